//! Cost per request, in process: weir-h2 against the `h2` crate serving a GET with a 5-byte
//! answer, and the encoder's modes against each other. Ignored by default; run in a release
//! build. Nanoseconds (best of 5 rounds):
//!   cargo test --release -p weir-h2 --test bench -- --ignored --nocapture ns_per_request
//! Instructions, which a loaded machine does not blur: `bench/h2-codec-callgrind` runs
//! `one_mode` under callgrind for two request counts and divides the difference.

mod support;

use bytes::{Buf, Bytes, BytesMut};
use std::io::IoSlice;
use std::time::Instant;
use support::frame;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use weir_h2::hpack::{Encoder, Indexing};
use weir_h2::{Config, Connection, Event, PREFACE};

const REQUESTS: usize = 200_000;
/// Requests the client sends before reading the answers (h2load -m 50).
const BATCH: usize = 50;
const ROUNDS: usize = 5;

const ANSWER: [(&str, &str); 4] = [
    ("content-type", "text/plain"),
    ("content-length", "5"),
    ("date", "Thu, 26 Nov 2026 06:00:00 GMT"),
    ("server", "weir"),
];

/// The client's bytes: preface, SETTINGS, a connection window raised to the maximum, then
/// one HEADERS frame per GET (fields as h2load sends them, literal without indexing).
fn client_bytes(count: usize) -> (Vec<u8>, Vec<u8>, usize) {
    let mut prelude = PREFACE.to_vec();
    frame(&mut prelude, 4, 0, 0, &[]);
    frame(
        &mut prelude,
        8,
        0,
        0,
        &(i32::MAX as u32 - 65_535).to_be_bytes(),
    );
    let mut e = Encoder::new(Indexing::None, true);
    let block = support::encode_block(
        &mut e,
        &[
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "127.0.0.1:8080"),
            ("user-agent", "h2load nghttp2/1.64.0"),
        ],
    );
    let mut requests = Vec::new();
    for i in 0..count {
        frame(&mut requests, 1, 0x5, 1 + 2 * i as u32, &block);
    }
    let per_request = 9 + block.len();
    (prelude, requests, per_request)
}

fn answer(conn: &mut Connection, event: Event) {
    if let Event::Request { stream_id, .. } = event {
        conn.send_head(stream_id, 200, &ANSWER, false)
            .expect("head");
        conn.send_data(stream_id, Bytes::from_static(b"hello"), true)
            .expect("data");
    }
}

/// The codec alone: bytes in, events, answers, bytes out, no I/O.
fn codec_alone(config: Config) -> f64 {
    let (prelude, requests, per) = client_bytes(REQUESTS);
    let start = Instant::now();
    serve_alone(config, &prelude, &requests, per);
    start.elapsed().as_nanos() as f64 / REQUESTS as f64
}

#[inline(never)]
fn serve_alone(config: Config, prelude: &[u8], requests: &[u8], per: usize) {
    let mut conn = Connection::new(config);
    conn.receive(prelude);
    let mut written = 0;
    for batch in requests.chunks(per * BATCH) {
        conn.input().extend_from_slice(batch);
        while let Some(event) = conn.poll_event() {
            answer(&mut conn, event);
        }
        while conn.has_output() {
            let mut slices = [IoSlice::new(&[]); 16];
            let n = conn.output_slices(&mut slices);
            let len: usize = slices[..n].iter().map(|s| s.len()).sum();
            written += len;
            conn.advance_output(len);
        }
    }
    assert!(written > requests.len() / per * 20);
}

/// The client over a duplex stream: writes a batch, reads until every answer in it ended.
async fn client(mut io: DuplexStream, prelude: Vec<u8>, requests: Vec<u8>, per: usize) {
    io.write_all(&prelude).await.expect("prelude");
    let mut buf = BytesMut::with_capacity(64 * 1024);
    for batch in requests.chunks(per * BATCH) {
        io.write_all(batch).await.expect("batch");
        let mut ended = 0;
        while ended < BATCH {
            while buf.len() >= 9 {
                let len = (buf[0] as usize) << 16 | (buf[1] as usize) << 8 | buf[2] as usize;
                if buf.len() < 9 + len {
                    break;
                }
                if buf[3] == 0 && buf[4] & 1 != 0 {
                    ended += 1;
                }
                buf.advance(9 + len);
            }
            if ended < BATCH && io.read_buf(&mut buf).await.expect("read") == 0 {
                panic!("server closed");
            }
        }
    }
}

