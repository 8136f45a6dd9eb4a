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
    assert_eq!(keys(), "weir:rate:{shared}:127.0.0.1");
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

/// Issue 37's measure with a real load generator: wrk against two instances sharing a limit
/// through Redis, 2 connections on one and 8 on the other, both at once for 5 s; the admitted
/// count is within 5% of one limit's (two separate limits would admit about twice it).
#[test]
fn wrk_split_across_two_instances_is_admitted_at_the_fleet_rate() {
    let redis = Redis::start();
    let up = Upstream::start("app");
    let body = format!(
        "{{ average: 300, burst: 30, redis: {{ endpoints: [\"{}\"] }} }}",
        redis.endpoint()
    );
    let (a, b) = (limited(&up, &body), limited(&up, &body));
    let runs: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = [(&a, 2), (&b, 8)]
            .into_iter()
            .map(|(weir, conns)| scope.spawn(move || paced_wrk(weir.addr(), conns, 5)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let requests: u64 = runs.iter().map(|r| r.0).sum();
    let refused: u64 = runs.iter().map(|r| r.1).sum();
    let seconds = runs.iter().map(|r| r.2).fold(0.0, f64::max);
    assert_within_5_percent(
        (requests - refused) as usize,
        refused as usize,
        seconds,
        300.0,
        30.0,
    );
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

/// Redis killed and restarted under a steady load through two instances sharing a limit
/// that does not bind: no request fails (`fail_open`), and none stalls past the timeout.
#[test]
fn redis_killed_and_restarted_under_load_fails_no_request() {
    let mut redis = Redis::start();
    let up = Upstream::start("app");
    let body = format!(
        "{{ average: 100000, burst: 100000, redis: {{ endpoints: [\"{}\"], timeout: 100ms }} }}",
        redis.endpoint()
    );
    let (a, b) = (limited(&up, &body), limited(&up, &body));
    let loads = [
        SteadyLoad::start(a.addr(), "/x"),
        SteadyLoad::start(b.addr(), "/x"),
    ];
    std::thread::sleep(Duration::from_millis(300));
    redis.stop();
    std::thread::sleep(Duration::from_millis(700));
    redis.restart();
    std::thread::sleep(Duration::from_millis(700));
    for load in loads {
        let report = load.finish();
        report.assert_no_failure();
        assert!(report.ok > 50, "the load ran: {}", report.ok);
    }
    // Enforcing again within seconds: the buckets are in the restarted Redis.
    let back = Instant::now();
    while redis_cli(redis.port, &["KEYS", "*"]) != "weir:rate:{shared}:127.0.0.1" {
        assert!(
            back.elapsed() < Duration::from_secs(5),
            "no bucket in the restarted Redis"
        );
        assert_eq!(status_of(&a, "/x"), 200);
        std::thread::sleep(Duration::from_millis(50));
    }
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
    let out = weir_check_refuses(
        "redis-bad-ca",
        "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nmiddlewares:\n  shared:\n    rate_limit: { average: 5, redis: { endpoints: [\"a:1\"], tls: { ca: /nowhere/ca.pem } } }\n",
    );
    assert!(
        out.contains("weir.yaml:5:65: middleware `shared`: cannot read CA file /nowhere/ca.pem"),
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

/// A Redis Cluster of three masters, weir pointed at a node that does not hold the limit's
/// slot: its `MOVED` is followed, the command sent again, and the limit holds (the bucket on
/// the node that owns the slot of the hash tag `{shared}`). A 1 s timeout: the redirected
/// command waits for a new connection, which a loaded machine may take a while to make.
#[test]
fn a_limit_in_a_redis_cluster_follows_moved() {
    let nodes: Vec<Redis> = (0..3)
        .map(|_| {
            Redis::start_with(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
            ])
        })
        .collect();
    let addresses: Vec<String> = nodes.iter().map(|n| n.endpoint()).collect();
    let mut create = std::process::Command::new("redis-cli");
    create.args(["--cluster", "create"]).args(&addresses).args([
        "--cluster-replicas",
        "0",
        "--cluster-yes",
    ]);
    stdout_of(&mut create, "redis-cli --cluster create");
    let started = Instant::now();
    while !redis_cli(nodes[0].port, &["CLUSTER", "INFO"]).contains("cluster_state:ok") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the cluster did not form"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The node that owns the slot of `shared`, and one that does not.
    let slot: u32 = redis_cli(nodes[0].port, &["CLUSTER", "KEYSLOT", "shared"])
        .parse()
        .unwrap();
    let owner = |node: &Redis| {
        redis_cli(node.port, &["CLUSTER", "NODES"])
            .lines()
            .any(|line| {
                line.contains("myself")
                    && line.split(' ').skip(8).any(|range| {
                        let (from, to) = range.split_once('-').unwrap_or((range, range));
                        (from.parse().unwrap_or(u32::MAX)..=to.parse().unwrap_or(0)).contains(&slot)
                    })
            })
    };
    let elsewhere = nodes
        .iter()
        .find(|n| !owner(n))
        .expect("a node without the slot");
    let holder = nodes.iter().find(|n| owner(n)).expect("the slot's node");

    let up = Upstream::start("app");
    let weir = limited(
        &up,
        &format!(
            "{{ average: 1, period: 1h, redis: {{ endpoints: [\"{}\"], fail_open: false, timeout: 1s }} }}",
            elsewhere.endpoint()
        ),
    );
    assert_eq!(status_of(&weir, "/x"), 200);
    for _ in 0..5 {
        assert_eq!(
            status_of(&weir, "/x"),
            429,
            "the limit holds through the redirect"
        );
    }
    assert_eq!(
        redis_cli(holder.port, &["EXISTS", "weir:rate:{shared}:127.0.0.1"]),
        "1"
    );
}

/// Sentinel: weir asks the sentinel for the master, and after a failover (the old master
/// answering `READONLY`) asks again; the limit holds throughout (`fail_open: false`, so a
/// request Redis could not decide would be a 503).
#[test]
fn a_limit_through_sentinel_survives_a_failover() {
    let master = Redis::start();
    let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
    let conf = temp_dir("sentinel").join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "sentinel monitor main 127.0.0.1 {} 1\nsentinel down-after-milliseconds main 1000\nsentinel failover-timeout main 5000\n",
            master.port
        ),
    )
    .unwrap();
    let conf_path = conf.display().to_string();
    let sentinel = Redis::start_with(&[&conf_path, "--sentinel"]);
    let master_of = || {
        redis_cli(
            sentinel.port,
            &["SENTINEL", "get-master-addr-by-name", "main"],
        )
        .lines()
        .last()
        .unwrap_or_default()
        .to_string()
    };
    assert_eq!(master_of(), master.port.to_string());
    // The replica has caught up before the failover.
    let started = Instant::now();
    while !redis_cli(replica.port, &["INFO", "replication"]).contains("master_link_status:up") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the replica did not sync"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let up = Upstream::start("app");
    let weir = limited(
        &up,
        &format!(
            "{{ average: 1, period: 1h, redis: {{ endpoints: [\"{}\"], sentinel: {{ master_name: main }}, fail_open: false, timeout: 1s }} }}",
            sentinel.endpoint()
        ),
    );
    assert_eq!(status_of(&weir, "/x"), 200);
    assert_eq!(status_of(&weir, "/x"), 429);

    assert_eq!(
        redis_cli(sentinel.port, &["SENTINEL", "FAILOVER", "main"]),
        "OK"
    );
    let started = Instant::now();
    while master_of() != replica.port.to_string() {
        assert!(started.elapsed() < Duration::from_secs(15), "no failover");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The old master is demoted once it is told; from then on it answers writes READONLY.
    while !redis_cli(master.port, &["INFO", "replication"]).contains("role:slave") {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the old master was not demoted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..10 {
        assert_eq!(
            status_of(&weir, "/x"),
            429,
            "the limit holds after the failover"
        );
    }
    assert_eq!(up.request_count(), 1);
}

/// TLS to Redis (`redis-server --tls-port`, clients not asked for a certificate): the limit
/// holds through it, with the server's certificate checked against `tls.ca`; a wrong CA is
/// a failed handshake, so no decision (`fail_open: false`: 503).
#[test]
fn a_limit_through_tls_to_redis() {
    let dir = temp_dir("redis-tls");
    let server = make_cert(&dir, "redis", &["localhost"], false);
    let other = make_cert(&dir, "other", &["localhost"], false);
    let (cert, key) = (
        server.cert.display().to_string(),
        server.key.display().to_string(),
    );
    let redis = Redis::start_with(&[
        "--tls-port",
        "{port}",
        "--port",
        "0",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &cert,
        "--tls-auth-clients",
        "no",
    ]);
    let up = Upstream::start("app");
    let with_ca = |ca: &std::path::Path| {
        limited(
            &up,
            &format!(
                "{{ average: 1, period: 1h, redis: {{ endpoints: [\"{}\"], fail_open: false, timeout: 1s, tls: {{ ca: \"{}\", server_name: localhost }} }} }}",
                redis.endpoint(),
                ca.display()
            ),
        )
    };
    let trusted = with_ca(&server.cert);
    assert_eq!(status_of(&trusted, "/x"), 200);
    assert_eq!(status_of(&trusted, "/x"), 429);
    let untrusted = with_ca(&other.cert);
    assert_eq!(status_of(&untrusted, "/x"), 503);
    untrusted.wait_for_line("TLS", 1);
}

/// Redis 6 ACLs and a database: weir authenticates as `username`/`password` and keeps its
/// buckets in `db`; a wrong password is a failed connection (`fail_open: false`: 503). The
/// first request waits for the connection, its AUTH and SELECT: 5 s, as a loaded CI machine
/// once took longer than 1 s there.
#[test]
fn a_limit_as_an_acl_user_in_another_database() {
    let redis = Redis::start_with(&["--user", "weir", "on", ">s3cret", "~*", "&*", "+@all"]);
    let up = Upstream::start("app");
    let with_password = |password: &str| {
        limited(
            &up,
            &format!(
                "{{ average: 1, period: 1h, redis: {{ endpoints: [\"{}\"], username: weir, password: {password}, db: 3, fail_open: false, timeout: 5s }} }}",
                redis.endpoint()
            ),
        )
    };
    let weir = with_password("s3cret");
    assert_eq!(status_of(&weir, "/x"), 200);
    assert_eq!(status_of(&weir, "/x"), 429);
    let keys = redis_cli(
        redis.port,
        &["--user", "weir", "--pass", "s3cret", "-n", "3", "KEYS", "*"],
    );
    assert_eq!(keys, "weir:rate:{shared}:127.0.0.1");
    let wrong = with_password("nope");
    assert_eq!(status_of(&wrong, "/x"), 503);
}
