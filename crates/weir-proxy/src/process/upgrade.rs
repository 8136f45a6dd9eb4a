//! Zero-downtime binary upgrade, both sides. On `SIGUSR2` the running process starts its
//! binary again (the path it was started as, so a binary replaced on disk is the one that runs)
//! with the same arguments, and hands the new process every listening socket over a Unix
//! socket (`SCM_RIGHTS`), one message per entrypoint and one for the admin listener. The new
//! process adopts the sockets whose entrypoint (or admin address) is unchanged in its config
//! (`listen/listeners.rs`, `admin/mod.rs`), starts, and answers `ready`; only then does the old one stop
//! accepting and drain as on `SIGTERM`. The sockets themselves are never closed, so no
//! connection queued in them is lost. If the new process fails to start, it sends its error
//! instead, and the old one logs it with the new process's exit status and goes on serving.

use crate::listen::listeners::{Bound, BoundEntrypoints, Inherited};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};
use weir_config::Transport;

/// Names the abstract Unix socket the new process fetches its sockets from.
const HANDOFF_ENV: &str = "WEIR_UPGRADE_FROM";
/// How long the new process may take to connect, and then to become ready.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);
const READY_WITHIN: Duration = Duration::from_secs(60);
/// Descriptors in one message (the kernel's SCM_MAX_FD is 253).
const MAX_FDS: usize = 253;
/// The largest message: one entrypoint's description, or the new process's error.
const MAX_MESSAGE: usize = 4096;
/// How long a new process that failed may take to exit before it is killed: it has reported
/// (or is printing) its error, and its exit status belongs in the old one's log.
const EXIT_WITHIN: Duration = Duration::from_secs(5);
/// What the new process sends ahead of its error when it cannot start.
const FAILED: &[u8] = b"failed: ";

/// The sockets an upgrade hands over.
pub struct Handoff {
    pub entrypoints: Vec<(String, Bound)>,
    /// The admin listener's socket, when one is served.
    pub admin: Option<Bound>,
}

/// Why a handoff failed, and whether the new process is ending by itself.
enum Failure {
    /// It reported an error or closed the handoff socket: it is exiting.
    Exiting(String),
    /// It hangs, or the handoff itself broke.
    Stuck(String),
}

/// The old side: starts the new binary, hands it duplicates of the sockets in `handoff` and
/// waits until it is ready. Blocking; run it off the control loop. Returns the new process's
/// pid.
pub fn hand_over(handoff: Handoff) -> Result<u32, String> {
    let name = format!(
        "weir-upgrade-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let io = |what: &str| {
        let what = what.to_string();
        move |e: rustix::io::Errno| format!("{what}: {e}")
    };
    let address = SocketAddrUnix::new_abstract_name(name.as_bytes()).map_err(io("address"))?;
    let listener = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(io("socket"))?;
    rustix::net::bind(&listener, &address).map_err(io("bind"))?;
    rustix::net::listen(&listener, 1).map_err(io("listen"))?;

    let mut args = std::env::args_os();
    let program = args
        .next()
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::current_exe().ok())
        .ok_or("cannot tell which binary this process runs")?;
    let mut child = std::process::Command::new(&program)
        .args(args)
        .env(HANDOFF_ENV, &name)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    match serve_new_process(&listener, &mut child, handoff) {
        Ok(()) => Ok(child.id()),
        Err(Failure::Exiting(reason)) => Err(wait_for_exit(&mut child, reason)),
        Err(Failure::Stuck(reason)) => {
            // Ours, and not ready: make sure it does not linger beside us.
            let _ = child.kill();
            let status = child
                .wait()
                .map_or_else(|e| e.to_string(), |s| s.to_string());
            Err(format!("{reason}; the new process was killed ({status})"))
        }
    }
}

/// Waits (up to `EXIT_WITHIN`) for a new process that failed to exit, and tells why it
/// failed with how it exited. Killing it at once could cut its own error line short.
fn wait_for_exit(child: &mut std::process::Child, reason: String) -> String {
    let deadline = Instant::now() + EXIT_WITHIN;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return format!("{reason} ({status})"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return format!("{reason}; it did not exit within {EXIT_WITHIN:?} and was killed");
            }
        }
    }
}

