//! The reload phase, run by the control thread on `SIGHUP`, `POST /api/reload` or a change of
//! the file under `--watch`: read and validate the file, compile it carrying over what keeps
//! its identity (`state/runtime.rs`), bind the entrypoints that are new or moved, then swap the
//! snapshot in and tell the workers which listeners to start and stop. Any error before the
//! swap refuses the whole reload, with every error reported, and the old configuration keeps
//! serving; kept listeners are never closed.

use crate::actions::elasticsearch::discovery::{self, Discovered};
use crate::admin::{self, ReloadReport, ReloadStatus};
use crate::listen::listeners::{Bound, BoundEntrypoints, Inherited, Listener};
use crate::process::worker::WorkerCommand;
use crate::servers::health_check::ActiveChecks;
use crate::state::runtime::Runtime;
use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tokio::sync::mpsc::UnboundedSender;
use weir_config::{Config, UpstreamServer};

/// What the control thread holds to reload.
pub struct Reloader {
    pub config_path: String,
    pub shared: Arc<ArcSwap<Runtime>>,
    /// Each worker's command channel.
    pub workers: Vec<UnboundedSender<WorkerCommand>>,
    pub bound: BoundEntrypoints,
    pub checks: ActiveChecks,
    pub status: Arc<Mutex<ReloadStatus>>,
    pub admin: admin::AdminListener,
    /// The nodes found for each discovering Elasticsearch service, put in place of its
    /// configured hosts by every compile.
    pub discovered: HashMap<String, Vec<String>>,
    /// Each Elasticsearch service's configured hosts, asked when no node found last answers.
    pub seeds: HashMap<String, Vec<UpstreamServer>>,
    /// `providers.etcd` as the process started with it (a change takes a restart).
    pub etcd: Option<weir_config::EtcdProvider>,
    /// The provider's last good document, merged into the file by every reload.
    pub document: Option<weir_config::Document>,
}

/// An entrypoint bound for a reload that has not been swapped in yet.
struct Added {
    name: String,
    bound: Bound,
    listeners: Vec<Listener>,
}

impl Reloader {
    /// Starts what the configuration in service needs (its listeners are sent to the workers
    /// by `process/server.rs` at start).
    pub fn start(&mut self) {
        self.checks.sync(&self.shared.load().services);
        self.seeds = seeds_of(&self.shared.load().config);
    }

    /// Puts the nodes found for `service` in place, compiled like a reload (what stays keeps
    /// its pools and health); nothing when they are the ones already serving.
    pub fn apply_discovered(&mut self, found: Discovered) {
        let nodes = match found.nodes {
            Ok(nodes) => nodes,
            Err(e) => {
                crate::log_error!("service `{}`: discovery failed: {e}", found.service);
                return;
            }
        };
        let old = self.shared.load_full();
        let serving: Vec<&str> = old
            .config
            .services
            .iter()
            .find(|s| s.name == found.service)
            .map(|s| s.servers.iter().map(|server| server.url.as_str()).collect())
            .unwrap_or_default();
        if serving == nodes {
            return;
        }
        self.discovered.insert(found.service.clone(), nodes.clone());
        let mut config = old.config.clone();
        discovery::apply(&mut config, &self.discovered);
        let workers = self.workers.len();
        match Runtime::compile(&config, workers, Some(&old)) {
            Ok(runtime) => {
                self.shared.store(Arc::new(runtime));
                let new = self.shared.load_full();
                self.tell_workers(|| WorkerCommand::Reloaded);
                self.checks.sync(&new.services);
                crate::log_info!(
                    "service `{}`: {} node(s) discovered [{}] (version {})",
                    found.service,
                    nodes.len(),
                    nodes.join(", "),
                    new.version
                );
            }
            Err(e) => crate::log_error!(
                "service `{}`: discovered nodes not applied: {e}",
                found.service
            ),
        }
    }

    /// Reloads the file; on success, the version now in service.
    pub fn reload(&mut self, trigger: &'static str) -> Result<u64, Vec<String>> {
        let result = self.try_reload();
        let version = self.shared.load().version;
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        match &result {
            Ok(_) => status.succeeded += 1,
            Err(errors) => {
                status.failed += 1;
                crate::log_error!(
                    "reload ({trigger}) refused; still serving version {version}: {} error(s)",
                    errors.len()
                );
                for e in errors {
                    crate::log_error!("reload error: {e}");
                }
            }
        }
        status.last = Some(ReloadReport {
            at: SystemTime::now(),
            trigger,
            errors: result.as_ref().err().cloned().unwrap_or_default(),
        });
        result
    }

    /// Applies a new document from the etcd provider as a reload; a refused one leaves the
    /// last good document (and the configuration) in service.
    pub fn apply_document(&mut self, update: crate::process::provider::EtcdUpdate) {
        let previous = self.document.replace(update.document);
        let result = self.reload("etcd");
        let mut status = self.status.lock().unwrap_or_else(|e| e.into_inner());
        let etcd = status.etcd.get_or_insert(admin::EtcdStatus {
            revision: 0,
            serving: false,
            last_error: None,
        });
        match result {
            Ok(version) => {
                etcd.revision = update.revision;
                etcd.serving = true;
                etcd.last_error = None;
                drop(status);
                if let (Some(provider), Some(document)) = (&self.etcd, &self.document) {
                    crate::process::provider::save(provider, &document.text);
                }
                crate::log_info!(
                    "etcd: revision {} in service (version {version})",
                    update.revision
                );
            }
            Err(errors) => {
                etcd.last_error = Some(errors);
                drop(status);
                self.document = previous;
            }
        }
    }

