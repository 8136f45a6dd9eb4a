//! `rate_limit`: a token bucket per source (Traefik's rateLimit on golang.org/x/time/rate):
//! a request takes a token; one that would wait a little for it waits, one that would wait
//! longer is refused 429 with `Retry-After` and `X-Retry-In`. The buckets are shared by the
//! workers, so the limit holds for the whole instance; with `redis`, they are in Redis, shared
//! by every instance, one script run per decision.

use super::source::{self, Shards, SHARDS};
use super::Flow;
use crate::http::codec::{push_decimal, RequestHead};
use crate::http::error::{ErrorKind, LocalError};
use crate::io::ticker::Ticker;
use crate::stores::redis::{Redis, StoreError, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use weir_config::SourceCriterion;

/// How many sources are remembered at most, across workers (Traefik's `maxSources`).
const MAX_SOURCES: usize = 65536;

/// A `rate_limit` that limits (a positive `average`), built once per configuration.
pub struct RateLimit {
    criterion: SourceCriterion,
    store: Store,
}

/// Where the buckets are: this instance's memory, or Redis, shared by a fleet.
enum Store {
    Local(Buckets),
    Redis(Box<SharedBuckets>),
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (rate, burst) = match &self.store {
            Store::Local(buckets) => (buckets.rate, buckets.burst),
            Store::Redis(shared) => (shared.rate, shared.burst),
        };
        f.debug_struct("RateLimit")
            .field("rate", &rate)
            .field("burst", &burst)
            .finish_non_exhaustive()
    }
}

impl RateLimit {
    /// `None` for an `average` of 0, which limits nothing (in Redis too: one of Traefik's
    /// Redis limiter's bugs refused everything there).
    pub fn new(name: &str, config: &weir_config::RateLimit) -> Option<RateLimit> {
        if config.average == 0 {
            return None;
        }
        // Traefik's arithmetic: average × 1 s in integer nanoseconds, over the period's.
        let rate = (config.average * 1_000_000_000) as f64 / config.period.as_nanos() as f64;
        let burst = config.burst as f64;
        let store = match &config.redis {
            Some(redis) => Store::Redis(Box::new(SharedBuckets::new(name, redis, rate, burst))),
            None => Store::Local(Buckets::new(rate, burst)),
        };
        Some(RateLimit {
            criterion: config.source_criterion.clone(),
            store,
        })
    }

    pub(super) fn shared_store(&self) -> Option<&std::sync::Arc<Redis>> {
        match &self.store {
            Store::Local(_) => None,
            Store::Redis(shared) => Some(&shared.redis),
        }
    }

    /// Takes a token for `req`'s source (waiting for it when the wait is short), or refuses.
    pub(super) fn on_request(&self, req: &RequestHead, peer: IpAddr) -> Flow<'_> {
        let mut spelled = [0u8; 45];
        let key = source::source_key(&self.criterion, req, peer).as_key(&mut spelled);
        match &self.store {
            Store::Local(buckets) => taken_flow(buckets.take(key, Instant::now())),
            Store::Redis(shared) => {
                let key = shared.key_for(key);
                Flow::Wait(Box::pin(shared.decide(key)))
            }
        }
    }
}

/// What the request does with its bucket's answer.
fn taken_flow(taken: Taken) -> Flow<'static> {
    match taken {
        Taken::Now => Flow::Continue,
        // Workers run without tokio's timer: a one-shot timerfd, for the requests that
        // wait. Without one (no descriptor left) the request goes now: its token is spent,
        // so the rate still holds.
        Taken::After(wait) => match Ticker::once(wait) {
            Ok(timer) => Flow::Wait(Box::pin(async move {
                let _ = timer.tick().await;
                Flow::Continue
            })),
            Err(_) => Flow::Continue,
        },
        Taken::Refused(wait) => Flow::Refuse(refusal(wait)),
    }
}

/// The token bucket of `Buckets::take` as one Redis script, so that each decision is atomic
/// for the whole fleet. Time is Redis's own (`TIME`): the instances' clocks do not have to
/// agree. KEYS[1] is the source's bucket; ARGV: tokens per microsecond, burst, how long an
/// idle bucket is kept (ms), the longest wait worth waiting (µs). Answers `{code, wait µs}`:
/// 1 now, 2 after the wait, 0 refused.
const BUCKET_SCRIPT: &str = r#"
if redis.replicate_commands then pcall(redis.replicate_commands) end
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local saved = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens, last = burst, now
if saved[1] then
  tokens, last = tonumber(saved[1]), tonumber(saved[2])
  if now > last then
    tokens = math.min(burst, tokens + (now - last) * rate)
    last = now
  end
