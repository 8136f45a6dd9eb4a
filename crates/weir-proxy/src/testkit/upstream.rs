//! A scripted HTTP/1 upstream for harness tests: a listener on a loopback port whose
//! connections read requests (heads parsed by weir's codec, bodies as framed) and act on the
//! script's next [`Step`], one step per request whatever the connection, recording what each
//! request was and which connection carried it.

use super::wire;
use crate::http::codec;
use bytes::BytesMut;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// What the upstream does with a request.
pub(crate) enum Step {
    /// Writes these bytes and waits for the connection's next request.
    Answer(Vec<u8>),
    /// Writes these bytes, then closes the connection.
    AnswerAndClose(Vec<u8>),
    /// Closes the connection without answering.
    Close,
    /// Writes these bytes (a head and part of its body, say), then neither writes nor closes.
    Stall(Vec<u8>),
    /// Writes these bytes once the test calls [`Upstream::release`], then goes on as `Answer`.
    Held(Vec<u8>),
}

/// `200 OK` with the body `ok`, kept alive: what a request gets once the script has run out.
pub(crate) const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

impl Step {
    pub(crate) fn answer(bytes: &str) -> Step {
        Step::Answer(bytes.as_bytes().to_vec())
    }

    /// An answer of this status, with the body `status NNN`, kept alive.
    pub(crate) fn status(status: u16) -> Step {
        Step::answer(&answer(status, &format!("status {status}")))
    }

    /// [`ok`] as a step.
    pub(crate) fn ok(body: &str) -> Step {
        Step::answer(&ok(body))
    }
}

/// `200 OK` with `body`, kept alive.
pub(crate) fn ok(body: &str) -> String {
    answer(200, body)
}

/// An answer of `status` with `body`, kept alive.
fn answer(status: u16, body: &str) -> String {
    let len = body.len();
    format!("HTTP/1.1 {status} X\r\ncontent-length: {len}\r\n\r\n{body}")
}

/// A request as the upstream received it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    /// Which of the upstream's connections carried it, counted from 0 in accept order.
    pub(crate) conn: usize,
    /// The head as text, request line first.
    pub(crate) head: String,
    pub(crate) body: Vec<u8>,
}

impl Seen {
    /// The request line (`GET /p HTTP/1.1`).
    pub(crate) fn line(&self) -> &str {
        self.head.lines().next().unwrap_or("")
    }

    /// The first value of a header (names compared without case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|line| {
            let (n, v) = line.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

#[derive(Default)]
struct Script {
    steps: RefCell<VecDeque<Step>>,
    seen: RefCell<Vec<Seen>>,
    connections: Cell<usize>,
    released: Notify,
}

/// A scripted upstream; it serves until the test's `LocalSet` ends.
pub(crate) struct Upstream {
    addr: SocketAddr,
    script: Rc<Script>,
}

impl Upstream {
    /// Listens on a free loopback port, serving `steps` in order, then [`OK`] to every request.
    pub(crate) async fn start(steps: impl IntoIterator<Item = Step>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let script = Rc::new(Script {
            steps: RefCell::new(steps.into_iter().collect()),
            ..Script::default()
        });
        let serving = script.clone();
        tokio::task::spawn_local(async move {
            while let Ok((io, _)) = listener.accept().await {
                let conn = serving.connections.get();
                serving.connections.set(conn + 1);
                tokio::task::spawn_local(serve(serving.clone(), io, conn));
            }
        });
        Upstream { addr, script }
    }

    /// `http://127.0.0.1:PORT`, for a service's `servers`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.script.connections.get()
    }

    /// Every request received so far, in order.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.script.seen.borrow().clone()
    }

    pub(crate) fn requests(&self) -> usize {
        self.script.seen.borrow().len()
    }

    /// Lets every `Held` answer waiting now go out.
    pub(crate) fn release(&self) {
        self.script.released.notify_waiters();
    }
}

/// A URL nothing listens on: connecting is refused.
pub(crate) fn refused_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("an address");
    drop(listener);
    format!("http://{addr}")
}

async fn serve(script: Rc<Script>, mut io: TcpStream, conn: usize) {
    let mut buf = BytesMut::new();
    loop {
        let (head, framing) = loop {
            let before = buf.clone();
            match codec::parse_request(&mut buf) {
                Ok(Some(request)) => {
                    let len = before.len() - buf.len();
                    let text = String::from_utf8_lossy(&before[..len]).into_owned();
                    break (text, request.framing);
                }
                Ok(None) => {}
                Err(e) => panic!("weir sent a malformed request: {}", e.message()),
            }
            if wire::fill(&mut io, &mut buf).await == 0 {
                return;
            }
        };
        let body = wire::read_body(&mut io, &mut buf, framing).await;
        script.seen.borrow_mut().push(Seen { conn, head, body });
        let step = script.steps.borrow_mut().pop_front();
        let step = step.unwrap_or_else(|| Step::answer(OK));
        let answer = match step {
            Step::Answer(bytes) => bytes,
            Step::AnswerAndClose(bytes) => {
                let _ = io.write_all(&bytes).await;
                return;
            }
            Step::Close => return,
            Step::Stall(bytes) => {
                let _ = io.write_all(&bytes).await;
                std::future::pending::<()>().await;
                return;
            }
            Step::Held(bytes) => {
                script.released.notified().await;
                bytes
            }
        };
        if io.write_all(&answer).await.is_err() {
            return;
        }
    }
}
