//! The control thread: everything that is not a request. It serves the admin listener, runs the
//! active health checks, and waits for signals: `SIGTERM` / `SIGINT` stop, `SIGHUP` reloads,
//! `SIGUSR1` reopens the access log and the error log (after logrotate moved them), `SIGUSR2` upgrades the binary
//! (`process/upgrade.rs`: the loop ends, as for a stop, once the new process is ready); it also takes
//! reloads asked for through the admin API and, under `--watch`, notices when the config file
//! changes; with `providers.etcd`, it applies each new document the provider's thread hands it.

use crate::actions::cache::fanout;
use crate::actions::elasticsearch::{discovery, replay};
use crate::admin::ReloadRequest;
use crate::process::provider;
use crate::process::reload::Reloader;
use crate::process::upgrade::{self, Predecessor};
use crate::state::runtime::Runtime;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;
use weir_config::RedisStore;

/// How often `--watch` looks at the config file.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How often the Elasticsearch services' discovery schedule is looked at (each has its own
/// `refresh`).
const DISCOVERY_TICK: Duration = Duration::from_millis(250);

/// Runs the control loop until a stop signal. `ready` is logged once the signals are
/// handled (a `SIGHUP` before that would end the process); then the process this one
/// upgrades, if any, is told (and `predecessor` taken).
pub fn run(
    mut reloader: Reloader,
    mut reload_requests: UnboundedReceiver<ReloadRequest>,
    etcd_revision: i64,
    watch: bool,
    ready: &str,
    predecessor: &mut Option<Predecessor>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    rt.block_on(async {
        // Signals first: once the admin listener answers, a `SIGHUP` is a reload (sent before
        // the handlers are in place it would end the process, or be lost where it is ignored).
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        let mut hup = signal(SignalKind::hangup()).map_err(|e| e.to_string())?;
        let mut usr1 = signal(SignalKind::user_defined1()).map_err(|e| e.to_string())?;
        let mut usr2 = signal(SignalKind::user_defined2()).map_err(|e| e.to_string())?;
        reloader.start();
        reloader.admin.commit();
        // Before the ready line: a change made once it is out is a change to act on.
        let mut watched = file_stamp(&reloader.config_path);
        crate::log_info!("{ready}");
        // systemd first: the old process exits once told, and must no longer be the unit's.
        crate::process::notify::ready(predecessor.is_some());
        if let Some(predecessor) = predecessor.take() {
            predecessor.report_ready();
        }
        // The handoff of a binary upgrade under way, answered with the new process's pid.
        let mut upgrading: Option<oneshot::Receiver<Result<u32, String>>> = None;
        let mut watch_tick = tokio::time::interval(WATCH_EVERY);
        watch_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Elasticsearch services' nodes: each is asked for when due, answers come back here.
        let mut discovery = discovery::Schedule::default();
        // Elasticsearch spools: replayed when anything waits and the last failure's backoff is over.
        let mut replays = replay::Replays::default();
        let (found_tx, mut found_rx) = tokio::sync::mpsc::unbounded_channel();
        let mut discovery_tick = tokio::time::interval(DISCOVERY_TICK);
        discovery_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The etcd provider's documents, from its own thread.
        let (etcd_tx, mut etcd_rx) = tokio::sync::mpsc::unbounded_channel();
        if let Some(etcd) = reloader.etcd.clone() {
            let applied = reloader.document.as_ref().map(|d| d.text.clone());
            provider::watch(etcd, etcd_revision, applied, etcd_tx);
        } else {
            drop(etcd_tx);
        }
        // Caches with `purge.fanout`: a follower task each, applying the fleet's purges.
        let mut followers = PurgeFollowers::default();
        followers.sync(&reloader.shared);
        // `tls.acme`: its own thread, started once a configuration has a block.
        let mut acme = crate::process::acme::AcmeThread::default();
        acme.sync(&reloader.shared);
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    let _ = reloader.reload("SIGHUP");
                }
                Some(request) = reload_requests.recv() => {
                    let _ = request.answer.send(reloader.reload("admin API"));
                }
                _ = usr1.recv() => reopen_logs(&reloader),
                _ = usr2.recv() => {
                    if upgrading.is_none() {
                        upgrading = start_upgrade(&reloader);
                    }
                }
                done = async { upgrading.as_mut()?.await.ok() }, if upgrading.is_some() => {
                    upgrading = None;
                    match done {
                        Some(Ok(pid)) => {
                            crate::log_info!("upgrade: process {pid} is serving; this one drains and exits");
                            break;
                        }
                        Some(Err(e)) => crate::log_error!("upgrade failed; still serving: {e}"),
                        None => crate::log_error!("upgrade failed; still serving"),
                    }
                }
                _ = discovery_tick.tick() => {
                    followers.sync(&reloader.shared);
                    acme.sync(&reloader.shared);
                    let runtime = reloader.shared.load();
                    discovery.start_due(&runtime.config, &runtime.elasticsearch, &reloader.seeds, &found_tx);
                    replays.start_due(&runtime.config, &runtime.elasticsearch);
                }
                Some(found) = found_rx.recv() => reloader.apply_discovered(found),
                Some(update) = etcd_rx.recv() => reloader.apply_document(update),
                _ = watch_tick.tick(), if watch => {
                    let stamp = file_stamp(&reloader.config_path);
                    if stamp != watched {
                        watched = stamp;
                        let _ = reloader.reload("file change");
                    }
                }
            }
        }
        Ok(())
    })
}

