//! Debian's `pebble` (Let's Encrypt's test CA) on free loopback ports, with
//! `pebble-challtestsrv` as its DNS server (every name is 127.0.0.1) and its validation ports
//! pointed at weir's entrypoints; killed on drop.

use super::{free_port, make_cert, temp_dir};
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Pebble {
    ca: Child,
    dns: Child,
    /// `https://127.0.0.1:PORT/dir`.
    pub directory: String,
    /// The certificate of pebble's own HTTPS listener, for weir's `ca`.
    pub listener_cert: PathBuf,
    management: u16,
    dir: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
}

impl Pebble {
    /// Validates HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port` of 127.0.0.1, and
    /// issues certificates valid for `validity_seconds`.
    pub fn start(http_port: u16, tls_port: u16, validity_seconds: u64) -> Pebble {
        let dir = temp_dir("pebble");
        let listener = make_cert(&dir, "listener", &["127.0.0.1"], false);
        let (port, management, dns_port) = (free_port(), free_port(), free_port());
        let config = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{port}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": listener.cert,
            "privateKey": listener.key,
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": validity_seconds,
        }});
        let config_path = dir.join("pebble.json");
        std::fs::write(&config_path, config.to_string()).unwrap();
        let dns = Command::new("pebble-challtestsrv")
            .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
            .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
            .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args(["-management", &format!("127.0.0.1:{}", free_port())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble-challtestsrv must be installed (Debian's pebble)");
        let mut ca = Command::new("pebble")
            .arg("-config")
            .arg(&config_path)
            .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
            // No random validation delays, no refused nonces: deterministic and fast.
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("pebble must be installed");
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        let stdout = ca.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        let pebble = Pebble {
            ca,
            dns,
            directory: format!("https://127.0.0.1:{port}/dir"),
            listener_cert: listener.cert,
            management,
            dir,
            log,
        };
        for wanted in [port, management, dns_port] {
            let deadline = Instant::now() + Duration::from_secs(20);
            while TcpStream::connect(("127.0.0.1", wanted)).is_err() {
                assert!(Instant::now() < deadline, "pebble did not start");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        pebble
    }

    /// Pebble's issuing root (new each run), as a PEM file.
    pub fn root(&self) -> PathBuf {
        let url = format!("https://127.0.0.1:{}/roots/0", self.management);
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&self.listener_cert)
            .arg(url)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let path = self.dir.join("root.pem");
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    /// How many certificates it has issued.
    pub fn issued(&self) -> usize {
        let log = self.log.lock().unwrap();
        log.iter()
            .filter(|l| l.contains("Issued certificate"))
            .count()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in [&mut self.ca, &mut self.dns] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
