"""Traffic policy (issue 35): what the middlewares cost, and how exactly a rate limit holds.

- policy-guarded-c50: a proxied route behind `ip_allow_list` + `rate_limit` (not limiting) +
  `basic_auth` (an apr1 hash) + `headers` (CORS), against the same route without them
  (`weir-plain`) and against nginx doing the same (`allow`/`deny`, `limit_req` with a large
  burst, `auth_basic`, `add_header`; `nginx-plain` without them). Every request carries the
  credentials and an allowed `Origin`.
- rate-limit-c50: a limit of RATE requests/s (burst 1) enforced under wrk's closed loop (far
  above the rate), by weir on 1, 2 and 4 workers (one bucket for the instance) and by nginx's
  `limit_req` (one worker); admitted = 2xx answers. The table's non-2xx are the refusals.
- rate-limit-refusing-c50: every request refused (a limit of one per hour) against the plain
  proxied route: the CPU a refusal costs beside a proxied request.
- jwt-es256-c50: every request with one ES256 token, verified by weir's `jwt` on the proxied
  route, against the plain route and against nginx `auth_request` to a local verifier (a
  second weir whose `jwt` route answers 204, started under nginx so that its CPU counts in
  nginx's figures).
"""
import base64, json, os, shlex, subprocess, time

from harness.common import work_dir, write
from harness.load import wrk_measure, wrk_script
from harness.peers import (NGINX_PROXY_LOC, WEIR_CATCH_ALL, config, http_targets, nginx_command, nginx_http,
                           nginx_upstream_block, start_nginx, start_upstream, start_weir, start_weir_proxy,
                           weir_service, weir_yaml)
from harness.procs import Proc, Procs, free_port, wait_port
from harness.runner import interleave

NAME, ORDER, PEERS = "policy", 75, ("nginx",)

RATE = 2000
ORIGIN = "http://app.test"
# bench:secret, as a client sends it.
CREDENTIALS = "Basic YmVuY2g6c2VjcmV0"


def apr1_hash():
    """The apr1 (Apache MD5) hash of `secret`, as `htpasswd -m` writes it."""
    return subprocess.run(["openssl", "passwd", "-apr1", "-salt", "weirbnch", "secret"],
                          capture_output=True, text=True, check=True).stdout.strip()


def guarded_weir_yaml(port, up_port, conns, hashed):
    routers = WEIR_CATCH_ALL + "    middlewares: [allow, limit, auth, cors]\n"
    middlewares = f"""middlewares:
  allow: {{ ip_allow_list: {{ source_range: ["127.0.0.1/32"] }} }}
  limit: {{ rate_limit: {{ average: 100000000, burst: 100000000 }} }}
  auth: {{ basic_auth: {{ users: ["bench:{hashed}"] }} }}
  cors: {{ headers: {{ access_control_allow_origin_list: ["{ORIGIN}"] }} }}
"""
    return weir_yaml(port, routers, weir_service(up_port, conns) + middlewares)


def limited_weir_yaml(port, up_port, conns, workers, limit):
    routers = WEIR_CATCH_ALL + "    middlewares: [limit]\n"
    services = weir_service(up_port, conns) + f"middlewares:\n  limit: {{ rate_limit: {limit} }}\n"
    return weir_yaml(port, routers, services).replace("workers: 1,", f"workers: {workers},", 1)


