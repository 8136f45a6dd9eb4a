//! The detect phase for entrypoints with TCP routers, and the TCP proxy (the routers
//! themselves are compiled in `routes.rs`). When a router needs
//! it (SNI, ALPN, TLS passthrough or termination), the ClientHello is peeked without being
//! consumed; routers are tried by priority; the first that matches takes the connection: a
//! server is picked by the service's balancer and connected to (PROXY protocol header first
//! when asked), and bytes go both ways: spliced as they are, or decrypted first when the
//! entrypoint terminates TLS for this router. A connection no TCP router takes goes on to
//! HTTP routing, as in Traefik.

use crate::http::codec::Head;
use crate::http::trace_context::{new_span_id, unix_nanos, AttrValue, Sampler};
use crate::io::relay::{self, Idle};
use crate::io::watch::{ConnWatch, Expired, Waiting};
use crate::listen::client_hello::{self, Peeked, MAX_HELLO_BYTES};
use crate::listen::peek;
use crate::listen::proxy_protocol;
use crate::observe::metrics::L4Cells;
use crate::observe::spans::{SpanKind, SpanRecord};
use crate::servers::balancer::{PickInput, UpstreamUse};
use crate::state::l4_routes::{Counted, TcpRoute};
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The detect phase of an entrypoint with TCP routers: the connection is proxied if a router
/// takes it (and `None` returned), handed back for HTTP otherwise (`Some`), or closed (`None`)
/// when it sent no usable start in time or nothing on the entrypoint serves it.
pub async fn serve(
    worker: &Rc<Worker>,
    config: &SharedRuntime,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
) -> Option<TcpStream> {
    let config = config.load_full();
    let ep = config.entrypoint(entrypoint)?;
    let routes = ep.tcp.as_ref()?;
    let watch = worker.watch_connection();
    let peeked = if routes.needs_hello {
        let peek = peek_hello(&io);
        match watch
            .within(
                &worker.clock,
                Waiting::Handshake,
                routes.hello_timeout,
                peek,
            )
            .await
        {
            Ok(Ok(peeked)) => Some(peeked),
            // Closed, reset, or silent for too long.
            Ok(Err(_)) | Err(Expired) => return None,
        }
    } else {
        None
    };
    let Some(route) = routes.find(peer, peeked.as_ref()) else {
        return ep.has_http_routes.then_some(io);
    };
    // Under `server.tracing`, a sampled connection makes one span.
    let traced = route.tracing.as_ref().and_then(Sampler::sample_new);
    let started = traced.map(|_| unix_nanos());
    let relayed = proxy(worker, route, io, peer, &watch, routes.hello_timeout).await;
    count(&route.service.cells[worker.id], &relayed);
    if let (Some(trace_id), Some(started)) = (traced, started) {
        let span = connection_span(route, peer, trace_id, started, relayed);
        worker.spans.write_record(&span);
    }
    None
}

/// Peeks until the first bytes say whether this is TLS and, if so, the whole ClientHello is
/// there (it may come in many segments). A hello cut short by the client's close ends with
/// an error: it can never complete.
async fn peek_hello(io: &TcpStream) -> std::io::Result<Peeked> {
    let mut buf = vec![0u8; MAX_HELLO_BYTES];
    peek::peek_until(io, &mut buf, |bytes| match client_hello::parse(bytes) {
        Peeked::Incomplete => None,
        done => Some(done),
    })
    .await
}

/// How a proxied connection went, for its span.
#[derive(Default)]
struct Relayed {
    /// The server connected to.
    server: Option<SocketAddr>,
    /// Bytes from the client and to it, when the relay ended cleanly.
    bytes: Option<(u64, u64)>,
    /// Why it ended early.
    error: Option<&'static str>,
}

/// A finished connection in its service's counts.
fn count(cells: &L4Cells, relayed: &Relayed) {
    cells.sessions.add(1);
    if let Some((from_client, to_client)) = relayed.bytes {
        cells.bytes_from_client.add(from_client);
        cells.bytes_to_client.add(to_client);
    }
    let reached_no_server = matches!(
        relayed.error,
        Some("max_connections" | "no_server" | "connect_failed" | "connect_timeout")
    );
    if reached_no_server {
        cells.failures.add(1);
    }
}

