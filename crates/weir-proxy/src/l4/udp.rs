//! UDP proxying: a session per client address. The first datagram from a client picks a server
//! with the service's balancer and opens a socket connected to it; the client's datagrams go out
//! on that socket and the server's replies come back to that client from the entrypoint's
//! address, one datagram for one datagram (never merged or split). A session ends after
//! `session_timeout` without a datagram either way, or, when a worker holds `max_sessions`,
//! to make room (the oldest first). Each worker has its own listening socket (SO_REUSEPORT
//! hashes a client to one worker) and its own sessions.

use crate::http::codec::Head;
use crate::servers::balancer::{PickInput, UpstreamUse};
use crate::state::l4_routes::UdpService;
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;
use tokio::net::UdpSocket;
use tokio::sync::Notify;

/// The largest datagram: UDP's length field allows 65,507 bytes of payload over IPv4.
const MAX_DATAGRAM: usize = 65_536;

struct Session {
    /// The service it sends to (for its counts).
    service: Arc<UdpService>,
    upstream: Rc<UdpSocket>,
    last_active: Rc<Cell<Instant>>,
    /// Set when the session is ended to make room; its reply task sees it and stops.
    ended: Rc<Cell<bool>>,
}

/// Serves one UDP entrypoint on one worker until the worker stops or the control thread closes
/// the socket (`stop`).
pub async fn serve(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    socket: UdpSocket,
    stop: Rc<Notify>,
) {
    let socket = Rc::new(socket);
    let sessions: Rc<RefCell<HashMap<SocketAddr, Session>>> = Rc::default();
    // Clients in the order their sessions began, for ending the oldest first.
    let mut order: VecDeque<SocketAddr> = VecDeque::new();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let notified = worker.shutdown.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if worker.shutdown.is_requested() {
            break;
        }
        let (n, client) = tokio::select! {
            received = socket.recv_from(&mut buf) => match received {
                Ok(received) => received,
                // An ICMP error from an earlier send, say: keep serving.
                Err(_) => continue,
            },
            _ = &mut notified => break,
            _ = stop.notified() => break,
        };
        let datagram = &buf[..n];
        let now = worker.clock.now();
        if let Some(session) = sessions.borrow().get(&client) {
            session.last_active.set(now);
            send_now(&session.upstream, datagram, None);
            let cells = &session.service.cells[worker.id];
            cells.datagrams_from_client.add(1);
            cells.bytes_from_client.add(n as u64);
            continue;
        }
        let runtime = config.load_full();
        let Some(service) = runtime.entrypoint(entrypoint).and_then(|ep| ep.udp.clone()) else {
            continue;
        };
        while sessions.borrow().len() >= service.max_sessions {
            let Some(oldest) = order.pop_front() else {
                break;
            };
            if let Some(old) = sessions.borrow_mut().remove(&oldest) {
                old.ended.set(true);
            }
        }
        let Some(upstream) = open_session(&worker, &service, client).await else {
            continue;
        };
        send_now(&upstream, datagram, None);
        let cells = &service.cells[worker.id];
        cells.sessions.add(1);
        cells.datagrams_from_client.add(1);
        cells.bytes_from_client.add(n as u64);
        let session = Session {
            service: service.clone(),
            upstream: Rc::new(upstream),
            last_active: Rc::new(Cell::new(now)),
            ended: Rc::new(Cell::new(false)),
        };
        tokio::task::spawn_local(relay_replies(
            worker.clone(),
            socket.clone(),
            sessions.clone(),
            client,
            service,
            session.upstream.clone(),
            session.last_active.clone(),
            session.ended.clone(),
        ));
        sessions.borrow_mut().insert(client, session);
        order.push_back(client);
        // Sessions that ended on their own leave stale entries in `order`: drop them from the
        // front now and then so it stays as long as the table.
        while order.len() > 2 * sessions.borrow().len() + 16 {
            if let Some(front) = order.pop_front() {
                if sessions.borrow().contains_key(&front) {
                    order.push_back(front);
                }
            }
        }
    }
    for (_, session) in sessions.borrow_mut().drain() {
        session.ended.set(true);
    }
}

/// Sends a datagram straight away (to `to`, or the connected peer). A full send buffer drops
/// it, as the network may. (Not tokio's `try_send`, which declines until the reactor has seen
/// the socket writable, as a new session's socket has not.)
fn send_now(socket: &UdpSocket, datagram: &[u8], to: Option<SocketAddr>) {
    let socket = socket2::SockRef::from(socket);
    let _ = match to {
        Some(to) => socket.send_to(datagram, &to.into()),
        None => socket.send(datagram),
    };
}

/// A socket connected to the server the balancer picks for `client`.
async fn open_session(
    worker: &Worker,
    service: &UdpService,
    client: SocketAddr,
) -> Option<UdpSocket> {
    let no_headers = Head::default();
    let input = PickInput {
        client_ip: client.ip(),
        path: "",
        headers: &no_headers,
    };
    let server = service.balancer.pick(worker.id, &input)?;
    let local: SocketAddr = if server.addr.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let upstream = match UdpSocket::bind(local).await {
        Ok(upstream) => upstream,
        Err(e) => {
            crate::log_error!(
                "udp service `{}`: cannot open a socket: {e}",
                service.balancer.name
            );
            return None;
        }
    };
    if let Err(e) = upstream.connect(server.addr).await {
        crate::log_error!(
            "udp service `{}`: cannot reach {}: {e}",
            service.balancer.name,
            server.url
        );
        return None;
    }
    Some(upstream)
}

/// Sends a session's replies back to its client until the session ends.
#[allow(clippy::too_many_arguments)]
async fn relay_replies(
    worker: Rc<Worker>,
    socket: Rc<UdpSocket>,
    sessions: Rc<RefCell<HashMap<SocketAddr, Session>>>,
    client: SocketAddr,
    service: Arc<UdpService>,
    upstream: Rc<UdpSocket>,
    last_active: Rc<Cell<Instant>>,
    ended: Rc<Cell<bool>>,
) {
    let Some(server) = service
        .balancer
        .servers
        .iter()
        .find(|s| Some(s.addr) == upstream.peer_addr().ok())
    else {
        return;
    };
    let _in_use = UpstreamUse::new(server, &service.balancer);
    loop {
        let tick = worker.tick.notified();
        tokio::select! {
            // Read into the worker's scratch buffer: a session holds no buffer while it waits.
            ready = upstream.readable() => if ready.is_ok() {
                let mut scratch = worker.buffers.scratch(MAX_DATAGRAM);
                // Until drained; an error (the server's port closed: ICMP unreachable) keeps
                // the session, the client may retry and the timeout ends it.
                let cells = &service.cells[worker.id];
                while let Ok(n) = upstream.try_recv(&mut scratch[..MAX_DATAGRAM]) {
                    last_active.set(worker.clock.now());
                    send_now(&socket, &scratch[..n], Some(client));
                    cells.datagrams_to_client.add(1);
                    cells.bytes_to_client.add(n as u64);
                }
            },
            _ = tick => {}
        }
        let idle = worker
            .clock
            .now()
            .saturating_duration_since(last_active.get());
        if ended.get() || idle >= service.session_timeout || worker.shutdown.is_requested() {
            break;
        }
    }
    // Leave the table unless this client already has a newer session.
    let mut table = sessions.borrow_mut();
    if table
        .get(&client)
        .is_some_and(|s| Rc::ptr_eq(&s.ended, &ended))
    {
        table.remove(&client);
    }
}
