//! weir-h2's client side: against the `h2` crate's server on a real TCP socket (requests,
//! bodies both ways under flow control, trailers, resets, the server's stream limit), and
//! against hand-written server frames for what the h2 crate does not send (1xx heads, GOAWAY
//! refusing streams, PING, protocol errors).

mod support;

use bytes::{BufMut, Bytes, BytesMut};
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use support::{listen, pattern};
use weir_h2::hpack::{Encoder, Indexing};
use weir_h2::{ClientConfig, ClientConnection, ClientEvent, Reason};

/// An h2 crate server: `/echo` streams the request body back with trailers
/// `x-body-bytes`; `/refuse` resets the stream REFUSED_STREAM; anything else answers "hello".
fn h2_server(max_streams: u32) -> std::net::SocketAddr {
    listen(move |sock| async move {
        let mut builder = h2::server::Builder::new();
        builder.max_concurrent_streams(max_streams);
        let Ok(mut conn) = builder.handshake::<_, Bytes>(sock).await else {
            return;
        };
        while let Some(Ok((request, respond))) = conn.accept().await {
            tokio::spawn(answer(request, respond));
        }
    })
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let path = request.uri().path().to_string();
    if path == "/refuse" {
        return respond.send_reset(h2::Reason::REFUSED_STREAM);
    }
    let mut body = request.into_body();
    if path != "/echo" {
        let response = http::Response::builder()
            .status(200)
            .body(())
            .expect("response");
        let Ok(mut send) = respond.send_response(response, false) else {
            return;
        };
        let _ = send.send_data(Bytes::from_static(b"hello"), true);
        return;
    }
    let response = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .expect("response");
    let Ok(mut send) = respond.send_response(response, false) else {
        return;
    };
    let mut total = 0usize;
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        total += chunk.len();
        send.reserve_capacity(chunk.len());
        let mut rest = chunk;
        while !rest.is_empty() {
            let granted = std::future::poll_fn(|cx| send.poll_capacity(cx)).await;
            let Some(Ok(n)) = granted else { return };
            let piece = rest.split_to(n.min(rest.len()));
            if send.send_data(piece, false).is_err() {
                return;
            }
        }
    }
    let got = body.trailers().await.ok().flatten();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("x-body-bytes", total.into());
    if let Some(v) = got.as_ref().and_then(|t| t.get("x-trailer")) {
        trailers.insert("x-got-trailer", v.clone());
    }
    let _ = send.send_trailers(trailers);
}

/// A blocking driver: a socket and the codec, pumped until a test's condition holds.
struct Client {
    sock: TcpStream,
    conn: ClientConnection,
}

impl Client {
    fn connect(addr: std::net::SocketAddr, config: ClientConfig) -> Client {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_nodelay(true).ok();
        sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .ok();
        let mut c = Client {
            sock,
            conn: ClientConnection::new(config),
        };
        c.until(|e| matches!(e, ClientEvent::Settings));
        c
    }

    fn flush(&mut self) {
        while self.conn.has_output() {
            let mut slices = [IoSlice::new(&[]); 16];
            let n = self.conn.output_slices(&mut slices);
            let written = self.sock.write_vectored(&slices[..n]).expect("write");
            self.conn.advance_output(written);
        }
    }

    /// The next event, reading the socket as needed.
    fn next(&mut self) -> ClientEvent {
        loop {
            self.flush();
            if let Some(e) = self.conn.poll_event() {
                return e;
            }
            let mut buf = [0u8; 65536];
            let n = self.sock.read(&mut buf).expect("read");
            assert!(n > 0, "the server closed the connection");
            self.conn.receive(&buf[..n]);
        }
    }

    /// Events up to and including the first that `stop` accepts.
    fn until(&mut self, mut stop: impl FnMut(&ClientEvent) -> bool) -> Vec<ClientEvent> {
        let mut seen = Vec::new();
        loop {
            let e = self.next();
            let done = stop(&e);
            seen.push(e);
            if done {
                return seen;
            }
        }
    }

    fn request(&mut self, method: &str, path: &str, end_stream: bool) -> u32 {
        let fields = [(&b"te"[..], &b"trailers"[..])];
        self.conn
            .send_request(
                method.as_bytes(),
                b"http",
                b"test",
                path.as_bytes(),
                fields,
                end_stream,
            )
            .expect("send_request")
    }

