//! Starting and stopping, and the accept phase: the main thread compiles the configuration,
//! binds every entrypoint once per worker (`listen/listeners.rs`), starts the worker threads (each a
//! single-threaded tokio runtime with its timerfd tick and sweep) and hands the control thread
//! (`process/control.rs`) the rest until a stop signal, then drains. A worker starts and stops
//! accepting when the control thread tells it (at start and on reload). Accepted connections
//! go to the TLS handshake or straight to the HTTP/1 driver, as do parked connections whose
//! clients write again.

use crate::admin::{self, AdminListener};
use crate::conn;
use crate::http::Scheme;
use crate::io::ticker::Ticker;
use crate::io::watch::SWEEP_TICK;
use crate::l4;
use crate::listen::listeners::{BoundEntrypoints, Inherited, Listener};
use crate::observe::metrics::Metrics;
use crate::process::reload::Reloader;
use crate::process::upgrade::Predecessor;
use crate::process::worker::{WorkerCommand, WorkerSetup};
use crate::process::{control, exporter};
use crate::servers::health_check::ActiveChecks;
use crate::state::runtime::Runtime;
use crate::state::runtime::SharedRuntime;
use crate::worker::{Active, Shutdown, Worker};
use arc_swap::ArcSwap;
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use tokio::sync::Notify;
use weir_config::Config;

/// How long past `graceful_timeout` a stop waits for the workers' threads before the process
/// exits without them (their own drain ends at the timeout; this covers closing and flushing).
const STOP_MARGIN: Duration = Duration::from_millis(500);

/// How the gateway was started.
pub struct RunOptions {
    /// The config file, read again on reload.
    pub config_path: String,
    /// Reload when the file changes.
    pub watch: bool,
    /// Called on each worker thread once a second, so the allocator can return the pages
    /// freed there (by parked connections' ended tasks, say) to the system.
    pub release_memory: fn(),
    /// The binary's version, commit and target: logged at start, shown by the admin API.
    pub build: crate::admin::build::BuildInfo,
}

/// Lifts the soft limit on open files to the hard one: every connection (two when proxied)
/// and every large cached body holds a descriptor, and systemd and most shells start a
/// process with a soft limit of 1024 (nginx's `worker_rlimit_nofile`, set for you). A refusal
/// leaves the limit as it was.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            maximum: limit.maximum,
        };
        let _ = setrlimit(Resource::Nofile, raised);
    }
}

/// Runs the gateway until a stop signal, then drains and returns. Started by a binary
/// upgrade, it tells the old process when it serves, or why it cannot.
pub fn run(config: Config, options: RunOptions) -> Result<(), String> {
    // First, so every line after it (an upgrade's hand-over included) goes where it says.
    crate::errorlog::install(crate::errorlog::prepare(&config.server.log)?);
    let (inherited, mut predecessor) = crate::process::upgrade::inherit()?;
    let result = serve(config, options, inherited, &mut predecessor);
    if let (Err(e), Some(predecessor)) = (&result, predecessor) {
        predecessor.report_failure(e);
    }
    result
}

