//! The ACME thread (issue 38): started by the control thread once a configuration has a
//! `tls.acme` block, it follows the served configuration (reloads included), loads each
//! name's certificate from storage, orders the missing and the due ones one at a time (so at
//! most one order per name is in flight), swaps each new certificate into the workers' table
//! (`listen/acme.rs`), and retries failures with exponential backoff. Never on a worker.

pub mod client;
pub mod etcd_storage;
pub mod redis_storage;
pub mod shared_storage;

use crate::listen::acme::{certified_key, update_table, NameState, ACME_STATES};
use crate::listen::tls::client_config;
use crate::state::runtime::Runtime;
use arc_swap::ArcSwap;
use client::{AccountKey, AcmeClient, Issued};
use etcd_storage::EtcdStorage;
use redis_storage::RedisStorage;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use shared_storage::{SharedLock, SharedStorage};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_config::{Acme, Config, EtcdProvider, RedisStore};

/// The first retry after a failure; each further failure doubles it, up to `BACKOFF_MAX`.
const BACKOFF_FIRST: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(6 * 3600);
/// How often the thread looks at the configuration when nothing is due sooner.
const CONFIG_TICK: Duration = Duration::from_secs(1);

/// Whether the ACME thread runs; the control thread asks it to start on each tick.
#[derive(Default)]
pub struct AcmeThread {
    started: bool,
}

impl AcmeThread {
    /// Starts the thread the first time the served configuration has an ACME block.
    pub fn sync(&mut self, shared: &Arc<ArcSwap<Runtime>>) {
        if self.started || wanted_names(&shared.load().config).is_empty() {
            return;
        }
        let shared = shared.clone();
        let started = std::thread::Builder::new()
            .name("weir-acme".into())
            .spawn(move || run(&shared));
        match started {
            Ok(_) => self.started = true,
            Err(e) => crate::log_error!("acme: cannot start its thread: {e}"),
        }
    }
}

/// A name to hold a certificate for, with the block that asks for it.
struct Wanted {
    name: String,
    entrypoint: String,
    acme: Acme,
}

/// Every name of every ACME block, in config order (the first block naming a name has it).
fn wanted_names(config: &Config) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    for ep in &config.entrypoints {
        let Some(acme) = ep.tls.as_ref().and_then(|tls| tls.acme.as_ref()) else {
            continue;
        };
        let mut names = acme.domains.clone();
        if acme.from_rules {
            names.extend(rule_hosts(config, &ep.name));
        }
        for name in names {
            if wanted.iter().all(|w| w.name != name) {
                wanted.push(Wanted {
                    name,
                    entrypoint: ep.name.clone(),
                    acme: acme.clone(),
                });
            }
        }
    }
    wanted
}

/// The exact names of the `Host` matchers of the routers serving `entrypoint`.
fn rule_hosts(config: &Config, entrypoint: &str) -> Vec<String> {
    let hosts = std::cell::RefCell::new(Vec::new());
    let serving = config
        .routers
        .iter()
        .filter(|r| r.entrypoints.is_empty() || r.entrypoints.iter().any(|e| e == entrypoint));
    for router in serving {
        router.rule.any_matcher(&|m| {
            if let weir_config::rule::Matcher::Host(weir_config::rule::HostPattern::Exact(host)) = m
            {
                hosts.borrow_mut().push(host.clone());
            }
            false
        });
    }
    hosts.into_inner()
}

/// One name the thread looks after.
struct Managed {
    wanted: Wanted,
    /// The certificate's validity, Unix seconds, once there is one.
    validity: Option<(i64, i64)>,
    /// When the next order is due, Unix seconds.
    due: i64,
    failures: u32,
    last_error: Option<String>,
    ordering: bool,
}

impl Managed {
    fn state(&self) -> NameState {
        let state = match (self.ordering, self.validity, self.failures) {
            (true, None, _) => "ordering",
            (true, Some(_), _) => "renewing",
            (false, _, 1..) => "failed",
            (false, None, 0) => "pending",
            (false, Some(_), 0) => "valid",
        };
        NameState {
            name: self.wanted.name.clone(),
            entrypoint: self.wanted.entrypoint.clone(),
            state,
            not_after: self.validity.map(|(_, not_after)| not_after),
            next_attempt: Some(self.due),
            last_error: self.last_error.clone(),
            failures: self.failures,
        }
    }