    /// The response of `id`: status, body (windows given back) and trailers.
    fn response(&mut self, id: u32) -> (u16, Vec<u8>, Vec<(String, String)>) {
        let (mut status, mut body, mut trailers) = (0, Vec::new(), Vec::new());
        loop {
            match self.next() {
                ClientEvent::Response {
                    stream_id,
                    status: s,
                    end_stream,
                    ..
                } if stream_id == id => {
                    status = s;
                    if end_stream {
                        break;
                    }
                }
                ClientEvent::Data {
                    stream_id,
                    data,
                    end_stream,
                } if stream_id == id => {
                    self.conn.release_capacity(id, data.len());
                    body.extend_from_slice(&data);
                    if end_stream {
                        break;
                    }
                }
                ClientEvent::Trailers { stream_id, fields } if stream_id == id => {
                    trailers = fields.iter().map(|(n, v)| (text(n), text(v))).collect();
                    break;
                }
                ClientEvent::Reset { stream_id, reason } if stream_id == id => {
                    panic!("stream {id} reset: {reason:?}")
                }
                _ => {}
            }
        }
        (status, body, trailers)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_get_and_its_answer_from_the_h2_crate() {
    let mut c = Client::connect(h2_server(100), ClientConfig::default());
    let id = c.request("GET", "/small", true);
    assert_eq!(id, 1);
    assert_eq!(c.response(id), (200, b"hello".to_vec(), vec![]));
    let id = c.request("GET", "/again", true);
    assert_eq!(id, 3, "client streams are odd and rise");
    assert_eq!(c.response(id).1, b"hello");
    assert_eq!(c.conn.open_streams(), 0);
}

#[test]
fn a_large_body_echoed_under_small_windows_both_ways_with_trailers() {
    // Windows far smaller than the body: the request waits for the server's WINDOW_UPDATEs,
    // the answer for ours (given back in batches by release_capacity).
    let config = ClientConfig {
        initial_window_size: 16 * 1024,
        connection_window_size: 65_535,
        ..ClientConfig::default()
    };
    let mut c = Client::connect(h2_server(100), config);
    let body = pattern(1 << 20);
    let id = c.request("POST", "/echo", false);
    c.conn
        .send_data(id, Bytes::from(body.clone()), false)
        .expect("data");
    assert!(
        c.conn.queued_bytes(id) > 0,
        "the server's window holds most of it back"
    );
    c.conn
        .send_trailers(id, [(&b"x-trailer"[..], &b"yes"[..])])
        .expect("trailers");
    let (status, echoed, trailers) = c.response(id);
    assert_eq!(status, 200);
    assert!(echoed == body, "echoed {} bytes", echoed.len());
    assert!(trailers.contains(&("x-body-bytes".into(), (1 << 20).to_string())));
    assert!(trailers.contains(&("x-got-trailer".into(), "yes".into())));
}

#[test]
fn many_streams_at_once_and_the_servers_limit() {
    let mut c = Client::connect(h2_server(3), ClientConfig::default());
    assert_eq!(c.conn.max_concurrent_streams(), 3);
    let ids: Vec<u32> = (0..3).map(|_| c.request("GET", "/small", true)).collect();
    assert!(!c.conn.can_open(), "three open: the server's limit");
    for id in ids {
        assert_eq!(c.response(id).1, b"hello");
    }
    assert!(c.conn.can_open());
}

#[test]
fn a_refused_stream_is_a_reset_and_the_connection_goes_on() {
    let mut c = Client::connect(h2_server(100), ClientConfig::default());
    let id = c.request("GET", "/refuse", true);
    let events = c.until(|e| matches!(e, ClientEvent::Reset { .. }));
    assert!(matches!(
        events.last(),
        Some(ClientEvent::Reset { stream_id, reason }) if *stream_id == id && *reason == Reason::REFUSED_STREAM
    ));
    let id = c.request("GET", "/small", true);
    assert_eq!(c.response(id).1, b"hello");
}

#[test]
fn a_cancelled_stream_leaves_the_connection_usable() {
    let mut c = Client::connect(h2_server(100), ClientConfig::default());
    let id = c.request("POST", "/echo", false);
    c.conn.send_reset(id, Reason::CANCEL);
    assert!(!c.conn.is_open(id));
    let id = c.request("GET", "/small", true);
    assert_eq!(c.response(id).1, b"hello");
}

// ---- hand-written server frames ----

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    let len = payload.len();
    b.put_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    b.put_u32(stream);
    b.put_slice(payload);
    b.to_vec()
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut e = Encoder::new(Indexing::None, false);
    let mut b = BytesMut::new();
    for (n, v) in fields {
        e.field(n.as_bytes(), v.as_bytes(), &mut b);
    }
    b.to_vec()
}

/// A client that has sent its preface and taken the server's empty SETTINGS.
fn in_memory() -> ClientConnection {
    let mut c = ClientConnection::new(ClientConfig::default());
    let preface = c.take_output();
    assert!(preface.starts_with(weir_h2::PREFACE));
    c.receive(&frame(0x4, 0, 0, &[]));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Settings)));
    c.take_output();
    c
}

