//! `jwt`'s `jwks_url`: the JWK Set fetched through the upstream side by the first request that
//! needs it (none held yet, the held one past its `Cache-Control: max-age`, a token of unknown
//! `kid`), one fetch at a time for all workers and never more often than once per
//! `JWKS_REFETCH_SPACING`; a request waits on it at most `JWKS_FETCH_TIMEOUT`.

use crate::actions::subrequest;
use crate::io::ticker::Ticker;
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use arc_swap::ArcSwap;
use bytes::Bytes;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_config::{
    parse_jwk_set, Jwk, DEFAULT_JWKS_MAX_AGE, JWKS_FETCH_TIMEOUT, JWKS_REFETCH_SPACING,
};

/// The largest JWK Set read; a larger answer counts as a failed fetch.
const MAX_JWKS: u64 = 1 << 20;

/// A JWK Set fetched from a URL, its keys made `K` (what the middleware verifies with).
pub(crate) struct RemoteKeys<K> {
    url: String,
    service: Arc<Service>,
    target: String,
    make: fn(&[Jwk]) -> K,
    /// The last set fetched that parsed (at first, none: `make` of no keys).
    held: ArcSwap<K>,
    born: Instant,
    /// When the held set is due to be fetched again, in milliseconds since `born` (0: now).
    due: AtomicU64,
    fetching: Mutex<Fetching>,
    /// Bumped when a fetch ends, for the requests waiting on it.
    ended: tokio::sync::watch::Sender<u64>,
}

#[derive(Default)]
struct Fetching {
    running: bool,
    last_start: Option<Instant>,
}

/// What a request does about a fetch.
enum Turn {
    Fetch,
    Wait(tokio::sync::watch::Receiver<u64>),
    Skip,
}

/// Ends the fetch it stands for even when the request fetching is dropped (its client gone,
/// its wait timed out).
struct Running<'r, K>(&'r RemoteKeys<K>);

impl<K> Drop for Running<'_, K> {
    fn drop(&mut self) {
        let mut fetching = self.0.fetching.lock().unwrap_or_else(|e| e.into_inner());
        fetching.running = false;
        self.0.ended.send_modify(|n| *n += 1);
    }
}

impl<K> RemoteKeys<K> {
    pub(crate) fn new(
        config: &weir_config::JwksUrl,
        service: Arc<Service>,
        make: fn(&[Jwk]) -> K,
    ) -> RemoteKeys<K> {
        RemoteKeys {
            url: config.url.clone(),
            service,
            target: config.target.clone(),
            make,
            held: ArcSwap::from_pointee(make(&[])),
            born: Instant::now(),
            due: AtomicU64::new(0),
            fetching: Mutex::default(),
            ended: tokio::sync::watch::Sender::new(0),
        }
    }

    /// The keys of the last set fetched.
    pub(crate) fn keys(&self) -> arc_swap::Guard<Arc<K>> {
        self.held.load()
    }

    /// Whether the held set is due to be fetched again (or none is held yet).
    pub(crate) fn stale(&self) -> bool {
        self.millis_now() >= self.due.load(Ordering::Relaxed)
    }

    fn millis_now(&self) -> u64 {
        self.born.elapsed().as_millis() as u64
    }

    /// Whether a request asking for a fresh set now would fetch one or wait on one.
    pub(crate) fn may_refresh(&self) -> bool {
        let fetching = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
        fetching.running || spaced(fetching.last_start)
    }

    /// Fetches the set for `from` (or waits on the fetch running), at most
    /// `JWKS_FETCH_TIMEOUT`. True when a new set is held.
    pub(crate) async fn refresh(&self, worker: &Worker, from: Requester) -> bool {
        let turn = {
            let mut fetching = self.fetching.lock().unwrap_or_else(|e| e.into_inner());
            if fetching.running {
                Turn::Wait(self.ended.subscribe())
            } else if spaced(fetching.last_start) {
                fetching.running = true;
                fetching.last_start = Some(Instant::now());
                Turn::Fetch
            } else {
                Turn::Skip
            }
        };
        match turn {
            Turn::Skip => false,
            Turn::Wait(mut ended) => {
                let _ = within(JWKS_FETCH_TIMEOUT, ended.changed()).await;
                false
            }
            Turn::Fetch => {
                let _running = Running(self);
                let fetched = within(JWKS_FETCH_TIMEOUT, self.fetch(worker, from));
                match fetched.await {
                    Some(Ok(())) => true,
                    Some(Err(why)) => {
                        crate::log_error!("jwt: jwks_url {}: {why}", self.url);
                        false
                    }
                    None => {
                        let waited = JWKS_FETCH_TIMEOUT.as_millis();
                        let why = format!("no JWK Set within {waited} ms");
                        crate::log_error!("jwt: jwks_url {}: {why}", self.url);
                        false
                    }
                }
            }
        }
    }

