//! The HTTP/3 mode (`--h3`): closed loop over QUIC, like h2load's `-c N -m M`. Each of N
//! connections keeps M request streams busy: a stream's task sends its next request once the
//! answer before it is read whole. Built on quinn + h3 + h3-quinn, the stack weir serves
//! HTTP/3 with, so the client's cost per request is known and the same for every peer.

use crate::template::Template;
use crate::Tally;
use bytes::{Buf, Bytes};
use hdrhistogram::Histogram;
use quinn::crypto::rustls::QuicClientConfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Credit a client gives one stream and the whole connection: a 10 MB answer arrives without
/// waiting on the client's window updates, so a download measures the server's sending.
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;

/// What the HTTP/3 mode sends, and for how long.
pub struct H3Plan {
    pub addr: SocketAddr,
    /// The name the server's certificate is checked against (the URL's host).
    pub server_name: String,
    pub uri: http::Uri,
    pub method: http::Method,
    pub headers: http::HeaderMap,
    pub body: Option<Template>,
    pub fixed_body: Option<Bytes>,
    pub connections: usize,
    pub streams: usize,
    pub duration: Duration,
    pub timeout: Duration,
}

/// The QUIC client settings: TLS 1.3 with ALPN `h3`, accepting only a certificate in
/// `cacert` (the benchmark's own, self-signed), and windows large enough for a download.
pub fn client_config(cacert: &Path) -> Result<quinn::ClientConfig, String> {
    let read_error = |e: &dyn std::fmt::Display| format!("{}: {e}", cacert.display());
    let pinned = CertificateDer::pem_file_iter(cacert)
        .map_err(|e| read_error(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read_error(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Pinned {
        certificates: pinned,
        algorithms: provider.signature_verification_algorithms,
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| e.to_string())?;
    let mut transport = quinn::TransportConfig::default();
    transport
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(CONNECTION_WINDOW.into());
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// Accepts a server whose certificate is one of `certificates` byte for byte (webpki refuses a
/// self-signed certificate as its own trust anchor), and checks its handshake signature.
#[derive(Debug)]
struct Pinned {
    certificates: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.certificates.iter().any(|c| c == end_entity) {
            true => Ok(ServerCertVerified::assertion()),
            false => Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            )),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// What the streams of a run add up to.
struct Totals {
    hist: Histogram<u64>,
    tally: Tally,
}

/// Runs the plan; returns the latencies (µs), the counts and how long it ran.
pub async fn drive(
    plan: H3Plan,
    config: quinn::ClientConfig,
) -> Result<(Histogram<u64>, Tally, Duration), String> {
    let plan = Rc::new(plan);
    let totals = Rc::new(RefCell::new(Totals {
        hist: Histogram::new(3).map_err(|e| e.to_string())?,
        tally: Tally::default(),
    }));
    let t0 = Instant::now() + Duration::from_millis(50);
    let local = tokio::task::LocalSet::new();
    let mut handles = Vec::new();
    for c in 0..plan.connections {
        let run = connection(plan.clone(), config.clone(), totals.clone(), c, t0);
        handles.push(local.spawn_local(run));
    }
    local
        .run_until(async {
            for h in handles {
                let _ = h.await;
            }
        })
        .await;
    let elapsed = t0.elapsed();
    let totals = Rc::try_unwrap(totals)
        .map_err(|_| "a stream outlived the run")?
        .into_inner();
    Ok((totals.hist, totals.tally, elapsed))
}

/// One connection (its own UDP socket, as separate clients have): M streams in a loop until
/// the run ends; a lost connection is opened again.
async fn connection(
    plan: Rc<H3Plan>,
    config: quinn::ClientConfig,
    totals: Rc<RefCell<Totals>>,
    c: usize,
    t0: Instant,
) {
    let end = t0 + plan.duration;
    tokio::time::sleep_until(t0.into()).await;
    let local: SocketAddr = match plan.addr {
        SocketAddr::V4(_) => ([0, 0, 0, 0], 0).into(),
        SocketAddr::V6(_) => ([0u16; 8], 0).into(),
    };
    let Ok(mut endpoint) = quinn::Endpoint::client(local) else {
        totals.borrow_mut().tally.errors += 1;
        return;
    };
    endpoint.set_default_client_config(config);
    while Instant::now() < end {
        let opened = async {
            let quic = endpoint
                .connect(plan.addr, &plan.server_name)
                .map_err(|_| ())?
                .await
                .map_err(|_| ())?;
            h3::client::new(h3_quinn::Connection::new(quic))
                .await
                .map_err(|_| ())
        };
        let Ok(Ok((mut driver, sender))) = tokio::time::timeout(plan.timeout, opened).await else {
            totals.borrow_mut().tally.errors += 1;
            continue;
        };
        let driving = tokio::task::spawn_local(async move {
            std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        });
        let mut streams = Vec::with_capacity(plan.streams);
        for s in 0..plan.streams {
            let first = (c * plan.streams + s) as u64;
            let run = stream(plan.clone(), sender.clone(), totals.clone(), first, end);
            streams.push(tokio::task::spawn_local(run));
        }
        drop(sender);
        for s in streams {
            let _ = s.await;
        }
        driving.abort();
    }
    endpoint.close(0u32.into(), b"done");
    endpoint.wait_idle().await;
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One stream slot: requests one after another until the run ends or the connection fails.
async fn stream(
    plan: Rc<H3Plan>,
    mut sender: Sender,
    totals: Rc<RefCell<Totals>>,
    first: u64,
    end: Instant,
) {
    let step = (plan.connections * plan.streams) as u64;
    let mut i = first;
    let mut rendered = Vec::new();
    while Instant::now() < end {
        let body = match (&plan.fixed_body, &plan.body) {
            (Some(fixed), _) => Some(fixed.clone()),
            (None, Some(template)) => {
                rendered.clear();
                template.render(i, &mut rendered);
                Some(Bytes::copy_from_slice(&rendered))
            }
            (None, None) => None,
        };
        let started = Instant::now();
        let exchanged = tokio::time::timeout(plan.timeout, exchange(&plan, &mut sender, body));
        let outcome = exchanged.await.unwrap_or(Err(()));
        let mut totals = totals.borrow_mut();
        totals.tally.sent += 1;
        match outcome {
            Ok(status) => {
                totals.tally.completed += 1;
                if !(200..300).contains(&status) {
                    totals.tally.non_2xx += 1;
                }
                let micros = started.elapsed().as_micros() as u64;
                let _ = totals.hist.record(micros.max(1));
            }
            // The connection is likely gone: its task opens it again.
            Err(()) => {
                totals.tally.errors += 1;
                return;
            }
        }
        i += step;
    }
}

/// One request and its whole answer (the body read and dropped); returns the status.
async fn exchange(plan: &H3Plan, sender: &mut Sender, body: Option<Bytes>) -> Result<u16, ()> {
    let mut request = http::Request::new(());
    *request.method_mut() = plan.method.clone();
    *request.uri_mut() = plan.uri.clone();
    *request.headers_mut() = plan.headers.clone();
    let mut stream = sender.send_request(request).await.map_err(|_| ())?;
    if let Some(body) = body {
        stream.send_data(body).await.map_err(|_| ())?;
    }
    stream.finish().await.map_err(|_| ())?;
    let response = stream.recv_response().await.map_err(|_| ())?;
    while let Some(mut data) = stream.recv_data().await.map_err(|_| ())? {
        data.advance(data.remaining());
    }
    Ok(response.status().as_u16())
}
