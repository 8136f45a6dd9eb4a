//! The cache's store: stored answers (`object.rs`) by primary key, each key holding its `Vary`
//! variants, in one quick_cache map shared by every worker and bounded by bytes, beside the
//! fetches in flight (`Flights`) that requests for the same key wait on. A lookup takes a
//! shard's read lock and clones an `Arc`. The store outlives reloads that keep its size and
//! key; `ResponseCache` is the compiled `caches.NAME` around it.

use super::disk::Disk;
use super::object::Object;
use crate::http::codec::{Head, RequestHead};
use crate::observe::metrics::{Cell, PerWorker};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use weir_cache::Fields;
use weir_config::rule::Cidr;
use weir_config::CacheKeyPart;

/// The identifier in `Cache-Status`.
pub(super) const CACHE_NAME: &str = "weir";

/// How long a key whose answer could not be stored skips request coalescing (Varnish's
/// hit-for-miss): requests for it go to the origin at once instead of one after another.
pub(super) const PASS_FOR: u64 = 60;

impl Fields for Head {
    fn lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.get_all(name)
    }

    fn all(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.iter()
    }
}

/// A primary key with its hash, computed once per request: the map, the flights and the
/// eviction (which rehashed the evicted key, long out of the CPU's caches) all use it.
#[derive(Clone, Default, Debug)]
pub(super) struct Key {
    hash: u64,
    bytes: Vec<u8>,
}

