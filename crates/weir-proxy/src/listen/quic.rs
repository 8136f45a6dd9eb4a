//! What an HTTP/3 entrypoint's QUIC endpoints are made of: the server settings (the TCP side's
//! certificates and SNI choice, ALPN `h3`, the `http3` limits), built when the configuration is
//! compiled, and the runtime quinn drives its connections with on a worker. The runtime is
//! tokio's but for its timers: workers run tokio without its timer (`io/ticker.rs`), so each
//! QUIC connection's timer is a timerfd of its own, and connections that are not QUIC pay
//! nothing for it.

use crate::listen::tls::ServerTls;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::unix::AsyncFd;
use weir_config::Http3Settings;

/// The ALPN token of HTTP/3 (RFC 9114, section 3.1).
const ALPN_H3: &[u8] = b"h3";
/// Unidirectional streams a client may open: HTTP/3 needs three (control, QPACK encoder and
/// decoder); a few more leave room for extensions weir ignores.
const MAX_UNI_STREAMS: u32 = 8;

/// The QUIC server settings of an `http3` entrypoint: the entrypoint's own rustls settings
/// (same certificate resolver, session cache and tickets) with ALPN `h3`.
pub fn server_config(
    tls: &ServerTls,
    http3: &Http3Settings,
) -> Result<quinn::ServerConfig, String> {
    let mut crypto = (*tls.config).clone();
    crypto.alpn_protocols = vec![ALPN_H3.to_vec()];
    // QUIC takes early data whole or not at all (RFC 9001, section 4.6.1). rustls accepts it
    // only on sessions resumed from its server-side store, whose entries are used once (a
    // stateless ticket could be replayed): so no tickets with 0-RTT on.
    crypto.max_early_data_size = if http3.zero_rtt { u32::MAX } else { 0 };
    if http3.zero_rtt {
        crypto.ticketer = Arc::new(StoredSessionsOnly);
    }
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto)
        .map_err(|e| format!("HTTP/3: {e}"))?;
    let mut transport = quinn::TransportConfig::default();
    let window = u64::from(http3.initial_window_size);
    transport
        .max_concurrent_bidi_streams(http3.max_concurrent_streams.into())
        .max_concurrent_uni_streams(MAX_UNI_STREAMS.into())
        .stream_receive_window(window.try_into().map_err(|e| format!("HTTP/3: {e}"))?)
        .receive_window(
            (window * 4)
                .try_into()
                .map_err(|e| format!("HTTP/3: {e}"))?,
        )
        .max_idle_timeout(Some(
            http3
                .idle_timeout
                .try_into()
                .map_err(|e| format!("HTTP/3 idle_timeout: {e}"))?,
        ));
    let mut config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Issues no session tickets, so that resumption goes through the server's session store.
#[derive(Debug)]
struct StoredSessionsOnly;

impl rustls::server::ProducesTickets for StoredSessionsOnly {
    fn enabled(&self) -> bool {
        false
    }

    fn lifetime(&self) -> u32 {
        0
    }

    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }

    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// tokio's quinn runtime with timerfd timers (see the module's comment).
#[derive(Debug)]
pub struct QuicRuntime;

impl Runtime for QuicRuntime {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn AsyncTimer>> {
        Box::pin(FdTimer::new(at))
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        TokioRuntime.spawn(future);
    }

    fn wrap_udp_socket(
        &self,
        socket: std::net::UdpSocket,
    ) -> std::io::Result<Arc<dyn AsyncUdpSocket>> {
        TokioRuntime.wrap_udp_socket(socket)
    }

    fn now(&self) -> Instant {
        Instant::now()
    }
}

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// One connection's timer: a one-shot timerfd re-armed only when the deadline moves. When the
/// descriptor cannot be made (out of descriptors), it fires at once, and quinn, finding
/// nothing due, arms it again: the connection polls rather than stalls.
struct FdTimer {
    fd: Option<AsyncFd<Fd>>,
    deadline: Instant,
}

impl std::fmt::Debug for FdTimer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FdTimer")
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl FdTimer {
    fn new(deadline: Instant) -> FdTimer {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK)
            .ok()
            // Deprecated because a wrapped type could close its descriptor while registered;
            // `Fd` owns its descriptor and only this AsyncFd holds it.
            .and_then(|timer| {
                #[allow(deprecated)]
                AsyncFd::new(Fd(timer)).ok()
            });
        let mut timer = FdTimer { fd, deadline };
        timer.arm();
        timer
    }

    fn arm(&mut self) {
        let Some(fd) = &self.fd else { return };
        // A zero expiration would disarm the timer: a nanosecond at least.
        let after = self
            .deadline
            .saturating_duration_since(Instant::now())
            .max(std::time::Duration::from_nanos(1));
        let expiration = Expiration::OneShot(TimeSpec::from_duration(after));
        if fd
            .get_ref()
            .0
            .set(expiration, TimerSetTimeFlags::empty())
            .is_err()
        {
            self.fd = None;
        }
    }
}

impl AsyncTimer for FdTimer {
    fn reset(self: Pin<&mut Self>, at: Instant) {
        let this = self.get_mut();
        if this.deadline != at {
            this.deadline = at;
            this.arm();
        }
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context) -> Poll<()> {
        let this = self.get_mut();
        loop {
            if Instant::now() >= this.deadline {
                return Poll::Ready(());
            }
            let Some(fd) = &this.fd else {
                return Poll::Ready(());
            };
            let expired = match fd.poll_read_ready(cx) {
                Poll::Ready(Ok(mut ready)) => {
                    let expired = ready.get_inner().0.wait().is_ok();
                    ready.clear_ready();
                    expired
                }
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Pending => return Poll::Pending,
            };
            // Fired a hair early by the clock's reading: armed again for the rest.
            if expired && Instant::now() < this.deadline {
                this.arm();
            }
        }
    }
}
