//! `weir-grpc-upstream ADDR`: the gRPC server of the `grpc` benchmark (cleartext HTTP/2 with
//! prior knowledge). Every call, whatever its method, is answered like a unary gRPC call: the
//! request's message echoed back, then `grpc-status: 0` in trailers. One thread, so it can be
//! pinned to the load cores beside the client.
#![forbid(unsafe_code)]

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::RecvStream;
use tokio::net::{TcpListener, TcpStream};

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
        tokio::task::spawn_local(answer(request.into_body(), respond));
    }
}

/// Reads the request's message and echoes it as the answer, with an OK status in trailers.
async fn answer(mut body: RecvStream, mut respond: SendResponse<Bytes>) {
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
    let _ = send.send_data(message.freeze(), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = send.send_trailers(trailers);
}