end
local left, code, wait = tokens - 1, 1, 0
if left < 0 then
  wait = math.floor(-left / rate)
  if wait > tonumber(ARGV[4]) then
    code, left = 0, tokens
  else
    code = 2
  end
end
redis.call('HSET', KEYS[1], 't', left, 'l', last)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {code, wait}
"#;

/// The buckets of a `rate_limit` with `redis`: one Redis hash per source, under
/// `{key_prefix}rate:{middleware}:{source}`, so that every instance naming the same store and
/// middleware shares them.
struct SharedBuckets {
    redis: std::sync::Arc<Redis>,
    rate: f64,
    burst: f64,
    key_base: Vec<u8>,
    /// The script's SHA-1, for `EVALSHA`.
    sha: String,
    /// ARGV, spelled once.
    args: [String; 4],
}

impl SharedBuckets {
    fn new(name: &str, config: &weir_config::RedisStore, rate: f64, burst: f64) -> Self {
        let digest = ring::digest::digest(
            &ring::digest::SHA1_FOR_LEGACY_USE_ONLY,
            BUCKET_SCRIPT.as_bytes(),
        );
        let sha = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        // A bucket left alone this long has refilled: dropping it changes nothing.
        let idle_ms = (burst / rate * 1000.0).ceil() as u64 + 1000;
        let args = [
            format!("{:e}", rate / 1e6),
            format!("{burst}"),
            idle_ms.to_string(),
            max_delay(rate).as_micros().to_string(),
        ];
        SharedBuckets {
            redis: Redis::new(config.clone()),
            rate,
            burst,
            key_base: format!("{}rate:{name}:", config.key_prefix).into_bytes(),
            sha,
            args,
        }
    }

    /// The bucket's key for `source`.
    fn key_for(&self, source: &[u8]) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.key_base.len() + source.len());
        key.extend_from_slice(&self.key_base);
        key.extend_from_slice(source);
        key
    }

    /// Asks Redis for a token (running the script by its hash, or whole once Redis has
    /// forgotten it); when Redis cannot answer in time, admits or refuses as `fail_open`
    /// says.
    async fn decide(&self, key: Vec<u8>) -> Flow<'static> {
        let [rate, burst, idle, delay] = &self.args;
        let rest: [&[u8]; 6] = [
            b"1",
            &key,
            rate.as_bytes(),
            burst.as_bytes(),
            idle.as_bytes(),
            delay.as_bytes(),
        ];
        let by_hash = [&[b"EVALSHA".as_slice(), self.sha.as_bytes()][..], &rest].concat();
        let mut answer = self.redis.call(&by_hash).await;
        if matches!(&answer, Err(StoreError::Refused(e)) if e.starts_with("NOSCRIPT")) {
            let whole = [&[b"EVAL".as_slice(), BUCKET_SCRIPT.as_bytes()][..], &rest].concat();
            answer = self.redis.call(&whole).await;
        }
        let taken = match answer {
            Ok(Value::Array(items)) => match items.as_slice() {
                [Value::Int(code), Value::Int(wait)] => {
                    let wait = Duration::from_micros((*wait).max(0) as u64);
                    match code {
                        1 => Some(Taken::Now),
                        2 => Some(Taken::After(wait)),
                        _ => Some(Taken::Refused(wait)),
                    }
                }
                _ => None,
            },
            _ => None,
        };
        match taken {
            Some(taken) => match taken_flow(taken) {
                Flow::Wait(wait) => wait.await,
                flow => flow,
            },
            None => self.unanswered(),
        }
    }

    /// No decision from Redis: admitted under `fail_open`, else 503; counted either way.
    fn unanswered(&self) -> Flow<'static> {
        self.redis
            .failures
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match self.redis.config.fail_open {
            true => Flow::Continue,
            false => Flow::Refuse(LocalError::new(
                503,
                ErrorKind::PolicyRefused,
                "Service Unavailable",
            )),
        }
    }
}