fn serve(
    config: Config,
    options: RunOptions,
    mut inherited: Inherited,
    predecessor: &mut Option<Predecessor>,
) -> Result<(), String> {
    crate::log_info!("version {}", options.build);
    raise_open_file_limit();
    let (config, document, etcd_revision) = match config.providers.etcd.clone() {
        Some(etcd) => {
            crate::process::provider::starting_config(&options.config_path, config, &etcd)
        }
        None => (config, None, 0),
    };
    let workers = config.server.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let mut runtime = Runtime::compile(&config, workers, None)?;
    let shutdown = Arc::new(Shutdown::default());

    // Bind every socket up front and queue each worker's listeners on its command channel.
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..workers).map(|_| unbounded_channel()).unzip();
    let mut bound = BoundEntrypoints::default();
    for ep in &config.entrypoints {
        let (entry, listeners) = BoundEntrypoints::bind(ep, workers, &mut inherited)?;
        entry.announce(&ep.name);
        if entry.http3 {
            runtime.advertise_http3(&ep.name, entry.actual.port());
        }
        let slot = runtime.slot(&ep.name).unwrap_or(0);
        // More sockets than workers when an upgrade handed over more: each is served.
        for (sender, listener) in senders.iter().cycle().zip(listeners) {
            let _ = sender.send(WorkerCommand::Listen { slot, listener });
        }
        bound.by_name.insert(ep.name.clone(), entry);
    }
    let shared = Arc::new(ArcSwap::from_pointee(runtime));
    let metrics = Arc::new(Metrics::new(workers));
    let (reload_sender, reload_requests) = unbounded_channel();
    let admin_state = Arc::new(admin::AdminState {
        metrics: metrics.clone(),
        runtime: shared.clone(),
        reloads: Arc::default(),
        reload: reload_sender,
        started: Instant::now(),
        build: options.build,
    });
    let mut admin = AdminListener::new(admin_state.clone());
    admin.inherit(inherited.admin.take());
    admin.prepare(config.server.admin.as_ref())?;
    // Handed-over sockets no entrypoint took: closed now, not held for the process's life.
    drop(inherited);

    let mut handles = Vec::with_capacity(workers);
    for (id, commands) in receivers.into_iter().enumerate() {
        let setup = WorkerSetup {
            id,
            workers,
            config: shared.clone(),
            shutdown: shutdown.clone(),
            metrics: metrics.workers[id].clone(),
            spans: metrics.spans.clone(),
        };
        let release_memory = options.release_memory;
        let handle = std::thread::Builder::new()
            .name(format!("weir-worker-{id}"))
            .spawn(move || worker_main(setup, commands, release_memory))
            .map_err(|e| format!("cannot start worker thread: {e}"))?;
        handles.push(handle);
    }

    // Its own stop: it sends what the workers flush as they stop.
    let exporter_stop = Arc::new(Shutdown::default());
    let exporter = exporter::start(metrics.spans.clone(), shared.clone(), exporter_stop.clone())?;

    let reloader = Reloader {
        config_path: options.config_path,
        shared: shared.clone(),
        workers: senders,
        bound,
        checks: ActiveChecks::default(),
        status: admin_state.reloads.clone(),
        admin,
        discovered: Default::default(),
        seeds: Default::default(),
        etcd: config.providers.etcd.clone(),
        document,
    };
    if reloader.etcd.is_some() {
        let mut status = reloader.status.lock().unwrap_or_else(|e| e.into_inner());
        status.etcd = Some(admin::EtcdStatus {
            revision: etcd_revision,
            serving: reloader.document.is_some(),
            last_error: None,
        });
    }
    crate::process::reload::write_pid_file(config.server.pid_file.as_deref())?;
    let ready = format!(
        "{workers} worker(s) running; graceful timeout {:?}",
        config.server.graceful_timeout
    );
    control::run(
        reloader,
        reload_requests,
        etcd_revision,
        options.watch,
        &ready,
        predecessor,
    )?;
    let graceful = shared.load().config.server.graceful_timeout;
    crate::log_info!("stopping; finishing in-flight requests (up to {graceful:?})");
    shutdown.request();
    // Each worker ends its drain by `graceful_timeout`; one that does not come back (spinning
    // on a bug, say) must not keep the process: it exits without it.
    let deadline = Instant::now() + graceful + STOP_MARGIN;
    while handles.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let stuck = handles.iter().filter(|h| !h.is_finished()).count();
    if stuck > 0 {
        crate::log_warn!("{stuck} worker(s) still busy past the graceful timeout; exiting anyway");
    }
    for handle in handles.into_iter().filter(|h| h.is_finished()) {
        let _ = handle.join();
    }
    stop_exporter(exporter, &exporter_stop, deadline);
    crate::process::reload::remove_pid_file(shared.load().config.server.pid_file.as_deref());
    crate::log_info!("stopped");
    Ok(())
}

