//! What one request carries from each Lua phase to the next (`ngx.ctx`, the variables its
//! scripts wrote, the client's address), on routes with a `lua` middleware: kept on the
//! worker's thread under the exchange's request head for as long as the exchange holds its
//! [`PhaseScope`].

use crate::http::codec::RequestHead;
use crate::http::Scheme;
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::time::Instant;

/// One request's state shared by its phases.
pub(super) struct Carried {
    pub ctx: Option<mlua::Table>,
    pub vars: HashMap<String, String>,
    pub remote_addr: String,
    pub scheme: Scheme,
    /// When the exchange began (`ngx.var.request_time` in `log`).
    pub started: Instant,
}

/// The carried states by [`key`], an address: weir's own, not a client's choice, so no keyed
/// hash is needed against flooding (SipHash cost three times what a Lua `access` phase's
/// lookups did).
type ByKey = HashMap<usize, Carried, BuildHasherDefault<crate::http::router::Fnv>>;

thread_local! {
    /// The requests of this worker whose exchange holds a [`PhaseScope`], by [`key`].
    static CARRIED: RefCell<ByKey> = RefCell::new(ByKey::default());
    /// The request whose script called `ngx.exec` (by [`key`]), and where it goes: the
    /// exchange takes it once the script's answer is back.
    static EXEC: RefCell<Option<(usize, Exec)>> = const { RefCell::new(None) };
}

/// Where `ngx.exec` sends a request: its new path and query, and its body when a script read
/// it from the client (the next route's action gets it from memory).
pub struct Exec {
    pub path: String,
    pub query: String,
    pub body: Option<bytes::Bytes>,
}

/// `ngx.exec` for request `key`.
pub(super) fn set_exec(key: usize, exec: Exec) {
    EXEC.set(Some((key, exec)));
}

/// The path and query a script of the request `head` is the head of gave `ngx.exec`, if one
/// did: taken, for the exchange to route it again. The exchange looks as soon as the script's
/// answer is back, with no other task run in between, so another request's target is one no
/// exchange took (a request weir made itself): dropped.
pub fn take_exec(head: &RequestHead) -> Option<Exec> {
    let key = key(head);
    let exec = EXEC.take();
    exec.filter(|(k, _)| *k == key).map(|(_, exec)| exec)
}

/// The key of the request `head` is the head of: its address, which stays put while its
/// exchange runs (the exchange's future is pinned, and owns the head).
pub(super) fn key(head: &RequestHead) -> usize {
    head as *const RequestHead as usize
}

/// Held by an exchange on a route with a `lua` middleware: its phases share one
/// [`Carried`] until it is dropped (the exchange ended, or was cancelled).
pub struct PhaseScope {
    /// Never 0 (an address), so the exchange's `Option<PhaseScope>` is one word.
    key: std::num::NonZeroUsize,
}

impl PhaseScope {
    pub fn enter(head: &RequestHead, remote_addr: &str, scheme: Scheme) -> PhaseScope {
        let key = key(head);
        let carried = Carried {
            ctx: None,
            vars: HashMap::new(),
            remote_addr: remote_addr.to_string(),
            scheme,
            started: Instant::now(),
        };
        CARRIED.with_borrow_mut(|all| all.insert(key, carried));
        let key = std::num::NonZeroUsize::new(key).unwrap_or(std::num::NonZeroUsize::MIN);
        PhaseScope { key }
    }
}

impl Drop for PhaseScope {
    fn drop(&mut self) {
        // Taken out first, so that the table's reference is released outside the borrow.
        let carried = CARRIED.with_borrow_mut(|all| all.remove(&self.key.get()));
        drop(carried);
    }
}

/// `f` on the state request `key` carries, when its exchange holds a scope.
pub(super) fn with<R>(key: usize, f: impl FnOnce(&mut Carried) -> R) -> Option<R> {
    CARRIED.with_borrow_mut(|all| {
        if all.is_empty() {
            return None;
        }
        all.get_mut(&key).map(f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exchange_s_scope_is_one_word() {
        assert_eq!(
            std::mem::size_of::<Option<PhaseScope>>(),
            std::mem::size_of::<usize>()
        );
    }
}
