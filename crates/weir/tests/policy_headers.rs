//! CORS through the `headers` middleware, case by case as Traefik's own tests assert it
//! (traefik pkg/middlewares/headers/header_test.go: `TestNewHeader_CORSPreflights` and
//! `TestNewHeader_CORSResponses`), against the weir binary. Each case is a router of its own
//! (by Host) in front of a `respond` answer, which the response-head phase edits as it would a
//! proxied one. What a case expects is the answer's `Access-Control-*` and `Vary` fields,
//! exactly: nothing more, nothing less.

mod common;
use common::*;

/// One case: its middleware's fields, the `Vary` the answer carries before the middleware
/// (`""`: none), the request's method and fields, and the fields expected back.
struct Case {
    name: &'static str,
    cors: &'static str,
    vary: &'static str,
    method: &'static str,
    request: Fields,
    expected: Fields,
}

/// Header fields, `(name, value)`.
type Fields = &'static [(&'static str, &'static str)];

const PREFLIGHT: Fields = &[
    ("Access-Control-Request-Headers", "origin"),
    ("Access-Control-Request-Method", "GET"),
    ("Origin", "https://foo.bar.org"),
];
const PREFLIGHT_NO_HEADERS: Fields = &[
    ("Access-Control-Request-Method", "GET"),
    ("Origin", "https://foo.bar.org"),
];
const FROM_FOO: Fields = &[("Origin", "https://foo.bar.org")];

const CASES: &[Case] = &[
    // TestNewHeader_CORSPreflights
    Case {
        name: "simple-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["https://foo.bar.org"], access_control_max_age: 600"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT,
        expected: &[
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "https://foo.bar.org"),
            ("access-control-max-age", "600"),
        ],
    },
    Case {
        name: "wildcard-origin-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["*"], access_control_max_age: 600"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT,
        expected: &[
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "*"),
            ("access-control-max-age", "600"),
        ],
    },
    Case {
        name: "allow-credentials-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["*"], access_control_allow_credentials: true, access_control_max_age: 600"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT,
        expected: &[
            ("access-control-allow-credentials", "true"),
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "https://foo.bar.org"),
            ("access-control-max-age", "600"),
        ],
    },
    Case {
        name: "allow-headers-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["*"], access_control_allow_headers: [origin, X-Forwarded-For], access_control_max_age: 600"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT,
        expected: &[
            ("access-control-allow-headers", "origin,X-Forwarded-For"),
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "*"),
            ("access-control-max-age", "600"),
        ],
    },
    Case {
        name: "no-request-headers-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["*"], access_control_allow_headers: [origin, X-Forwarded-For], access_control_max_age: 600"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT_NO_HEADERS,
        expected: &[
            ("access-control-allow-headers", "origin,X-Forwarded-For"),
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "*"),
            ("access-control-max-age", "600"),
        ],
    },
    Case {
        name: "nil-max-age-preflight",
        cors: r#"access_control_allow_methods: [GET, OPTIONS, PUT], access_control_allow_origin_list: ["*"]"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT_NO_HEADERS,
        expected: &[
            ("access-control-allow-methods", "GET,OPTIONS,PUT"),
            ("access-control-allow-origin", "*"),
        ],
    },
    // TestNewHeader_CORSResponses
    Case {
        name: "simple-request",
        cors: r#"access_control_allow_origin_list: ["https://foo.bar.org"]"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[("access-control-allow-origin", "https://foo.bar.org")],
    },
    Case {
        name: "wildcard-origin-request",
        cors: r#"access_control_allow_origin_list: ["*"]"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[("access-control-allow-origin", "*")],
    },
    Case {
        name: "regexp-origin-request",
        cors: r#"access_control_allow_origin_list_regex: ['^https?://([a-z]+)\.bar\.org$']"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[("access-control-allow-origin", "https://foo.bar.org")],
    },
    Case {
        name: "partial-regexp-origin-request",
        cors: r#"access_control_allow_origin_list_regex: ['([a-z]+)\.bar']"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[("access-control-allow-origin", "https://foo.bar.org")],
    },
    Case {
        name: "regexp-origin-request-without-matching",
        cors: r#"access_control_allow_origin_list_regex: ['([a-z]+)\.bar\.org']"#,
        vary: "",
        method: "GET",
        request: &[("Origin", "https://bar.org")],
        expected: &[],
    },
    Case {
        name: "empty-origin-request",
        cors: r#"access_control_allow_origin_list: ["https://foo.bar.org"]"#,
        vary: "",
        method: "GET",
        request: &[],
        expected: &[],
    },
    Case {
        name: "allow-credentials-request",
        cors: r#"access_control_allow_origin_list: ["*"], access_control_allow_credentials: true"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[
            ("access-control-allow-credentials", "true"),
            ("access-control-allow-origin", "https://foo.bar.org"),
        ],
    },
    Case {
        name: "expose-headers-request",
        cors: r#"access_control_allow_origin_list: ["*"], access_control_expose_headers: [origin, X-Forwarded-For]"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[
            ("access-control-allow-origin", "*"),
            ("access-control-expose-headers", "origin,X-Forwarded-For"),
        ],
    },
    Case {
        name: "vary-request",
        cors: r#"access_control_allow_origin_list: ["https://foo.bar.org"], add_vary_header: true"#,
        vary: "",
        method: "GET",
        request: FROM_FOO,
        expected: &[
            ("access-control-allow-origin", "https://foo.bar.org"),
            ("vary", "Origin"),
        ],
    },
    Case {
        name: "vary-non-empty-response",
        cors: r#"access_control_allow_origin_list: ["https://foo.bar.org"], add_vary_header: true"#,
        vary: "Testing",
        method: "GET",
        request: FROM_FOO,
        expected: &[
            ("access-control-allow-origin", "https://foo.bar.org"),
            ("vary", "Testing,Origin"),
        ],
    },
    Case {
        name: "vary-existing-origin",
        cors: r#"access_control_allow_origin_list: ["https://foo.bar.org"], add_vary_header: true"#,
        vary: "Origin",
        method: "GET",
        request: FROM_FOO,
        expected: &[
            ("access-control-allow-origin", "https://foo.bar.org"),
            ("vary", "Origin"),
        ],
    },
    // "Test Simple CustomRequestHeaders Not Hijacked by CORS": a preflight-shaped request on
    // a middleware with no CORS field is not answered as a preflight.
    Case {
        name: "custom-request-headers-not-hijacked",
        cors: r#"request: { set: { foo: bar } }"#,
        vary: "",
        method: "OPTIONS",
        request: PREFLIGHT,
        expected: &[],
    },
];

