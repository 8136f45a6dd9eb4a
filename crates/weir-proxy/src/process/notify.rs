//! systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram to the Unix
//! socket `$NOTIFY_SOCKET` names, sent once weir serves. The new process of a binary upgrade
//! sends its own pid with it (`MAINPID=`), before the old process is told to stop, so a
//! `Type=notify` unit (with `NotifyAccess=all`) follows the upgrade instead of ending with the
//! old process. Without `$NOTIFY_SOCKET` (not started by systemd) nothing is sent.

use std::ffi::OsStr;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable systemd sets for a `Type=notify` service.
const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Tells systemd this process serves; `upgraded`: it replaces the unit's main process.
pub fn ready(upgraded: bool) {
    let Some(socket) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    let message = match upgraded {
        true => format!("MAINPID={}\nREADY=1\n", std::process::id()),
        false => "READY=1\n".to_string(),
    };
    if let Err(e) = send(&socket, message.as_bytes()) {
        crate::log_warn!("cannot notify systemd at {}: {e}", socket.to_string_lossy());
    }
}

/// Sends `message` to the socket at `path`: a file, or with a leading `@` an abstract name.
fn send(path: &OsStr, message: &[u8]) -> std::io::Result<()> {
    let address = match path.as_bytes().strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(message, &address)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn received(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path_and_to_an_abstract_name() {
        let path = std::env::temp_dir().join(format!("weir-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let by_path = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), b"READY=1\n").unwrap();
        assert_eq!(received(&by_path), "READY=1\n");
        let _ = std::fs::remove_file(&path);

        // systemd writes an abstract socket's name with a leading `@`.
        let name = format!("weir-notify-test-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_socket = UnixDatagram::bind_addr(&address).unwrap();
        send(OsStr::new(&format!("@{name}")), b"MAINPID=7\nREADY=1\n").unwrap();
        assert_eq!(received(&abstract_socket), "MAINPID=7\nREADY=1\n");
    }
}
