//! An HTTP/2 upstream in clear (`h2c`, for a service with `protocol: h2c`) for harness tests:
//! a listener on a loopback port that reads each stream's head, body and trailers whole,
//! records them, and answers `200` with the body `ok`; [`H2Upstream::start_one_per_connection`]
//! closes each connection gracefully (GOAWAY) after its first request.

use bytes::Bytes;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::net::{TcpListener, TcpStream};

/// A request as the upstream received it.
#[derive(Clone, Debug)]
pub(crate) struct H2Seen {
    pub(crate) headers: http::HeaderMap,
    pub(crate) body: Vec<u8>,
    pub(crate) trailers: Option<http::HeaderMap>,
}

impl H2Seen {
    /// A header's value, as text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// An HTTP/2 upstream; it serves until the test's `LocalSet` ends.
pub(crate) struct H2Upstream {
    addr: SocketAddr,
    seen: Rc<RefCell<Vec<H2Seen>>>,
    connections: Rc<Cell<usize>>,
}

impl H2Upstream {
    pub(crate) async fn start() -> H2Upstream {
        Self::start_with(false).await
    }

    /// Each connection answers one request, then sends GOAWAY and closes once it is out.
    pub(crate) async fn start_one_per_connection() -> H2Upstream {
        Self::start_with(true).await
    }

    async fn start_with(one_per_connection: bool) -> H2Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        let seen = Rc::new(RefCell::new(Vec::new()));
        let connections = Rc::new(Cell::new(0));
        let (serving, counting) = (seen.clone(), connections.clone());
        tokio::task::spawn_local(async move {
            while let Ok((io, _)) = listener.accept().await {
                counting.set(counting.get() + 1);
                tokio::task::spawn_local(serve(serving.clone(), io, one_per_connection));
            }
        });
        H2Upstream {
            addr,
            seen,
            connections,
        }
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.connections.get()
    }

    /// `http://127.0.0.1:PORT`, for a service's `servers`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received whole so far, in order.
    pub(crate) fn seen(&self) -> Vec<H2Seen> {
        self.seen.borrow().clone()
    }
}

async fn serve(seen: Rc<RefCell<Vec<H2Seen>>>, io: TcpStream, one_per_connection: bool) {
    let Ok(mut conn) = h2::server::handshake(io).await else {
        return;
    };
    while let Some(Ok((request, respond))) = conn.accept().await {
        if one_per_connection {
            conn.graceful_shutdown();
        }
        tokio::task::spawn_local(answer(seen.clone(), request, respond));
    }
}

/// Reads the request whole, records it, answers `ok`.
async fn answer(
    seen: Rc<RefCell<Vec<H2Seen>>>,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let (parts, mut recv) = request.into_parts();
    let mut body = Vec::new();
    while let Some(data) = recv.data().await {
        let Ok(data) = data else { return };
        let _ = recv.flow_control().release_capacity(data.len());
        body.extend_from_slice(&data);
    }
    let Ok(trailers) = recv.trailers().await else {
        return;
    };
    seen.borrow_mut().push(H2Seen {
        headers: parts.headers,
        body,
        trailers,
    });
    let response = http::Response::builder()
        .status(200)
        .body(())
        .expect("a response head");
    if let Ok(mut send) = respond.send_response(response, false) {
        let _ = send.send_data(Bytes::from_static(b"ok"), true);
    }
}
