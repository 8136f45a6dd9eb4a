//! Starting and stopping, and the accept phase: the main thread binds every entrypoint once per
//! worker (SO_REUSEPORT, so the kernel spreads connections), starts the worker threads, each a
//! single-threaded tokio runtime with its timerfd tick and sweep, waits for SIGTERM / SIGINT,
//! and drains. Accepted connections go to the TLS handshake or straight to the HTTP/1 driver,
//! as do parked connections whose clients write again.

use crate::admin;
use crate::conn::watch::SWEEP_TICK;
use crate::conn::{self, Scheme};
use crate::l4;
use crate::metrics::Metrics;
use crate::runtime::Runtime;
use crate::ticker::Ticker;
use crate::worker::{ClientTimeouts, Shutdown, Worker, WorkerSetup};
use arc_swap::ArcSwap;
use socket2::{Domain, Protocol, Socket, Type};
use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use weir_config::{Config, Transport};

/// Runs the gateway until a stop signal, then drains and returns. `release_memory` is called
/// on each worker thread once a second, so the allocator can return the pages freed there
/// (by parked connections' ended tasks, say) to the system.
pub fn run(config: Config, release_memory: fn()) -> Result<(), String> {
    let workers = config.server.workers.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let runtime = Runtime::compile(&config, workers)?;
    let shared = Arc::new(ArcSwap::from_pointee(runtime));
    let shutdown = Arc::new(Shutdown::default());
    let graceful = config.server.graceful_timeout;
    let timeouts = ClientTimeouts {
        idle: config.server.client_idle_timeout,
        body: config.server.client_body_timeout,
        send: config.server.client_send_timeout,
    };

    // Bind every socket up front: the first per entrypoint resolves port 0 to a real port,
    // the others join it through SO_REUSEPORT.
    let mut per_worker: Vec<Vec<Listener>> = (0..workers).map(|_| Vec::new()).collect();
    for ep in &config.entrypoints {
        let first = Listener::bind(ep.address, ep.transport).map_err(|e| {
            format!(
                "entrypoint `{}`: cannot listen on {}: {e}",
                ep.name, ep.address
            )
        })?;
        let actual = first
            .local_addr()
            .map_err(|e| format!("entrypoint `{}`: {e}", ep.name))?;
        let udp = if ep.transport == Transport::Udp {
            "/udp"
        } else {
            ""
        };
        eprintln!("weir: entrypoint {} listening on {actual}{udp}", ep.name);
        per_worker[0].push(first);
        for list in per_worker.iter_mut().skip(1) {
            list.push(
                Listener::bind(actual, ep.transport)
                    .map_err(|e| format!("entrypoint `{}`: {e}", ep.name))?,
            );
        }
    }
    let names = config.entrypoints.iter().map(|e| e.name.clone()).collect();
    let metrics = Arc::new(Metrics::new(names, workers));
    let admin = match &config.server.admin {
        Some(admin) => {
            // A plain bind (no SO_REUSEPORT): a second weir must not share the admin port.
            let listener = std::net::TcpListener::bind(admin.address)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| format!("admin: cannot listen on {}: {e}", admin.address))?;
            let actual = listener.local_addr().map_err(|e| format!("admin: {e}"))?;
            eprintln!("weir: admin listening on {actual}");
            Some(listener)
        }
        None => None,
    };
    eprintln!("weir: {workers} worker(s) running; graceful timeout {graceful:?}");

    let mut handles = Vec::with_capacity(workers);
    for (id, listeners) in per_worker.into_iter().enumerate() {
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        let setup = WorkerSetup {
            id,
            config: shared,
            shutdown,
            timeouts,
            metrics: metrics.workers[id].clone(),
            open_file_cache: config.server.open_file_cache,
        };
        let handle = std::thread::Builder::new()
            .name(format!("weir-worker-{id}"))
            .spawn(move || worker_main(setup, listeners, graceful, release_memory))
            .map_err(|e| format!("cannot start worker thread: {e}"))?;
        handles.push(handle);
    }

    let checked = shared.load().services.clone();
    let admin = admin.map(|listener| {
        let state = admin::AdminState {
            metrics: metrics.clone(),
            runtime: shared.clone(),
            token: config.server.admin.as_ref().and_then(|a| a.token.clone()),
        };
        (listener, Arc::new(state))
    });
    wait_for_stop_signal(admin, checked)?;
    eprintln!("weir: stopping; finishing in-flight requests (up to {graceful:?})");
    shutdown.request();
    for handle in handles {
        let _ = handle.join();
    }
    eprintln!("weir: stopped");
    Ok(())
}

