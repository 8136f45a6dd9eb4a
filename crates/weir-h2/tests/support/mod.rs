//! A test server: weir-h2's `Connection` driven over a real TCP socket by a small tokio loop,
//! answering a few paths (below), on a thread of its own.

#![allow(dead_code)]

use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::io::IoSlice;
use std::net::SocketAddr;
use tokio::io::Interest;
use tokio::net::{TcpListener, TcpStream};
use weir_h2::hpack::Encoder;
use weir_h2::{Config, Connection, Event};

/// Paths: `/small` and `/` answer "hello"; `/big/N` N bytes of `pattern`; `/echo` streams the body
/// back and ends with trailers `x-body-bytes` (and `x-got-trailer` echoing the request's
/// `x-trailer`); `/trailers` "t" and `grpc-status: 0`; `/never` no answer. A head over the
/// cap is answered 431.
pub struct Server {
    pub addr: SocketAddr,
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

impl Server {
    pub fn start(config: Config) -> Server {
        Server {
            addr: listen(move |sock| serve(sock, config)),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

/// Accepts on a loopback port, on a thread of its own with a current-thread runtime, and
/// runs `serve` in a task per connection.
pub fn listen<F, Fut>(serve: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(listener.local_addr().expect("addr"))
                .expect("send addr");
            while let Ok((sock, _)) = listener.accept().await {
                sock.set_nodelay(true).ok();
                tokio::spawn(serve(sock));
            }
        });
    });
    rx.recv().expect("server address")
}

/// A header block of `fields`, in order, from `encoder`.
pub fn encode_block(encoder: &mut Encoder, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (n, v) in fields {
        encoder.field(n.as_bytes(), v.as_bytes(), &mut block);
    }
    block
}

/// Appends one frame (RFC 9113 §4.1) to `dst`.
pub fn frame(dst: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    dst.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    dst.extend_from_slice(&stream.to_be_bytes());
    dst.extend_from_slice(payload);
}

#[derive(Default)]
struct Exchange {
    path: String,
    body_bytes: usize,
    echo: bool,
}

/// Serves one connection until it ends; returns nothing, errors end it.
pub async fn serve(sock: TcpStream, config: Config) {
    let mut conn = Connection::new(config);
    let mut exchanges: HashMap<u32, Exchange> = HashMap::new();
    loop {
        while let Some(event) = conn.poll_event() {
            answer(&mut conn, &mut exchanges, event);
        }
        if conn.is_done() && !conn.has_output() {
            linger(sock).await;
            return;
        }
        let interest = if conn.has_output() {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        let Ok(ready) = sock.ready(interest).await else {
            return;
        };
        if ready.is_writable() && conn.has_output() {
            let mut slices = [IoSlice::new(&[]); 64];
            let n = conn.output_slices(&mut slices);
            match sock.try_write_vectored(&slices[..n]) {
                Ok(written) => conn.advance_output(written),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        if ready.is_readable() {
            match sock.try_read_buf(conn.input()) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    }
}

/// Closes without a reset: a client still sending when the socket closed with its input
/// unread would get a reset, which can destroy the GOAWAY before the client reads it.
async fn linger(mut sock: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if sock.shutdown().await.is_err() {
        return;
    }
    let mut scratch = [0u8; 4096];
    let quiet = std::time::Duration::from_secs(2);
    while let Ok(Ok(n)) = tokio::time::timeout(quiet, sock.read(&mut scratch)).await {
        if n == 0 {
            return;
        }
    }
}

fn answer(conn: &mut Connection, exchanges: &mut HashMap<u32, Exchange>, event: Event) {
    match event {
        Event::Request {
            stream_id,
            head,
            end_stream,
        } => {
            let path = String::from_utf8_lossy(head.path().unwrap_or_default()).into_owned();
            let echo = path == "/echo";
            if echo {
                conn.send_head(
                    stream_id,
                    200,
                    &[("content-type", "application/octet-stream")],
                    false,
                )
                .ok();
            }
            exchanges.insert(
                stream_id,
                Exchange {
                    path,
                    body_bytes: 0,
                    echo,
                },
            );
            if end_stream {
                finish(conn, exchanges, stream_id, None);
            }
        }
        Event::HeadTooLarge { stream_id, .. } => {
            conn.send_head(stream_id, 431, &[("content-length", "0")], true)
                .ok();
        }
        Event::Data {
            stream_id,
            data,
            end_stream,
        } => {
            conn.release_capacity(stream_id, data.len());
            if let Some(x) = exchanges.get_mut(&stream_id) {
                x.body_bytes += data.len();
                if x.echo && !data.is_empty() {
                    conn.send_data(stream_id, data, false).ok();
                }
            }
            if end_stream {
                finish(conn, exchanges, stream_id, None);
            }
        }
        Event::Trailers { stream_id, fields } => {
            let got = fields
                .get(b"x-trailer")
                .map(|v| String::from_utf8_lossy(v).into_owned());
            finish(conn, exchanges, stream_id, got);
        }
        Event::Reset { stream_id, .. } | Event::StreamError { stream_id, .. } => {
            exchanges.remove(&stream_id);
        }
        _ => {}
    }
}

fn finish(
    conn: &mut Connection,
    exchanges: &mut HashMap<u32, Exchange>,
    stream_id: u32,
    trailer: Option<String>,
) {
    let Some(x) = exchanges.remove(&stream_id) else {
        return;
    };
    let path = x.path.as_str();
    if x.echo {
        let bytes = x.body_bytes.to_string();
        let mut fields = vec![("x-body-bytes", bytes)];
        if let Some(t) = trailer {
            fields.push(("x-got-trailer", t));
        }
        conn.send_trailers(stream_id, &fields).ok();
    } else if path == "/small" || path == "/" {
        conn.send_head(
            stream_id,
            200,
            &[("content-type", "text/plain"), ("content-length", "5")],
            false,
        )
        .ok();
        conn.send_data(stream_id, Bytes::from_static(b"hello"), true)
            .ok();
    } else if let Some(n) = path
        .strip_prefix("/big/")
        .and_then(|n| n.parse::<usize>().ok())
    {
        let len = n.to_string();
        conn.send_head(stream_id, 200, &[("content-length", len.as_str())], false)
            .ok();
        conn.send_data(stream_id, Bytes::from(pattern(n)), true)
            .ok();
    } else if path == "/trailers" {
        conn.send_head(
            stream_id,
            200,
            &[("content-type", "application/grpc")],
            false,
        )
        .ok();
        conn.send_data(stream_id, Bytes::from_static(b"t"), false)
            .ok();
        conn.send_trailers(stream_id, &[("grpc-status", "0")]).ok();
    } else if path == "/never" {
        // No answer: the client resets it.
    } else {
        conn.send_head(stream_id, 404, &[("content-length", "0")], true)
            .ok();
    }
}
