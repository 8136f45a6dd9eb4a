//! End-to-end routing: every matcher and operator, priorities, 404, and entrypoint scoping,
//! through the real binary.

mod common;
use common::*;

fn respond(name: &str, rule: &str, extra: &str) -> String {
    format!("  {name}:\n    rule: \"{rule}\"\n{extra}    respond: {{ body: \"{name}\" }}\n")
}

#[test]
fn matchers_operators_and_priority() {
    let mut yaml = String::from(
        "server: { workers: 2 }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\n  admin: { address: \"127.0.0.1:0\" }\nrouters:\n",
    );
    for (name, rule, extra) in [
        ("host", "Host(`api.example.com`)", ""),
        (
            "host-regexp",
            "HostRegexp(`^[a-z]+\\\\.example\\\\.org$`)",
            "",
        ),
        ("path", "Path(`/exact`)", ""),
        ("prefix", "PathPrefix(`/pre`)", ""),
        ("path-regexp", "PathRegexp(`^/v[0-9]+/items$`)", ""),
        ("method", "Method(`DELETE`)", ""),
        ("header", "Header(`X-Env`, `prod`)", ""),
        ("header-regexp", "HeaderRegexp(`X-Trace`, `^t-[0-9]+$`)", ""),
        ("query", "Query(`mobile`, `true`)", ""),
        ("query-regexp", "QueryRegexp(`id`, `^[0-9]+$`)", ""),
        ("client-ip", "ClientIP(`127.0.0.0/8`) && Path(`/ip`)", ""),
        (
            "not-client-ip",
            "ClientIP(`10.0.0.0/8`) && Path(`/ip10`)",
            "",
        ),
        ("and", "Host(`shop.test`) && Path(`/cart`)", ""),
        ("or", "Path(`/a`) || Path(`/b`)", ""),
        ("not", "Host(`neg.test`) && !PathPrefix(`/private`)", ""),
        (
            "parens",
            "Host(`p.test`) && (Method(`PUT`) || Method(`PATCH`))",
            "",
        ),
        ("low", "Host(`prio.test`)", "    priority: 1\n"),
        (
            "high",
            "Host(`prio.test`) && PathPrefix(`/`)",
            "    priority: 100\n",
        ),
        ("long-wins", "Host(`len.test`) && PathPrefix(`/x`)", ""),
        ("short-loses", "Host(`len.test`)", ""),
        ("admin-only", "Path(`/admin`)", "    entrypoints: [admin]\n"),
    ] {
        yaml.push_str(&respond(name, rule, extra));
    }
    let weir = Weir::start(&yaml);
    let web = weir.addr();
    let admin = weir.addrs["admin"];
    let req = |method: &str, host: &str, target: &str, headers: &str| {
        let r = request(
            web,
            &format!(
                "{method} {target} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n"
            ),
        );
        if r.status == 404 {
            "404".to_string()
        } else {
            r.text()
        }
    };
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        ("GET", "API.Example.com:8080", "/", "", "host"),
        ("GET", "www.example.org", "/", "", "host-regexp"),
        ("GET", "x.test", "/exact?q=1", "", "path"),
        ("GET", "x.test", "/exact/more", "", "404"),
        ("GET", "x.test", "/prefix/deep", "", "prefix"),
        ("GET", "x.test", "/v12/items", "", "path-regexp"),
        ("DELETE", "x.test", "/", "", "method"),
        ("GET", "x.test", "/", "X-Env: prod\r\n", "header"),
        ("GET", "x.test", "/", "X-Env: dev\r\n", "404"),
        ("GET", "x.test", "/", "X-Trace: t-42\r\n", "header-regexp"),
        ("GET", "x.test", "/?mobile=true", "", "query"),
        ("GET", "x.test", "/?mobile=false", "", "404"),
        ("GET", "x.test", "/?id=7", "", "query-regexp"),
        ("GET", "x.test", "/ip", "", "client-ip"),
        ("GET", "x.test", "/ip10", "", "404"),
        ("GET", "shop.test", "/cart", "", "and"),
        ("GET", "other.test", "/cart", "", "404"),
        ("GET", "x.test", "/b", "", "or"),
        ("GET", "neg.test", "/public", "", "not"),
        ("GET", "neg.test", "/private/x", "", "404"),
        ("PATCH", "p.test", "/", "", "parens"),
        ("GET", "p.test", "/", "", "404"),
        ("GET", "prio.test", "/", "", "high"),
        ("GET", "len.test", "/x", "", "long-wins"),
        ("GET", "len.test", "/y", "", "short-loses"),
        ("GET", "x.test", "/admin", "", "404"),
        ("GET", "nothing.test", "/nothing", "", "404"),
    ];
    for (method, host, target, headers, want) in cases {
        assert_eq!(
            &req(method, host, target, headers),
            want,
            "{method} {host}{target} {headers:?}"
        );
    }
    assert_eq!(get(admin, "x", "/admin").text(), "admin-only");
    let miss = get(web, "nothing.test", "/");
    assert_eq!(miss.status, 404);
}