fn worker_main(
    setup: WorkerSetup,
    commands: UnboundedReceiver<WorkerCommand>,
    release_memory: fn(),
) {
    let id = setup.id;
    let shutdown = setup.shutdown.clone();
    crate::lua::enter_worker(id, setup.workers, shutdown.clone());
    // I/O only: no tokio timer, whose clock reads and wheel walks on every park cost about
    // 1,100 instructions per request. Time is the worker's tick (`io/ticker.rs`) and sweep.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::log_error!("worker {id} cannot start: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let config = setup.config.clone();
        let settings = config.load().worker_settings();
        let worker = match Worker::new(setup.id, setup.shutdown, setup.metrics, settings) {
            Ok(worker) => {
                worker.spans.attach(setup.spans.clone());
                Rc::new(worker)
            }
            Err(e) => {
                crate::log_error!("worker {id} cannot start: {e}");
                return;
            }
        };
        // The worker's VM, made now when `init_worker` has timers to start.
        crate::lua::apply_program(config.load().lua.as_ref());
        let active = Rc::new(Cell::new(0usize));
        tokio::task::spawn_local(follow_commands(
            worker.clone(),
            config.clone(),
            commands,
            active.clone(),
        ));
        tokio::task::spawn_local(unpark_loop(worker.clone(), config.clone(), active.clone()));
        let ticker = match Ticker::new(SWEEP_TICK) {
            Ok(ticker) => ticker,
            Err(e) => {
                crate::log_error!("worker {id} cannot start its clock: {e}");
                return;
            }
        };
        let sweeper = worker.clone();
        let sweeper_config = config.clone();
        let sweeper_active = active.clone();
        tokio::task::spawn_local(async move {
            let mut ticks = 0u32;
            while ticker.tick().await.is_ok() {
                sweeper.sweep_connections();
                // Parked HTTP/2 connections past their idle timeout say GOAWAY from a task.
                for conn in sweeper.idle.take_due() {
                    resume(&sweeper, &sweeper_config, conn, &sweeper_active);
                }
                flush_log(&sweeper, &sweeper_config);
                ticks = ticks.wrapping_add(1);
                // Pooled connections expire with second precision.
                if ticks % 10 == 0 {
                    let pooled = sweeper.pool.sweep() + sweeper.h2_pool.sweep();
                    sweeper.metrics.pooled.set(pooled as u64);
                    release_memory();
                }
                sweeper.tick.notify_waiters();
            }
        });

        let notified = shutdown.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !shutdown.is_requested() {
            notified.await;
        }
        // Idle connections get a short grace for a request already on its way, then close
        // gently (`conn/h1.rs`); busy ones finish their request. Parked ones get a task again
        // for that (checked every tick: one may have parked as the stop came).
        let graceful = config.load().config.server.graceful_timeout;
        let deadline = Instant::now() + graceful;
        loop {
            for conn in worker.idle.take_all() {
                resume(&worker, &config, conn, &active);
            }
            // Lua timers run early on a stop (`premature`): their runs are waited for too.
            let busy = active.get() + crate::lua::unfinished_timers();
            if busy == 0 || Instant::now() >= deadline {
                break;
            }
            worker.sweep_connections();
            worker.tick.notified().await;
        }
        flush_log(&worker, &config);
    });
}

