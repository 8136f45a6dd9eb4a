//! What a fleet of weir instances shares through a real Redis (issue 37). `rate_limit`: the
//! admitted rate across 2 and 3 instances, however the traffic is split between them; Redis
//! stopped, frozen or never there (`fail_open` admitting at once, or answering 503, and no
//! request waiting longer than `timeout`); enforcement back within seconds of Redis's return,
//! with one log line each way; and `average: 0`, which limits nothing, Redis or not (one of
//! Traefik's Redis limiter's bugs refused everything there). `purge.fanout`: a `PURGE` by URL,
//! prefix or tag at one instance applied by the others within a second; a follower back from
//! a disconnection drops its memory tier when purges were published meanwhile, and keeps it
//! when none were.

mod common;
use common::*;
use std::time::{Duration, Instant};

/// Two workers proxying every path to `upstream` behind `shared`, a `rate_limit` whose body is
/// given, on `/` but not on `/open`.
fn limited(upstream: &Upstream, body: &str) -> Weir {
    Weir::start(&guarded_config(upstream, "shared", "rate_limit", body))
}

fn status_of(weir: &Weir, path: &str) -> u16 {
    get(weir.addr(), "t", path).status
}

/// Sends from `threads[i]` connections to `weirs[i]`, as fast as the answers come, for
/// `window`: the 200s, the 429s and the seconds it took.
fn hammer(weirs: &[&Weir], threads: &[usize], window: Duration) -> (usize, usize, f64) {
    let addrs: Vec<_> = weirs.iter().map(|w| w.addr()).collect();
    admitted_and_refused(&addrs, threads, window, Duration::from_millis(2))
}

/// The admitted count for `average`/s with `burst` over `elapsed` is within 5% of the token
/// bucket's: the burst plus the rate over the time.
fn assert_within_5_percent(
    admitted: usize,
    refused: usize,
    elapsed: f64,
    average: f64,
    burst: f64,
) {
    let expected = burst + average * elapsed;
    let off = (admitted as f64 - expected) / expected;
    eprintln!(
        "admitted {admitted} refused {refused} in {elapsed:.2}s: {:+.2}%",
        off * 100.0
    );
    assert!(
        off.abs() <= 0.05,
        "admitted {admitted} (refused {refused}) in {elapsed:.2}s, expected {expected:.0}: {:+.1}%",
        off * 100.0
    );
    assert!(refused > admitted, "the load must be well over the rate");
}

/// Three instances of 2 workers each share one bucket: 100/s with a burst of 20, the
/// traffic split 4:1:1 between them, then 1:1:1; each window's admitted count is within 5% of
/// one instance's limit (three separate limits would admit about three times it).
#[test]
fn three_instances_share_one_limit_however_the_traffic_is_split() {
    let redis = Redis::start();
    let up = Upstream::start("app");
    let body = format!(
        "{{ average: 100, burst: 20, redis: {{ endpoints: [\"{}\"] }} }}",
        redis.endpoint()
    );
    let weirs = [
        limited(&up, &body),
        limited(&up, &body),
        limited(&up, &body),
    ];
    let all: Vec<&Weir> = weirs.iter().collect();
    let (first, refused, elapsed) = hammer(&all, &[4, 1, 1], Duration::from_secs(3));
    assert_within_5_percent(first, refused, elapsed, 100.0, 20.0);
    // One bucket for the one source, under the prefix, the word and the middleware's name;
    // left idle, it expires in Redis (burst/rate + 1 s), so the next window starts full.
    let keys = || redis_cli(redis.port, &["KEYS", "*"]);
    assert_eq!(keys(), "weir:rate:shared:127.0.0.1");
    std::thread::sleep(Duration::from_millis(1600));
    assert_eq!(keys(), "", "the idle bucket expired");
    let (second, refused, elapsed) = hammer(&all, &[2, 2, 2], Duration::from_secs(3));
    assert_within_5_percent(second, refused, elapsed, 100.0, 20.0);
    assert_eq!(up.request_count(), first + second);
}

/// Two instances, nine tenths of the traffic on one: the limit is the fleet's.
#[test]
fn two_instances_share_one_limit() {
    let redis = Redis::start();
    let up = Upstream::start("app");
    let body = format!(
        "{{ average: 150, burst: 10, redis: {{ endpoints: [\"{}\"] }} }}",
        redis.endpoint()
    );
    let (a, b) = (limited(&up, &body), limited(&up, &body));
    let (admitted, refused, elapsed) = hammer(&[&a, &b], &[9, 1], Duration::from_secs(3));
    assert_within_5_percent(admitted, refused, elapsed, 150.0, 10.0);
    assert_eq!(up.request_count(), admitted);
}

