//! `weir reload`: asks the running gateway to reload, through its admin API when the config
//! has one on a fixed port (the answer says whether the reload took and, if not, every error),
//! else by `SIGHUP` to the pid in `server.pid_file`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;
use weir_config::Config;

/// Asks for a reload; the message to print on success.
pub fn ask(config: &Config) -> Result<String, String> {
    // Port 0 was resolved at start: only the process knows it.
    if let Some(admin) = config
        .server
        .admin
        .as_ref()
        .filter(|a| a.address.port() != 0)
    {
        return through_admin(admin);
    }
    if let Some(path) = &config.server.pid_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the pid file {}: {e}", path.display()))?;
        let pid = text
            .trim()
            .parse::<i32>()
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| format!("{} holds no pid", path.display()))?;
        rustix::process::kill_process(pid, rustix::process::Signal::HUP)
            .map_err(|e| format!("cannot signal process {}: {e}", pid.as_raw_nonzero()))?;
        return Ok(format!(
            "sent SIGHUP to process {}; its log says how the reload went",
            pid.as_raw_nonzero()
        ));
    }
    Err("the config has neither `server.admin` nor `server.pid_file`: send SIGHUP to the process yourself".into())
}

fn through_admin(admin: &weir_config::Admin) -> Result<String, String> {
    let mut address = admin.address;
    if address.ip().is_unspecified() {
        address = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), address.port());
    }
    let fail = |e: std::io::Error| format!("admin API at {address}: {e}");
    let mut io = TcpStream::connect_timeout(&address, Duration::from_secs(5)).map_err(fail)?;
    io.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(fail)?;
    let auth = admin
        .token
        .as_ref()
        .map(|t| format!("authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /api/reload HTTP/1.1\r\nhost: {address}\r\n{auth}content-length: 0\r\nconnection: close\r\n\r\n"
    );
    io.write_all(request.as_bytes()).map_err(fail)?;
    let mut answer = String::new();
    io.read_to_string(&mut answer).map_err(fail)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let ok = head.starts_with("HTTP/1.1 200");
    let parsed: serde_json::Value = serde_json::from_str(body).unwrap_or_default();
    if ok {
        return Ok(format!("reloaded: version {}", parsed["version"]));
    }
    match parsed["errors"].as_array() {
        Some(errors) => Err(format!(
            "reload refused; the running config is unchanged:\n{}",
            errors
                .iter()
                .map(|e| format!("  {}", e.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join("\n")
        )),
        None => Err(format!(
            "admin API answered: {}",
            head.lines().next().unwrap_or_default()
        )),
    }
}