/// A sampled connection's span: a root span named after the router.
fn connection_span(
    route: &TcpRoute,
    peer: SocketAddr,
    trace_id: u128,
    started: u64,
    relayed: Relayed,
) -> SpanRecord {
    let mut attributes = vec![
        ("network.transport", AttrValue::Str("tcp".into())),
        ("client.address", AttrValue::Str(peer.ip().to_string())),
        ("client.port", AttrValue::Int(i64::from(peer.port()))),
        ("weir.tcp.router", AttrValue::Str(route.name.clone())),
    ];
    if let Some(server) = relayed.server {
        attributes.push((
            "weir.upstream.address",
            AttrValue::Str(server.ip().to_string()),
        ));
        attributes.push((
            "weir.upstream.port",
            AttrValue::Int(i64::from(server.port())),
        ));
    }
    if let Some((from_client, to_client)) = relayed.bytes {
        attributes.push((
            "weir.tcp.bytes_from_client",
            AttrValue::Int(from_client as i64),
        ));
        attributes.push(("weir.tcp.bytes_to_client", AttrValue::Int(to_client as i64)));
    }
    if let Some(error) = relayed.error {
        attributes.push(("error.type", AttrValue::Str(error.into())));
    }
    SpanRecord {
        trace_id,
        span_id: new_span_id(),
        parent_id: 0,
        tracestate: None,
        name: format!("tcp {}", route.name),
        kind: SpanKind::Server,
        start_unix_nano: started,
        end_unix_nano: unix_nanos(),
        attributes,
        events: Vec::new(),
        error: relayed.error.is_some(),
    }
}

/// Proxies a connection `route` took: connects to a server of its service and relays the
/// bytes; `handshake_timeout` is the entrypoint's, for a route that terminates TLS.
async fn proxy(
    worker: &Rc<Worker>,
    route: &TcpRoute,
    io: TcpStream,
    peer: SocketAddr,
    watch: &ConnWatch,
    handshake_timeout: Duration,
) -> Relayed {
    let mut relayed = Relayed::default();
    let Some(_counted) = Counted::enter(&route.service.open, route.service.max_connections) else {
        // At the cap: closed at once, as nginx's limit_conn does.
        relayed.error = Some("max_connections");
        return relayed;
    };
    let balancer = &route.service.balancer;
    let no_headers = Head::default();
    let input = PickInput {
        client_ip: peer.ip(),
        path: "",
        headers: &no_headers,
    };
    let Some(server) = balancer.pick(worker.id, &input) else {
        relayed.error = Some("no_server");
        return relayed;
    };
    relayed.server = Some(server.addr);
    let _in_use = UpstreamUse::new(server, balancer);
    let connecting = TcpStream::connect(server.addr);
    let mut upstream = match watch
        .within(
            &worker.clock,
            Waiting::Connect,
            balancer.connect_timeout,
            connecting,
        )
        .await
    {
        Ok(Ok(upstream)) => upstream,
        Ok(Err(e)) => {
            crate::log_error!(
                "tcp router `{}`: cannot connect to {}: {e}",
                route.name,
                server.url
            );
            relayed.error = Some("connect_failed");
            return relayed;
        }
        Err(Expired) => {
            crate::log_error!(
                "tcp router `{}`: connecting to {} timed out",
                route.name,
                server.url
            );
            relayed.error = Some("connect_timeout");
            return relayed;
        }
    };
    let _ = upstream.set_nodelay(true);
    if let Some(version) = route.service.proxy_protocol {
        let local = io.local_addr().unwrap_or(peer);
        let header = proxy_protocol::header(version, peer, local);
        if upstream.write_all(&header).await.is_err() {
            relayed.error = Some("proxy_protocol_write");
            return relayed;
        }
    }
    let idle = Idle {
        watch,
        clock: &worker.clock,
        limit: balancer.idle_timeout,
    };
    match &route.terminate {
        Some(tls) => {
            let acceptor = tokio_rustls::TlsAcceptor::from(tls.clone());
            let handshake = acceptor.accept(io);
            let Ok(Ok(mut client)) = watch
                .within(
                    &worker.clock,
                    Waiting::Handshake,
                    handshake_timeout,
                    handshake,
                )
                .await
            else {
                relayed.error = Some("tls_handshake");
                return relayed;
            };
            relayed.bytes = relay::copy_both(&mut client, &mut upstream, idle)
                .await
                .ok();
        }
        None => {
            relayed.bytes = relay::splice_both(&io, &upstream, &worker.buffers, idle)
                .await
                .ok();
        }
    }
    relayed
}