fn config() -> String {
    let mut routers = String::new();
    let mut middlewares = String::new();
    for case in CASES {
        let name = case.name;
        let headers = match case.vary {
            "" => String::new(),
            vary => format!(", headers: {{ vary: {vary} }}"),
        };
        routers.push_str(&format!(
            "  {name}:\n    rule: \"Host(`{name}.test`)\"\n    middlewares: [{name}]\n    respond: {{ status: 200, body: \"answered\"{headers} }}\n"
        ));
        middlewares.push_str(&format!("  {name}: {{ headers: {{ {} }} }}\n", case.cors));
    }
    format!(
        "entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\nrouters:\n{routers}middlewares:\n{middlewares}"
    )
}

/// The answer's CORS and `Vary` fields, lowercased names, sorted.
fn cors_fields(answer: &Resp) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = answer
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
        .filter(|(n, _)| n.starts_with("access-control-") || n == "vary")
        .collect();
    fields.sort();
    fields
}

#[test]
fn cors_answers_as_traefik_does() {
    let weir = Weir::start(&config());
    for case in CASES {
        let mut raw = format!(
            "{} /foo HTTP/1.1\r\nHost: {}.test\r\n",
            case.method, case.name
        );
        for (name, value) in case.request {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("Connection: close\r\n\r\n");
        let answer = request(weir.addr(), &raw);
        let expected: Vec<(String, String)> = case
            .expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(cors_fields(&answer), expected, "case {}", case.name);
        let preflight = case.method == "OPTIONS" && !case.expected.is_empty();
        if preflight {
            // weir answers a preflight itself: 200, no body; the route's action never runs.
            assert_eq!(answer.status, 200, "case {}", case.name);
            assert_eq!(
                answer.header("content-length"),
                Some("0"),
                "case {}",
                case.name
            );
            assert!(answer.body.is_empty(), "case {}", case.name);
        } else {
            assert_eq!(answer.text(), "answered", "case {}", case.name);
        }
    }
}

/// A preflight answered by a `headers` middleware is wrapped only by the middlewares before it
/// (as in Traefik, where an answering middleware's own response edits and those of later
/// middlewares never see its answer): a response edit listed after it does not apply, one
/// listed before it does.
#[test]
fn a_preflight_is_wrapped_only_by_earlier_middlewares() {
    let yaml = r#"entrypoints:
  web: { address: "127.0.0.1:0" }
routers:
  api:
    rule: "PathPrefix(`/`)"
    middlewares: [outer, cors, inner]
    respond: { status: 200, body: "answered" }
middlewares:
  outer: { headers: { response: { set: { x-outer: "1" } } } }
  cors:
    headers:
      access_control_allow_origin_list: ["https://app.test"]
      access_control_allow_methods: [GET, PUT]
      add_vary_header: true
      response: { set: { x-own: "1" } }
  inner: { headers: { response: { set: { x-inner: "1" } } } }
"#;
    let weir = Weir::start(yaml);
    let preflight = request(
        weir.addr(),
        "OPTIONS /items HTTP/1.1\r\nHost: t\r\nOrigin: https://app.test\r\nAccess-Control-Request-Method: PUT\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(preflight.status, 200);
    assert_eq!(preflight.header("x-outer"), Some("1"));
    assert_eq!(preflight.header("x-own"), None);
    assert_eq!(preflight.header("x-inner"), None);
    assert_eq!(preflight.header("vary"), None);
    assert_eq!(
        preflight.header("access-control-allow-methods"),
        Some("GET,PUT")
    );
    // An ordinary request gets every middleware's edits, and the CORS fields.
    let answer = request(
        weir.addr(),
        "GET /items HTTP/1.1\r\nHost: t\r\nOrigin: https://app.test\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(answer.text(), "answered");
    for field in ["x-outer", "x-own", "x-inner"] {
        assert_eq!(answer.header(field), Some("1"), "{field}");
    }
    assert_eq!(
        answer.header("access-control-allow-origin"),
        Some("https://app.test")
    );
    assert_eq!(answer.header("vary"), Some("Origin"));
}

/// "Regexp Malformed Origin Request": a bad expression is a configuration error, with its
/// position.
#[test]
fn a_malformed_origin_expression_is_refused_with_its_position() {
    let stderr = weir_check_refuses(
        "cors-check",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [bad]\n    respond: { status: 200 }\nmiddlewares:\n  bad:\n    headers:\n      access_control_allow_origin_list_regex: [\"a(b\"]\n",
    );
    assert!(
        stderr.contains("weir.yaml:11:") && stderr.contains("invalid regular expression"),
        "{stderr}"
    );
}

/// The security fields, as traefik's `Test_newSecure_modifyResponse` (secure_test.go) asserts
/// them, each on its own router; plus `Strict-Transport-Security` only over HTTPS unless forced
/// (unrolled/secure's `isSSL`: the connection, or an `ssl_proxy_headers` field), and
/// `TestNew_allowedHosts` (headers_test.go): a host outside `allowed_hosts` gets 500 "Bad Host".
#[test]
fn security_fields_as_traefik_sets_them() {
    // (router, the middleware's fields, the security fields expected back)
    let cases: &[(&str, &str, Fields)] = &[
        (
            "permissions",
            r#"permissions_policy: "microphone=(),""#,
            &[("permissions-policy", "microphone=(),")],
        ),
        (
            "sts",
            "sts_seconds: 1, force_sts_header: true",
            &[("strict-transport-security", "max-age=1")],
        ),
        (
            "sts-preload",
            "sts_seconds: 1, force_sts_header: true, sts_preload: true",
            &[("strict-transport-security", "max-age=1; preload")],
        ),
        (
            "frame-custom",
            "custom_frame_options_value: foo",
            &[("x-frame-options", "foo")],
        ),
        (
            "frame-deny",
            "frame_deny: true",
            &[("x-frame-options", "DENY")],
        ),
        (
            "nosniff",
            "content_type_nosniff: true",
            &[("x-content-type-options", "nosniff")],
        ),
        // Not forced: a plain HTTP request gets no Strict-Transport-Security.
        (
            "sts-plain",
            "sts_seconds: 60, sts_include_subdomains: true",
            &[],
        ),
    ];
    let security = [
        "strict-transport-security",
        "x-frame-options",
        "x-content-type-options",
        "x-xss-protection",
        "content-security-policy",
        "referrer-policy",
        "permissions-policy",
    ];
    let mut routers = String::new();
    let mut middlewares = String::new();
    for (name, fields, _) in cases {
        routers.push_str(&format!(
            "  {name}:\n    rule: \"Host(`{name}.test`)\"\n    middlewares: [{name}]\n    respond: {{ status: 200, body: \"ok\" }}\n"
        ));
        middlewares.push_str(&format!("  {name}: {{ headers: {{ {fields} }} }}\n"));
    }
    let yaml = format!(
        r#"entrypoints:
  web: {{ address: "127.0.0.1:0" }}
routers:
{routers}  proxied-https:
    rule: "Host(`behind.test`)"
    middlewares: [behind]
    respond: {{ status: 200, body: "ok" }}
  hosts:
    rule: "PathPrefix(`/`)"
    priority: 1
    middlewares: [hosts]
    respond: {{ status: 200, body: "ok" }}
middlewares:
{middlewares}  behind:
    headers:
      sts_seconds: 60
      sts_include_subdomains: true
      ssl_proxy_headers: {{ X-Forwarded-Proto: https }}
  hosts:
    headers:
      allowed_hosts: [foo.com, bar.com]
      hosts_proxy_headers: [X-Forwarded-Host]
"#
    );
    let weir = Weir::start(&yaml);
    for (name, _, expected) in cases {
        let answer = get(weir.addr(), &format!("{name}.test"), "/foo");
        assert_eq!(answer.status, 200, "case {name}");
        let found: Vec<(String, String)> = answer
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v.clone()))
            .filter(|(n, _)| security.contains(&n.as_str()))
            .collect();
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(found, expected, "case {name}");
    }
    // Behind a proxy that terminated TLS and says so.
    let answer = request(
        weir.addr(),
        "GET / HTTP/1.1\r\nHost: behind.test\r\nX-Forwarded-Proto: https\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(
        answer.header("strict-transport-security"),
        Some("max-age=60; includeSubDomains")
    );
    let answer = get(weir.addr(), "behind.test", "/");
    assert_eq!(answer.header("strict-transport-security"), None);
    // TestNew_allowedHosts: an allowed host, no host, another host.
    assert_eq!(get(weir.addr(), "foo.com", "/").status, 200);
    assert_eq!(get(weir.addr(), "FOO.com", "/").status, 200);
    let refused = request(weir.addr(), "GET / HTTP/1.0\r\n\r\n");
    assert_eq!(refused.status, 500);
    let refused = get(weir.addr(), "boo.com", "/");
    assert_eq!(refused.status, 500);
    assert_eq!(refused.text(), "Bad Host\n");
    // The host a proxy in front names counts, not the Host it sent to weir.
    let proxied = request(
        weir.addr(),
        "GET / HTTP/1.1\r\nHost: boo.com\r\nX-Forwarded-Host: bar.com\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(proxied.status, 200);
}

/// TestNew_withoutOptions: a `headers` that sets nothing is refused, with its position.
#[test]
fn a_headers_middleware_that_sets_nothing_is_refused() {
    let stderr = weir_check_refuses(
        "headers-empty",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n  r:\n    rule: \"PathPrefix(`/`)\"\n    middlewares: [empty]\n    respond: { status: 200 }\nmiddlewares:\n  empty:\n    headers: {}\n",
    );
    assert!(
        stderr.contains("weir.yaml:10:") && stderr.contains("`headers` sets nothing"),
        "{stderr}"
    );
}