    fn try_reload(&mut self) -> Result<u64, Vec<String>> {
        let path = self.config_path.clone();
        let (mut config, sources) = weir_config::load_file_with(&path, self.document.as_ref())
            .map_err(|errors| errors.iter().map(ToString::to_string).collect::<Vec<_>>())?;
        let seeds = seeds_of(&config);
        discovery::apply(&mut config, &self.discovered);
        let old = self.shared.load_full();
        let workers = self.workers.len();
        let mut runtime = Runtime::compile(&config, workers, Some(&old))
            .map_err(|e| vec![sources.located(&e)])?;
        if config.providers.etcd != self.etcd {
            crate::log_warn!(
                "reload: `providers.etcd` changed; it takes effect at the next restart"
            );
        }
        if config.server.workers != old.config.server.workers {
            crate::log_warn!(
                "reload: `server.workers` changed; it takes effect at the next restart (still {workers})"
            );
        }
        let added = self.bind_new_entrypoints(&config, workers)?;
        for ep in config.entrypoints.iter().filter(|ep| ep.http3.is_some()) {
            let added_now = added.iter().find(|a| a.name == ep.name).map(|a| &a.bound);
            if let Some(bound) = added_now.or_else(|| self.bound.by_name.get(&ep.name)) {
                runtime.advertise_http3(&ep.name, bound.actual.port());
            }
        }
        let pid_file = config.server.pid_file.as_deref();
        if pid_file != old.config.server.pid_file.as_deref() {
            write_pid_file(pid_file).map_err(|e| vec![e])?;
            remove_pid_file(old.config.server.pid_file.as_deref());
        }

        self.admin
            .prepare(config.server.admin.as_ref())
            .map_err(|e| vec![e])?;

        // A changed `server.log` is opened now: one that cannot be refuses the reload.
        let log = (config.server.log != old.config.server.log)
            .then(|| crate::errorlog::prepare(&config.server.log))
            .transpose()
            .map_err(|e| vec![e])?;

        // Nothing can fail from here: swap, then move the listeners.
        self.seeds = seeds;
        self.shared.store(Arc::new(runtime));
        if let Some(log) = log {
            crate::errorlog::install(log);
        }
        let new = self.shared.load_full();
        let mut closed = Vec::new();
        self.bound.by_name.retain(|name, bound| {
            let kept = config
                .entrypoints
                .iter()
                .any(|ep| ep.name == *name && bound.keeps(ep));
            if !kept {
                closed.push(name.clone());
            }
            kept
        });
        for name in &closed {
            if let Some(slot) = new.slot(name) {
                self.tell_workers(|| WorkerCommand::Close { slot });
            }
        }
        let mut opened = Vec::new();
        for Added {
            name,
            bound,
            listeners,
        } in added
        {
            if let Some(slot) = new.slot(&name) {
                // In turn: an `http3` entrypoint has a QUIC socket per worker after its TCP ones.
                for (worker, listener) in self.workers.iter().cycle().zip(listeners) {
                    let _ = worker.send(WorkerCommand::Listen { slot, listener });
                }
                bound.announce(&name);
            }
            self.bound.by_name.insert(name.clone(), bound);
            opened.push(name);
        }
        self.tell_workers(|| WorkerCommand::Reloaded);
        self.checks.sync(&new.services);
        self.admin.commit();
        crate::log_info!(
            "reloaded {path} (version {}): {} entrypoints (opened [{}], closed [{}]), {} routers, {} services",
            new.version,
            config.entrypoints.len(),
            opened.join(", "),
            closed.join(", "),
            config.routers.len() + config.tcp.routers.len() + config.udp.routers.len(),
            config.services.len() + config.tcp.services.len() + config.udp.services.len(),
        );
        Ok(new.version)
    }

    /// Binds the entrypoints that are new or whose address or transport changed.
    fn bind_new_entrypoints(
        &self,
        config: &Config,
        workers: usize,
    ) -> Result<Vec<Added>, Vec<String>> {
        let mut added = Vec::new();
        let mut errors = Vec::new();
        for ep in &config.entrypoints {
            if self
                .bound
                .by_name
                .get(&ep.name)
                .is_some_and(|b| b.keeps(ep))
            {
                continue;
            }
            match BoundEntrypoints::bind(ep, workers, &mut Inherited::default()) {
                Ok((bound, listeners)) => added.push(Added {
                    name: ep.name.clone(),
                    bound,
                    listeners,
                }),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(added)
        } else {
            Err(errors)
        }
    }

    fn tell_workers(&self, command: impl Fn() -> WorkerCommand) {
        for worker in &self.workers {
            let _ = worker.send(command());
        }
    }
}

/// The configured hosts of every Elasticsearch service.
fn seeds_of(config: &Config) -> HashMap<String, Vec<UpstreamServer>> {
    config
        .services
        .iter()
        .filter(|s| s.elasticsearch.is_some())
        .map(|s| (s.name.clone(), s.servers.clone()))
        .collect()
}

/// Writes this process's pid to `server.pid_file` (at start, and when a reload moves it).
pub fn write_pid_file(path: Option<&Path>) -> Result<(), String> {
    let Some(path) = path else { return Ok(()) };
    std::fs::write(path, format!("{}\n", std::process::id()))
        .map_err(|e| format!("cannot write the pid file {}: {e}", path.display()))
}

/// Removes the pid file, unless another process (the one an upgrade started) wrote it since.
pub fn remove_pid_file(path: Option<&Path>) {
    let Some(path) = path else { return };
    let ours = std::fs::read_to_string(path)
        .is_ok_and(|text| text.trim() == std::process::id().to_string());
    if ours {
        let _ = std::fs::remove_file(path);
    }
}
