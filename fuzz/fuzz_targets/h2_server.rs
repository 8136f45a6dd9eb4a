//! Fuzz target: weir's HTTP/2 server codec (`weir_h2::Connection`), the bytes a client sends
//! after the preface, fed in reads of random sizes (the first two input bytes seed them) and
//! answered as the edge answers: a head and data for each request, trailers after the
//! client's, capacity given back for its data. Never panics; no event follows a connection
//! error; a stream's events come only after its head; the output is whole frames, each within
//! the largest frame size a client may allow.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use weir_fuzz::{assert_whole_h2_frames, Cuts};
use weir_h2::{Config, Connection, Event, PREFACE};

fuzz_target!(|input: &[u8]| {
    let Some((seed, body)) = input.split_first_chunk::<2>() else {
        return;
    };
    let mut cuts = Cuts::new(u32::from(u16::from_le_bytes(*seed)));
    let mut client = PREFACE.to_vec();
    client.extend_from_slice(body);
    let mut connection = Connection::new(Config::default());
    let (mut at, mut failed) = (0, false);
    let mut opened = HashSet::new();
    while at < client.len() {
        let n = cuts.next(client.len() - at).min(client.len() - at);
        connection.receive(&client[at..at + n]);
        at += n;
        while let Some(event) = connection.poll_event() {
            assert!(!failed, "an event after a connection error: {event:?}");
            match event {
                Event::Request { stream_id, .. } | Event::HeadTooLarge { stream_id, .. } => {
                    opened.insert(stream_id);
                    let _ = connection.send_head(stream_id, 200, &[("x-b", "2")], false);
                    let _ = connection.send_data(stream_id, Bytes::from_static(b"answer"), false);
                }
                Event::Data { stream_id, data, .. } => {
                    assert!(opened.contains(&stream_id), "data before a head on {stream_id}");
                    connection.release_capacity(stream_id, data.len());
                }
                Event::Trailers { stream_id, .. } => {
                    assert!(opened.contains(&stream_id), "trailers before a head on {stream_id}");
                    let _ = connection.send_trailers(stream_id, &[("x-c", "3")]);
                }
                Event::ConnectionError { .. } => failed = true,
                _ => {}
            }
        }
    }
    assert_whole_h2_frames(&connection.take_output());
});