/// Redis stopped: with `fail_open` (the default) requests are admitted at once, not after the
/// timeout, and weir says so once; Redis back (empty): the limit holds again within seconds,
/// and weir says that once too. Frozen: a request waits no longer than `timeout`.
#[test]
fn redis_away_admits_without_waiting_and_enforcement_returns_with_it() {
    let mut redis = Redis::start();
    let up = Upstream::start("app");
    let weir = limited(
        &up,
        &format!(
            "{{ average: 1, period: 1h, redis: {{ endpoints: [\"{}\"], timeout: 200ms }} }}",
            redis.endpoint()
        ),
    );
    assert_eq!(status_of(&weir, "/x"), 200);
    assert_eq!(
        status_of(&weir, "/x"),
        429,
        "Redis holds the hour's one token"
    );

    redis.stop();
    for _ in 0..20 {
        let asked = Instant::now();
        assert_eq!(status_of(&weir, "/x"), 200, "fail_open admits");
        assert!(
            asked.elapsed() < Duration::from_millis(600),
            "{:?}",
            asked.elapsed()
        );
    }
    weir.wait_for_line("unreachable", 1);

    redis.restart();
    let back = Instant::now();
    loop {
        if status_of(&weir, "/x") == 429 {
            break;
        }
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "enforcing again within 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    weir.wait_for_line("reachable again", 1);
    let lines = weir.stderr();
    let said = |text: &str| lines.iter().filter(|l| l.contains(text)).count();
    assert_eq!(said("unreachable"), 1, "{lines:?}");

    // Frozen: connections stay open and nothing is answered.
    redis.pause(true);
    for _ in 0..3 {
        let asked = Instant::now();
        assert_eq!(status_of(&weir, "/x"), 200);
        let took = asked.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_millis(700),
            "waited {took:?} on a frozen Redis with a 200ms timeout"
        );
    }
    redis.pause(false);
    assert_eq!(status_of(&weir, "/open"), 200);
}

/// `fail_open: false`: a Redis that is not there answers 503, at once; `average: 0` limits
/// nothing and never asks Redis.
#[test]
fn fail_closed_answers_503_and_average_zero_limits_nothing() {
    let up = Upstream::start("app");
    let nowhere = format!("127.0.0.1:{}", free_port());
    let body =
        format!("{{ average: 5, redis: {{ endpoints: [\"{nowhere}\"], fail_open: false }} }}");
    let with_admin = guarded_config(&up, "shared", "rate_limit", &body).replace(
        "server: { workers: 2 }",
        "server: { workers: 2, admin: { address: \"127.0.0.1:0\" } }",
    );
    let closed = Weir::start(&with_admin);
    for _ in 0..5 {
        let asked = Instant::now();
        let resp = get(closed.addr(), "t", "/x");
        assert_eq!(resp.status, 503, "{}", resp.text());
        assert!(asked.elapsed() < Duration::from_millis(500));
    }
    assert_eq!(status_of(&closed, "/open"), 200);
    assert_eq!(up.request_count(), 1);
    let metrics = get(closed.addrs["@admin"], "a", "/metrics").text();
    assert!(
        metrics
            .lines()
            .any(|l| l == "weir_rate_limit_store_failures_total{middleware=\"shared\"} 5"),
        "{metrics}"
    );

    let off = limited(
        &up,
        &format!("{{ average: 0, redis: {{ endpoints: [\"{nowhere}\"], fail_open: false }} }}"),
    );
    for _ in 0..20 {
        assert_eq!(status_of(&off, "/x"), 200);
    }
}

/// Bad Redis settings are refused by `weir check` at their `file:line:column`.
#[test]
fn bad_redis_settings_are_refused_where_they_are() {
    let out = weir_check_refuses(
        "redis-bad",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nmiddlewares:\n  shared:\n    rate_limit: { average: 5, redis: { endpoints: [localhost] } }\n",
    );
    assert!(
        out.contains(":5:52: a Redis endpoint must be `host:port`"),
        "{out}"
    );
}