    /// When a certificate valid over `validity` is renewed: `renew_before` its expiry, by
    /// default a third of its lifetime.
    fn renewal_time(&self, (not_before, not_after): (i64, i64)) -> i64 {
        let before = match self.wanted.acme.renew_before {
            Some(d) => d.as_secs() as i64,
            None => (not_after - not_before) / 3,
        };
        not_after - before
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn publish(names: &[Managed]) {
    if let Ok(mut states) = ACME_STATES.lock() {
        *states = names.iter().map(Managed::state).collect();
    }
}

fn run(shared: &Arc<ArcSwap<Runtime>>) {
    let mut names: Vec<Managed> = Vec::new();
    // The shared stores (and CAs) of the blocks, whose answers are copied each tick.
    let mut answer_sources: Vec<(SharedStore, String, Arc<dyn SharedStorage>)> = Vec::new();
    loop {
        let wanted = wanted_names(&shared.load().config);
        // Names no longer configured stop being served and looked after.
        names.retain(|m| {
            let keep = wanted.iter().any(|w| w.name == m.wanted.name);
            if !keep {
                let name = m.wanted.name.clone();
                update_table(|t| {
                    t.certificates.remove(&name);
                });
            }
            keep
        });
        for w in wanted {
            match names.iter_mut().find(|m| m.wanted.name == w.name) {
                // A reload may change the block (renew_before, challenges, ...).
                Some(m) => {
                    m.wanted = w;
                    // A new `renew_before` moves the renewal (a retry keeps its backoff).
                    if let (Some(validity), 0) = (m.validity, m.failures) {
                        m.due = m.renewal_time(validity);
                    }
                }
                None => names.push(start(w)),
            }
        }
        let now = now();
        let next = (0..names.len())
            .filter(|&i| names[i].due <= now)
            .min_by_key(|&i| names[i].due);
        if let Some(i) = next {
            // Shown as ordering (or renewing) while the order runs.
            names[i].ordering = true;
            publish(&names);
            order(&mut names[i]);
            publish(&names);
            continue;
        }
        publish(&names);
        follow_shared_answers(&names, &mut answer_sources);
        let soonest = names.iter().map(|m| m.due).min().unwrap_or(i64::MAX);
        let wait = Duration::from_secs(soonest.saturating_sub(now).max(0) as u64);
        std::thread::sleep(wait.min(CONFIG_TICK));
    }
}

/// Copies the pending answers of each shared store the blocks use into the workers' table
/// (another instance may be ordering); the stores' clients are kept from tick to tick.
fn follow_shared_answers(
    names: &[Managed],
    sources: &mut Vec<(SharedStore, String, Arc<dyn SharedStorage>)>,
) {
    let mut wanted: Vec<(SharedStore, String)> = Vec::new();
    for m in names {
        if let Some(store) = SharedStore::of(&m.wanted.acme) {
            let source = (store, ca_authority(&m.wanted.acme));
            if !wanted.contains(&source) {
                wanted.push(source);
            }
        }
    }
    sources.retain(|(store, ca, _)| wanted.iter().any(|(s, c)| s == store && c == ca));
    for (store, ca) in wanted {
        if !sources.iter().any(|(s, c, _)| *s == store && *c == ca) {
            match store.open(&ca) {
                Ok(opened) => sources.push((store, ca, opened)),
                Err(e) => crate::log_error!("acme: the shared answers of {ca}: {e}"),
            }
        }
    }
    for (_, _, storage) in sources.iter() {
        shared_storage::sync_answers(storage.as_ref());
    }
}

/// A block's shared store, as configured.
#[derive(Clone, PartialEq)]
enum SharedStore {
    Redis(RedisStore),
    Etcd(EtcdProvider),
}

impl SharedStore {
    fn of(acme: &Acme) -> Option<SharedStore> {
        match (&acme.storage_redis, &acme.storage_etcd) {
            (Some(redis), _) => Some(SharedStore::Redis(redis.clone())),
            (None, Some(etcd)) => Some(SharedStore::Etcd(etcd.clone())),
            (None, None) => None,
        }
    }

    /// Its keys for the CA named `ca`.
    fn open(&self, ca: &str) -> Result<Arc<dyn SharedStorage>, String> {
        Ok(match self {
            SharedStore::Redis(redis) => Arc::new(RedisStorage::new(redis, ca)?),
            SharedStore::Etcd(etcd) => Arc::new(EtcdStorage::new(etcd, ca)?),
        })
    }
}

/// A name met for the first time: its stored certificate when there is a usable one (due at
/// its renewal time), else due now.
fn start(wanted: Wanted) -> Managed {
    let mut managed = Managed {
        validity: None,
        due: now(),
        failures: 0,
        last_error: None,
        ordering: false,
        wanted,
    };
    let name = managed.wanted.name.clone();
    let storage = Storage::of(&managed.wanted.acme);
    match storage.map(|s| (s.load_stored(&name), s.describe())) {
        Ok((Ok(Some(validity)), place)) => {
            managed.validity = Some(validity);
            managed.due = managed.renewal_time(validity);
            crate::log_info!(
                "acme: {name}: certificate loaded from {place}, valid until {}",
                validity.1
            );
        }
        Ok((Ok(None), _)) => crate::log_info!(
            "acme: {name}: no certificate yet; entrypoint `{}` serves its default certificate for it until the order completes",
            managed.wanted.entrypoint
        ),
        Ok((Err(e), _)) | Err(e) => crate::log_error!(
            "acme: {name}: the stored certificate is not used ({e}); entrypoint `{}` serves its default certificate for it until a new order completes",
            managed.wanted.entrypoint
        ),
    }
    managed
}

/// Orders `m`'s certificate; on success it is stored and swapped in, on failure the next try
/// is put off by the backoff.
fn order(m: &mut Managed) {
    let name = m.wanted.name.clone();
    // Instances sharing the storage order a name one at a time: the others wait for the lock,
    // then find its result stored and take it instead of ordering again.
    let outcome = Storage::of(&m.wanted.acme).and_then(|storage| {
        let _held = storage.lock(&name)?;
        if let Ok(Some(validity)) = storage.load_stored(&name) {
            if m.renewal_time(validity) > now() {
                return Ok((
                    validity,
                    "loaded from storage (ordered by another instance)",
                ));
            }
        }
        let issued = obtain(&m.wanted.acme, &storage, &name)?;
        let validity = storage.store_and_install(&name, &issued)?;
        Ok((validity, "obtained"))
    });
    m.ordering = false;
    match outcome {
        Ok((validity, how)) => {
            m.validity = Some(validity);
            m.due = m.renewal_time(validity);
            m.failures = 0;
            m.last_error = None;
            crate::log_info!(
                "acme: {name}: certificate {how}, valid until {}; renewal at {}",
                validity.1,
                m.due
            );
        }
        Err(e) => {
            m.failures += 1;
            let backoff = BACKOFF_FIRST
                .saturating_mul(1 << (m.failures - 1).min(20))
                .min(BACKOFF_MAX);
            m.due = now() + backoff.as_secs() as i64;
            crate::log_error!(
                "acme: {name}: order failed (attempt {}; next in {}s): {e}",
                m.failures,
                backoff.as_secs()
            );
            m.last_error = Some(e);
        }
    }
}

/// Holds `NAME.lock` in `folder` (an exclusive `flock`, released when the file is dropped),
/// waiting while another instance holds it.
fn lock_name(folder: &Path, name: &str) -> Result<std::fs::File, String> {
    create_private_folder(folder)?;
    // Opened in place, never replaced: every instance must lock the same file.
    let path = folder.join(format!("{name}.lock"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    Ok(file)
}

fn obtain(acme: &Acme, storage: &Storage, name: &str) -> Result<Issued, String> {
    let key = storage.account_key()?;
    let tls = directory_tls(acme)?;
    let mut client = AcmeClient::connect(tls, &acme.directory, key)?;
    if let Storage::Shared(shared) = storage {
        client.shared_answers = Some(shared.clone());
    }
    client.account(acme.email.as_deref())?;
    client.obtain(&[name.to_string()], &acme.challenges, acme.key_type)
}

/// The client settings for the CA's directory: `ca`'s roots, else the system's, as for an
/// https:// upstream.
fn directory_tls(acme: &Acme) -> Result<Arc<rustls::ClientConfig>, String> {
    let tls = weir_config::UpstreamTls {
        ca: acme.ca.clone(),
        server_name: None,
        insecure_skip_verify: false,
        certificate: None,
        pos: acme.pos,
    };
    client_config(&tls, weir_config::UpstreamProtocol::Http1)
}

/// Where one block's files live: `storage`, then a folder per CA (a directory URL's host and
/// port), so that accounts and certificates of different CAs do not mix.
fn storage_folder(acme: &Acme) -> PathBuf {
    acme.storage.join(ca_authority(acme))
}

/// The directory URL's host and port, as a file name.
fn ca_authority(acme: &Acme) -> String {
    acme.directory
        .trim_start_matches("https://")
        .split('/')
        .next()
        .unwrap_or_default()
        .replace([':', '[', ']'], "_")
}

/// Where a block's account key and certificates are kept: a folder (locked with `flock`) or
/// a fleet's shared store (Redis, etcd).
enum Storage {
    Folder(PathBuf),
    Shared(Arc<dyn SharedStorage>),
}

/// A name's lock, released when dropped (its parts are held for their `Drop` alone).
enum Held<'a> {
    Folder(#[allow(dead_code)] std::fs::File),
    Shared(#[allow(dead_code)] SharedLock<'a>),
}

impl Storage {
    fn of(acme: &Acme) -> Result<Storage, String> {
        match SharedStore::of(acme) {
            Some(store) => store.open(&ca_authority(acme)).map(Storage::Shared),
            None => Ok(Storage::Folder(storage_folder(acme))),
        }
    }

    fn describe(&self) -> String {
        match self {
            Storage::Folder(folder) => folder.display().to_string(),
            Storage::Shared(shared) => shared.describe(),
        }
    }

    fn lock(&self, name: &str) -> Result<Held<'_>, String> {
        match self {
            Storage::Folder(folder) => lock_name(folder, name).map(Held::Folder),
            Storage::Shared(shared) => {
                shared_storage::lock(shared.as_ref(), name).map(Held::Shared)
            }
        }
    }

    fn account_key(&self) -> Result<AccountKey, String> {
        let shared = match self {
            Storage::Folder(folder) => return account_key(folder),
            Storage::Shared(shared) => shared,
        };
        // The first instance to store a key makes the fleet's account; the others use it.
        if shared.get("account.key")?.is_none() {
            let (_, pkcs8) = AccountKey::generate()?;
            shared.set_if_absent("account.key", pem_block("PRIVATE KEY", &pkcs8).as_bytes())?;
        }
        let place = shared.describe();
        let pem = shared
            .get("account.key")?
            .ok_or_else(|| format!("the account key vanished from {place}"))?;
        let key = PrivateKeyDer::from_pem_slice(&pem)
            .map_err(|e| format!("the account key in {place}: {e}"))?;
        AccountKey::from_pkcs8(key.secret_der())
    }

    /// The stored pair for `name`, installed: see [`load_stored`].
    fn load_stored(&self, name: &str) -> Result<Option<(i64, i64)>, String> {
        let shared = match self {
            Storage::Folder(folder) => return load_stored(folder, name),
            Storage::Shared(shared) => shared,
        };
        match (
            shared.get(&format!("{name}.crt"))?,
            shared.get(&format!("{name}.key"))?,
        ) {
            (Some(chain), Some(key)) => install(name, &chain, &key).map(Some),
            _ => Ok(None),
        }
    }

    fn store_and_install(&self, name: &str, issued: &Issued) -> Result<(i64, i64), String> {
        let shared = match self {
            Storage::Folder(folder) => return store_and_install(folder, name, issued),
            Storage::Shared(shared) => shared,
        };
        let validity = install(name, issued.chain_pem.as_bytes(), issued.key_pem.as_bytes())?;
        // The key first: a reader finding the new chain finds its key.
        shared.set(&format!("{name}.key"), issued.key_pem.as_bytes())?;
        shared.set(&format!("{name}.crt"), issued.chain_pem.as_bytes())?;
        Ok(validity)
    }
}

/// The account key of `folder`, made and stored (0600) the first time.
fn account_key(folder: &Path) -> Result<AccountKey, String> {
    let path = folder.join("account.key");
    if path.exists() {
        let key = PrivateKeyDer::from_pem_file(&path)
            .map_err(|e| format!("cannot read the account key {}: {e}", path.display()))?;
        return AccountKey::from_pkcs8(key.secret_der())
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    let (key, pkcs8) = AccountKey::generate()?;
    let pem = pem_block("PRIVATE KEY", &pkcs8);
    write_private(folder, "account.key", pem.as_bytes())?;
    Ok(key)
}

fn pem_block(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

/// Writes `file` in `folder` (made 0700 if missing) readable by weir's user alone, through a
/// temporary file renamed over it (a reader never sees half of it).
fn write_private(folder: &Path, file: &str, bytes: &[u8]) -> Result<(), String> {
    create_private_folder(folder)?;
    let target = folder.join(file);
    let temporary = folder.join(format!(".{file}.tmp"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temporary)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()));
    written
        .and_then(|()| std::fs::rename(&temporary, &target))
        .map_err(|e| format!("cannot write {}: {e}", target.display()))
}

fn create_private_folder(folder: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(folder)
        .map_err(|e| format!("cannot create {}: {e}", folder.display()))
}

/// The stored pair for `name`, installed in the table: its validity, or `None` when there is
/// none; an error when it is unusable or expired.
fn load_stored(folder: &Path, name: &str) -> Result<Option<(i64, i64)>, String> {
    let (cert, key) = (
        folder.join(format!("{name}.crt")),
        folder.join(format!("{name}.key")),
    );
    if !cert.exists() || !key.exists() {
        return Ok(None);
    }
    let chain = std::fs::read(&cert).map_err(|e| format!("{}: {e}", cert.display()))?;
    let key = std::fs::read(&key).map_err(|e| format!("{}: {e}", key.display()))?;
    install(name, &chain, &key).map(Some)
}

fn store_and_install(folder: &Path, name: &str, issued: &Issued) -> Result<(i64, i64), String> {
    let validity = install(name, issued.chain_pem.as_bytes(), issued.key_pem.as_bytes())?;
    write_private(folder, &format!("{name}.key"), issued.key_pem.as_bytes())?;
    write_private(folder, &format!("{name}.crt"), issued.chain_pem.as_bytes())?;
    Ok(validity)
}

/// Checks a PEM chain and key (not expired) and swaps them into the workers' table under
/// `name`; returns the leaf's validity.
fn install(name: &str, chain_pem: &[u8], key_pem: &[u8]) -> Result<(i64, i64), String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the certificate chain: {e}"))?;
    let leaf = chain.first().ok_or("no certificate in the chain")?;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("the certificate: {e}"))?;
    let validity = parsed.validity();
    let validity = (
        validity.not_before.timestamp(),
        validity.not_after.timestamp(),
    );
    if validity.1 <= now() {
        return Err(format!("the certificate expired at {}", validity.1));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| format!("the key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let certified = certified_key(chain, key.secret_der(), &provider)?;
    certified
        .keys_match()
        .map_err(|_| "the key does not match the certificate".to_string())?;
    let name = name.to_string();
    update_table(|t| {
        t.certificates.insert(name.clone(), certified.clone());
    });
    Ok(validity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_locked_by_one_holder_at_a_time() {
        let folder = std::env::temp_dir().join(format!("weir-acme-lock-{}", std::process::id()));
        let held = lock_name(&folder, "a.example.org").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let other = folder.clone();
        let waiter = std::thread::spawn(move || {
            let _second = lock_name(&other, "a.example.org").unwrap();
            tx.send(()).unwrap();
        });
        // Another name is free meanwhile.
        drop(lock_name(&folder, "b.example.org").unwrap());
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "taken twice"
        );
        drop(held);
        rx.recv_timeout(Duration::from_secs(10)).unwrap();
        waiter.join().unwrap();
        std::fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn files_are_written_for_weir_alone() {
        let folder = std::env::temp_dir().join(format!("weir-acme-{}", std::process::id()));
        write_private(&folder.join("ca"), "account.key", b"secret").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode(&folder.join("ca/account.key")), 0o600);
        assert_eq!(mode(&folder.join("ca")), 0o700);
        assert_eq!(
            std::fs::read(folder.join("ca/account.key")).unwrap(),
            b"secret"
        );
        std::fs::remove_dir_all(&folder).unwrap();
    }
}
