//! Active health checks, run by the control thread: `GET path` to every server of a service
//! with `health_check` every `interval`, in the service's protocol (HTTP/2 for `h2` and `h2c`);
//! a server goes down after `unhealthy_threshold` consecutive failures and back up after
//! `healthy_threshold` passes (both logged). The state lives in each server's `Health`
//! (`servers/health.rs`), which the workers' balancers read.

use crate::servers::balancer::{Server, Service};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::{HealthCheck, UpstreamProtocol};

/// The running checks, one task per server of each service with `health_check`, keyed by
/// what they check (service, server state, settings): a reload keeps the tasks whose key is
/// unchanged, so their counts and rhythm go on, and starts or ends the others.
#[derive(Default)]
pub struct ActiveChecks {
    tasks: HashMap<String, tokio::task::JoinHandle<()>>,
}

impl ActiveChecks {
    /// Makes the running checks those of `services` (on the control thread's runtime).
    pub fn sync(&mut self, services: &[Arc<Service>]) {
        let mut wanted = HashMap::new();
        for service in services {
            let Some(check) = &service.health_check else {
                // Without checks, nothing keeps a server down.
                for server in &service.servers {
                    server.health.set_down(false);
                }
                continue;
            };
            for index in 0..service.servers.len() {
                let key = format!("{} {} {check:?}", service.name, service.servers[index].id);
                wanted.insert(key, (service.clone(), index, check.clone()));
            }
        }
        self.tasks.retain(|key, task| {
            let keep = wanted.contains_key(key);
            if !keep {
                task.abort();
            }
            keep
        });
        for (key, (service, index, check)) in wanted {
            self.tasks.entry(key).or_insert_with(|| {
                tokio::spawn(async move {
                    check_server(&service, &service.servers[index], &check).await;
                })
            });
        }
    }
}

async fn check_server(service: &Service, server: &Server, check: &HealthCheck) {
    let (mut passes, mut fails) = (0u32, 0u32);
    loop {
        let result = tokio::time::timeout(check.timeout, probe(service, server, check)).await;
        let outcome = match result {
            Ok(Ok(status))
                if check
                    .expect_status
                    .iter()
                    .any(|(l, h)| (*l..=*h).contains(&status)) =>
            {
                Ok(())
            }
            Ok(Ok(status)) => Err(format!("answered {status}")),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", check.timeout)),
        };
        match outcome {
            Ok(()) => {
                fails = 0;
                passes += 1;
                if server.health.is_down() && passes >= check.healthy_threshold {
                    server.health.set_down(false);
                    crate::log_info!(
                        "service `{}`: server {} is up again: health check GET {} passed {passes} time(s) in a row",
                        service.name,
                        server.url,
                        check.path
                    );
                }
            }
            Err(why) => {
                passes = 0;
                fails += 1;
                if !server.health.is_down() && fails >= check.unhealthy_threshold {
                    server.health.set_down(true);
                    crate::log_warn!(
                        "service `{}`: server {} is down: {why} (health check GET {}, failed {fails} time(s) in a row)",
                        service.name,
                        server.url,
                        check.path
                    );
                }
            }
        }
        tokio::time::sleep(check.interval).await;
    }
}

/// One `GET path` on a new connection, in the service's protocol; the response's status.
async fn probe(service: &Service, server: &Server, check: &HealthCheck) -> std::io::Result<u16> {
    let io = TcpStream::connect(server.addr).await?;
    if service.protocol != UpstreamProtocol::Http1 {
        return match &server.tls {
            None => probe_h2(io, "http", server, check).await,
            Some(tls) => {
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                let io = connector.connect(tls.name.clone(), io).await?;
                probe_h2(io, "https", server, check).await
            }
        };
    }
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nUser-Agent: weir-health-check\r\n",
        check.path, server.authority
    );
    for (name, value) in &check.headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let status_line = match &server.tls {
        None => exchange(io, request.as_bytes()).await?,
        Some(tls) => {
            let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
            let io = connector.connect(tls.name.clone(), io).await?;
            exchange(io, request.as_bytes()).await?
        }
    };
    let text = String::from_utf8_lossy(&status_line);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| text.starts_with("HTTP/1."))
        .ok_or_else(|| std::io::Error::other("not an HTTP response"))
}

/// The probe as one HTTP/2 stream on its own connection.
async fn probe_h2<S: AsyncRead + AsyncWrite + Unpin>(
    io: S,
    scheme: &str,
    server: &Server,
    check: &HealthCheck,
) -> std::io::Result<u16> {
    let (mut send, connection) = h2::client::handshake(io)
        .await
        .map_err(std::io::Error::other)?;
    let uri = format!("{scheme}://{}{}", server.authority, check.path);
    let mut request = http::Request::get(uri).header("user-agent", "weir-health-check");
    for (name, value) in &check.headers {
        request = request.header(name.as_str(), value.as_str());
    }
    let request = request.body(()).map_err(std::io::Error::other)?;
    let (response, _) = send
        .send_request(request, true)
        .map_err(std::io::Error::other)?;
    tokio::pin!(connection);
    tokio::select! {
        response = response => Ok(response.map_err(std::io::Error::other)?.status().as_u16()),
        _ = &mut connection => Err(std::io::Error::other("the connection closed")),
    }
}

/// Sends the request and reads until the status line is complete.
async fn exchange<S: AsyncReadExt + AsyncWriteExt + Unpin>(
    mut io: S,
    request: &[u8],
) -> std::io::Result<Vec<u8>> {
    io.write_all(request).await?;
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    while !got.windows(2).any(|w| w == b"\r\n") && got.len() < 4096 {
        let n = io.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}
