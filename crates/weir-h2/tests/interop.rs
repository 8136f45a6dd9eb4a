//! weir-h2 as a server on a real TCP socket against real clients: the `h2` crate's client
//! and Debian's nghttp and h2load (nghttp2-client, installed by scripts/test).

mod support;

use bytes::Bytes;
use std::process::Command;
use support::{pattern, Server};
use tokio::net::TcpStream;
use weir_h2::{Config, Indexing};

type Client = h2::client::SendRequest<Bytes>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

async fn connect(server: &Server) -> Client {
    let sock = TcpStream::connect(server.addr).await.expect("connect");
    let (client, connection) = h2::client::handshake(sock).await.expect("handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

fn request(method: &str, path: &str) -> http::Request<()> {
    http::Request::builder()
        .method(method)
        .uri(format!("http://test{path}"))
        .body(())
        .expect("request")
}

/// Reads a whole body, giving the window back as it goes; returns it and the trailers.
async fn body_of(response: http::Response<h2::RecvStream>) -> (Vec<u8>, Option<http::HeaderMap>) {
    let mut body = response.into_body();
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("body chunk");
        body.flow_control()
            .release_capacity(chunk.len())
            .expect("release");
        all.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.expect("trailers");
    (all, trailers)
}

async fn get(client: &mut Client, path: &str) -> (u16, Vec<u8>) {
    let (response, _) = client
        .send_request(request("GET", path), true)
        .expect("send");
    let response = response.await.expect("response");
    let status = response.status().as_u16();
    (status, body_of(response).await.0)
}

#[test]
fn h2_client_many_concurrent_streams_on_one_connection() {
    let server = Server::start(Config::default());
    runtime().block_on(async {
        let client = connect(&server).await;
        // 300 streams at once: more than the 100 the server allows, so the client queues.
        let mut tasks = Vec::new();
        for _ in 0..300 {
            let mut c = client.clone();
            tasks.push(tokio::spawn(async move { get(&mut c, "/small").await }));
        }
        for t in tasks {
            assert_eq!(t.await.expect("task"), (200, b"hello".to_vec()));
        }
    });
}

#[test]
fn h2_client_large_bodies_both_ways_under_flow_control() {
    // Small windows make flow control work hard: 64 KiB per stream, 128 KiB per connection.
    let config = Config {
        initial_window_size: 65_535,
        connection_window_size: 128 * 1024,
        ..Config::default()
    };
    let server = Server::start(config);
    runtime().block_on(async {
        let mut client = connect(&server).await;
        let (status, body) = get(&mut client, "/big/3000000").await;
        assert_eq!(status, 200);
        assert!(body == pattern(3_000_000), "the 3 MB answer arrived intact");

        let upload = Bytes::from(pattern(5_000_000));
        let (response, mut send) = client
            .send_request(request("POST", "/echo"), false)
            .expect("send");
        let sender = tokio::spawn({
            let upload = upload.clone();
            async move {
                let mut at = 0;
                while at < upload.len() {
                    send.reserve_capacity(64 * 1024);
                    let room = std::future::poll_fn(|cx| send.poll_capacity(cx))
                        .await
                        .expect("capacity")
                        .expect("capacity");
                    let n = room.min(upload.len() - at);
                    send.send_data(upload.slice(at..at + n), false)
                        .expect("data");
                    at += n;
                }
                send.send_data(Bytes::new(), true).expect("end");
            }
        });
        let response = response.await.expect("response");
        let (echoed, trailers) = body_of(response).await;
        sender.await.expect("sender");
        assert_eq!(echoed.len(), upload.len());
        assert!(echoed == upload, "the 5 MB echo matches");
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["x-body-bytes"], "5000000");
    });
}

#[test]
fn h2_client_trailers_both_ways() {
    let server = Server::start(Config::default());
    runtime().block_on(async {
        let mut client = connect(&server).await;
        let (response, mut send) = client
            .send_request(request("POST", "/echo"), false)
            .expect("send");
        send.send_data(Bytes::from_static(b"abc"), false)
            .expect("data");
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-trailer", "yes".parse().expect("value"));
        send.send_trailers(trailers).expect("trailers");
        let (body, trailers) = body_of(response.await.expect("response")).await;
        assert_eq!(body, b"abc");
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["x-got-trailer"], "yes");
        assert_eq!(trailers["x-body-bytes"], "3");

        let (response, _) = client
            .send_request(request("GET", "/trailers"), true)
            .expect("send");
        let (body, trailers) = body_of(response.await.expect("response")).await;
        assert_eq!(body, b"t");
        assert_eq!(trailers.expect("trailers")["grpc-status"], "0");
    });
}

#[test]
fn h2_client_reset_stream_leaves_the_connection_serving() {
    let server = Server::start(Config::default());
    runtime().block_on(async {
        let mut client = connect(&server).await;
        for _ in 0..10 {
            let (_response, mut send) = client
                .send_request(request("POST", "/never"), false)
                .expect("send");
            send.send_reset(h2::Reason::CANCEL);
        }
        assert_eq!(get(&mut client, "/small").await, (200, b"hello".to_vec()));
    });
}

#[test]
fn h2_client_head_over_the_cap_is_answered_431() {
    let server = Server::start(Config {
        max_header_list_size: 8 * 1024,
        ..Config::default()
    });
    runtime().block_on(async {
        let mut client = connect(&server).await;
        let mut big = request("GET", "/small");
        big.headers_mut()
            .insert("x-big", "a".repeat(12 * 1024).parse().expect("value"));
        let (response, _) = client.send_request(big, true).expect("send");
        assert_eq!(response.await.expect("response").status(), 431);
        // The HPACK state stayed in step: the next request is served.
        assert_eq!(get(&mut client, "/small").await, (200, b"hello".to_vec()));
    });
}

