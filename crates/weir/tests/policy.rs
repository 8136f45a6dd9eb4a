//! End-to-end policy middlewares against the binary: `ip_allow_list` with each client-address
//! strategy, its reject status, and its refusal in gRPC and Elasticsearch form. Cases are ported from Traefik's
//! pkg/middlewares/ipallowlist/ip_allowlist_test.go and pkg/ip/strategy_test.go (named on
//! each assertion); clients connect from chosen loopback addresses (127.0.0.20, 127.0.0.21,
//! ::1) to be the remote address Traefik's tests set.

mod common;
use common::*;

/// The status and body of a GET to `url` sent from the local address `source`, with `args`.
fn from(source: &str, url: &str, args: &[&str]) -> (u16, String) {
    let mut curl_args = vec!["--interface", source, "-w", "\n%{http_code}"];
    curl_args.extend(args);
    curl_args.push(url);
    let out = String::from_utf8(curl_ok(&curl_args)).expect("UTF-8");
    let (body, status) = out.rsplit_once('\n').expect("status line");
    (status.parse().expect("status"), body.to_string())
}

/// A request from 127.0.0.1 whose `X-Forwarded-For` is `forwarded`.
fn forwarded(weir: &Weir, path: &str, forwarded: &str) -> Resp {
    request(
        weir.addr(),
        &format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: {forwarded}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
}

fn weir_with(up: &Upstream, routes: &[(&str, &str)]) -> Weir {
    weir_with_entrypoints(up, routes, "")
}

/// weir proxying to `up` with an `ip_allow_list` per path prefix, on an h2c-capable `web`
/// entrypoint and the `extra` entrypoint lines.
fn weir_with_entrypoints(up: &Upstream, routes: &[(&str, &str)], extra: &str) -> Weir {
    let mut routers = String::new();
    let mut middlewares = String::new();
    for (i, (path, middleware)) in routes.iter().enumerate() {
        routers.push_str(&format!(
            "  r{i}: {{ rule: \"PathPrefix(`{path}`)\", middlewares: [m{i}], service: app }}\n"
        ));
        middlewares.push_str(&format!("  m{i}: {{ ip_allow_list: {middleware} }}\n"));
    }
    Weir::start(&format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\", h2c: true }}\n{extra}\
         routers:\n{routers}\
         services:\n  app: {{ servers: [{{ url: \"{}\" }}] }}\n\
         middlewares:\n{middlewares}",
        up.url()
    ))
}