def start_nginx_guarded(ctx, name, port, up_port, conns, users_file, guards):
    """nginx proxying to the upstream; `guards` are the location's policy lines."""
    http = nginx_upstream_block(up_port, conns) + f"""
  limit_req_zone $binary_remote_addr zone=bench:1m rate=100000000r/s;
  limit_req_zone $binary_remote_addr zone=limited:1m rate={RATE}r/s;
  limit_req_status 429;
  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ {guards} {NGINX_PROXY_LOC} }} }}"""
    return start_nginx(name, port, http, ctx.proxy_cpus)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def es256_key_and_token():
    """A P-256 JWK (public) and an ES256 token it verifies, valid for a day, made with
    Python's cryptography (Debian's python3-cryptography)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    key = ec.generate_private_key(ec.SECP256R1())
    numbers = key.public_key().public_numbers()
    jwk = {"kty": "EC", "crv": "P-256", "kid": "bench", "alg": "ES256",
           "x": b64url(numbers.x.to_bytes(32, "big")), "y": b64url(numbers.y.to_bytes(32, "big"))}
    header = b64url(json.dumps({"alg": "ES256", "typ": "JWT", "kid": "bench"}).encode())
    claims = b64url(json.dumps({"sub": "bench", "exp": int(time.time()) + 86400}).encode())
    signed = f"{header}.{claims}".encode()
    r, s_ = decode_dss_signature(key.sign(signed, ec.ECDSA(hashes.SHA256())))
    signature = b64url(r.to_bytes(32, "big") + s_.to_bytes(32, "big"))
    return jwk, f"{header}.{claims}.{signature}"


def jwt_middleware(jwk):
    members = ", ".join(f'{k}: "{v}"' for k, v in jwk.items())
    return f"middlewares:\n  token: {{ jwt: {{ keys: [{{ {members} }}] }} }}\n"


def start_nginx_auth_request(ctx, name, port, up_port, conns, verifier_yaml):
    """nginx proxying to the upstream after an `auth_request` to a weir verifier, which runs
    as nginx's child (the same process tree, the same core) on its own port."""
    verifier_port = free_port()
    _, verifier = config(name, "verifier.yaml", verifier_yaml(verifier_port))
    http = nginx_upstream_block(up_port, conns) + f"""
  upstream verifier {{ server 127.0.0.1:{verifier_port}; keepalive 64; keepalive_requests 1000000; }}
  server {{ listen 127.0.0.1:{port} backlog=4096;
    location / {{ auth_request /_verify; {NGINX_PROXY_LOC} }}
    location = /_verify {{ internal; proxy_pass http://verifier; proxy_http_version 1.1;
      proxy_set_header Connection ""; proxy_pass_request_body off; proxy_set_header Content-Length ""; }}
  }}"""
    nginx = nginx_command(name, nginx_http(name, http))
    script = f"{shlex.quote(ctx.weir)} run -c {shlex.quote(verifier)} & exec {' '.join(map(shlex.quote, nginx))}"
    proc = Proc(name, ["sh", "-c", script], port, ctx.proxy_cpus)
    wait_port(verifier_port, proc.proc, f"{name}'s verifier")
    return proc


def expecting_refusals(measure, plain=()):
    """`measure`, with refusals (non-2xx) expected of every target but those named `plain`."""
    def run(url, proc):
        figures = measure(url, proc)
        if proc.name not in plain:
            figures["errors_expected"] = True
        return figures
    return run


def admitted(measure, rate):
    """`measure`, adding the admitted (2xx) answers per second and how far off `rate` they are."""
    def run(url, proc):
        figures = measure(url, proc)
        seconds = figures["requests"] / figures["rps"] if figures["rps"] else 0
        per_second = (figures["requests"] - figures["non_2xx"]) / seconds if seconds else 0
        figures["admitted_per_s"] = per_second
        figures["admitted_off_pct"] = 100.0 * (per_second - rate) / rate
        return figures
    return run


