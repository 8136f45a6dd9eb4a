//! The detect and handshake phases of a TLS entrypoint: a client speaking plain HTTP to the
//! port gets a readable 400 (as nginx answers), otherwise the TLS handshake runs under
//! `handshake_timeout` and the driver ALPN picks takes the decrypted stream; an HTTP/1 one
//! parked while idle comes back through [`resume`]. A failed or stalled
//! handshake closes the connection and is counted (`weir_tls_handshake_failures_total`); the
//! worker goes on serving the others.

use crate::conn::{h1, h2};
use crate::http::error::{ErrorKind, LocalError};
use crate::http::Scheme;
use crate::io::idle::ParkedTls;
use crate::io::watch::{ConnWatch, Expired, Waiting};
use crate::listen::acme::ACME_TLS_ALPN;
use crate::listen::tls::ServerTls;
use crate::observe::metrics::HandshakeFailure;
use crate::state::runtime::SharedRuntime;
use crate::worker::Worker;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

pub async fn serve(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    io: TcpStream,
    peer: SocketAddr,
    tls: ServerTls,
) {
    let watch = worker.watch_connection();
    let limit = tls.handshake_timeout;
    let mut first = [0u8; 1];
    let peek = io.peek(&mut first);
    let failed = |why| {
        if let Some(ep) = config.load().entrypoint(entrypoint) {
            ep.cells[worker.id].handshake_failed(why);
        }
    };
    match watch
        .within(&worker.clock, Waiting::Handshake, limit, peek)
        .await
    {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            failed(HandshakeFailure::PlainHttp);
            // Boxed: its 4 KiB scratch would otherwise size every TLS connection's task.
            return Box::pin(refuse_plain_http(&worker, &watch, io)).await;
        }
        Err(Expired) if !worker.shutdown.is_requested() => {
            return failed(HandshakeFailure::Timeout);
        }
        // Closed before a byte (a port check, say), or stopping: nothing was attempted.
        _ => return,
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.config);
    let handshake = acceptor.accept(io);
    match watch
        .within(&worker.clock, Waiting::Handshake, limit, handshake)
        .await
    {
        Ok(Ok(stream)) => {
            // ALPN picked the driver.
            let alpn = stream.get_ref().1.alpn_protocol();
            if alpn == Some(b"h2") {
                h2::serve(
                    worker,
                    config,
                    entrypoint,
                    stream,
                    peer,
                    Scheme::Https,
                    watch,
                )
                .await;
            } else if alpn == Some(ACME_TLS_ALPN) {
                // A TLS-ALPN-01 validation: the handshake was the answer (RFC 8737 §3).
            } else {
                h1::serve(
                    worker,
                    config,
                    entrypoint,
                    stream,
                    peer,
                    Scheme::Https,
                    watch,
                )
                .await;
            }
        }
        Ok(Err(_)) => failed(HandshakeFailure::Error),
        Err(Expired) => failed(HandshakeFailure::Timeout),
    }
}

/// Serves a parked HTTP/1 TLS connection whose client wrote again, its session as it was.
pub async fn resume(
    worker: Rc<Worker>,
    config: SharedRuntime,
    entrypoint: usize,
    stream: Box<ParkedTls>,
    peer: SocketAddr,
) {
    let watch = worker.watch_connection();
    h1::serve(
        worker,
        config,
        entrypoint,
        *stream,
        peer,
        Scheme::Https,
        watch,
    )
    .await;
}

/// Answers a plain-HTTP request sent to a TLS port, after reading what arrived of it (closing
/// with unread input would reset the connection and lose the answer).
async fn refuse_plain_http(worker: &Worker, watch: &ConnWatch, mut io: TcpStream) {
    const LINGER: Duration = Duration::from_secs(1);
    let mut scratch = [0u8; 4096];
    let read = io.read(&mut scratch);
    let _ = watch
        .within(&worker.clock, Waiting::RequestBody, LINGER, read)
        .await;
    let mut answer = Vec::new();
    let message = "This port speaks HTTPS: the plain HTTP request was refused.";
    let date = worker.clock.date_header();
    let error = LocalError::new(400, ErrorKind::PlainHttpOnTls, message);
    error.plain().write(&mut answer, false, false, b"", &date);
    if io.write_all(&answer).await.is_ok() {
        let _ = io.shutdown().await;
        let read = io.read(&mut scratch);
        let _ = watch
            .within(&worker.clock, Waiting::RequestBody, LINGER, read)
            .await;
    }
}
