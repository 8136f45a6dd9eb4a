//! Fuzz target: weir's HTTP/2 client codec (`weir_h2::ClientConnection`, the upstream side),
//! fed a server's bytes in reads of random sizes (the first two input bytes seed them), with
//! requests opened as the upstream side opens them: a few at the start, more as responses
//! end, each with a body and some with trailers, capacity given back for response data.
//! Never panics; no event follows a connection error; a stream's data and trailers come only
//! after its response head, and only for streams the client opened; the output is whole frames,
//! each within the largest frame size a server may allow.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use weir_fuzz::{assert_whole_h2_frames, Cuts};
use weir_h2::{ClientConfig, ClientConnection, ClientEvent};

/// Opens a request as the upstream side does: a POST with a small body, trailers on every
/// other one.
fn open(client: &mut ClientConnection, opened: &mut HashSet<u32>, n: &mut u32) {
    let fields: [(&[u8], &[u8]); 2] = [(b"content-type", b"application/grpc"), (b"te", b"trailers")];
    let Ok(id) = client.send_request(b"POST", b"http", b"up", b"/svc/Call", fields, false) else {
        return;
    };
    opened.insert(id);
    *n += 1;
    let with_trailers = *n % 2 == 0;
    let _ = client.send_data(id, Bytes::from_static(b"\0\0\0\0\x05hello"), !with_trailers);
    if with_trailers {
        let _ = client.send_trailers(id, [(&b"x-t"[..], &b"1"[..])]);
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((seed, server)) = input.split_first_chunk::<2>() else {
        return;
    };
    let mut cuts = Cuts::new(u32::from(u16::from_le_bytes(*seed)));
    let mut client = ClientConnection::new(ClientConfig::default());
    let (mut opened, mut headed) = (HashSet::new(), HashSet::new());
    let mut requests = 0;
    for _ in 0..3 {
        open(&mut client, &mut opened, &mut requests);
    }
    let (mut at, mut failed) = (0, false);
    while at < server.len() {
        let n = cuts.next(server.len() - at).min(server.len() - at);
        client.receive(&server[at..at + n]);
        at += n;
        while let Some(event) = client.poll_event() {
            assert!(!failed, "an event after a connection error: {event:?}");
            match event {
                ClientEvent::Response { stream_id, end_stream, .. } => {
                    assert!(opened.contains(&stream_id), "a response on {stream_id}, never opened");
                    headed.insert(stream_id);
                    if end_stream && requests < 64 {
                        open(&mut client, &mut opened, &mut requests);
                    }
                }
                ClientEvent::Data { stream_id, data, end_stream } => {
                    assert!(headed.contains(&stream_id), "data before a head on {stream_id}");
                    client.release_capacity(stream_id, data.len());
                    if end_stream && requests < 64 {
                        open(&mut client, &mut opened, &mut requests);
                    }
                }
                ClientEvent::Trailers { stream_id, .. } => {
                    assert!(headed.contains(&stream_id), "trailers before a head on {stream_id}");
                }
                ClientEvent::ConnectionError { .. } => failed = true,
                _ => {}
            }
        }
    }
    let out = client.take_output();
    // The client's output starts with the connection preface, which is not a frame.
    let frames = out.strip_prefix(weir_h2::PREFACE).expect("the preface first");
    assert_whole_h2_frames(frames);
});