impl Key {
    fn new(bytes: Vec<u8>, hasher: &foldhash::fast::RandomState) -> Key {
        Key {
            hash: hasher.hash_one(&bytes),
            bytes,
        }
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.hash == other.hash && self.bytes == other.bytes
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// What a primary key holds: the stored variants (one per secondary key).
#[derive(Clone, Default)]
pub(super) struct Entry {
    pub(super) variants: Variants,
    /// Until when (Unix seconds) requests for this key skip coalescing: the last answer
    /// could not be stored.
    pub(super) pass_until: u64,
    /// What the variants weigh, summed when they change: the map weighs an entry it evicts,
    /// and reading it here spares a walk through the evicted objects, long out of the CPU's
    /// caches (a full store evicts on every miss).
    weight: u64,
}

impl Entry {
    /// The entry with its variants' weight summed again.
    fn weighed(mut self) -> Entry {
        self.weight = self.variants.iter().map(|o| o.weight()).sum();
        self
    }
}

/// A key's variants. Most keys have one (no `Vary`), held without a list: the map clones an
/// entry on every lookup, and storing or evicting one then allocates or frees no list.
#[derive(Clone, Default)]
pub(super) enum Variants {
    #[default]
    None,
    One(Arc<Object>),
    Many(Arc<[Arc<Object>]>),
}

impl Variants {
    pub(super) fn iter(&self) -> std::slice::Iter<'_, Arc<Object>> {
        match self {
            Variants::None => [].iter(),
            Variants::One(object) => std::slice::from_ref(object).iter(),
            Variants::Many(list) => list.iter(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        matches!(self, Variants::None)
    }

    /// These variants with `object` in place of the one for its secondary key.
    fn with(&self, object: Arc<Object>) -> Variants {
        let mut list: Vec<Arc<Object>> = self
            .iter()
            .filter(|o| o.secondary != object.secondary)
            .cloned()
            .collect();
        if list.is_empty() {
            return Variants::One(object);
        }
        list.push(object);
        Variants::Many(list.into())
    }
}

#[derive(Clone)]
pub(super) struct Weigh;

impl quick_cache::Weighter<Key, Entry> for Weigh {
    fn weight(&self, key: &Key, entry: &Entry) -> u64 {
        // A pass marker weighs its key and a little.
        key.len() as u64 + 64 + entry.weight
    }
}

/// A lookup's result.
#[derive(Default)]
pub(super) struct Found {
    /// The variant for the request.
    pub(super) object: Option<Arc<Object>>,
    /// The key holds variants for other values of the `Vary`'d fields.
    pub(super) other_variants: bool,
    /// The key's answers are not stored just now: skip coalescing.
    pub(super) pass: bool,
}

/// The fetches in flight, by the hash of their primary key: the first request for a key that
/// must go to the origin leads, the others wait for it (`Flights::join`). Keyed by hash, a
/// flight costs no copy of its key; two keys in flight at once with the same 64-bit hash
/// would make one wait for the other's fetch, then look again and fetch its own.
#[derive(Default)]
pub(super) struct Flights {
    /// A key's flight is made by its first follower: most fetches have none, and then cost
    /// no allocation and no wake-up.
    leading: Mutex<HashMap<u64, Option<Arc<Flight>>, foldhash::fast::RandomState>>,
}

/// One fetch in flight: done once its leader stored the answer (or gave up).
#[derive(Default)]
pub(super) struct Flight {
    done: AtomicBool,
    landed: Notify,
}

impl Flight {
    /// Waits until the leader is done (the caller bounds the wait).
    pub(super) async fn landed(&self) {
        // Created before the check, a `Notified` gets the leader's wake-up even if it comes
        // before the first poll.
        let landed = self.landed.notified();
        if !self.done.load(Ordering::Acquire) {
            landed.await;
        }
    }
}

/// Leading or following the fetch of a key.
pub(super) enum Join {
    Lead(Leader),
    Follow(Arc<Flight>),
}

/// The right to fetch a key; dropping it (stored, failed, or cancelled) wakes the followers.
pub(super) struct Leader {
    flights: Arc<Flights>,
    key_hash: u64,
}

impl Drop for Leader {
    fn drop(&mut self) {
        // Even after a panic elsewhere poisoned the lock, the followers must be woken.
        let mut leading = self
            .flights
            .leading
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let followed = leading.remove(&self.key_hash).flatten();
        drop(leading);
        if let Some(flight) = followed {
            flight.done.store(true, Ordering::Release);
            flight.landed.notify_waiters();
        }
    }
}

impl Flights {
    pub(super) fn join(self: &Arc<Self>, key: &Key) -> Join {
        let key_hash = key.hash;
        let Ok(mut leading) = self.leading.lock() else {
            // A poisoned lock (a panic elsewhere): fetch without coalescing.
            return Join::Follow(Arc::new(Flight {
                done: AtomicBool::new(true),
                landed: Notify::new(),
            }));
        };
        match leading.entry(key_hash) {
            std::collections::hash_map::Entry::Occupied(mut flying) => {
                let flight = flying.get_mut().get_or_insert_with(Arc::default);
                Join::Follow(flight.clone())
            }
            std::collections::hash_map::Entry::Vacant(free) => {
                free.insert(None);
                Join::Lead(Leader {
                    flights: self.clone(),
                    key_hash,
                })
            }
        }
    }

    /// Leads the fetch of `key` if nobody does.
    pub(super) fn lead(self: &Arc<Self>, key: &Key) -> Option<Leader> {
        match self.join(key) {
            Join::Lead(leader) => Some(leader),
            Join::Follow(_) => None,
        }
    }
}

/// Keys are hashed with foldhash (`Key::new`): SipHash was 2% of a miss's instructions
/// (callgrind), and keys are URLs the cache already bounds.
type Objects =
    quick_cache::sync::Cache<Key, Entry, Weigh, foldhash::fast::RandomState, CountEvictions>;

/// quick_cache's own lifecycle (evicted entries dropped after the shard's lock is released),
/// counting the answers pushed out to make room (pass markers are not answers).
#[derive(Clone, Default)]
pub(super) struct CountEvictions {
    evicted: Arc<AtomicU64>,
    inner: quick_cache::sync::DefaultLifecycle<Key, Entry>,
}

impl quick_cache::Lifecycle<Key, Entry> for CountEvictions {
    type RequestState =
        <quick_cache::sync::DefaultLifecycle<Key, Entry> as quick_cache::Lifecycle<Key, Entry>>::RequestState;

    fn begin_request(&self) -> Self::RequestState {
        self.inner.begin_request()
    }

    fn on_evict(&self, state: &mut Self::RequestState, key: Key, entry: Entry) {
        if !entry.variants.is_empty() {
            // Only when the store is full: the shared counter costs nothing to a hit.
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.on_evict(state, key, entry);
    }

    fn end_request(&self, state: Self::RequestState) {
        self.inner.end_request(state);
    }
}

/// What a cache counts in one worker (summed for `/metrics` and the admin API).
#[derive(Default)]
#[repr(align(64))]
pub struct CacheCells {
    /// Answered from the store (fresh, or stale where allowed).
    pub hits: Cell,
    /// Sent to the origin: not stored, another variant, or stale and revalidated.
    pub misses: Cell,
    /// Revalidated: the origin answered 304 and the stored answer was served.
    pub revalidated: Cell,
    /// Answers the origin sent that were stored.
    pub stores: Cell,
}

/// The share of the memory for answers asked for again (quick_cache's hot ring); the rest holds
/// new answers on probation, and a key evicted from there is remembered (a ghost), so its next
/// request enters the hot ring. quick_cache's default is 0.97. At 0.99 the probation ring is
/// 1% of the store, and a one-time answer (most misses) is dropped while its memory is still
/// in the CPU's caches, where the next new answer is written: a miss into a full 512 MiB
/// store spent 1.2 µs less user time than at 0.5 and 0.3 µs less than at 0.97
/// (`bench/run cache`'s load; 1% is 5 MiB there).
const HOT_ALLOCATION: f64 = 0.99;

/// The part of a cache that outlives a reload while its size and key stay the same.
pub struct Store {
    pub(super) objects: Objects,
    /// Hashes the keys (`Key::new`), the same for every worker and across reloads.
    key_hasher: foldhash::fast::RandomState,
    pub(super) flights: Arc<Flights>,
    /// The second tier, when configured: every stored answer is written there too.
    pub(super) disk: Option<Arc<Disk>>,
    /// Hits, misses and stores, per worker; kept with the store over a reload.
    pub(super) counts: PerWorker<CacheCells>,
    /// Answers evicted to make room, all workers together.
    evicted: Arc<AtomicU64>,
}

impl Store {
    pub fn new(
        memory: u64,
        disk: Option<&weir_config::CacheDisk>,
        workers: usize,
    ) -> Result<Store, String> {
        // quick_cache sizes its shards from an item estimate: one per 16 KiB.
        let items = (memory / (16 << 10)).clamp(64, 1 << 22) as usize;
        let disk = match disk {
            Some(d) => {
                Some(Arc::new(Disk::open(&d.path, d.size).map_err(|e| {
                    format!("disk folder {}: {e}", d.path.display())
                })?))
            }
            None => None,
        };
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(items)
            .weight_capacity(memory)
            .hot_allocation(HOT_ALLOCATION)
            .build()
            .map_err(|e| format!("memory store: {e}"))?;
        let lifecycle = CountEvictions::default();
        Ok(Store {
            evicted: lifecycle.evicted.clone(),
            objects: Objects::with_options(options, Weigh, Default::default(), lifecycle),
            key_hasher: Default::default(),
            flights: Arc::default(),
            disk,
            counts: PerWorker::new(workers),
        })
    }

    /// Brings the answer stored on disk for `key` into memory (on a blocking thread); false
    /// when there is none (or no disk tier).
    pub(super) async fn load_from_disk(&self, key: &Key) -> bool {
        let Some(disk) = self.disk.clone().filter(|d| d.contains(key)) else {
            return false;
        };
        let wanted = key.clone();
        let loaded = tokio::task::spawn_blocking(move || disk.load(&wanted).map(|o| (wanted, o)));
        match loaded.await {
            Ok(Some((key, object))) => {
                self.put_in_memory(key, Arc::new(object));
                true
            }
            _ => false,
        }
    }

    /// Removes `key`'s answers from both tiers.
    pub(super) fn remove(&self, key: &Key) {
        self.objects.remove(key);
        if let Some(disk) = self.disk.clone() {
            let key = key.to_vec();
            tokio::task::spawn_blocking(move || disk.remove(&key));
        }
    }

    /// What `key` holds for this request.
    pub(super) fn lookup(&self, key: &Key, req: &Head, now: u64) -> Found {
        let Some(entry) = self.objects.get(key) else {
            return Found::default();
        };
        let variant = entry.variants.iter().find(|o| {
            !o.varies
                || weir_cache::secondary_key(&o.fields, req).as_deref()
                    == Some(o.secondary.as_slice())
        });
        Found {
            object: variant.cloned(),
            other_variants: !entry.variants.is_empty(),
            pass: entry.pass_until > now,
        }
    }

    /// Stores `object` as its key's variant for its secondary key, in memory and (written on
    /// a blocking thread) on disk.
    pub(super) fn put(&self, key: Key, object: Arc<Object>) {
        if let Some(disk) = self.disk.clone() {
            let (key, object) = (key.clone(), object.clone());
            tokio::task::spawn_blocking(move || {
                if let Err(e) = disk.save(&key, &object) {
                    crate::log_error!("cache file not written: {e}");
                }
            });
        }
        self.put_in_memory(key, object);
    }

    fn put_in_memory(&self, key: Key, object: Arc<Object>) {
        let mut entry = self.objects.get(&key).unwrap_or_default();
        entry.variants = entry.variants.with(object);
        entry.pass_until = 0;
        self.objects.insert(key, entry.weighed());
    }

    /// Marks `key` as one whose answers are not stored, for `PASS_FOR` from `now` (Unix
    /// seconds, the worker's clock that `lookup` compares against).
    pub(super) fn mark_pass(&self, key: Key, now: u64) {
        let mut entry = self.objects.get(&key).unwrap_or_default();
        entry.pass_until = now + PASS_FOR;
        self.objects.insert(key, entry);
    }
}

/// A cache's memory tier and what it answered, counted.
#[derive(Debug, Clone, Copy)]
pub struct CacheStats {
    pub entries: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub revalidated: u64,
    pub stores: u64,
    pub evictions: u64,
}

/// A compiled `caches.NAME`: its settings around its store.
pub struct ResponseCache {
    pub name: String,
    pub(super) store: Arc<Store>,
    pub(super) max_object_size: u64,
    pub(super) lock_timeout: Duration,
    pub(super) purge_allow: Vec<Cidr>,
    key: Vec<CacheKeyPart>,
    /// Where accepted purges are published for the fleet (`purge.fanout`).
    pub(super) fanout: Option<super::fanout::Fanout>,
    fanout_store: Option<weir_config::RedisStore>,
}

impl std::fmt::Debug for ResponseCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCache")
            .field("name", &self.name)
            .finish()
    }
}

impl ResponseCache {
    /// Errors (a fanout's unusable TLS files) read `LINE:COLUMN: message`.
    pub fn new(cfg: &weir_config::Cache, store: Arc<Store>) -> Result<ResponseCache, String> {
        Ok(ResponseCache {
            name: cfg.name.clone(),
            store,
            max_object_size: cfg.max_object_size,
            lock_timeout: cfg.lock_timeout,
            purge_allow: cfg.purge_allow.clone(),
            key: cfg.key.clone(),
            fanout: cfg
                .purge_fanout
                .as_ref()
                .map(|redis| super::fanout::Fanout::new(&cfg.name, redis))
                .transpose()?,
            fanout_store: cfg.purge_fanout.clone(),
        })
    }

    /// What the memory tier holds now (for the admin API).
    pub fn stats(&self) -> CacheStats {
        let counts = &self.store.counts;
        CacheStats {
            entries: self.store.objects.len(),
            bytes: self.store.objects.weight(),
            hits: counts.sum(|c| c.hits.get()),
            misses: counts.sum(|c| c.misses.get()),
            revalidated: counts.sum(|c| c.revalidated.get()),
            stores: counts.sum(|c| c.stores.get()),
            evictions: self.store.evicted.load(Ordering::Relaxed),
        }
    }

    /// The Redis store the fleet's purges go through, if any (for the control thread's
    /// follower).
    pub fn fanout_store(&self) -> Option<&weir_config::RedisStore> {
        self.fanout_store.as_ref()
    }

    /// The store's reload identity: a store is kept while these stay the same.
    pub fn store_identity(cfg: &weir_config::Cache) -> String {
        format!("{} {} {:?} {:?}", cfg.name, cfg.memory, cfg.key, cfg.disk)
    }

    /// The primary key: the configured parts of the request (HEAD is looked up as GET, so a
    /// stored GET answers it).
    pub(super) fn primary_key(&self, req: &RequestHead, scheme: &str) -> Key {
        self.key_for(scheme, req.host(), req.path(), req.query())
    }

    /// The primary key of a GET for this URL.
    pub(super) fn key_for(&self, scheme: &str, host: &str, path: &str, query: &str) -> Key {
        let mut key = Vec::with_capacity(128);
        for part in &self.key {
            match part {
                CacheKeyPart::Method => key.extend_from_slice(b"GET"),
                CacheKeyPart::Scheme => key.extend_from_slice(scheme.as_bytes()),
                CacheKeyPart::Host => key.extend(host.bytes().map(|b| b.to_ascii_lowercase())),
                CacheKeyPart::Path => key.extend_from_slice(path.as_bytes()),
                CacheKeyPart::Query => key.extend_from_slice(query.as_bytes()),
            }
            key.push(0);
        }
        Key::new(key, &self.store.key_hasher)
    }

    /// What the key is made of.
    pub(super) fn key_parts(&self) -> &[CacheKeyPart] {
        &self.key
    }
}

/// A key's host part (`None` when the key has none) and path part, for a key made of `parts`.
pub(super) fn host_and_path<'k>(
    parts: &[CacheKeyPart],
    key: &'k [u8],
) -> (Option<&'k [u8]>, &'k [u8]) {
    let (mut host, mut path): (Option<&[u8]>, &[u8]) = (None, b"");
    for (part, value) in parts.iter().zip(key.split(|&b| b == 0)) {
        match part {
            CacheKeyPart::Host => host = Some(value),
            CacheKeyPart::Path => path = value,
            _ => {}
        }
    }
    (host, path)
}