/// The 429 as Traefik writes it: `Retry-After` in whole seconds (rounded up), `X-Retry-In` as
/// Go prints a duration, and the status text as the body. Written without `core::fmt`: a
/// refusal should cost well under half a proxied request.
fn refusal(wait: Duration) -> LocalError {
    let mut error = LocalError::new(429, ErrorKind::PolicyRefused, "Too Many Requests");
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut retry_after = Vec::with_capacity(20);
    push_decimal(&mut retry_after, seconds);
    error.headers.reserve_exact(2);
    error
        .headers
        .push(("retry-after".into(), ascii_text(retry_after)));
    error.headers.push(("x-retry-in".into(), go_duration(wait)));
    error
}

/// Bytes this module wrote, all UTF-8, as a `String`.
fn ascii_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_default()
}

/// What a request gets from its bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Taken {
    Now,
    /// A token, once the wait is over (a wait short enough to be worth it).
    After(Duration),
    /// No token: the wait would be this long.
    Refused(Duration),
}

/// One source's bucket, as golang.org/x/time/rate's `Limiter` keeps it: tokens (negative
/// when requests are waiting for theirs) as of `last`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    last: Instant,
}

/// The buckets of one middleware, by source, in shards.
struct Buckets {
    /// Tokens per second.
    rate: f64,
    burst: f64,
    /// The longest wait worth waiting rather than refusing.
    max_delay: Duration,
    /// How long a bucket is kept without a request.
    idle_ttl: Duration,
    shards: Shards<Shard>,
}

#[derive(Default)]
struct Shard {
    buckets: HashMap<Box<[u8]>, Bucket, foldhash::fast::FixedState>,
    /// When to drop the idle buckets next.
    next_sweep: Option<Instant>,
}

impl Buckets {
    fn new(rate: f64, burst: f64) -> Buckets {
        let max_delay = max_delay(rate);
        // Traefik: a bucket refills within its time to live, plus a second.
        let idle_ttl = Duration::from_secs(if rate >= 1.0 {
            2
        } else {
            1 + (1.0 / rate) as u64
        });
        Buckets {
            rate,
            burst,
            max_delay,
            idle_ttl,
            shards: Shards::new(),
        }
    }

    /// A token for `source` at `now`, as `Limiter.Reserve` gives it, cancelled when the wait
    /// exceeds `max_delay` (then the bucket keeps its token).
    fn take(&self, source: &[u8], now: Instant) -> Taken {
        let mut shard = self.shards.lock(source);
        if shard.next_sweep.is_none_or(|at| now >= at) {
            shard.sweep(now, self.idle_ttl);
        }
        let bucket = match shard.buckets.get_mut(source) {
            Some(bucket) => bucket,
            None => shard.insert(source, now, self.burst, self.idle_ttl),
        };
        // Refill for the time since the last request, up to the burst.
        let elapsed = now.saturating_duration_since(bucket.last);
        let tokens = (bucket.tokens + elapsed.as_secs_f64() * self.rate).min(self.burst);
        bucket.last = bucket.last.max(now);
        let left = tokens - 1.0;
        if left >= 0.0 {
            bucket.tokens = left;
            return Taken::Now;
        }
        // Go's durationFromTokens: nanoseconds, truncated.
        let wait = Duration::from_nanos((-left / self.rate * 1e9) as u64);
        if wait > self.max_delay {
            bucket.tokens = tokens;
            Taken::Refused(wait)
        } else {
            bucket.tokens = left;
            Taken::After(wait)
        }
    }
}

impl Shard {
    /// Drops the buckets idle for `idle_ttl` (they would be full again anyway).
    fn sweep(&mut self, now: Instant, idle_ttl: Duration) {
        self.buckets
            .retain(|_, b| now.saturating_duration_since(b.last) < idle_ttl);
        self.next_sweep = Some(now + idle_ttl);
    }

    /// A full bucket for a new source; when the shard holds its share of `MAX_SOURCES`, the
    /// idle buckets go first, then the one idle longest (Traefik evicts the nearest expiry).
    fn insert(
        &mut self,
        source: &[u8],
        now: Instant,
        burst: f64,
        idle_ttl: Duration,
    ) -> &mut Bucket {
        if self.buckets.len() >= MAX_SOURCES / SHARDS {
            self.sweep(now, idle_ttl);
        }
        if self.buckets.len() >= MAX_SOURCES / SHARDS {
            let oldest = self
                .buckets
                .iter()
                .min_by_key(|(_, b)| b.last)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.buckets.remove(&oldest);
            }
        }
        let fresh = Bucket {
            tokens: burst,
            last: now,
        };
        self.buckets.entry(source.into()).or_insert(fresh)
    }
}

