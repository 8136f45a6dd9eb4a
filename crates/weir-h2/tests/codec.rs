//! The codec in process, fed raw frames: idle state size, zero-copy bodies, batched window
//! updates, flow control on the send side, the flood limits, GOAWAY. Each case names the rule
//! (RFC 9113 section or CVE) it checks.

mod support;

use bytes::Bytes;
use std::io::IoSlice;
use weir_h2::hpack::{Encoder, Indexing};
use weir_h2::{Config, Connection, Event, Reason, PREFACE};

const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const GOAWAY: u8 = 7;
const WINDOW_UPDATE: u8 = 8;
const CONTINUATION: u8 = 9;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    support::frame(&mut f, kind, flags, stream, payload);
    f
}

fn request_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut fields = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "t"),
    ];
    fields.extend_from_slice(extra);
    support::encode_block(&mut Encoder::new(Indexing::None, false), &fields)
}

/// Frames in the output, as (type, flags, stream, payload).
fn frames(conn: &mut Connection) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let out = conn.take_output();
    let mut at = 0;
    let mut all = Vec::new();
    while at < out.len() {
        let len = (out[at] as usize) << 16 | (out[at + 1] as usize) << 8 | out[at + 2] as usize;
        let stream = u32::from_be_bytes([out[at + 5], out[at + 6], out[at + 7], out[at + 8]]);
        all.push((
            out[at + 3],
            out[at + 4],
            stream,
            out[at + 9..at + 9 + len].to_vec(),
        ));
        at += 9 + len;
    }
    all
}

fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

/// A connection past the preface and SETTINGS exchange, its output drained.
fn connected(config: Config) -> Connection {
    let mut c = Connection::new(config);
    c.receive(PREFACE);
    c.receive(&frame(SETTINGS, 0, 0, &[]));
    assert!(matches!(events(&mut c)[..], [Event::Settings]));
    frames(&mut c);
    c
}

fn goaway_code(frames: &[(u8, u8, u32, Vec<u8>)]) -> Option<u32> {
    frames
        .iter()
        .find(|f| f.0 == GOAWAY)
        .map(|f| u32::from_be_bytes([f.3[4], f.3[5], f.3[6], f.3[7]]))
}

#[test]
fn an_idle_connection_gives_back_every_buffer() {
    let mut c = connected(Config::default());
    c.receive(&frame(
        HEADERS,
        0x5,
        1,
        &request_block("/", &[("user-agent", "test")]),
    ));
    let Some(Event::Request { stream_id: 1, .. }) = c.poll_event() else {
        panic!("request")
    };
    c.send_head(1, 200, &[("content-length", "60000")], false)
        .expect("head");
    // Within the client's default window (65,535), so the answer is written whole.
    c.send_data(1, Bytes::from(vec![b'x'; 60_000]), true)
        .expect("data");
    let mut slices = [IoSlice::new(&[]); 8];
    let n = c.output_slices(&mut slices);
    let written: usize = slices[..n].iter().map(|s| s.len()).sum();
    c.advance_output(written);
    // The read buffer as a driver holds it between reads.
    c.input();
    let busy = c.state_bytes();
    assert!(c.release_idle_buffers());
    let idle = c.state_bytes();
    println!("state while serving: {busy} bytes; idle: {idle} bytes");
    // The decoder's table is empty (literals without indexing): all that is left is the struct.
    assert!(idle < 1024, "idle state {idle} bytes");
    assert_eq!(idle, std::mem::size_of::<Connection>());
    assert!(
        busy > 16 * 1024,
        "the buffers were counted while busy: {busy}"
    );
}

#[test]
fn an_idle_connection_keeps_only_the_hpack_tables_live_entries() {
    let mut c = connected(Config::default());
    // A literal with incremental indexing (RFC 7541 §6.2.1) puts one entry in the table.
    let mut block = request_block("/", &[]);
    block.extend_from_slice(&[0x40, 3, b'x', b'-', b'a', 4, b'1', b'2', b'3', b'4']);
    c.receive(&frame(HEADERS, 0x5, 1, &block));
    assert!(matches!(c.poll_event(), Some(Event::Request { .. })));
    c.send_head(1, 204, &[] as &[(&str, &str)], true)
        .expect("head");
    c.take_output();
    assert!(c.release_idle_buffers());
    let idle = c.state_bytes();
    println!("idle with one table entry: {idle} bytes");
    assert!(idle - std::mem::size_of::<Connection>() < 64, "{idle}");
}

