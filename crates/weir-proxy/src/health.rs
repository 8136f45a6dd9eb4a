//! Server health, shared by every worker: active checks (`health_check`, run by the control
//! thread: `GET path` every `interval`, a server goes down after `unhealthy_threshold`
//! consecutive failures and back up after `healthy_threshold` passes) and passive checks
//! (`passive_health`: `max_failures` failures seen by requests within `window` eject the
//! server for `eject`). Balancers skip servers that are down or ejected; reading that costs two
//! relaxed atomic loads, and no clock unless the server was ejected.

use crate::balancer::{Server, Service};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use weir_config::{HealthCheck, PassiveHealth};

/// Milliseconds since the first call (a process-wide monotonic clock for ejections).
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

#[derive(Debug, Default)]
pub struct Health {
    /// Down by active checks.
    down: AtomicBool,
    /// Ejected by passive checks until this `now_ms()`; 0 when not ejected.
    ejected_until: AtomicU64,
    /// Passive failures counted in the window that began at `window_start`.
    failures: AtomicU32,
    window_start: AtomicU64,
}

impl Health {
    pub fn usable(&self) -> bool {
        if self.down.load(Ordering::Relaxed) {
            return false;
        }
        let until = self.ejected_until.load(Ordering::Relaxed);
        until == 0 || now_ms() >= until
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Relaxed)
    }

    /// A request saw this server fail (connect error, reset, 502/503/504). Returns true when
    /// this failure ejected it.
    pub fn record_failure(&self, policy: &PassiveHealth) -> bool {
        let now = now_ms();
        let start = self.window_start.load(Ordering::Relaxed);
        if now.saturating_sub(start) > policy.window.as_millis() as u64 {
            self.window_start.store(now, Ordering::Relaxed);
            self.failures.store(0, Ordering::Relaxed);
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= policy.max_failures {
            self.failures.store(0, Ordering::Relaxed);
            self.ejected_until
                .store(now + policy.eject.as_millis() as u64, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Runs the active checks of every service that has them, forever (on the control thread).
pub async fn run_checks(services: Vec<Arc<Service>>) {
    let mut tasks = Vec::new();
    for service in services {
        let Some(check) = service.health_check.clone() else {
            continue;
        };
        for index in 0..service.servers.len() {
            let service = service.clone();
            let check = check.clone();
            tasks.push(tokio::spawn(async move {
                check_server(&service, &service.servers[index], &check).await;
            }));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn check_server(service: &Service, server: &Server, check: &HealthCheck) {
    let (mut passes, mut fails) = (0u32, 0u32);
    loop {
        let result = tokio::time::timeout(check.timeout, probe(server, check)).await;
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
                    server.health.down.store(false, Ordering::Relaxed);
                    eprintln!(
                        "weir: service `{}`: server {} is up again",
                        service.name, server.url
                    );
                }
            }
            Err(why) => {
                passes = 0;
                fails += 1;
                if !server.health.is_down() && fails >= check.unhealthy_threshold {
                    server.health.down.store(true, Ordering::Relaxed);
                    eprintln!(
                        "weir: service `{}`: server {} is down: {why}",
                        service.name, server.url
                    );
                }
            }
        }
        tokio::time::sleep(check.interval).await;
    }
}

/// One `GET path` on a new connection; the response's status.
async fn probe(server: &Server, check: &HealthCheck) -> std::io::Result<u16> {
    let io = TcpStream::connect(server.addr).await?;
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
