//! A server's state shared by every worker and kept across reloads (`ServerState`: pool id,
//! requests in flight, health). Health: down by active checks (`servers/health_check.rs`), drained by
//! an operator (the admin API), or ejected by passive checks (`passive_health`: `max_failures`
//! failures seen by requests within `window` eject the server for `eject`). Balancers skip
//! servers that are down, drained or ejected; reading that costs two relaxed atomic loads, and
//! no clock unless the server was ejected.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Instant;
use weir_config::PassiveHealth;

/// Milliseconds since the first call (a process-wide monotonic clock for ejections).
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// In `Health::out`: down by active checks.
const DOWN: u8 = 1;
/// In `Health::out`: drained through the admin API.
const DRAINED: u8 = 2;

#[derive(Debug, Default)]
pub struct Health {
    /// Why the server takes no new requests: `DOWN`, `DRAINED`, both, or 0.
    out: AtomicU8,
    /// Ejected by passive checks until this `now_ms()`; 0 when not ejected.
    ejected_until: AtomicU64,
    /// Passive failures counted in the window that began at `window_start`.
    failures: AtomicU32,
    window_start: AtomicU64,
}

impl Health {
    pub fn usable(&self) -> bool {
        if self.out.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let until = self.ejected_until.load(Ordering::Relaxed);
        until == 0 || now_ms() >= until
    }

    pub fn is_down(&self) -> bool {
        self.out.load(Ordering::Relaxed) & DOWN != 0
    }

    pub fn is_drained(&self) -> bool {
        self.out.load(Ordering::Relaxed) & DRAINED != 0
    }

    /// Whether passive checks have the server ejected now.
    pub fn is_ejected(&self) -> bool {
        let until = self.ejected_until.load(Ordering::Relaxed);
        until != 0 && now_ms() < until
    }

    /// Set by the active checks (`servers/health_check.rs`).
    pub fn set_down(&self, down: bool) {
        self.set(DOWN, down);
    }

    /// Set through the admin API: no new requests, those in flight finish.
    pub fn set_drained(&self, drained: bool) {
        self.set(DRAINED, drained);
    }

    fn set(&self, flag: u8, on: bool) {
        if on {
            self.out.fetch_or(flag, Ordering::Relaxed);
        } else {
            self.out.fetch_and(!flag, Ordering::Relaxed);
        }
    }

    /// A request saw this server fail (connect error, reset, 502/503/504). Returns true when
    /// this failure ejected it.
    pub fn record_failure(&self, policy: &PassiveHealth) -> bool {
        let now = now_ms();
        let start = self.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) > policy.window.as_millis() as u64 {
            self.window_start.store(now, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= policy.max_failures {
            self.failures.store(0, Ordering::Relaxed);
            self.ejected_until
                .store(now + policy.eject.as_millis() as u64, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// An atomic on its own cache line, so workers touching neighbouring slots do not contend.
#[repr(align(64))]
#[derive(Default, Debug)]
pub struct Padded(pub AtomicUsize);

/// What a server keeps across reloads while its identity (service, scheme, address, TLS name)
/// holds (`state/carry.rs`): its pool id, requests in flight and health.
#[derive(Debug)]
pub struct ServerState {
    /// Process-unique id; indexes each worker's connection pool.
    pub id: usize,
    pub inflight: Padded,
    /// Active and passive health, shared by every worker.
    pub health: Health,
}

static NEXT_SERVER_ID: AtomicUsize = AtomicUsize::new(0);

pub fn new_server_state() -> Arc<ServerState> {
    Arc::new(ServerState {
        id: NEXT_SERVER_ID.fetch_add(1, Ordering::Relaxed),
        inflight: Padded::default(),
        health: Health::default(),
    })
}