def run(ctx):
    conns = 50
    out = {}
    hashed = apr1_hash()
    users_file = write(os.path.join(work_dir("nginx-guarded"), "htpasswd"), f"bench:{hashed}\n")
    headers = (f'wrk.headers["Authorization"] = "{CREDENTIALS}"\n'
               f'wrk.headers["Origin"] = "{ORIGIN}"\n')
    script = wrk_script("policy", headers)
    with Procs() as procs:
        up_port = free_port()
        procs.add(start_upstream(ctx, up_port))
        ports = [free_port() for _ in range(4)]
        guards = (f'allow 127.0.0.1; deny all; limit_req zone=bench burst=100000000 nodelay; '
                  f'auth_basic "bench"; auth_basic_user_file {users_file}; '
                  f'add_header Access-Control-Allow-Origin "{ORIGIN}" always;')
        nginx = procs.add(start_nginx_guarded(ctx, "nginx-guarded", ports[0], up_port, conns, users_file, guards))
        nginx_plain = procs.add(start_nginx_guarded(ctx, "nginx-plain", ports[1], up_port, conns, users_file, ""))
        weir = procs.add(start_weir(ctx.weir, "weir-guarded", ports[2], guarded_weir_yaml(ports[2], up_port, conns, hashed),
                                    ctx.proxy_cpus))
        weir_plain = procs.add(start_weir_proxy(ctx, "weir-plain", ports[3], up_port, conns))
        targets = http_targets("/", ("nginx", nginx), ("weir", weir), ("nginx-plain", nginx_plain),
                               ("weir-plain", weir_plain))
        out[f"policy-guarded-c{conns}"] = interleave("policy-guarded", targets, wrk_measure(ctx, conns, script),
                                                     ctx.rounds)

    with Procs() as procs:
        up_port = free_port()
        procs.add(start_upstream(ctx, up_port))
        peers = []
        for workers in (1, 2, 4):
            port = free_port()
            yaml = limited_weir_yaml(port, up_port, conns, workers, f"{{ average: {RATE}, burst: 1 }}")
            peers.append((f"weir-w{workers}", procs.add(start_weir(ctx.weir, f"weir-limit-w{workers}", port, yaml,
                                                                   ctx.proxy_cpus))))
        port = free_port()
        peers.append(("nginx", procs.add(start_nginx_guarded(ctx, "nginx-limit", port, up_port, conns, users_file,
                                                             "limit_req zone=limited;"))))
        measure = admitted(expecting_refusals(wrk_measure(ctx, conns, wrk_script("plain"))), RATE)
        out[f"rate-limit-{RATE}-per-s-c{conns}"] = interleave("rate-limit", http_targets("/", *peers), measure,
                                                               ctx.rounds)

    with Procs() as procs:
        up_port = free_port()
        procs.add(start_upstream(ctx, up_port))
        port, plain_port = free_port(), free_port()
        refusing = procs.add(start_weir(ctx.weir, "weir-refusing", port,
                                        limited_weir_yaml(port, up_port, conns, 1, "{ average: 1, period: 1h }"),
                                        ctx.proxy_cpus))
        plain = procs.add(start_weir_proxy(ctx, "weir-plain", plain_port, up_port, conns))
        measure = expecting_refusals(wrk_measure(ctx, conns, wrk_script("plain")), plain=("weir-plain",))
        targets = http_targets("/", ("weir", refusing), ("weir-plain", plain))
        out[f"rate-limit-refusing-c{conns}"] = interleave("rate-limit-refusing", targets, measure, ctx.rounds)

    jwk, token = es256_key_and_token()
    token_script = wrk_script("jwt", f'wrk.headers["Authorization"] = "Bearer {token}"\n')
    with Procs() as procs:
        up_port = free_port()
        procs.add(start_upstream(ctx, up_port))
        port, plain_port, nginx_port = free_port(), free_port(), free_port()
        routers = WEIR_CATCH_ALL + "    middlewares: [token]\n"
        weir = procs.add(start_weir(ctx.weir, "weir-jwt", port,
                                    weir_yaml(port, routers, weir_service(up_port, conns) + jwt_middleware(jwk)),
                                    ctx.proxy_cpus))
        plain = procs.add(start_weir_proxy(ctx, "weir-plain", plain_port, up_port, conns))
        verifier_routers = ("  verify:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [token]\n"
                            "    respond: { status: 204 }\n")
        nginx = procs.add(start_nginx_auth_request(
            ctx, "nginx-auth-request", nginx_port, up_port, conns,
            lambda vport: weir_yaml(vport, verifier_routers, jwt_middleware(jwk))))
        targets = http_targets("/", ("nginx", nginx), ("weir", weir), ("weir-plain", plain))
        out[f"jwt-es256-c{conns}"] = interleave("jwt-es256", targets, wrk_measure(ctx, conns, token_script),
                                                ctx.rounds)
    return out