fn run(command: &mut Command) -> (bool, String, String) {
    let out = command.output().unwrap_or_else(|e| {
        panic!("{command:?}: {e} (nghttp2-client is installed by scripts/test)")
    });
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn nghttp_get_upload_trailers_and_a_head_over_the_cap() {
    let server = Server::start(Config {
        max_header_list_size: 8 * 1024,
        ..Config::default()
    });
    let (ok, out, err) = run(Command::new("nghttp").arg(server.url("/small")));
    assert!(ok, "{err}");
    assert_eq!(out, "hello");

    // 2 MB up and back, with a request trailer.
    let dir = std::env::temp_dir().join(format!("weir-h2-nghttp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("upload");
    std::fs::write(&file, pattern(2_000_000)).expect("write");
    let out = Command::new("nghttp")
        .args([
            "-d",
            file.to_str().expect("path"),
            "--trailer",
            "x-trailer: nghttp",
        ])
        .arg(server.url("/echo"))
        .output()
        .expect("nghttp");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == pattern(2_000_000),
        "echo of {} bytes",
        out.stdout.len()
    );
    let (ok, out, err) = run(Command::new("nghttp")
        .args([
            "-v",
            "-n",
            "-d",
            file.to_str().expect("path"),
            "--trailer",
            "x-trailer: nghttp",
        ])
        .arg(server.url("/echo")));
    assert!(ok, "{err}");
    assert!(out.contains("x-got-trailer: nghttp"), "{out}");
    assert!(out.contains("x-body-bytes: 2000000"), "{out}");
    std::fs::remove_dir_all(&dir).ok();

    let big = format!("x-big: {}", "b".repeat(12 * 1024));
    let (ok, out, err) = run(Command::new("nghttp")
        .args(["-v", "-n", "-H", &big])
        .arg(server.url("/small")));
    assert!(ok, "{err}");
    assert!(out.contains(":status: 431"), "{out}");
}

#[test]
fn h2load_many_concurrent_streams_all_succeed() {
    let server = Server::start(Config::default());
    let (ok, out, err) = run(Command::new("h2load")
        .args(["-n", "5000", "-c", "4", "-m", "100"])
        .arg(server.url("/small")));
    assert!(ok, "{err}");
    assert!(out.contains("5000 succeeded, 0 failed, 0 errored"), "{out}");
    assert!(out.contains("status codes: 5000 2xx"), "{out}");

    let (ok, out, err) = run(Command::new("h2load")
        .args(["-n", "200", "-c", "2", "-m", "10"])
        .arg(server.url("/big/200000")));
    assert!(ok, "{err}");
    assert!(out.contains("200 succeeded, 0 failed"), "{out}");
}

#[test]
fn every_encoder_mode_is_decoded_by_the_h2_client_and_nghttp() {
    // Huffman (RFC 7541 §5.2) and the dynamic table (§2.3.2) are options: each must keep the
    // client's table in step across answers on one connection.
    for (encoder, huffman) in [
        (Indexing::None, true),
        (Indexing::Dynamic(4096), false),
        (Indexing::Dynamic(256), true),
    ] {
        let server = Server::start(Config {
            encoder,
            huffman,
            ..Config::default()
        });
        runtime().block_on(async {
            let mut client = connect(&server).await;
            for path in ["/small", "/big/10", "/small", "/nothing", "/small"] {
                let (response, _) = client
                    .send_request(request("GET", path), true)
                    .expect("send");
                let response = response.await.expect("response");
                let head = response.headers().clone();
                let status = response.status().as_u16();
                let (body, _) = body_of(response).await;
                match path {
                    "/small" => {
                        assert_eq!((status, &body[..]), (200, &b"hello"[..]));
                        assert_eq!(head["content-type"], "text/plain", "{encoder:?} {huffman}");
                        assert_eq!(head["content-length"], "5");
                    }
                    "/big/10" => assert_eq!(
                        (status, &head["content-length"]),
                        (200, &"10".parse::<http::HeaderValue>().expect("value"))
                    ),
                    _ => assert_eq!(status, 404),
                }
            }
        });
        let (ok, out, err) = run(Command::new("nghttp")
            .args(["-v", "-n"])
            .arg(server.url("/small"))
            .arg(server.url("/big/10"))
            .arg(server.url("/")));
        assert!(ok, "{err}");
        assert_eq!(out.matches("content-type: text/plain").count(), 2, "{out}");
        assert_eq!(out.matches("content-length: 10").count(), 1, "{out}");
    }
}

#[test]
fn h2_client_rapid_reset_is_cut_off_with_enhance_your_calm() {
    // CVE-2023-44487: a client that opens and resets streams without waiting for answers.
    let server = Server::start(Config::default());
    runtime().block_on(async {
        let sock = TcpStream::connect(server.addr).await.expect("connect");
        let (mut client, connection) = h2::client::handshake(sock).await.expect("handshake");
        let driver = tokio::spawn(connection);
        for _ in 0..200 {
            let Ok((_response, mut send)) = client.send_request(request("POST", "/never"), false)
            else {
                break;
            };
            send.send_reset(h2::Reason::CANCEL);
            tokio::task::yield_now().await;
        }
        let error = tokio::time::timeout(std::time::Duration::from_secs(10), driver)
            .await
            .expect("the server closes the connection")
            .expect("driver task")
            .expect_err("a connection error");
        assert_eq!(
            error.reason(),
            Some(h2::Reason::ENHANCE_YOUR_CALM),
            "{error}"
        );
    });
}