/// Acts on the control thread's commands: listeners to start and stop, settings to apply.
async fn follow_commands(
    worker: Rc<Worker>,
    config: SharedRuntime,
    mut commands: UnboundedReceiver<WorkerCommand>,
    active: Rc<Cell<usize>>,
) {
    while let Some(command) = commands.recv().await {
        match command {
            WorkerCommand::Listen { slot, listener } => {
                let stop = Rc::new(Notify::new());
                let mut listeners = worker.listeners.borrow_mut();
                listeners.entry(slot).or_default().push(stop.clone());
                drop(listeners);
                let started = match listener {
                    Listener::Tcp(l) => TcpListener::from_std(l).map(|listener| {
                        let accepting = accept_loop(
                            worker.clone(),
                            config.clone(),
                            slot,
                            listener,
                            stop,
                            active.clone(),
                        );
                        tokio::task::spawn_local(accepting);
                    }),
                    Listener::Quic(socket) => {
                        let serving = conn::h3::serve_endpoint(
                            worker.clone(),
                            config.clone(),
                            slot,
                            socket,
                            stop,
                            active.clone(),
                        );
                        tokio::task::spawn_local(serving);
                        Ok(())
                    }
                    Listener::Udp(u) => tokio::net::UdpSocket::from_std(u).map(|socket| {
                        tokio::task::spawn_local(l4::udp::serve(
                            worker.clone(),
                            config.clone(),
                            slot,
                            socket,
                            stop,
                        ));
                    }),
                };
                if let Err(e) = started {
                    crate::log_error!("worker {}: {e}", worker.id);
                }
            }
            WorkerCommand::Close { slot } => {
                let stops = worker.listeners.borrow_mut().remove(&slot);
                for stop in stops.into_iter().flatten() {
                    stop.notify_one();
                }
            }
            WorkerCommand::Reloaded => {
                let runtime = config.load();
                worker.apply_settings(runtime.worker_settings());
                crate::lua::apply_program(runtime.lua.as_ref());
            }
        }
    }
}

/// Accepts on one listener until the worker stops or the control thread closes it (`stop`).
async fn accept_loop(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    listener: TcpListener,
    stop: Rc<Notify>,
    active: Rc<Cell<usize>>,
) {
    loop {
        let notified = worker.shutdown.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if worker.shutdown.is_requested() {
            return;
        }
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((io, peer)) => {
                    let _ = io.set_nodelay(true);
                    let counted = Active::enter(&active);
                    let worker = worker.clone();
                    let config = config.clone();
                    // detect: TLS entrypoints go through the handshake first; a plain one
                    // hands the stream straight to the HTTP/1 driver. Separate tasks, so a
                    // plain connection's task is sized for the plain path alone.
                    // Entrypoints with TCP routers detect first (`l4/tcp.rs`); what no TCP
                    // router takes goes on to HTTP in the same task.
                    let (tls, has_tcp, h2c) = {
                        let runtime = config.load();
                        // Closed by a reload an instant ago: the connection goes too.
                        let Some(ep) = runtime.entrypoint(entrypoint) else {
                            continue;
                        };
                        ep.cells[worker.id].connections.add(1);
                        (ep.tls.clone(), ep.tcp.is_some(), ep.h2c)
                    };
                    match tls {
                        _ if has_tcp => tokio::task::spawn_local(async move {
                            if let Some(io) = l4::tcp::serve(&worker, &config, entrypoint, io, peer).await {
                                serve_http(worker, config, entrypoint, io, peer, tls).await;
                            }
                            drop(counted);
                        }),
                        Some(tls) => tokio::task::spawn_local(async move {
                            conn::tls::serve(worker, config, entrypoint, io, peer, tls).await;
                            drop(counted);
                        }),
                        None if h2c => tokio::task::spawn_local(async move {
                            serve_http(worker, config, entrypoint, io, peer, None).await;
                            drop(counted);
                        }),
                        None => spawn_plain(worker, config, entrypoint, io, peer, counted),
                    };
                }
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    crate::log_error!("accept failed: {e}");
                    worker.tick.notified().await;
                }
            },
            _ = &mut notified => return,
            _ = stop.notified() => return,
        }
    }
}

/// HTTP on a connection a TCP router did not take, or on an `h2c` entrypoint: TLS (whose
/// ALPN picks the driver), the HTTP/2 preface, or HTTP/1.
async fn serve_http(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
    tls: Option<crate::listen::tls::ServerTls>,
) {
    match tls {
        // Boxed: the TLS handshake's state (7 KB) would otherwise size the task of every
        // plain connection served here, idle HTTP/2 ones included.
        Some(tls) => Box::pin(conn::tls::serve(worker, config, entrypoint, io, peer, tls)).await,
        None => {
            let watch = worker.watch_connection();
            let h2c = config
                .load()
                .entrypoint(entrypoint)
                .is_some_and(|ep| ep.h2c);
            let h2 = if h2c {
                match starts_with_preface(&worker, &watch, &io).await {
                    Some(h2) => h2,
                    // Closed, or silent, before its first bytes said which.
                    None => return,
                }
            } else {
                false
            };
            if h2 {
                conn::h2::serve(worker, config, entrypoint, io, peer, Scheme::Http, watch).await;
            } else {
                conn::h1::serve(worker, config, entrypoint, io, peer, Scheme::Http, watch).await;
            }
        }
    }
}