fn serve_new_process(
    listener: &OwnedFd,
    child: &mut std::process::Child,
    handoff: Handoff,
) -> Result<(), Failure> {
    let deadline = Instant::now() + CONNECT_WITHIN;
    let conn = loop {
        match rustix::net::accept_with(listener, SocketFlags::CLOEXEC) {
            Ok(conn) => break conn,
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(Failure::Stuck(format!("accept: {e}"))),
        }
        if let Ok(Some(_)) = child.try_wait() {
            let reason = "the new process exited before it took the sockets";
            return Err(Failure::Exiting(reason.into()));
        }
        if Instant::now() > deadline {
            return Err(Failure::Stuck(format!(
                "the new process did not connect within {CONNECT_WITHIN:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let broken = |what: &str| {
        let what = what.to_string();
        move |e: rustix::io::Errno| Failure::Stuck(format!("{what}: {e}"))
    };
    rustix::net::sockopt::set_socket_timeout(
        &conn,
        rustix::net::sockopt::Timeout::Recv,
        Some(READY_WITHIN),
    )
    .map_err(broken("handoff socket"))?;
    let entrypoints = handoff.entrypoints.iter().map(|(name, entry)| {
        let description = serde_json::json!({
            "name": name,
            "configured": entry.configured.to_string(),
            "actual": entry.actual.to_string(),
            "udp": entry.transport == Transport::Udp,
        });
        (format!("`{name}`"), description, entry)
    });
    // Named "" (no entrypoint can be), so a binary from before admin handoffs, started by a
    // downgrade, closes it as an entrypoint it does not have.
    let admin = handoff.admin.iter().map(|entry| {
        let description = serde_json::json!({
            "name": "",
            "admin": true,
            "configured": entry.configured.to_string(),
            "actual": entry.actual.to_string(),
            "udp": false,
        });
        ("the admin listener".to_string(), description, entry)
    });
    for (what, description, entry) in entrypoints.chain(admin) {
        let description = description.to_string();
        for fds in entry.sockets.chunks(MAX_FDS) {
            send_with_fds(&conn, description.as_bytes(), fds)
                .map_err(broken(&format!("handing over {what}")))?;
        }
    }
    send_with_fds(&conn, b"end", &[]).map_err(broken("handoff"))?;
    let mut answer = vec![0u8; MAX_MESSAGE];
    match rustix::net::recv(&conn, &mut answer, RecvFlags::empty()) {
        Ok((n, _)) if &answer[..n] == b"ready" => Ok(()),
        Ok((n, _)) => Err(Failure::Exiting(match answer[..n].strip_prefix(FAILED) {
            Some(error) => format!(
                "the new process could not start: {}",
                String::from_utf8_lossy(error)
            ),
            None => "the new process stopped before it was ready".into(),
        })),
        Err(e) => Err(Failure::Stuck(format!(
            "the new process did not get ready: {e}"
        ))),
    }
}

fn send_with_fds(conn: &OwnedFd, bytes: &[u8], fds: &[OwnedFd]) -> rustix::io::Result<()> {
    let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
    let mut space =
        vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(borrowed.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !borrowed.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(&borrowed));
    }
    rustix::net::sendmsg(
        conn,
        &[IoSlice::new(bytes)],
        &mut control,
        SendFlags::empty(),
    )?;
    Ok(())
}

/// The new side's link to the process it replaces: told `ready` once this one serves.
pub struct Predecessor(OwnedFd);

impl Predecessor {
    pub fn report_ready(self) {
        let _ = rustix::net::send(&self.0, b"ready", SendFlags::empty());
    }

    /// Tells the old process why this one cannot start (it logs it and goes on serving).
    pub fn report_failure(self, error: &str) {
        let mut message = FAILED.to_vec();
        let room = MAX_MESSAGE - FAILED.len();
        let mut end = error.len().min(room);
        while !error.is_char_boundary(end) {
            end -= 1;
        }
        message.extend_from_slice(&error.as_bytes()[..end]);
        let _ = rustix::net::send(&self.0, &message, SendFlags::empty());
    }
}

/// The new side, when it cannot start before it takes the sockets (its config has errors):
/// takes them all the same, so the handoff completes, and tells the old process why.
/// Nothing when this process was not started by an upgrade.
pub fn refuse(error: &str) {
    if let Ok((_, Some(predecessor))) = receive() {
        predecessor.report_failure(error);
    }
}

/// The new side: when this process was started by an upgrade, fetches the sockets the old
/// process hands over.
pub fn inherit() -> Result<(Inherited, Option<Predecessor>), String> {
    let (inherited, predecessor) = receive()?;
    if predecessor.is_some() {
        let count: usize = inherited.by_name.values().map(|b| b.sockets.len()).sum();
        let admin = match inherited.admin {
            Some(_) => " and the admin listener",
            None => "",
        };
        crate::log_info!(
            "upgrade: took over {count} listening socket(s) of {} entrypoint(s){admin}",
            inherited.by_name.len()
        );
    }
    Ok((inherited, predecessor))
}

/// `inherit` without a word.
fn receive() -> Result<(Inherited, Option<Predecessor>), String> {
    let Some(name) = std::env::var_os(HANDOFF_ENV) else {
        return Ok((Inherited::default(), None));
    };
    let fail = |e: rustix::io::Errno| format!("upgrade: cannot take over the sockets: {e}");
    let address = SocketAddrUnix::new_abstract_name(name.as_encoded_bytes()).map_err(fail)?;
    let conn = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .map_err(fail)?;
    rustix::net::connect(&conn, &address).map_err(fail)?;
    let mut inherited = Inherited::default();
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let received = rustix::net::recvmsg(
            &conn,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        )
        .map_err(fail)?;
        let mut fds: Vec<OwnedFd> = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(rights) = message {
                fds.extend(rights);
            }
        }
        let text = &buf[..received.bytes];
        if text == b"end" || received.bytes == 0 {
            break;
        }
        let entry = describe(text).ok_or("upgrade: a handoff message is not understood")?;
        let Described {
            name,
            admin,
            configured,
            actual,
            transport,
        } = entry;
        let bound = || Bound {
            configured,
            actual,
            transport,
            sockets: Vec::new(),
            http3: false,
        };
        let into = match admin {
            true => inherited.admin.get_or_insert_with(bound),
            false => inherited.by_name.entry(name).or_insert_with(bound),
        };
        into.sockets.extend(fds);
    }
    Ok((inherited, Some(Predecessor(conn))))
}

/// One handoff message: an entrypoint's sockets, or the admin listener's.
struct Described {
    name: String,
    admin: bool,
    configured: SocketAddr,
    actual: SocketAddr,
    transport: Transport,
}

fn describe(text: &[u8]) -> Option<Described> {
    let value: serde_json::Value = serde_json::from_slice(text).ok()?;
    let addr = |key: &str| value[key].as_str()?.parse::<SocketAddr>().ok();
    let transport = if value["udp"].as_bool()? {
        Transport::Udp
    } else {
        Transport::Tcp
    };
    Some(Described {
        name: value["name"].as_str()?.to_string(),
        admin: value["admin"].as_bool().unwrap_or(false),
        configured: addr("configured")?,
        actual: addr("actual")?,
        transport,
    })
}

/// Duplicates of every bound entrypoint's sockets and of the admin listener's (`admin`), for
/// `hand_over` to send.
pub fn duplicates(bound: &BoundEntrypoints, admin: Option<Bound>) -> Result<Handoff, String> {
    let entrypoints = bound
        .by_name
        .iter()
        .map(|(name, entry)| {
            let sockets = entry
                .sockets
                .iter()
                .map(|fd| fd.try_clone())
                .collect::<Result<_, _>>()
                .map_err(|e| format!("cannot duplicate a socket of `{name}`: {e}"))?;
            Ok((
                name.clone(),
                Bound {
                    configured: entry.configured,
                    actual: entry.actual,
                    transport: entry.transport,
                    sockets,
                    http3: false,
                },
            ))
        })
        .collect::<Result<_, String>>()?;
    Ok(Handoff { entrypoints, admin })
}