/// The purge followers (`actions/cache/fanout.rs`) of the caches in service, by cache name,
/// with the store each follows.
#[derive(Default)]
struct PurgeFollowers(HashMap<String, (RedisStore, tokio::task::JoinHandle<()>)>);

impl PurgeFollowers {
    /// Starts a follower for each cache with a fanout that has none (or one on another
    /// store), and stops those of caches that no longer have one.
    fn sync(&mut self, shared: &Arc<ArcSwap<Runtime>>) {
        let runtime = shared.load();
        let wanted: HashMap<&str, &RedisStore> = runtime
            .caches
            .iter()
            .filter_map(|c| Some((c.name.as_str(), c.fanout_store()?)))
            .collect();
        self.0.retain(|name, (store, task)| {
            let keep = wanted.get(name.as_str()) == Some(&&*store);
            if !keep {
                task.abort();
            }
            keep
        });
        for (name, store) in wanted {
            if self.0.contains_key(name) {
                continue;
            }
            let (cache, shared) = (name.to_string(), shared.clone());
            let find = move || {
                let runtime = shared.load();
                runtime.caches.iter().find(|c| c.name == cache).cloned()
            };
            let task = tokio::spawn(fanout::follow(name.to_string(), store.clone(), find));
            self.0.insert(name.to_string(), (store.clone(), task));
        }
    }
}

/// Starts a binary upgrade on a thread of its own (it waits for the new process).
fn start_upgrade(reloader: &Reloader) -> Option<oneshot::Receiver<Result<u32, String>>> {
    crate::log_info!("upgrade: starting the new binary");
    let admin = reloader.admin.handoff();
    let sockets = match admin.and_then(|admin| upgrade::duplicates(&reloader.bound, admin)) {
        Ok(sockets) => sockets,
        Err(e) => {
            crate::log_error!("upgrade failed; still serving: {e}");
            return None;
        }
    };
    let (answer, answered) = oneshot::channel();
    let started = std::thread::Builder::new()
        .name("weir-upgrade".into())
        .spawn(move || {
            let _ = answer.send(upgrade::hand_over(sockets));
        });
    match started {
        Ok(_) => Some(answered),
        Err(e) => {
            crate::log_error!("upgrade failed; still serving: {e}");
            None
        }
    }
}

/// What `--watch` compares: the file's modification time and length.
fn file_stamp(path: &str) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

fn reopen_logs(reloader: &Reloader) {
    match crate::errorlog::reopen() {
        Ok(true) => crate::log_info!("log reopened"),
        Ok(false) => {}
        Err(e) => crate::log_error!("cannot reopen the log: {e}"),
    }
    let runtime = reloader.shared.load();
    if let Some(log) = &runtime.access_log {
        match log.reopen() {
            Ok(()) => crate::log_info!("access log reopened"),
            Err(e) => crate::log_error!("cannot reopen the access log: {e}"),
        }
    }
}