fn get(c: &mut ClientConnection) -> u32 {
    let none: [(&[u8], &[u8]); 0] = [];
    c.send_request(b"GET", b"http", b"a", b"/", none, true)
        .expect("send_request")
}

#[test]
fn informational_heads_are_skipped_for_the_final_one() {
    let mut c = in_memory();
    let id = get(&mut c);
    c.receive(&frame(
        0x1,
        0x4,
        id,
        &block(&[(":status", "103"), ("link", "</a>")]),
    ));
    c.receive(&frame(0x1, 0x4 | 0x1, id, &block(&[(":status", "204")])));
    match c.poll_event() {
        Some(ClientEvent::Response {
            stream_id,
            status,
            end_stream,
            ..
        }) => assert_eq!((stream_id, status, end_stream), (id, 204, true)),
        other => panic!("expected the 204, got {other:?}"),
    }
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn goaway_refuses_the_streams_above_its_last_id() {
    let mut c = in_memory();
    let ids: Vec<u32> = (0..3).map(|_| get(&mut c)).collect();
    let mut payload = ids[0].to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    c.receive(&frame(0x7, 0, 0, &payload));
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::GoAway { last_stream_id, .. }) if last_stream_id == ids[0]
    ));
    let mut refused = Vec::new();
    while let Some(ClientEvent::Reset { stream_id, reason }) = c.poll_event() {
        assert_eq!(reason, Reason::REFUSED_STREAM);
        refused.push(stream_id);
    }
    refused.sort();
    assert_eq!(refused, ids[1..]);
    assert!(!c.can_open(), "no new stream after GOAWAY");
    assert!(c.is_open(ids[0]), "the stream below the last id goes on");
}

#[test]
fn pings_and_settings_are_acknowledged() {
    let mut c = in_memory();
    c.receive(&frame(0x6, 0, 0, b"12345678"));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Ping { .. })));
    assert_eq!(c.take_output().to_vec(), frame(0x6, 0x1, 0, b"12345678"));
    // SETTINGS_MAX_CONCURRENT_STREAMS 1.
    c.receive(&frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 1]));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Settings)));
    assert_eq!(c.take_output().to_vec(), frame(0x4, 0x1, 0, &[]));
    get(&mut c);
    assert!(!c.can_open());
}

#[test]
fn protocol_errors_close_the_connection_with_goaway() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("a push promise", frame(0x5, 0x4, 1, &[0, 0, 0, 2])),
        ("DATA on a stream never opened", frame(0x0, 0, 5, b"x")),
        (
            "HEADERS on an even stream",
            frame(0x1, 0x4, 2, &block(&[(":status", "200")])),
        ),
        (
            "a window overflow",
            frame(0x8, 0, 0, &0x7fff_ffffu32.to_be_bytes()),
        ),
    ];
    for (what, bytes) in cases {
        let mut c = in_memory();
        get(&mut c);
        c.take_output();
        c.receive(&bytes);
        assert!(
            matches!(c.poll_event(), Some(ClientEvent::ConnectionError { .. })),
            "{what}"
        );
        assert!(c.is_closed(), "{what}");
        assert_eq!(c.take_output()[3], 0x7, "{what}: GOAWAY written");
    }
}

#[test]
fn a_malformed_response_resets_only_its_stream() {
    let mut c = in_memory();
    let id = get(&mut c);
    c.take_output();
    // No :status.
    c.receive(&frame(0x1, 0x4, id, &block(&[("server", "x")])));
    assert!(matches!(
        c.poll_event(),
        Some(ClientEvent::Reset { stream_id, reason }) if stream_id == id && reason == Reason::PROTOCOL_ERROR
    ));
    assert_eq!(c.take_output()[3], 0x3, "RST_STREAM written");
    // DATA beyond the declared content-length.
    let id = get(&mut c);
    c.receive(&frame(
        0x1,
        0x4,
        id,
        &block(&[(":status", "200"), ("content-length", "2")]),
    ));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Response { .. })));
    c.receive(&frame(0x0, 0x1, id, b"xyz"));
    assert!(matches!(c.poll_event(), Some(ClientEvent::Reset { .. })));
    assert!(c.can_open(), "the connection goes on");
}
