//! `weir-grpc-upstream ADDR`: the gRPC server of the `grpc` benchmark (cleartext HTTP/2 with
//! prior knowledge). A call to a method named `Stream` (`/bench.Echo/Stream`) is answered as a
//! server-streaming call: the request's message echoed back [`STREAMED_MESSAGES`] times, each
//! in a DATA frame of its own; every other call like a unary one: the message echoed once.
//! Then `grpc-status: 0` in trailers. One thread, so it can be pinned to the load cores beside
//! the client.
#![forbid(unsafe_code)]

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::RecvStream;
use tokio::net::{TcpListener, TcpStream};

/// The messages of a server-streaming answer.
const STREAMED_MESSAGES: usize = 1000;

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:50051".to_string());
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("weir-grpc-upstream: {e}");
            std::process::exit(1);
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let listener = match TcpListener::bind(&addr).await {
            Ok(listener) => listener,
            Err(e) => {
                eprintln!("weir-grpc-upstream: cannot listen on {addr}: {e}");
                std::process::exit(1);
            }
        };
        eprintln!("weir-grpc-upstream: listening on {addr}");
        loop {
            if let Ok((io, _)) = listener.accept().await {
                let _ = io.set_nodelay(true);
                tokio::task::spawn_local(serve(io));
            }
        }
    });
}

async fn serve(io: TcpStream) {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(1000)
        .initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20);
    let Ok(mut connection) = builder.handshake::<TcpStream, Bytes>(io).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        let streaming = request.uri().path().ends_with("/Stream");
        tokio::task::spawn_local(answer(request.into_body(), respond, streaming));
    }
}

/// Reads the request's message and echoes it as the answer (or [`STREAMED_MESSAGES`] times),
/// with an OK status in trailers.
async fn answer(mut body: RecvStream, mut respond: SendResponse<Bytes>, streaming: bool) {
    let mut message = BytesMut::new();
    while let Some(Ok(data)) = body.data().await {
        let _ = body.flow_control().release_capacity(data.len());
        message.extend_from_slice(&data);
    }
    let mut head = http::Response::new(());
    head.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    let Ok(mut send) = respond.send_response(head, false) else {
        return;
    };
    let message = message.freeze();
    let times = if streaming { STREAMED_MESSAGES } else { 1 };
    for _ in 0..times {
        let _ = send.send_data(message.clone(), false);
    }
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}
