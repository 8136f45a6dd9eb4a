//! `purge.fanout`: a `PURGE` accepted by one instance is published through Redis, and every
//! other instance of the fleet applies it too. Redis numbers each order (one script: `INCR`
//! then `PUBLISH`), so a follower that was disconnected can tell whether it missed any: when
//! the number moved while it was away, it drops its whole memory tier rather than serve what
//! a missed purge removed elsewhere.

use super::purge::{self, PurgeOrder};
use super::store::ResponseCache;
use crate::io::ticker::Ticker;
use crate::stores::redis::{self, Dialer, Redis, Subscription, Value};
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use weir_config::RedisStore;

/// Numbers the order and publishes it with its number in front, atomically.
const PUBLISH_SCRIPT: &str =
    "local n = redis.call('INCR', KEYS[1]) redis.call('PUBLISH', ARGV[1], n .. '\\n' .. ARGV[2]) return n";

/// This process, so that a follower skips the orders its own instance published.
static ORIGIN: LazyLock<u64> = LazyLock::new(|| {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    u64::from_le_bytes(bytes) ^ u64::from(std::process::id())
});

/// Follower reconnection backoff: from this, doubling, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A cache's way to the fleet: the channel its purges go on and the counter numbering them.
#[derive(Debug)]
pub struct Fanout {
    redis: Arc<Redis>,
    channel: Vec<u8>,
    counter: Vec<u8>,
}

impl Fanout {
    pub fn new(cache: &str, config: &RedisStore) -> Result<Fanout, String> {
        let channel = format!("{}purge:{cache}", config.key_prefix);
        Ok(Fanout {
            redis: Redis::new(config.clone())?,
            counter: format!("{channel}:seq").into_bytes(),
            channel: channel.into_bytes(),
        })
    }

    /// Publishes `order`; whether Redis took it (within the store's `timeout`).
    pub(super) async fn publish(&self, order: &PurgeOrder) -> bool {
        let message = encode(*ORIGIN, order);
        let args: [&[u8]; 6] = [
            b"EVAL",
            PUBLISH_SCRIPT.as_bytes(),
            b"1",
            &self.counter,
            &self.channel,
            &message,
        ];
        match self.redis.call(&args).await {
            Ok(Value::Int(_)) => true,
            other => {
                crate::log_warn!(
                    "purge fanout: not published ({:?}); the other instances keep their copies",
                    other.err()
                );
                false
            }
        }
    }
}

/// `origin`, then the order's fields, one a line (none of them can hold a line break: they come
/// from a request line and header values).
fn encode(origin: u64, order: &PurgeOrder) -> Vec<u8> {
    let tags: Vec<&[u8]> = order.tags.iter().map(|t| &**t).collect();
    let mut out = format!(
        "{origin:x}\n{}\n{}\n{}\n{}\n",
        order.scheme, order.host, order.path, order.query
    )
    .into_bytes();
    out.extend_from_slice(&tags.join(&b","[..]));
    out
}

/// A published message: its number, where it came from, and the order.
fn decode(payload: &[u8]) -> Option<(u64, u64, PurgeOrder)> {
    let text = std::str::from_utf8(payload).ok()?;
    let mut lines = text.split('\n');
    let number = lines.next()?.parse().ok()?;
    let origin = u64::from_str_radix(lines.next()?, 16).ok()?;
    let mut field = || lines.next().map(str::to_string);
    let order = PurgeOrder {
        scheme: field()?,
        host: field()?,
        path: field()?,
        query: field()?,
        tags: field()?
            .split(',')
            .filter(|t| !t.is_empty())
            .map(|t| Box::from(t.as_bytes()))
            .collect(),
    };
    Some((number, origin, order))
}

/// Follows `cache`'s channel for as long as the task runs (the control thread aborts it when
/// the cache or its fanout changes): applies each order another instance published to the
/// cache `find` returns (the one in service), and, back from a disconnection during which
/// orders were published, drops the memory tier. One log line when Redis goes, one when it is
/// back.
pub async fn follow(
    cache: String,
    config: RedisStore,
    find: impl Fn() -> Option<Arc<ResponseCache>>,
) {
    let channel = format!("{}purge:{cache}", config.key_prefix);
    let counter = format!("{channel}:seq");
    let dialer = match Dialer::new(config) {
        Ok(dialer) => dialer,
        Err(e) => {
            crate::log_error!("cache `{cache}`: purge fanout: {e}");
            return;
        }
    };
    let mut seen: Option<u64> = None;
    let mut away = false;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let why = match Subscription::open(&dialer, channel.as_bytes()).await {
            Err(e) => e,
            Ok(mut subscription) => {
                // Subscribed first, then the count: nothing published from now on is missed.
                let current = match redis::call_once(&dialer, &[b"GET", counter.as_bytes()]).await {
                    Ok(Value::Text(n)) => std::str::from_utf8(&n).ok().and_then(|n| n.parse().ok()),
                    Ok(_) => Some(0),
                    Err(_) => None,
                };
                if away {
                    crate::log_info!("cache `{cache}`: purge fanout: redis reachable again");
                    away = false;
                }
                backoff = FIRST_BACKOFF;
                let missed = match (seen, current) {
                    (Some(before), Some(now)) => now != before,
                    // The first connection: nothing to have missed; no count: assume the worst.
                    (None, _) => false,
                    (Some(_), None) => true,
                };
                if missed {
                    if let Some(found) = find() {
                        found.store.objects.clear();
                        crate::log_warn!(
                            "cache `{cache}`: purges may have been missed while redis was away; memory tier dropped"
                        );
                    }
                }
                if current.is_some() {
                    seen = current;
                }
                loop {
                    let payload = match subscription.next().await {
                        Ok(payload) => payload,
                        Err(e) => break e,
                    };
                    let Some((number, origin, order)) = decode(&payload) else {
                        continue;
                    };
                    seen = Some(seen.map_or(number, |s| s.max(number)));
                    if origin == *ORIGIN {
                        continue;
                    }
                    if let Some(found) = find() {
                        purge::apply(&found, &order).await;
                    }
                }
            }
        };
        if !away {
            crate::log_warn!("cache `{cache}`: purge fanout: redis unreachable ({why})");
            away = true;
        }
        match Ticker::once(backoff) {
            Ok(timer) => {
                let _ = timer.tick().await;
            }
            Err(_) => return,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_go_through_the_channel_unchanged() {
        let order = PurgeOrder {
            scheme: "http".into(),
            host: "shop.example".into(),
            path: "/img/*".into(),
            query: "a=1&b=2".into(),
            tags: vec![Box::from(&b"red"[..]), Box::from(&b"blue"[..])],
        };
        let mut payload = b"42\n".to_vec();
        payload.extend(encode(7, &order));
        assert_eq!(decode(&payload), Some((42, 7, order.clone())));
        let untagged = PurgeOrder {
            tags: Vec::new(),
            ..order
        };
        let mut payload = b"1\n".to_vec();
        payload.extend(encode(9, &untagged));
        assert_eq!(decode(&payload), Some((1, 9, untagged)));
        assert_eq!(decode(b"x\n1\nhttp"), None);
    }
}