#[test]
fn many_routes_route_correctly() {
    let mut yaml = String::from("entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n");
    for i in 0..2000 {
        yaml.push_str(&respond(
            &format!("r{i}"),
            &format!("Host(`h{i}.test`) && PathPrefix(`/`)"),
            "",
        ));
    }
    let weir = Weir::start(&yaml);
    for i in [0, 777, 1999] {
        assert_eq!(
            get(weir.addr(), &format!("h{i}.test"), "/x").text(),
            format!("r{i}")
        );
    }
    assert_eq!(get(weir.addr(), "h2000.test", "/").status, 404);
}

#[test]
fn rules_behave_as_in_traefik() {
    let mut yaml = String::from(
        "server: { workers: 1 }\nentrypoints:\n  web: { address: \"127.0.0.1:0\" }\nrouters:\n",
    );
    for (name, rule, extra) in [
        ("lower", "pathprefix(`/lower`)", ""),
        ("upper", "PATHPREFIX(`/upper`)", ""),
        ("title", "Pathprefix(`/title`)", ""),
        ("wild", "Host(`*.wild.test`)", ""),
        ("dot-rule", "Host(`dot.test.`)", ""),
        ("dot-request", "Host(`plain.test`)", ""),
        ("ipv6", "Host(`::1`)", ""),
        ("empty-authority", "Host(`empty.test`)", ""),
        ("rx-case", "HostRegexp(`^[A-Z]+\\\\.rx\\\\.test$`)", ""),
        (
            "rx-lower",
            "HostRegexp(`^[a-z]+\\\\.rx\\\\.test$`)",
            "    priority: 1\n",
        ),
        ("method", "Host(`m.test`) && Method(`get`)", ""),
        ("flag", "Host(`q.test`) && Query(`flag`)", ""),
        ("spaced", "Path(`/foo bar`)", ""),
        ("slash", "Path(`/a/b`)", ""),
        ("braces", "PathRegexp(`^/{path:(css|js)}$`)", ""),
        ("any", "Host(`*`)", "    priority: 1\n"),
    ] {
        yaml.push_str(&respond(name, rule, extra));
    }
    let weir = Weir::start(&yaml);
    let route = |raw: &str| {
        let r = request(weir.addr(), raw);
        if r.status == 404 {
            "404".to_string()
        } else {
            r.text()
        }
    };
    let get = |host: &str, target: &str| {
        route(&format!(
            "GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
        ))
    };
    // Matcher names: as documented, all lowercase, all uppercase, capitalised.
    assert_eq!(get("x", "/lower"), "lower");
    assert_eq!(get("x", "/upper"), "upper");
    assert_eq!(get("x", "/title"), "title");
    // `*.wild.test` is one label; `*` catches any other host (at priority 1).
    assert_eq!(get("a.wild.test", "/"), "wild");
    assert_eq!(get("A.Wild.Test:8080", "/"), "wild");
    assert_eq!(get("a.b.wild.test", "/"), "any");
    assert_eq!(get("wild.test", "/"), "any");
    // A trailing dot on either side; IPv6 literals without brackets.
    assert_eq!(get("dot.test", "/"), "dot-rule");
    assert_eq!(get("plain.test.", "/"), "dot-request");
    assert_eq!(get("[::1]:8080", "/"), "ipv6");
    // An empty absolute-form authority falls back to the Host header.
    assert_eq!(
        route("GET http:///x HTTP/1.1\r\nHost: empty.test\r\nConnection: close\r\n\r\n"),
        "empty-authority"
    );
    // HostRegexp sees the lowercased host and is case-sensitive.
    assert_eq!(get("ABC.rx.test", "/"), "rx-lower");
    // Method: the rule's name is upper-cased; the request's is compared exactly.
    assert_eq!(get("m.test", "/"), "method");
    assert_eq!(
        route("get / HTTP/1.1\r\nHost: m.test\r\nConnection: close\r\n\r\n"),
        "any"
    );
    // Paths are matched decoded, except reserved characters: `%2F` is not `/`.
    assert_eq!(get("x", "/foo%20bar"), "spaced");
    assert_eq!(get("x", "/a%2Fb"), "any");
    assert_eq!(get("x", "/%61/b"), "slash");
    // A brace that Go's regexes read as a literal.
    assert_eq!(get("x", "/%7Bpath:css%7D"), "braces");
    // Query with one argument: the key is present with an empty value.
    assert_eq!(get("q.test", "/?flag"), "flag");
    assert_eq!(get("q.test", "/?flag="), "flag");
    assert_eq!(get("q.test", "/?flag=1"), "any");
}
