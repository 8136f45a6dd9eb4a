//! Router micro-benchmark: nanoseconds per lookup with 10 and with 10,000 Host-routed
//! routes (plus a few unindexed ones), to show the lookup cost does not grow with the table.
//! Run: `cargo bench -p weir-proxy --bench router`.

use bytes::BytesMut;
use std::hint::black_box;
use std::time::Instant;
use weir_proxy::codec::parse_request;
use weir_proxy::Router;

fn build(routes: usize) -> Router<usize> {
    let mut rules = Vec::new();
    for i in 0..routes {
        let text = format!("Host(`h{i}.example.com`) && PathPrefix(`/api`)");
        rules.push((
            weir_config::rule::parse(&text).unwrap(),
            text.len() as i64,
            i,
        ));
    }
    for (j, text) in [
        "Header(`X-Canary`, `1`)",
        "PathRegexp(`^/v[0-9]+/`)",
        "Method(`PURGE`)",
    ]
    .iter()
    .enumerate()
    {
        rules.push((weir_config::rule::parse(text).unwrap(), 1, routes + j));
    }
    Router::new(rules)
}

fn measure(routes: usize) -> f64 {
    let router = build(routes);
    let heads: Vec<_> = (0..64)
        .map(|k| {
            let i = (k * 7919) % routes;
            let raw = format!("GET /api/items/{k} HTTP/1.1\r\nHost: h{i}.example.com\r\nUser-Agent: bench\r\n\r\n");
            parse_request(&mut BytesMut::from(raw.as_str())).unwrap().unwrap()
        })
        .collect();
    let ip: std::net::IpAddr = "127.0.0.1".parse().unwrap();
    let iterations = 2_000_000;
    let started = Instant::now();
    let mut hits = 0usize;
    for n in 0..iterations {
        let head = &heads[n % heads.len()];
        hits += black_box(router.route_request(head, ip)).is_some() as usize;
    }
    assert_eq!(hits, iterations);
    started.elapsed().as_nanos() as f64 / iterations as f64
}

fn main() {
    let small = measure(10);
    let large = measure(10_000);
    println!("router lookup, 10 routes:     {small:.1} ns");
    println!("router lookup, 10,000 routes: {large:.1} ns");
    println!("ratio 10,000 / 10:            {:.2}", large / small);
}
