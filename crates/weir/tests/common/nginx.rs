//! Debian's nginx as an upstream (plain, TLS, HTTP/2, serving a folder), and free ports.

use super::*;

/// nginx from Debian as an upstream that reports its connection serial number.
pub struct Nginx {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Nginx {
    pub fn start() -> Nginx {
        Nginx::start_with("")
    }

    /// Starts nginx with extra `http`-level directives.
    pub fn start_with(http_extra: &str) -> Nginx {
        Nginx::start_server(http_extra, "", ANSWER_CONNECTION)
    }

    /// Starts nginx serving the files under `root` (its ETags and ranges; JSON, HTML and
    /// PNG typed).
    pub fn serve_dir(root: &std::path::Path) -> Nginx {
        let location = format!(
            "root {}; types {{ application/json json; text/html html; image/png png; }}",
            root.display()
        );
        Nginx::start_server("", "", &location)
    }

    /// Starts nginx speaking HTTPS with this certificate and key (PEM files); with
    /// `client_ca`, it requires a client certificate signed by that CA.
    pub fn start_tls(
        cert: &std::path::Path,
        key: &std::path::Path,
        client_ca: Option<&std::path::Path>,
    ) -> Nginx {
        let verify = client_ca
            .map(|ca| {
                format!(
                    ";\n    ssl_verify_client on;\n    ssl_client_certificate {}",
                    ca.display()
                )
            })
            .unwrap_or_default();
        Nginx::start_server(
            "",
            &format!(
                " ssl;\n    ssl_certificate {};\n    ssl_certificate_key {}{verify}",
                cert.display(),
                key.display()
            ),
            ANSWER_CONNECTION,
        )
    }

    /// Starts nginx speaking HTTPS with this certificate and key, `location` the body of its
    /// `location /` block.
    pub fn start_tls_location(
        cert: &std::path::Path,
        key: &std::path::Path,
        location: &str,
    ) -> Nginx {
        let listen = format!(
            " ssl;\n    ssl_certificate {};\n    ssl_certificate_key {}",
            cert.display(),
            key.display()
        );
        Nginx::start_server("", &listen, location)
    }

    /// Starts nginx with `location` as the body of its `location /` block (nested locations
    /// allowed).
    pub fn with_location(location: &str) -> Nginx {
        Nginx::start_server("", "", location)
    }

    /// Starts nginx speaking HTTP/2 only: in clear with prior knowledge (`h2c`), or over TLS
    /// with this certificate and key. `location` is the `location /` block's body.
    pub fn start_h2(tls: Option<(&std::path::Path, &std::path::Path)>, location: &str) -> Nginx {
        let listen = match tls {
            None => " http2".to_string(),
            Some((cert, key)) => format!(
                " ssl http2;\n    ssl_certificate {};\n    ssl_certificate_key {}",
                cert.display(),
                key.display()
            ),
        };
        Nginx::start_server("", &listen, location)
    }

    fn start_server(http_extra: &str, listen_extra: &str, location: &str) -> Nginx {
        // free_port() releases the port before nginx binds it, so another process (a weir
        // binding port 0 in a parallel test) can take it first: then this nginx exits and the
        // port answers for someone else. Start again on a new port until nginx itself holds it.
        for _ in 0..5 {
            if let Some(nginx) = Nginx::try_start(http_extra, listen_extra, location) {
                return nginx;
            }
        }
        panic!("nginx did not start");
    }

    fn try_start(http_extra: &str, listen_extra: &str, location: &str) -> Option<Nginx> {
        let dir = temp_dir("nginx");
        let port = free_port();
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {dir};\n  proxy_temp_path {dir};\n  fastcgi_temp_path {dir};\n  uwsgi_temp_path {dir};\n  scgi_temp_path {dir};\n  keepalive_requests 100000;\n  {http_extra}\n\
               server {{\n    listen 127.0.0.1:{port}{listen_extra};\n    location / {{ {location} }}\n  }}\n}}\n",
            dir = dir.display()
        );
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let child = spawn_nginx(&dir, &conf, addr)?;
        Some(Nginx { child, addr })
    }
}

/// Starts nginx with `conf` (written into `dir`, its prefix) and waits until it holds `addr`;
/// `None` when it exits first (another process took the port) or does not bind in 4 s.
pub fn spawn_nginx(dir: &std::path::Path, conf: &str, addr: SocketAddr) -> Option<Child> {
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let mut child = Command::new(nginx_bin())
        .arg("-c")
        .arg(&path)
        .arg("-p")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx must be installed (scripts/test installs nginx-light)");
    // nginx writes its pid file once its sockets are bound.
    let pid_file = dir.join("nginx.pid");
    let own_pid = child.id().to_string();
    for _ in 0..200 {
        if child.try_wait().ok().flatten().is_some() {
            return None;
        }
        let bound = std::fs::read_to_string(&pid_file).is_ok_and(|p| p.trim() == own_pid);
        if bound && TcpStream::connect(addr).is_ok() {
            return Some(child);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// What the test nginx answers by default: which of its connections served the request.
const ANSWER_CONNECTION: &str = "return 200 \"conn=$connection\\n\";";

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn nginx_bin() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