/// The longest wait worth waiting rather than refusing. Traefik: half a token's time, at most
/// 0.5 s for rates under one a second.
fn max_delay(rate: f64) -> Duration {
    if rate < 1.0 {
        Duration::from_millis(500)
    } else {
        Duration::from_nanos(1_000_000_000 / (rate as u64 * 2))
    }
}

/// A duration as Go's `time.Duration.String` prints it: `1.5s`, `2m0.5s`, `250ms`, `1µs`, `0s`.
fn go_duration(d: Duration) -> String {
    let mut out = Vec::with_capacity(24);
    let nanos = d.as_nanos();
    if nanos == 0 {
        out.extend_from_slice(b"0s");
    } else if nanos < 1_000_000_000 {
        // Below a second: the largest unit that keeps an integer part, and its fraction.
        let nanos = nanos as u64;
        let (unit, name): (u64, &[u8]) = match nanos {
            0..1_000 => (1, b"ns"),
            1_000..1_000_000 => (1_000, "µs".as_bytes()),
            _ => (1_000_000, b"ms"),
        };
        push_with_fraction(&mut out, nanos / unit, nanos % unit, unit);
        out.extend_from_slice(name);
    } else {
        let secs = d.as_secs();
        let (hours, minutes) = (secs / 3600, secs / 60 % 60);
        if hours > 0 {
            push_decimal(&mut out, hours);
            out.push(b'h');
        }
        if hours > 0 || minutes > 0 {
            push_decimal(&mut out, minutes);
            out.push(b'm');
        }
        push_with_fraction(&mut out, secs % 60, d.subsec_nanos().into(), 1_000_000_000);
        out.push(b's');
    }
    ascii_text(out)
}