async fn codec_server(mut io: DuplexStream) {
    let mut conn = Connection::new(Config::default());
    loop {
        while let Some(event) = conn.poll_event() {
            answer(&mut conn, event);
        }
        while conn.has_output() {
            let mut slices = [IoSlice::new(&[]); 16];
            let n = conn.output_slices(&mut slices);
            let w = io.write_vectored(&slices[..n]).await.expect("write");
            conn.advance_output(w);
        }
        match io.read_buf(conn.input()).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

async fn h2_server(io: DuplexStream) {
    let mut conn = h2::server::Builder::new()
        .max_concurrent_streams(100)
        .handshake::<_, Bytes>(io)
        .await
        .expect("handshake");
    while let Some(request) = conn.accept().await {
        let Ok((_request, mut respond)) = request else {
            return;
        };
        let mut response = http::Response::builder().status(200);
        for (n, v) in ANSWER {
            response = response.header(n, v);
        }
        let mut send = respond
            .send_response(response.body(()).expect("response"), false)
            .expect("head");
        send.send_data(Bytes::from_static(b"hello"), true)
            .expect("data");
    }
}

fn over_duplex(h2_crate: bool) -> f64 {
    let (prelude, requests, per) = client_bytes(REQUESTS);
    let start = Instant::now();
    serve_duplex(h2_crate, prelude, requests, per);
    start.elapsed().as_nanos() as f64 / REQUESTS as f64
}

#[inline(never)]
fn serve_duplex(h2_crate: bool, prelude: Vec<u8>, requests: Vec<u8>, per: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (a, b) = tokio::io::duplex(256 * 1024);
        let server = if h2_crate {
            tokio::spawn(h2_server(b))
        } else {
            tokio::spawn(codec_server(b))
        };
        client(a, prelude, requests, per).await;
        server.abort();
    })
}

fn best(f: impl Fn() -> f64) -> f64 {
    (0..ROUNDS).map(|_| f()).fold(f64::MAX, f64::min)
}

#[test]
#[ignore = "a benchmark: run in a release build with --ignored"]
fn ns_per_request_weir_h2_against_the_h2_crate() {
    let plain = best(|| codec_alone(Config::default()));
    let huffman = best(|| {
        codec_alone(Config {
            huffman: true,
            ..Config::default()
        })
    });
    let dynamic = best(|| {
        codec_alone(Config {
            encoder: Indexing::Dynamic(4096),
            ..Config::default()
        })
    });
    let codec_io = best(|| over_duplex(false));
    let h2_io = best(|| over_duplex(true));
    println!("weir-h2 alone, literals without indexing: {plain:.0} ns/request");
    println!("weir-h2 alone, literals without indexing, Huffman: {huffman:.0} ns/request");
    println!("weir-h2 alone, dynamic table (4 KiB): {dynamic:.0} ns/request");
    println!("weir-h2 over a tokio duplex stream: {codec_io:.0} ns/request");
    println!("h2 crate over a tokio duplex stream: {h2_io:.0} ns/request");
    println!("ratio weir-h2 / h2 (over duplex): {:.2}", codec_io / h2_io);
}

/// One mode, once, for callgrind: `WEIR_H2_BENCH_MODE` (plain, huffman, dynamic, duplex,
/// h2-duplex) and `WEIR_H2_BENCH_REQUESTS`.
#[test]
#[ignore = "run under callgrind by bench/h2-codec-callgrind"]
fn one_mode() {
    let mode = std::env::var("WEIR_H2_BENCH_MODE").unwrap_or_else(|_| "plain".into());
    let count = std::env::var("WEIR_H2_BENCH_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let (prelude, requests, per) = client_bytes(count);
    match mode.as_str() {
        "plain" => serve_alone(Config::default(), &prelude, &requests, per),
        "huffman" => serve_alone(
            Config {
                huffman: true,
                ..Config::default()
            },
            &prelude,
            &requests,
            per,
        ),
        "dynamic" => serve_alone(
            Config {
                encoder: Indexing::Dynamic(4096),
                ..Config::default()
            },
            &prelude,
            &requests,
            per,
        ),
        "duplex" => serve_duplex(false, prelude, requests, per),
        "h2-duplex" => serve_duplex(true, prelude, requests, per),
        other => panic!("unknown mode {other}"),
    }
}