/// Three instances caching one nginx origin, with `purge.fanout` through `redis`.
fn purging_fleet(redis: &Redis) -> (Nginx, Vec<Weir>) {
    let origin = Nginx::with_location(
        "add_header cache-control \"max-age=3600\"; add_header cache-tag \"$uri-tag, all\"; return 200 \"$uri\";",
    );
    let yaml = format!(
        "server: {{ workers: 2 }}\n\
         entrypoints:\n  web: {{ address: \"127.0.0.1:0\" }}\n\
         routers:\n  all: {{ rule: \"PathPrefix(`/`)\", service: origin, cache: main }}\n\
         services:\n  origin: {{ servers: [{{ url: \"http://{}\" }}] }}\n\
         caches:\n  main: {{ purge: {{ allow: [127.0.0.1], fanout: {{ redis: {{ endpoints: [\"{}\"] }} }} }} }}\n",
        origin.addr,
        redis.endpoint()
    );
    let weirs = (0..3).map(|_| Weir::start(&yaml)).collect();
    (origin, weirs)
}

/// Whether `weir` answers `path` from its cache (asking once first, so that it is stored).
fn cached(weir: &Weir, path: &str) -> bool {
    let status = get(weir.addr(), "t", path)
        .header("cache-status")
        .unwrap_or_default()
        .to_string();
    status.starts_with("weir; hit")
}

fn purge_at(weir: &Weir, path: &str, extra: &str) -> String {
    let resp = request(
        weir.addr(),
        &format!("PURGE {path} HTTP/1.1\r\nHost: t\r\n{extra}Connection: close\r\n\r\n"),
    );
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.text()
}

/// Waits (up to 1 s) until `path` is no longer a hit at every one of `weirs`.
fn purged_everywhere(weirs: &[&Weir], path: &str) {
    let started = Instant::now();
    for weir in weirs {
        loop {
            let status = get(weir.addr(), "t", path)
                .header("cache-status")
                .unwrap_or_default()
                .to_string();
            if !status.starts_with("weir; hit") {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{path} still cached: {status}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn a_purge_at_one_instance_reaches_the_others() {
    let redis = Redis::start();
    let (_origin, weirs) = purging_fleet(&redis);
    let paths = ["/a", "/img/1", "/img/2", "/tagged"];
    for weir in &weirs {
        for path in paths {
            get(weir.addr(), "t", path);
            assert!(cached(weir, path), "{path} stored");
        }
    }
    // By URL, at the first instance.
    let answer = purge_at(&weirs[0], "/a", "");
    assert_eq!(answer, "{\"purged\":1,\"fanout\":\"published\"}\n");
    purged_everywhere(&weirs.iter().collect::<Vec<_>>(), "/a");
    // By prefix, at the second; by tag, at the third.
    purge_at(&weirs[1], "/img/*", "");
    purged_everywhere(&[&weirs[0], &weirs[2]], "/img/1");
    purged_everywhere(&[&weirs[0], &weirs[2]], "/img/2");
    assert!(cached(&weirs[0], "/tagged"));
    purge_at(&weirs[2], "/", "Cache-Tag: /tagged-tag\r\n");
    purged_everywhere(&[&weirs[0], &weirs[1]], "/tagged");
}

/// A follower that lost its connection while nothing was published keeps its copies; one that
/// was away while a purge went out (Redis restarted, empty) drops its memory tier.
#[test]
fn a_follower_back_from_a_gap_drops_its_memory_only_if_it_missed_purges() {
    let mut redis = Redis::start();
    let (_origin, weirs) = purging_fleet(&redis);
    for weir in &weirs {
        get(weir.addr(), "t", "/kept");
        assert!(cached(weir, "/kept"));
    }
    purge_at(&weirs[0], "/other", "");
    // Every subscriber's connection cut; nothing published meanwhile.
    assert!(
        redis_cli(redis.port, &["CLIENT", "KILL", "TYPE", "pubsub"])
            .parse::<u32>()
            .unwrap()
            >= 3
    );
    for weir in &weirs {
        weir.wait_for_line("purge fanout: redis reachable again", 1);
    }
    for weir in &weirs {
        assert!(cached(weir, "/kept"), "nothing missed, nothing dropped");
    }
    // Redis gone: a purge cannot be published; back empty, its count differs from what the
    // followers saw: each drops its memory tier.
    redis.stop();
    let answer = purge_at(&weirs[0], "/kept", "");
    assert!(answer.contains("\"fanout\":\"failed\""), "{answer}");
    redis.restart();
    for weir in &weirs[1..] {
        weir.wait_for_line("memory tier dropped", 1);
        assert!(!cached(weir, "/kept"));
    }
}