/// The detect phase of an `h2c` entrypoint: whether the connection opens with the HTTP/2
/// preface (peeked, not consumed; decided as soon as the bytes differ). `None` when the client
/// closes or stays silent for `client_idle_timeout` before that.
async fn starts_with_preface(
    worker: &Worker,
    watch: &crate::io::watch::ConnWatch,
    io: &TcpStream,
) -> Option<bool> {
    let preface = conn::h2::PREFACE;
    let mut seen = [0u8; 24];
    let peeking = crate::listen::peek::peek_until(io, &mut seen, |bytes| {
        if bytes != &preface[..bytes.len()] {
            Some(false)
        } else if bytes.len() == preface.len() {
            Some(true)
        } else {
            None
        }
    });
    let idle = worker.timeouts.get().idle;
    match watch
        .within(
            &worker.clock,
            crate::io::watch::Waiting::RequestHead,
            idle,
            peeking,
        )
        .await
    {
        Ok(Ok(h2)) => Some(h2),
        Ok(Err(_)) | Err(_) => None,
    }
}

/// A plain connection's HTTP/1 task (on accept, and when a parked connection wakes).
fn spawn_plain(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
    counted: Active,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_local(async move {
        let watch = worker.watch_connection();
        conn::h1::serve(worker, config, entrypoint, io, peer, Scheme::Http, watch).await;
        drop(counted);
    })
}

/// Gives parked connections whose clients wrote a task again.
async fn unpark_loop(worker: Rc<Worker>, config: SharedRuntime, active: Rc<Cell<usize>>) {
    loop {
        let woken = match worker.idle.woken().await {
            Ok(woken) => woken,
            Err(e) => {
                crate::log_error!("worker {}: parked connections: {e}", worker.id);
                return;
            }
        };
        for conn in woken {
            resume(&worker, &config, conn, &active);
        }
    }
}

/// Starts a task again for a connection that was parked.
fn resume(
    worker: &Rc<Worker>,
    config: &SharedRuntime,
    conn: crate::io::idle::Woken,
    active: &Rc<Cell<usize>>,
) {
    let counted = Active::enter(active);
    let (worker, config) = (worker.clone(), config.clone());
    match conn.io {
        crate::io::idle::WokenIo::Plain(io) => match TcpStream::from_std(io) {
            Ok(io) => {
                spawn_plain(worker, config, conn.entrypoint, io, conn.peer, counted);
            }
            Err(e) => crate::log_error!("worker {}: cannot resume a connection: {e}", worker.id),
        },
        crate::io::idle::WokenIo::Tls(stream) => {
            tokio::task::spawn_local(async move {
                conn::tls::resume(worker, config, conn.entrypoint, stream, conn.peer).await;
                drop(counted);
            });
        }
        crate::io::idle::WokenIo::H2(parked) => {
            tokio::task::spawn_local(async move {
                conn::h2::resume(worker, config, conn.entrypoint, parked, conn.peer).await;
                drop(counted);
            });
        }
    }
}

/// Writes the access-log lines the worker gathered since the last tick, and hands its
/// finished spans to the exporter's queue.
fn flush_log(worker: &Worker, config: &SharedRuntime) {
    if let Some(log) = &config.load().access_log {
        log.flush(&worker.log_lines);
    }
    worker.spans.flush();
}

/// Lets the span exporter send the workers' last spans, until the stop's own deadline: the
/// process exits by `graceful_timeout` and its margin, whatever the collector does.
fn stop_exporter(exporter: std::thread::JoinHandle<()>, stop: &Shutdown, deadline: Instant) {
    stop.request();
    while !exporter.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    if exporter.is_finished() {
        let _ = exporter.join();
    }
}