/// ip_allowlist_test.go `TestIPAllowLister_ServeHTTP`: "authorized with remote address",
/// "non authorized with remote address", and both again with `RejectStatusCode: 404`. The
/// refusal's body is the status text, as Traefik writes it, and the server never sees it.
#[test]
fn the_remote_address_is_allowed_or_refused() {
    let up = Upstream::start("app");
    let weir = weir_with(
        &up,
        &[
            ("/plain", "{ source_range: [127.0.0.20] }"),
            (
                "/not-found",
                "{ source_range: [127.0.0.20], reject_status_code: 404 }",
            ),
        ],
    );
    let base = format!("http://{}", weir.addr());
    let (status, _) = from("127.0.0.20", &format!("{base}/plain"), &[]);
    assert_eq!(status, 200);
    assert_eq!(up.request_count(), 1);
    let (status, body) = from("127.0.0.21", &format!("{base}/plain"), &["-D", "-"]);
    assert_eq!(status, 403);
    assert!(body.ends_with("\r\n\r\nForbidden"), "{body}");
    assert_eq!(
        header_value(&body, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    let (status, _) = from("127.0.0.20", &format!("{base}/not-found"), &[]);
    assert_eq!(status, 200);
    assert_eq!(
        from("127.0.0.21", &format!("{base}/not-found"), &[]),
        (404, "Not Found".to_string())
    );
    // Over HTTP/2 the same.
    let h2 = ["--http2-prior-knowledge"];
    assert_eq!(
        from("127.0.0.21", &format!("{base}/plain"), &h2),
        (403, "Forbidden".to_string())
    );
    assert_eq!(up.request_count(), 2);
}

/// strategy_test.go `TestDepthStrategy_GetIP` through the allow list: "Use depth", "Use
/// depth that match the first IP in XForwardedFor", "Use nonexistent depth in
/// XForwardedFor", and spaces around entries; the connection's own address no longer
/// counts.
#[test]
fn depth_picks_the_nth_forwarded_address_from_the_right() {
    let up = Upstream::start("app");
    let weir = weir_with(
        &up,
        &[(
            "/depth",
            "{ source_range: [10.0.0.3, 10.0.0.2/32], ip_strategy: { depth: 3 } }",
        )],
    );
    let cases = [
        ("10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", 200),
        ("10.0.0.3,10.0.0.2,10.0.0.1", 200),
        ("10.0.0.4, 10.0.0.3 ,10.0.0.2,10.0.0.1", 200),
        ("10.0.0.1,10.0.0.4,10.0.0.3,10.0.0.2", 403),
        ("10.0.0.2,10.0.0.1", 403),
        ("", 403),
        ("127.0.0.1,10.0.0.2,10.0.0.1", 403),
        ("bogus,10.0.0.2,10.0.0.1", 403),
        // A port on the entry is dropped, as Traefik's checker does.
        ("10.0.0.3:4711,10.0.0.2,10.0.0.1", 200),
    ];
    for (list, status) in cases {
        assert_eq!(forwarded(&weir, "/depth", list).status, status, "{list:?}");
    }
    let no_header = get(weir.addr(), "t", "/depth");
    assert_eq!(
        (no_header.status, no_header.text()),
        (403, "Forbidden".into())
    );
}

/// strategy_test.go `TestTrustedIPsStrategy_GetIP` through the allow list: "Do not trust
/// all IPs", "Do not trust all IPs with CIDR", "Trust all IPs" (nothing left: refused).
#[test]
fn excluded_ips_pick_the_first_address_not_excluded_from_the_right() {
    let up = Upstream::start("app");
    let weir = weir_with(
        &up,
        &[
            (
                "/pool",
                "{ source_range: [10.0.0.3], ip_strategy: { excluded_ips: [10.0.0.2, 10.0.0.1] } }",
            ),
            (
                "/cidr",
                "{ source_range: [127.0.0.1], ip_strategy: { excluded_ips: [10.0.0.1/24] } }",
            ),
        ],
    );
    let cases = [
        ("/pool", "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", 200),
        ("/pool", "10.0.0.3,10.0.0.4,10.0.0.2,10.0.0.1", 403),
        ("/pool", "10.0.0.2,10.0.0.1", 403),
        (
            "/cidr",
            "127.0.0.1,10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1",
            200,
        ),
        ("/cidr", "127.0.0.1, ,10.0.0.4 , 10.0.0.1", 200),
        ("/cidr", "10.0.0.4,10.0.0.3,10.0.0.2,10.0.0.1", 403),
        ("/cidr", "127.0.0.1,bogus,10.0.0.1", 403),
    ];
    for (path, list, status) in cases {
        assert_eq!(
            forwarded(&weir, path, list).status,
            status,
            "{path} {list:?}"
        );
    }
}

/// strategy_test.go `TestDepthStrategy_GetIP` "Use depth with IPv6 subnet" and "Use depth
/// with IPv4 subnet" (IPv4 unmasked), and `TestRemoteAddrStrategy_GetIP` "Use RemoteAddr,
/// ipv6 ... subnet" with a client connecting from ::1.
#[test]
fn ipv6_subnet_masks_ipv6_addresses_only() {
    let up = Upstream::start("app");
    let weir = weir_with_entrypoints(
        &up,
        &[
            (
                "/depth-subnet",
                "{ source_range: [\"::abcd:0:0:0\", 10.0.0.2], ip_strategy: { depth: 2, ipv6_subnet: 80 } }",
            ),
            ("/depth", "{ source_range: [\"::abcd:0:0:0\"], ip_strategy: { depth: 2 } }"),
            ("/remote-subnet", "{ source_range: [\"::\"], ip_strategy: { ipv6_subnet: 64 } }"),
            ("/remote", "{ source_range: [\"::\"] }"),
        ],
        "  v6: { address: \"[::1]:0\" }\n",
    );
    let v6 = "10.0.0.3,::abcd:ffff:c0a8:1,10.0.0.1";
    assert_eq!(forwarded(&weir, "/depth-subnet", v6).status, 200);
    assert_eq!(forwarded(&weir, "/depth", v6).status, 403);
    let v4 = "10.0.0.3,10.0.0.2,10.0.0.1";
    assert_eq!(forwarded(&weir, "/depth-subnet", v4).status, 200);
    let url = |path: &str| format!("http://{}{path}", weir.addrs["v6"]);
    assert_eq!(from("::1", &url("/remote-subnet"), &[]).0, 200);
    assert_eq!(from("::1", &url("/remote"), &[]).0, 403);
}

/// A gRPC request refused by the allow list gets gRPC's trailers-only answer:
/// `PERMISSION_DENIED` (7) for a 403, the status text as `grpc-message`.
#[test]
fn a_refused_grpc_call_is_answered_in_grpc_form() {
    let up = Upstream::start("app");
    let weir = weir_with(&up, &[("/weir.Test/", "{ source_range: [10.0.0.1] }")]);
    let url = format!("http://{}/weir.Test/Unary", weir.addr());
    let head = curl_grpc_head(&["--http2-prior-knowledge"], &url);
    assert!(head.starts_with("http/2 200"), "{head}");
    assert_eq!(
        header_value(&head, "content-type"),
        Some("application/grpc")
    );
    assert_eq!(header_value(&head, "grpc-status"), Some("7"), "{head}");
    assert_eq!(header_value(&head, "grpc-message"), Some("forbidden"));
    assert_eq!(up.request_count(), 0);
}

/// ip_allowlist_test.go `TestNewIPAllowLister` "invalid IP" and "invalid HTTP status code":
/// `weir check` refuses the file and names where.
#[test]
fn weir_check_names_a_bad_range_and_status() {
    let stderr = weir_check_refuses(
        "policy-check",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\n\
         middlewares:\n  only:\n    ip_allow_list: { source_range: [foo], reject_status_code: 600 }\n",
    );
    assert!(
        stderr.contains("weir.yaml:5:37: `foo` is not an address or network"),
        "{stderr}"
    );
    assert!(
        stderr.contains("weir.yaml:5:63: `reject_status_code` must be"),
        "{stderr}"
    );
}

/// On a route to an Elasticsearch service, the refusal is Elasticsearch's JSON error with
/// the reject status, and no node is asked.
#[test]
fn a_refusal_on_an_elasticsearch_route_is_elasticsearch_shaped() {
    let dead = free_port();
    let weir = Weir::start(&format!(
        "entrypoints:\n  es: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  es: {{ rule: \"PathPrefix(`/`)\", middlewares: [office], service: es }}\n\
         services:\n  es:\n    elasticsearch:\n      hosts: [\"http://127.0.0.1:{dead}\"]\n      \
         discovery: {{ enabled: false }}\n\
         middlewares:\n  office: {{ ip_allow_list: {{ source_range: [192.0.2.0/24] }} }}\n"
    ));
    let answer = get(weir.addrs["es"], "es", "/books/_search");
    assert_eq!(answer.status, 403);
    assert!(answer
        .header("content-type")
        .is_some_and(|t| t.starts_with("application/json")));
    let error = answer.json();
    assert_eq!(error["status"], 403);
    assert_eq!(error["error"]["reason"], "Forbidden");
}