/// `whole` and `part`/`unit` (a power of ten) as a decimal without trailing zeros.
fn push_with_fraction(out: &mut Vec<u8>, whole: u64, mut part: u64, mut unit: u64) {
    push_decimal(out, whole);
    if part == 0 {
        return;
    }
    out.push(b'.');
    while part % 10 == 0 {
        part /= 10;
        unit /= 10;
    }
    // Leading zeros: as many as `part` has fewer digits than `unit` has zeros.
    let mut place = unit / 10;
    while place > part {
        out.push(b'0');
        place /= 10;
    }
    push_decimal(out, part);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(average: u64, period: Duration, burst: u64) -> Buckets {
        let config = weir_config::RateLimit {
            average,
            period,
            burst,
            source_criterion: SourceCriterion::default(),
            redis: None,
        };
        match RateLimit::new("limit", &config).expect("limits").store {
            Store::Local(buckets) => buckets,
            Store::Redis(_) => unreachable!(),
        }
    }

    /// rate_limiter_test.go `TestNewRateLimiter`: "maxDelay computation", "maxDelay
    /// computation, low rate regime", "no ratelimit on Average == 0"; and the idle time to
    /// live of `New`.
    #[test]
    fn rate_max_delay_and_time_to_live() {
        let b = buckets(200, Duration::from_secs(1), 10);
        assert_eq!(b.max_delay, Duration::from_micros(2500));
        assert_eq!(b.idle_ttl, Duration::from_secs(2));
        let b = buckets(2, Duration::from_secs(10), 10);
        assert!((b.rate - 0.2).abs() < 1e-10);
        assert_eq!(b.max_delay, Duration::from_millis(500));
        assert_eq!(b.idle_ttl, Duration::from_secs(6));
        let b = buckets(50, Duration::from_millis(500), 1);
        assert!((b.rate - 100.0).abs() < 1e-10);
        let off = weir_config::RateLimit {
            average: 0,
            period: Duration::from_secs(1),
            burst: 10,
            source_criterion: SourceCriterion::default(),
            redis: None,
        };
        assert!(RateLimit::new("limit", &off).is_none());
    }

    /// A wait to the microsecond: the bucket's float arithmetic is off by a nanosecond or so.
    fn to_micros(taken: Taken) -> Taken {
        let round = |d: Duration| Duration::from_micros((d.as_nanos() as f64 / 1e3).round() as u64);
        match taken {
            Taken::Now => Taken::Now,
            Taken::After(wait) => Taken::After(round(wait)),
            Taken::Refused(wait) => Taken::Refused(round(wait)),
        }
    }

    /// The token bucket on a fake clock: a full bucket of `burst`, one token per 1/rate,
    /// a short wait taken (and its token spent), a long one refused (its token kept).
    #[test]
    fn token_bucket_on_a_fake_clock() {
        let b = buckets(10, Duration::from_secs(1), 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.take(b"a", t0), Taken::Now);
        }
        // Empty: the next token is 100 ms away, over max_delay (50 ms).
        assert_eq!(
            to_micros(b.take(b"a", t0)),
            Taken::Refused(Duration::from_millis(100))
        );
        assert_eq!(
            b.take(b"b", t0),
            Taken::Now,
            "another source has its own bucket"
        );
        let t1 = t0 + Duration::from_millis(40);
        assert_eq!(
            to_micros(b.take(b"a", t1)),
            Taken::Refused(Duration::from_millis(60))
        );
        // 40 ms away: within max_delay, the request waits and the token is spent.
        let t2 = t0 + Duration::from_millis(60);
        assert_eq!(
            to_micros(b.take(b"a", t2)),
            Taken::After(Duration::from_millis(40))
        );
        // The next one also waits for that one's token.
        assert_eq!(
            to_micros(b.take(b"a", t2)),
            Taken::Refused(Duration::from_millis(140))
        );
        let t4 = t0 + Duration::from_secs(10);
        for _ in 0..3 {
            assert_eq!(b.take(b"a", t4), Taken::Now);
        }
        assert!(matches!(b.take(b"a", t4), Taken::Refused(_)));
    }

    /// A source that stops sending frees its bucket once idle for the time to live (2 s at
    /// 100/s): the first request to a shard after that sweeps it; a recent bucket stays.
    #[test]
    fn idle_buckets_expire() {
        let b = buckets(100, Duration::from_secs(1), 1);
        let t0 = Instant::now();
        for source in 0..100u32 {
            b.take(&source.to_be_bytes(), t0);
        }
        let held = |b: &Buckets| -> usize { b.shards.each().map(|s| s.buckets.len()).sum() };
        assert_eq!(held(&b), 100);
        let recent = 7u32.to_be_bytes();
        b.take(&recent, t0 + Duration::from_secs(1));
        let after_ttl = t0 + Duration::from_millis(2500);
        // Enough new sources that every shard gets a request, and sweeps.
        for source in 1000..1200u32 {
            b.take(&source.to_be_bytes(), after_ttl);
        }
        assert_eq!(held(&b), 201, "the recent bucket and the new ones");
        assert!(b.shards.each().any(|s| s.buckets.contains_key(&recent[..])));
    }

    /// Memory stays bounded: past its share of `MAX_SOURCES`, a shard drops its oldest bucket.
    #[test]
    fn sources_are_capped() {
        let b = buckets(1, Duration::from_secs(1), 1);
        let t0 = Instant::now();
        for source in 0..(MAX_SOURCES as u32 + 1000) {
            b.take(
                &source.to_be_bytes(),
                t0 + Duration::from_micros(source.into()),
            );
        }
        let held: usize = b.shards.each().map(|s| s.buckets.len()).sum();
        assert!(held <= MAX_SOURCES, "{held}");
        assert!(held > MAX_SOURCES * 9 / 10, "{held}");
    }

    /// Go's `Duration.String` for the waits `X-Retry-In` carries.
    #[test]
    fn durations_as_go_prints_them() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(999), "999ns"),
            (Duration::from_nanos(1_500), "1.5µs"),
            (Duration::from_micros(2_500), "2.5ms"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_nanos(199_999_999), "199.999999ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_millis(1_500), "1.5s"),
            (Duration::from_secs(60), "1m0s"),
            (Duration::from_millis(90_250), "1m30.25s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_nanos(1_000_001), "1.000001ms"),
            (Duration::from_nanos(1_050_000_000), "1.05s"),
            (Duration::from_nanos(10_000_000_001), "10.000000001s"),
            (Duration::from_secs(3 * 3600 + 7), "3h0m7s"),
        ];
        for (d, text) in cases {
            assert_eq!(go_duration(d), text);
        }
        let r = refusal(Duration::from_millis(1_200));
        assert_eq!(r.status, 429);
        assert_eq!(
            r.headers,
            vec![
                ("retry-after".to_string(), "2".to_string()),
                ("x-retry-in".to_string(), "1.2s".to_string())
            ]
        );
    }
}