#[test]
fn a_busy_connection_keeps_its_buffers() {
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    assert!(matches!(
        c.poll_event(),
        Some(Event::Request {
            end_stream: false,
            ..
        })
    ));
    assert!(!c.release_idle_buffers(), "an open stream is not idle");
}

#[test]
fn data_payloads_are_slices_of_the_read_buffer() {
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    assert!(matches!(c.poll_event(), Some(Event::Request { .. })));
    c.receive(&frame(DATA, 0, 1, &[7u8; 3000]));
    let input = c.input();
    let range = input.as_ptr() as usize..input.as_ptr() as usize + input.len();
    let Some(Event::Data { data, .. }) = c.poll_event() else {
        panic!("data")
    };
    assert_eq!(data.len(), 3000);
    assert!(
        range.contains(&(data.as_ptr() as usize)),
        "not copied out of the read buffer"
    );
}

#[test]
fn large_payloads_are_written_from_the_callers_bytes() {
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    assert!(matches!(c.poll_event(), Some(Event::Request { .. })));
    c.send_head(1, 200, &[] as &[(&str, &str)], false)
        .expect("head");
    let body = Bytes::from(vec![1u8; 10_000]);
    c.send_data(1, body.clone(), true).expect("data");
    let mut slices = [IoSlice::new(&[]); 8];
    let n = c.output_slices(&mut slices);
    assert!(
        slices[..n].iter().any(|s| s.as_ptr() == body.as_ptr()),
        "the body was copied"
    );
}

#[test]
fn window_updates_go_out_when_half_the_window_is_consumed() {
    // RFC 9113 §6.9 leaves the timing to the receiver; batching saves a frame per DATA frame.
    let config = Config {
        initial_window_size: 65_536,
        connection_window_size: 1 << 20,
        ..Config::default()
    };
    let mut c = connected(config);
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    c.poll_event();
    for _ in 0..31 {
        c.receive(&frame(DATA, 0, 1, &[0u8; 1024]));
        let Some(Event::Data { data, .. }) = c.poll_event() else {
            panic!("data")
        };
        c.release_capacity(1, data.len());
    }
    assert!(
        frames(&mut c).is_empty(),
        "no update before half the window"
    );
    c.receive(&frame(DATA, 0, 1, &[0u8; 1024]));
    c.poll_event();
    c.release_capacity(1, 1024);
    let out = frames(&mut c);
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].0, out[0].2, &out[0].3[..]),
        (WINDOW_UPDATE, 1, &32_768u32.to_be_bytes()[..])
    );
}

#[test]
fn data_beyond_the_stream_window_is_a_flow_control_error() {
    // RFC 9113 §6.9.1: a sender must not exceed the window; the stream is reset.
    let config = Config {
        initial_window_size: 1000,
        ..Config::default()
    };
    let mut c = connected(config);
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    c.poll_event();
    c.receive(&frame(DATA, 0, 1, &[0u8; 1001]));
    assert!(matches!(
        c.poll_event(),
        Some(Event::StreamError {
            stream_id: 1,
            reason: Reason::FLOW_CONTROL_ERROR
        })
    ));
    let out = frames(&mut c);
    assert!(out
        .iter()
        .any(|f| f.0 == RST_STREAM && f.2 == 1 && f.3 == 3u32.to_be_bytes()));
}

#[test]
fn send_side_waits_for_the_clients_window() {
    // RFC 9113 §6.9.2: SETTINGS_INITIAL_WINDOW_SIZE bounds what the server may send first.
    let mut c = Connection::new(Config::default());
    c.receive(PREFACE);
    c.receive(&frame(SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 10]));
    events(&mut c);
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    frames(&mut c);
    c.send_head(1, 200, &[] as &[(&str, &str)], false)
        .expect("head");
    c.send_data(1, Bytes::from_static(b"0123456789abcdef"), true)
        .expect("data");
    let out = frames(&mut c);
    let data: Vec<_> = out.iter().filter(|f| f.0 == DATA).collect();
    assert_eq!(data.len(), 1);
    assert_eq!((&data[0].3[..], data[0].1), (&b"0123456789"[..], 0));
    assert_eq!(c.queued_bytes(1), 6);
    c.receive(&frame(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()));
    assert!(matches!(
        c.poll_event(),
        Some(Event::WindowUpdate { stream_id: 1 })
    ));
    let out = frames(&mut c);
    assert_eq!(
        (out[0].0, out[0].1, &out[0].3[..]),
        (DATA, 1, &b"abcdef"[..])
    );
    assert_eq!(c.open_streams(), 0);
}