/// An entrypoint's socket on one worker.
enum Listener {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

impl Listener {
    /// Binds with SO_REUSEPORT, so every worker has its own socket on the address.
    fn bind(addr: SocketAddr, transport: Transport) -> std::io::Result<Listener> {
        let (kind, protocol) = match transport {
            Transport::Tcp => (Type::STREAM, Protocol::TCP),
            Transport::Udp => (Type::DGRAM, Protocol::UDP),
        };
        let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        Ok(match transport {
            Transport::Tcp => {
                socket.set_nodelay(true)?;
                socket.listen(4096)?;
                Listener::Tcp(socket.into())
            }
            Transport::Udp => Listener::Udp(socket.into()),
        })
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr(),
            Listener::Udp(u) => u.local_addr(),
        }
    }
}

/// The control thread: serves the admin listener, if any, and runs the active health checks
/// until a stop signal.
fn wait_for_stop_signal(
    admin: Option<(std::net::TcpListener, Arc<admin::AdminState>)>,
    checked: Vec<Arc<crate::balancer::Service>>,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start signal handler: {e}"))?;
    rt.block_on(async {
        if let Some((listener, state)) = admin {
            let listener = TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            tokio::spawn(admin::serve(listener, state));
        }
        tokio::spawn(crate::health_check::run_checks(checked));
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
        let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
}

fn worker_main(
    setup: WorkerSetup,
    listeners: Vec<Listener>,
    graceful: Duration,
    release_memory: fn(),
) {
    let id = setup.id;
    let shutdown = setup.shutdown.clone();
    // I/O only: no tokio timer, whose clock reads and wheel walks on every park cost about
    // 1,100 instructions per request. Time is the worker's tick (`ticker.rs`) and sweep.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("weir: worker {id} cannot start: {e}");
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let worker = match Worker::new(setup) {
            Ok(worker) => Rc::new(worker),
            Err(e) => {
                eprintln!("weir: worker {id} cannot start: {e}");
                return;
            }
        };
        let active = Rc::new(Cell::new(0usize));
        for (entrypoint, std_listener) in listeners.into_iter().enumerate() {
            let started = match std_listener {
                Listener::Tcp(l) => TcpListener::from_std(l).map(|listener| {
                    tokio::task::spawn_local(accept_loop(
                        worker.clone(),
                        entrypoint,
                        listener,
                        active.clone(),
                    ));
                }),
                Listener::Udp(u) => tokio::net::UdpSocket::from_std(u).map(|socket| {
                    tokio::task::spawn_local(l4::udp::serve(worker.clone(), entrypoint, socket));
                }),
            };
            if let Err(e) = started {
                eprintln!("weir: worker {id}: {e}");
            }
        }
        tokio::task::spawn_local(unpark_loop(worker.clone(), active.clone()));
        let ticker = match Ticker::new(SWEEP_TICK) {
            Ok(ticker) => ticker,
            Err(e) => {
                eprintln!("weir: worker {id} cannot start its clock: {e}");
                return;
            }
        };
        let sweeper = worker.clone();
        tokio::task::spawn_local(async move {
            let mut ticks = 0u32;
            while ticker.tick().await.is_ok() {
                sweeper.sweep_connections();
                ticks = ticks.wrapping_add(1);
                // Pooled connections expire with second precision.
                if ticks % 10 == 0 {
                    sweeper.pool.sweep();
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
        // Close idle connections now and as they become idle; busy ones finish their request.
        let deadline = Instant::now() + graceful;
        while active.get() > 0 && Instant::now() < deadline {
            worker.sweep_connections();
            worker.tick.notified().await;
        }
    });
}

/// Counts a connection as active (a graceful stop waits for it) until dropped.
struct Active(Rc<Cell<usize>>);

impl Active {
    fn enter(count: &Rc<Cell<usize>>) -> Active {
        count.set(count.get() + 1);
        Active(count.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

async fn accept_loop(
    worker: Rc<Worker>,
    entrypoint: usize,
    listener: TcpListener,
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
                    worker.metrics.entrypoints[entrypoint].connections.add(1);
                    let counted = Active::enter(&active);
                    let worker = worker.clone();
                    // detect: TLS entrypoints go through the handshake first; a plain one
                    // hands the stream straight to the HTTP/1 driver. Separate tasks, so a
                    // plain connection's task is sized for the plain path alone.
                    // Entrypoints with TCP routers detect first (`l4/tcp.rs`); what no TCP
                    // router takes goes on to HTTP in the same task.
                    let (tls, has_tcp) = {
                        let config = worker.config.load();
                        let ep = &config.entrypoints[entrypoint];
                        (ep.tls.clone(), ep.tcp.is_some())
                    };
                    match tls {
                        _ if has_tcp => tokio::task::spawn_local(async move {
                            if let Some(io) = l4::tcp::serve(&worker, entrypoint, io, peer).await {
                                serve_http(worker, entrypoint, io, peer, tls).await;
                            }
                            drop(counted);
                        }),
                        Some(tls) => tokio::task::spawn_local(async move {
                            conn::tls::serve(worker, entrypoint, io, peer, tls).await;
                            drop(counted);
                        }),
                        None => spawn_plain(worker, entrypoint, io, peer, counted),
                    };
                }
                Err(e) => {
                    // Out of descriptors and similar: back off instead of spinning.
                    eprintln!("weir: accept failed: {e}");
                    worker.tick.notified().await;
                }
            },
            _ = &mut notified => return,
        }
    }
}

/// HTTP on a connection a TCP router did not take.
async fn serve_http(
    worker: Rc<Worker>,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
    tls: Option<crate::tls::ServerTls>,
) {
    match tls {
        Some(tls) => conn::tls::serve(worker, entrypoint, io, peer, tls).await,
        None => {
            let watch = worker.watch_connection();
            conn::h1::serve(worker, entrypoint, io, peer, Scheme::Http, watch).await;
        }
    }
}

/// A plain connection's HTTP/1 task (on accept, and when a parked connection wakes).
fn spawn_plain(
    worker: Rc<Worker>,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
    counted: Active,
) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_local(async move {
        let watch = worker.watch_connection();
        conn::h1::serve(worker, entrypoint, io, peer, Scheme::Http, watch).await;
        drop(counted);
    })
}

/// Gives parked connections whose clients wrote a task again.
async fn unpark_loop(worker: Rc<Worker>, active: Rc<Cell<usize>>) {
    loop {
        let woken = match worker.idle.woken().await {
            Ok(woken) => woken,
            Err(e) => {
                eprintln!("weir: worker {}: parked connections: {e}", worker.id);
                return;
            }
        };
        for conn in woken {
            match TcpStream::from_std(conn.io) {
                Ok(io) => {
                    let counted = Active::enter(&active);
                    spawn_plain(worker.clone(), conn.entrypoint, io, conn.peer, counted);
                }
                Err(e) => eprintln!(
                    "weir: worker {}: cannot resume a connection: {e}",
                    worker.id
                ),
            }
        }
    }
}