    /// Asks the server for the set and holds it when it parses.
    async fn fetch(&self, worker: &Worker, from: Requester) -> Result<(), String> {
        let accept = [(&b"accept"[..], &b"application/json"[..])];
        let head = subrequest::request_head("GET", &self.target, "", accept.into_iter(), None)
            .ok_or("its path does not make a request")?;
        let asked = (&head, Bytes::new());
        let answer = subrequest::send(worker, &self.service, from, asked, None, MAX_JWKS)
            .await
            .map_err(|failed| failed.message.to_string())?;
        let status = answer.head.status;
        if !(200..300).contains(&status) {
            return Err(format!("answered {status}; the keys held are kept"));
        }
        let text = std::str::from_utf8(&answer.body).map_err(|_| "the JWK Set is not UTF-8")?;
        let listed = parse_jwk_set(text).map_err(|why| format!("the answer {why}"))?;
        let mut keys = Vec::with_capacity(listed.len());
        let mut refused = Vec::new();
        for (number, parsed) in listed.into_iter().enumerate() {
            match parsed {
                Ok(Some(jwk)) => keys.push(jwk),
                Ok(None) => {}
                Err(why) => refused.push(format!("key {}: {why}", number + 1)),
            }
        }
        if !refused.is_empty() {
            let why = refused.join("; ");
            crate::log_warn!("jwt: jwks_url {}: left out {why}", self.url);
        }
        self.held.store(Arc::new((self.make)(&keys)));
        let max_age = max_age(&answer.head.head).unwrap_or(DEFAULT_JWKS_MAX_AGE);
        let due = self.millis_now() + max_age.as_millis().min(u64::MAX as u128 / 2) as u64;
        self.due.store(due.max(1), Ordering::Relaxed);
        Ok(())
    }
}

/// What `work` comes to within `limit`; `None` when it takes longer (it is dropped). Workers
/// run without tokio's timer: a one-shot timerfd (without one, no descriptor left, the
/// service's own timeouts bound the work).
async fn within<T>(limit: Duration, work: impl std::future::Future<Output = T>) -> Option<T> {
    let Ok(timer) = Ticker::once(limit) else {
        return Some(work.await);
    };
    tokio::select! {
        done = work => Some(done),
        _ = timer.tick() => None,
    }
}

/// Whether a fetch may start, the last having started at `last_start`.
fn spaced(last_start: Option<Instant>) -> bool {
    last_start.is_none_or(|at| at.elapsed() >= JWKS_REFETCH_SPACING)
}

/// How long an answer may be used by its `Cache-Control` (`no-store` and `no-cache`: not at
/// all); `None` when it does not say.
fn max_age(head: &crate::http::codec::Head) -> Option<Duration> {
    let mut found = None;
    for value in head.get_all("cache-control") {
        let Ok(value) = std::str::from_utf8(value) else {
            continue;
        };
        for directive in value.split(',').map(str::trim) {
            let (name, argument) = directive.split_once('=').unwrap_or((directive, ""));
            if name.eq_ignore_ascii_case("no-store") || name.eq_ignore_ascii_case("no-cache") {
                return Some(Duration::ZERO);
            }
            if name.eq_ignore_ascii_case("max-age") {
                if let Ok(seconds) = argument.trim_matches('"').parse::<u64>() {
                    found = Some(Duration::from_secs(seconds));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_control_says_how_long_a_set_is_used() {
        let with = |values: &[&str]| {
            let mut head = crate::http::codec::Head::default();
            for v in values {
                head.append("cache-control", v.as_bytes());
            }
            max_age(&head)
        };
        assert_eq!(with(&[]), None);
        assert_eq!(with(&["public, max-age=60"]), Some(Duration::from_secs(60)));
        assert_eq!(with(&["Max-Age=\"7\""]), Some(Duration::from_secs(7)));
        assert_eq!(with(&["max-age=60", "no-cache"]), Some(Duration::ZERO));
        assert_eq!(with(&["max-age=soon"]), None);
    }
}