#[test]
fn rapid_reset_closes_the_connection() {
    // CVE-2023-44487: streams opened and reset before any answer, past the budget.
    let config = Config {
        max_client_resets: 10,
        ..Config::default()
    };
    let mut c = connected(config);
    let mut id = 1;
    let mut closed = None;
    for _ in 0..12 {
        c.receive(&frame(HEADERS, 0x4, id, &request_block("/", &[])));
        c.receive(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        id += 2;
        for e in events(&mut c) {
            if let Event::ConnectionError { reason } = e {
                closed = Some(reason);
            }
        }
    }
    assert_eq!(closed, Some(Reason::ENHANCE_YOUR_CALM));
    assert_eq!(goaway_code(&frames(&mut c)), Some(0xb));
}

#[test]
fn resets_of_answered_streams_do_not_count_as_rapid() {
    let config = Config {
        max_client_resets: 10,
        ..Config::default()
    };
    let mut c = connected(config);
    let mut id = 1;
    for _ in 0..50 {
        // Answered streams give the budget back; a reset after the answer costs nothing.
        c.receive(&frame(HEADERS, 0x4, id, &request_block("/", &[])));
        c.poll_event();
        c.send_head(id, 200, &[] as &[(&str, &str)], true)
            .expect("head");
        c.receive(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        let e = events(&mut c);
        assert!(
            !e.iter().any(|e| matches!(e, Event::ConnectionError { .. })),
            "{e:?}"
        );
        id += 2;
    }
}

#[test]
fn a_continuation_flood_closes_the_connection() {
    // CVE-2024-27316 and its kin: endless CONTINUATION frames, here empty ones.
    let config = Config {
        max_continuation_frames: 16,
        ..Config::default()
    };
    let mut c = connected(config);
    c.receive(&frame(HEADERS, 0x1, 1, &request_block("/", &[])));
    for _ in 0..17 {
        c.receive(&frame(CONTINUATION, 0, 1, &[]));
    }
    let e = events(&mut c);
    assert!(
        matches!(
            e[..],
            [Event::ConnectionError {
                reason: Reason::ENHANCE_YOUR_CALM
            }]
        ),
        "{e:?}"
    );
}

#[test]
fn a_block_in_continuation_frames_is_one_request() {
    // RFC 9113 §6.10: the block is the concatenation of the fragments.
    let mut c = connected(Config::default());
    let block = request_block("/split", &[("x-a", "1")]);
    let (a, b) = block.split_at(7);
    c.receive(&frame(HEADERS, 0x1, 1, a));
    assert!(c.poll_event().is_none());
    c.receive(&frame(CONTINUATION, 0x4, 1, b));
    let Some(Event::Request {
        head,
        end_stream: true,
        ..
    }) = c.poll_event()
    else {
        panic!("request")
    };
    assert_eq!(head.path(), Some(&b"/split"[..]));
    assert_eq!(head.fields.get(b"x-a"), Some(&b"1"[..]));
}

#[test]
fn a_head_larger_than_the_clients_frame_size_is_split_into_continuation() {
    // RFC 9113 §4.3: a field block over SETTINGS_MAX_FRAME_SIZE goes in CONTINUATION frames.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    let big = "v".repeat(40_000);
    c.send_head(1, 200, &[("x-big", big.as_str())], true)
        .expect("head");
    let out = frames(&mut c);
    let kinds: Vec<(u8, u8)> = out.iter().map(|f| (f.0, f.1)).collect();
    assert_eq!(
        kinds,
        [(HEADERS, 0x1), (CONTINUATION, 0), (CONTINUATION, 0x4)]
    );
    assert!(out.iter().all(|f| f.3.len() <= 16_384));
}

#[test]
fn goaway_lets_open_streams_finish_and_ignores_new_ones() {
    // RFC 9113 §6.8: streams up to the last id are served; later ones are ignored.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    c.send_goaway(Reason::NO_ERROR);
    assert!(!c.is_done());
    let out = frames(&mut c);
    assert_eq!(out[0].0, GOAWAY);
    assert_eq!(&out[0].3[..4], &1u32.to_be_bytes());
    c.receive(&frame(HEADERS, 0x5, 3, &request_block("/", &[])));
    assert!(
        c.poll_event().is_none(),
        "stream 3 is above the GOAWAY's last id"
    );
    c.send_head(1, 200, &[] as &[(&str, &str)], true)
        .expect("head");
    assert!(c.is_done());
}

#[test]
fn a_bad_preface_is_a_connection_error() {
    // RFC 9113 §3.4: a bad preface is a connection error of type PROTOCOL_ERROR.
    let mut c = Connection::new(Config::default());
    frames(&mut c);
    c.receive(b"GET / HTTP/1.1\r\n\r\n");
    assert!(matches!(
        c.poll_event(),
        Some(Event::ConnectionError {
            reason: Reason::PROTOCOL_ERROR
        })
    ));
    assert_eq!(goaway_code(&frames(&mut c)), Some(1));
    assert!(c.is_done());
}

#[test]
fn frames_in_flight_after_the_servers_reset_are_ignored() {
    // RFC 9113 §5.1 "closed": after sending RST_STREAM, frames in flight must be ignored;
    // a body still arriving costs no reset budget and no RST_STREAM per frame.
    let config = Config {
        max_local_resets: 2,
        ..Config::default()
    };
    let mut c = connected(config);
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    c.poll_event();
    c.send_reset(1, Reason::CANCEL);
    frames(&mut c);
    for _ in 0..10 {
        c.receive(&frame(DATA, 0, 1, &[0u8; 100]));
    }
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    assert!(events(&mut c).is_empty());
    assert!(frames(&mut c).is_empty(), "nothing answered");
    // A stream closed the ordinary way is still an error (h2spec 5.1 closed).
    c.receive(&frame(HEADERS, 0x5, 3, &request_block("/", &[])));
    c.poll_event();
    c.send_head(3, 204, &[] as &[(&str, &str)], true)
        .expect("head");
    frames(&mut c);
    c.receive(&frame(DATA, 0, 3, &[0u8; 10]));
    assert!(events(&mut c).is_empty());
    assert!(frames(&mut c)
        .iter()
        .any(|f| f.0 == RST_STREAM && f.2 == 3 && f.3 == 5u32.to_be_bytes()));
}

#[test]
fn a_second_head_without_end_stream_resets_the_stream_and_tells_the_caller() {
    // RFC 9113 §8.1: trailers carry END_STREAM; without it the request is malformed.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    c.poll_event();
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    assert!(matches!(
        c.poll_event(),
        Some(Event::StreamError {
            stream_id: 1,
            reason: Reason::PROTOCOL_ERROR
        })
    ));
    assert_eq!(c.open_streams(), 0);
    assert!(frames(&mut c)
        .iter()
        .any(|f| f.0 == RST_STREAM && f.2 == 1 && f.3 == 1u32.to_be_bytes()));
}

#[test]
fn an_owed_table_size_update_goes_in_the_first_block_even_trailers() {
    // RFC 7541 §4.2: after the client lowers SETTINGS_HEADER_TABLE_SIZE, the first header
    // block the server sends starts with a dynamic table size update.
    let config = Config {
        encoder: Indexing::Dynamic(4096),
        ..Config::default()
    };
    let mut c = connected(config);
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    c.send_head(1, 200, &[("x-a", "1")], false).expect("head");
    frames(&mut c);
    c.receive(&frame(SETTINGS, 0, 0, &[0, 1, 0, 0, 0, 0]));
    events(&mut c);
    frames(&mut c);
    c.send_trailers(1, &[("x-t", "1")]).expect("trailers");
    let out = frames(&mut c);
    assert_eq!((out[0].0, out[0].1), (HEADERS, 0x5));
    assert_eq!(
        out[0].3[0], 0x20,
        "a size update to 0 first: {:?}",
        out[0].3
    );
}

#[test]
fn a_graceful_shutdown_waits_a_round_trip_before_the_final_goaway() {
    // RFC 9113 §6.8: first GOAWAY with 2^31-1 and a PING; the final GOAWAY after the ack
    // names the last stream the client opened meanwhile.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    c.begin_graceful_shutdown();
    let out = frames(&mut c);
    assert_eq!(
        (out[0].0, &out[0].3[..4]),
        (GOAWAY, &0x7fff_ffffu32.to_be_bytes()[..])
    );
    assert_eq!((out[1].0, out[1].1), (6, 0));
    c.receive(&frame(HEADERS, 0x5, 3, &request_block("/", &[])));
    assert!(
        matches!(c.poll_event(), Some(Event::Request { stream_id: 3, .. })),
        "still served"
    );
    c.receive(&frame(6, 1, 0, &out[1].3));
    assert!(matches!(c.poll_event(), Some(Event::Ping { .. })));
    let out = frames(&mut c);
    assert_eq!(
        (out[0].0, &out[0].3[..4]),
        (GOAWAY, &3u32.to_be_bytes()[..])
    );
    c.receive(&frame(HEADERS, 0x5, 5, &request_block("/", &[])));
    assert!(
        c.poll_event().is_none(),
        "stream 5 came after the final GOAWAY"
    );
    c.send_head(1, 204, &[] as &[(&str, &str)], true)
        .expect("head");
    c.send_head(3, 204, &[] as &[(&str, &str)], true)
        .expect("head");
    assert!(c.is_done());
}

#[test]
fn a_ping_flood_that_never_reads_the_acks_is_cut_off() {
    // CVE-2019-9512: PINGs whose acks pile up unwritten; 1000 as nghttp2's max_outbound_ack.
    let mut c = connected(Config::default());
    for _ in 0..1000 {
        c.receive(&frame(6, 0, 0, b"pingping"));
    }
    let e = events(&mut c);
    assert!(!e.iter().any(|e| matches!(e, Event::ConnectionError { .. })));
    c.receive(&frame(6, 0, 0, b"pingping"));
    assert!(matches!(
        c.poll_event(),
        Some(Event::ConnectionError {
            reason: Reason::ENHANCE_YOUR_CALM
        })
    ));
}

#[test]
fn pings_whose_acks_are_written_are_not_a_flood() {
    let mut c = connected(Config::default());
    for _ in 0..5000 {
        c.receive(&frame(6, 0, 0, b"pingping"));
        assert!(matches!(c.poll_event(), Some(Event::Ping { .. })));
        let mut slices = [IoSlice::new(&[]); 4];
        let n = c.output_slices(&mut slices);
        let len: usize = slices[..n].iter().map(|s| s.len()).sum();
        c.advance_output(len);
    }
}

#[test]
fn empty_data_frames_reach_the_caller_only_to_end_the_stream() {
    // CVE-2019-9518 (empty frames flood): an empty DATA frame carries nothing to hand out.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x4, 1, &request_block("/", &[])));
    c.poll_event();
    for _ in 0..100 {
        c.receive(&frame(DATA, 0, 1, &[]));
    }
    assert!(c.poll_event().is_none());
    c.receive(&frame(DATA, 0x1, 1, &[]));
    assert!(matches!(
        c.poll_event(),
        Some(Event::Data {
            stream_id: 1,
            end_stream: true,
            ..
        })
    ));
}

#[test]
fn a_zero_window_increment_on_a_closed_stream_is_a_stream_error() {
    // RFC 9113 §6.9: an increment of 0 is a stream error of type PROTOCOL_ERROR; h2spec 6.9/2
    // against weir's edge, whose answer completes (the stream closes) before the frame arrives.
    let mut c = connected(Config::default());
    c.receive(&frame(HEADERS, 0x5, 1, &request_block("/", &[])));
    c.poll_event();
    c.send_head(1, 204, &[] as &[(&str, &str)], true)
        .expect("head");
    frames(&mut c);
    c.receive(&frame(WINDOW_UPDATE, 0, 1, &0u32.to_be_bytes()));
    assert!(events(&mut c).is_empty());
    assert!(frames(&mut c)
        .iter()
        .any(|f| f.0 == RST_STREAM && f.2 == 1 && f.3 == 1u32.to_be_bytes()));
    // A real increment on the closed stream is ignored.
    c.receive(&frame(WINDOW_UPDATE, 0, 1, &10u32.to_be_bytes()));
    assert!(events(&mut c).is_empty());
    assert!(frames(&mut c).is_empty());
}
