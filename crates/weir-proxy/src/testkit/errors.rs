//! weir's own error answers (`exchange/mod.rs::render_error`): one error, rendered in the
//! flavour its route needs (plain text, or Elasticsearch's JSON on a route to an Elasticsearch
//! service), before the response-head filters see it; and the errors that stay as configured
//! or prebuilt.

use super::{proxy, refused_url, respond, run, Harness};

/// A worker whose one route goes to an Elasticsearch service with a seed that refuses
/// connections (no discovery), with `middlewares` (a flow map of definitions) on the route.
fn elasticsearch(middlewares: &str) -> Harness {
    let names = if middlewares.is_empty() { "" } else { "seen" };
    let mut yaml = format!(
        "server:\n  workers: 1\nentrypoints:\n  web:\n    address: \"127.0.0.1:0\"\n\
         routers:\n  all:\n    rule: \"PathPrefix(`/`)\"\n    service: es\n    middlewares: [{names}]\n\
         services:\n  es:\n    elasticsearch:\n      hosts: [\"{}\"]\n      discovery: {{ enabled: false }}\n",
        refused_url()
    );
    if !middlewares.is_empty() {
        yaml += &format!("middlewares:\n  seen: {middlewares}\n");
    }
    Harness::new(&yaml)
}

/// Elasticsearch's error body for weir's 502 when no connection could be made.
const REFUSED_IN_ES_FORM: &str = "{\"error\":{\"reason\":\"upstream connection failed\",\
\"root_cause\":[{\"reason\":\"upstream connection failed\",\"type\":\"gateway_upstream_exception\"}],\
\"type\":\"gateway_upstream_exception\"},\"status\":502}";

#[test]
fn a_refused_connection_is_plain_text_on_a_plain_route() {
    run(async {
        let h = proxy(&[refused_url()]).harness();
        let r = h.connect().get("/").await;
        assert_eq!(r.status(), 502);
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.text(), "upstream connection failed\n");
    });
}

#[test]
fn the_same_error_is_elasticsearch_json_on_a_route_to_a_cluster() {
    run(async {
        let r = elasticsearch("").connect().get("/logs/_doc/1").await;
        assert_eq!(r.status(), 502);
        assert_eq!(
            r.header("content-type"),
            Some("application/json; charset=UTF-8")
        );
        assert_eq!(r.text(), REFUSED_IN_ES_FORM);
        assert_eq!(r.header("x-elastic-product"), None);
    });
}

#[test]
fn response_head_filters_see_the_error_as_rendered() {
    run(async {
        let seen = "{ headers: { response: { set: { x-seen: yes } } } }";
        let r = elasticsearch(seen).connect().get("/").await;
        assert_eq!(r.status(), 502);
        assert_eq!(r.header("x-seen"), Some("yes"));
        assert_eq!(r.text(), REFUSED_IN_ES_FORM);
    });
}

#[test]
fn a_request_no_router_takes_gets_the_prebuilt_plain_404() {
    run(async {
        let yaml = respond("{ body: hi }")
            .yaml()
            .replace("PathPrefix(`/`)", "Path(`/only`)");
        let r = Harness::new(&yaml).connect().get("/other").await;
        assert_eq!(r.status(), 404);
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.text(), "no route matches this request\n");
    });
}

#[test]
fn a_respond_route_s_error_status_keeps_its_configured_answer() {
    run(async {
        let h = respond("{ status: 403, body: \"go away\", headers: { x-why: policy } }").harness();
        let r = h.connect().get("/").await;
        assert_eq!(r.status(), 403);
        assert_eq!(r.header("x-why"), Some("policy"));
        assert_eq!(r.header("content-type"), None);
        assert_eq!(r.text(), "go away");
    });
}
