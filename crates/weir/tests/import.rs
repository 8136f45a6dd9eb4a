//! `weir import traefik`: Traefik dynamic configurations shaped as the examples of Traefik's
//! own documentation (each case names its page under `docs/content/` of traefik/traefik, v3),
//! in its YAML and TOML forms, converted and then passed by `weir check`; what has no
//! counterpart is named on stderr; and a converted configuration serves as Traefik's would.

mod common;
use common::*;
use std::process::Command;

/// Runs `weir import traefik` on `text` saved as `name`: (stdout, stderr, success).
fn import(dir: &std::path::Path, name: &str, text: &str) -> (String, String, bool) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(weir_bin())
        .args(["import", "traefik"])
        .arg(&path)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// The converted YAML must pass `weir check` as it stands.
fn assert_checks(dir: &std::path::Path, yaml: &str, case: &str) {
    let path = dir.join("weir.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = weir_check(&path);
    assert!(
        out.status.success(),
        "{case}: weir check refused the result:\n{}\n{yaml}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (page the example follows, Traefik YAML, lines the result must hold, notes stderr must hold)
const CASES: &[(&str, &str, &[&str], &[&str])] = &[
    (
        "middlewares/http/ratelimit.md",
        "http:\n  middlewares:\n    test-ratelimit:\n      rateLimit:\n        average: 100\n        burst: 200\n        period: 1m\n        sourceCriterion:\n          ipStrategy:\n            depth: 2\n            excludedIPs: [\"127.0.0.1/32\", \"192.168.1.7\"]\n",
        &["    rate_limit:", "      average: 100", "      period: \"1m\"", "          excluded_ips:"],
        &[],
    ),
    (
        "middlewares/http/headers.md",
        "http:\n  middlewares:\n    testHeader:\n      headers:\n        customRequestHeaders:\n          X-Script-Name: \"test\"\n          X-Custom-Request-Header: \"\"\n        customResponseHeaders:\n          X-Custom-Response-Header: \"\"\n        accessControlAllowMethods: [GET, OPTIONS, PUT]\n        accessControlAllowHeaders: \"*\"\n        accessControlAllowOriginList: [\"https://foo.bar.org\", \"https://example.org\"]\n        accessControlMaxAge: 100\n        addVaryHeader: true\n        frameDeny: true\n        stsSeconds: 31536000\n        stsIncludeSubdomains: true\n        stsPreload: true\n        contentSecurityPolicy: \"default-src 'self'\"\n",
        &["      request:", "          X-Script-Name: \"test\"", "          - \"X-Custom-Response-Header\"", "      sts_include_subdomains: true", "      access_control_max_age: 100"],
        &["testHeader.headers.contentSecurityPolicy"],
    ),
    (
        "middlewares/http/ipallowlist.md",
        "http:\n  middlewares:\n    test-ipallowlist:\n      ipAllowList:\n        sourceRange: [\"127.0.0.1/32\", \"192.168.1.7\"]\n        ipStrategy: { depth: 2 }\n",
        &["    ip_allow_list:", "      source_range:"],
        &[],
    ),
    (
        "middlewares/http/ipwhitelist.md (v2's name)",
        "http:\n  middlewares:\n    old:\n      ipWhiteList:\n        sourceRange: [\"10.0.0.0/8\"]\n",
        &["    ip_allow_list:"],
        &[],
    ),
    (
        "middlewares/http/basicauth.md",
        "http:\n  middlewares:\n    test-auth:\n      basicAuth:\n        users:\n          - \"test:$apr1$H6uskkkW$IgXLP6ewTrSuBkTrqE8wj/\"\n          - \"test2:$apr1$d9hr9HBB$4HxwgUir3HP4EsggP/QNo0\"\n        realm: MyRealm\n        removeHeader: true\n",
        &["    basic_auth:", "      realm: \"MyRealm\"", "      remove_header: true"],
        &[],
    ),
    (
        "middlewares/http/stripprefix.md and addprefix.md",
        "http:\n  middlewares:\n    test-stripprefix:\n      stripPrefix:\n        prefixes: [\"/foobar\", \"/fiibar\"]\n    test-addprefix:\n      addPrefix:\n        prefix: \"/foo\"\n",
        &["    strip_prefix:", "      - \"/fiibar\"", "    add_prefix: \"/foo\""],
        &[],
    ),
    (
        "middlewares/http/redirectscheme.md",
        "http:\n  middlewares:\n    test-redirectscheme:\n      redirectScheme:\n        scheme: https\n        permanent: true\n        port: \"443\"\n",
        &["    redirect_scheme:", "      permanent: true"],
        &["redirectScheme.port"],
    ),
    (
        "middlewares/http/circuitbreaker.md",
        "http:\n  middlewares:\n    latency-check:\n      circuitBreaker:\n        expression: \"LatencyAtQuantileMS(50.0) > 100\"\n        checkPeriod: 100ms\n        fallbackDuration: 10s\n",
        &["    circuit_breaker:", "      expression: \"LatencyAtQuantileMS(50.0) > 100\"", "      check_period: \"100ms\""],
        &[],
    ),
    (
        "middlewares/http/buffering.md",
        "http:\n  middlewares:\n    limit:\n      buffering:\n        maxRequestBodyBytes: 2000000\n        retryExpression: \"IsNetworkError() && Attempts() < 2\"\n",
        &["    buffering:", "      max_request_body_bytes: 2000000", "      retry_expression: \"IsNetworkError() && Attempts() < 2\""],
        &[],
    ),
    (
        "middlewares/http/inflightreq.md and chain.md",
        "http:\n  middlewares:\n    test-inflightreq:\n      inFlightReq:\n        amount: 10\n    secured:\n      chain:\n        middlewares: [test-inflightreq@file, known-ips]\n    known-ips:\n      ipAllowList:\n        sourceRange: [\"192.168.1.7\", \"127.0.0.1/32\"]\n",
        &["    in_flight_req:", "      amount: 10", "        - \"test-inflightreq\""],
        &[],
    ),
    (
        "middlewares/http/compress.md",
        "http:\n  middlewares:\n    test-compress:\n      compress:\n        excludedContentTypes: [text/event-stream]\n        minResponseBodyBytes: 1200\n",
        &["    compress:", "      min_length: 1200"],
        &["compress.excludedContentTypes"],
    ),
    (
        "middlewares/http/contenttype.md (no counterpart)",
        "http:\n  middlewares:\n    autodetect:\n      contentType: {}\n",
        &[],
        &["the `contentType` middleware has no counterpart"],
    ),
    (
        "middlewares/http/retry.md (a service setting in weir)",
        "http:\n  middlewares:\n    test-retry:\n      retry:\n        attempts: 4\n",
        &[],
        &["weir retries per service"],
    ),
    (
        "routing/routers/index.md, routing/services/index.md",
        "http:\n  routers:\n    my-router:\n      rule: \"Host(`example.com`) && PathPrefix(`/api`)\"\n      entryPoints: [web]\n      service: my-service\n      priority: 10\n    dashboard:\n      rule: \"Host(`traefik.example.com`)\"\n      service: api@internal\n  services:\n    my-service:\n      loadBalancer:\n        servers:\n          - url: \"http://127.0.0.1:8080/\"\n          - url: \"http://127.0.0.1:8081/\"\n            weight: 3\n        healthCheck:\n          path: /health\n          interval: \"10s\"\n          timeout: \"3s\"\n        sticky:\n          cookie: {}\n    mirrored:\n      mirroring:\n        service: my-service\n",
        &["  web:", "    address: \":80\"", "    rule: \"Host(`example.com`) && PathPrefix(`/api`)\"", "    priority: 10", "        weight: 3", "    health_check:"],
        &["service `api@internal` is Traefik's own", "loadBalancer.sticky", "a `mirroring` service is not converted"],
    ),
    (
        "routing/routers/index.md (TCP) and routing/services/index.md (TCP, UDP)",
        "tcp:\n  routers:\n    to-db:\n      entryPoints: [postgres]\n      rule: \"HostSNI(`*`)\"\n      service: db\n    sni:\n      entryPoints: [tls]\n      rule: \"HostSNI(`db.example.com`)\"\n      service: db\n      tls:\n        passthrough: true\n  services:\n    db:\n      loadBalancer:\n        proxyProtocol:\n          version: 2\n        servers:\n          - address: \"127.0.0.1:5432\"\nudp:\n  routers:\n    to-dns:\n      entryPoints: [dns]\n      service: dns\n  services:\n    dns:\n      loadBalancer:\n        servers:\n          - address: \"127.0.0.1:53\"\n",
        &["tcp:", "        passthrough: true", "      proxy_protocol:", "udp:", "    address: \":8003/udp\""],
        &[],
    ),
];

#[test]
fn documentation_examples_convert_and_pass_weir_check() {
    for (n, (page, traefik, lines, notes)) in CASES.iter().enumerate() {
        let dir = temp_dir(&format!("import-{n}"));
        let (yaml, stderr, ok) = import(&dir, "dynamic.yml", traefik);
        assert!(ok, "{page}: {stderr}");
        for line in *lines {
            assert!(
                yaml.lines().any(|l| l == *line),
                "{page}: no line `{line}` in\n{yaml}"
            );
        }
        for note in *notes {
            assert!(
                stderr.contains(note),
                "{page}: no note `{note}` in\n{stderr}"
            );
        }
        assert!(!stderr.contains("check of the result"), "{page}: {stderr}");
        assert_checks(&dir, &yaml, page);
    }
}

#[test]
fn toml_converts_as_yaml_does() {
    // The TOML tab of middlewares/http/ratelimit.md and routing/routers/index.md's shape.
    let toml = "[http.routers.my-router]\n  rule = \"Path(`/foo`)\"\n  entryPoints = [\"web\"]\n  middlewares = [\"test-ratelimit\"]\n  service = \"service-foo\"\n\n[http.middlewares.test-ratelimit.rateLimit]\n  average = 100\n  burst = 50\n\n[[http.services.service-foo.loadBalancer.servers]]\n  url = \"http://127.0.0.1:8080\"\n";
    let dir = temp_dir("import-toml");
    let (from_toml, stderr, ok) = import(&dir, "dynamic.toml", toml);
    assert!(ok, "{stderr}");
    assert!(
        from_toml.contains("    rate_limit:\n      average: 100\n      burst: 50\n"),
        "{from_toml}"
    );
    assert!(
        from_toml.contains("    middlewares:\n      - \"test-ratelimit\"\n"),
        "{from_toml}"
    );
    assert_checks(&dir, &from_toml, "toml");
    // A file that is not TOML is refused with where it went wrong.
    let (_, stderr, ok) = import(&dir, "broken.toml", "[http.routers\nrule = 1\n");
    assert!(!ok);
    assert!(stderr.contains("broken.toml"), "{stderr}");
}

#[test]
fn a_converted_configuration_serves_as_traefiks_would() {
    let up = Upstream::start("app");
    let traefik = format!(
        "http:\n  routers:\n    api:\n      rule: \"PathPrefix(`/api`)\"\n      entryPoints: [web]\n      middlewares: [strip, tag]\n      service: app\n  middlewares:\n    strip:\n      stripPrefix:\n        prefixes: [\"/api\"]\n    tag:\n      headers:\n        customRequestHeaders:\n          X-Imported: \"yes\"\n          User-Agent: \"\"\n  services:\n    app:\n      loadBalancer:\n        servers:\n          - url: \"{}\"\n",
        up.url()
    );
    let dir = temp_dir("import-serve");
    let (yaml, stderr, ok) = import(&dir, "dynamic.yaml", &traefik);
    assert!(ok, "{stderr}");
    // The placeholder address of Traefik's `web`, on a free port for the test.
    let yaml = yaml.replace("address: \":80\"", "address: \"127.0.0.1:0\"");
    let weir = Weir::start(&yaml);
    let resp = request(
        weir.addr(),
        "GET /api/users HTTP/1.1\r\nHost: x\r\nUser-Agent: curl\r\n\r\n",
    );
    assert_eq!(resp.status, 200);
    let seen = resp.json();
    assert_eq!(seen["target"], "/users", "{seen}");
    assert_eq!(echoed_header(&seen, "x-imported").as_deref(), Some("yes"));
    assert_eq!(echoed_header(&seen, "user-agent"), None, "{seen}");
}
