//! The server side of one HTTP/2 connection (RFC 9113), sans-IO: the caller reads the socket
//! into `input()`, takes events from `poll_event()`, answers with `send_*`, and writes what
//! `output_slices()` shows. Owns the stream states, both directions' flow control, the limits
//! (concurrent streams, header list size, CONTINUATION flood, rapid reset) and GOAWAY.

use crate::frame::{self, Head, Reason};
use crate::head::{Collector, HeaderBlock, Refusal, RequestHead};
use crate::hpack::{Decoder, Encoder, Indexing};
use crate::output::Output;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the server announces and enforces.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub max_concurrent_streams: u32,
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE). Below 65,535 a client
    /// that sends before it reads our SETTINGS may overrun it (§6.9.2 allows it that much).
    pub initial_window_size: u32,
    /// The connection's receive window, raised from 65,535 by a WINDOW_UPDATE at the start.
    pub connection_window_size: u32,
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE; a larger request head is handed out as
    /// `Event::HeadTooLarge` for the caller to answer 431.
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the decoder's dynamic table.
    pub header_table_size: u32,
    /// Streams the client may reset before the server answered them, net of the answers it
    /// completed, before the connection is closed with ENHANCE_YOUR_CALM (CVE-2023-44487).
    pub max_client_resets: u32,
    /// Streams the server may reset for the client's errors before closing the connection.
    pub max_local_resets: u32,
    /// CONTINUATION frames after one HEADERS (the CONTINUATION flood, CVE-2024-27316).
    pub max_continuation_frames: u32,
    pub encoder: Indexing,
    pub huffman: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_streams: 100,
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 32 * 1024,
            header_table_size: 4096,
            max_client_resets: 64,
            max_local_resets: 256,
            max_continuation_frames: 64,
            encoder: Indexing::None,
            huffman: false,
        }
    }
}

/// What the client did, in the order it happened.
#[derive(Debug)]
pub enum Event {
    /// A new stream and its request head; `end_stream`: no body follows.
    Request {
        stream_id: u32,
        head: RequestHead,
        end_stream: bool,
    },
    /// A new stream whose head exceeded `max_header_list_size`; the caller answers (431).
    HeadTooLarge { stream_id: u32, end_stream: bool },
    /// Body bytes: a slice of the read buffer. Give the window back with `release_capacity`,
    /// also for bytes the caller drops (the connection's window counts them too).
    Data {
        stream_id: u32,
        data: Bytes,
        end_stream: bool,
    },
    /// The request's trailers; the request is complete.
    Trailers { stream_id: u32, fields: HeaderBlock },
    /// The client reset the stream.
    Reset { stream_id: u32, reason: Reason },
    /// The server reset the stream for the client's error (malformed trailers or body,
    /// flow control); the caller drops it.
    StreamError { stream_id: u32, reason: Reason },
    /// The client's SETTINGS were applied and acknowledged.
    Settings,
    /// A PING, already answered.
    Ping { payload: [u8; 8] },
    /// The client will open no stream above `last_stream_id`.
    GoAway {
        last_stream_id: u32,
        reason: Reason,
        debug: Bytes,
    },
    /// Send window opened on a stream (0: the connection); queued data went out.
    WindowUpdate { stream_id: u32 },
    /// A connection error: GOAWAY is in the output; flush it and close.
    ConnectionError { reason: Reason },
}

/// Where an open stream stands, for a caller deciding how to end it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamProgress {
    /// The client sent END_STREAM.
    pub request_ended: bool,
    /// The caller ended its answer (it may still wait for the client's window).
    pub answer_queued: bool,
    /// The answer's END_STREAM is in the output.
    pub answer_sent: bool,
}

/// A misuse of the send side by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// No such open stream (never opened, closed, or reset).
    UnknownStream,
    /// Its head was sent already, or not yet (for data and trailers), or it is ended.
    WrongState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Preface,
    FirstSettings,
    Open,
    /// After a connection error: nothing more is read.
    Closed,
}

struct Stream {
    id: u32,
    /// The client sent END_STREAM (half-closed remote).
    recv_closed: bool,
    head_sent: bool,
    /// END_STREAM queued by the caller (sent once `pending` drains).
    send_ended: bool,
    /// END_STREAM written to the output.
    send_closed: bool,
    send_window: i64,
    recv_window: i64,
    /// Bytes the caller released that the client has not been given back yet.
    recv_unacked: u32,
    /// Body bytes still allowed by content-length (§8.1.1).
    content_left: Option<u64>,
    pending: VecDeque<Bytes>,
    /// Trailers written once `pending` drains: a whole HEADERS block, encoded without the
    /// dynamic table so it does not depend on when it goes out.
    pending_trailers: Option<Bytes>,
}

/// What a header block opens or closes, decided at its HEADERS frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    NewStream,
    Trailers,
    /// Decode (to keep HPACK in step), then reset the stream with this code.
    Refuse(Reason),
    /// Decode only: a stream above our GOAWAY's last id (§6.8).
    Ignore,
}

/// A header block awaiting CONTINUATION frames.
struct PartialBlock {
    stream_id: u32,
    end_stream: bool,
    target: Target,
    fragments: BytesMut,
    continuations: u32,
}

pub struct Connection {
    config: Config,
    phase: Phase,
    input: BytesMut,
    output: Output,
    streams: Vec<Stream>,
    decoder: Decoder,
    encoder: Encoder,
    block: Option<Box<PartialBlock>>,
    peer_max_frame_size: u32,
    peer_initial_window: i64,
    send_window: i64,
    recv_window: i64,
    recv_unacked: u32,
    last_client_stream: u32,
    /// The last stream id of the GOAWAY we sent, if any.
    goaway_sent: Option<u32>,
    client_reset_budget: u32,
    local_reset_budget: u32,
    /// The last streams the server reset: frames the client sent before it saw the reset
    /// are ignored (§5.1, "closed"), not answered as errors.
    recent_local_resets: [u32; RECENT_RESETS],
    next_reset_slot: usize,
    /// A graceful shutdown's first GOAWAY went out; its PING's ack brings the final one.
    shutdown_ping_pending: bool,
    /// Replies the client's frames caused that the caller has not written yet.
    unwritten_replies: u16,
}

/// nghttp2's limit of queued acknowledgements (its `max_outbound_ack`, 1000).
const MAX_UNWRITTEN_REPLIES: u16 = 1000;

/// The payload of the PING a graceful shutdown measures its round trip with.
const SHUTDOWN_PING: [u8; 8] = *b"weir-bye";

const RECENT_RESETS: usize = 4;

enum Step {
    Event(Event),
    Nothing,
}

type ConnResult = Result<Step, Reason>;

impl Connection {
    /// A server connection; our SETTINGS and the connection window's update are in the output.
    pub fn new(config: Config) -> Connection {
        let mut c = Connection {
            config,
            phase: Phase::Preface,
            input: BytesMut::new(),
            output: Output::default(),
            streams: Vec::new(),
            decoder: Decoder::new(config.header_table_size as usize),
            encoder: Encoder::new(config.encoder, config.huffman),
            block: None,
            peer_max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            send_window: frame::DEFAULT_WINDOW as i64,
            recv_window: frame::DEFAULT_WINDOW as i64,
            recv_unacked: 0,
            last_client_stream: 0,
            goaway_sent: None,
            client_reset_budget: config.max_client_resets,
            local_reset_budget: config.max_local_resets,
            recent_local_resets: [0; RECENT_RESETS],
            next_reset_slot: 0,
            shutdown_ping_pending: false,
            unwritten_replies: 0,
        };
        frame::write_settings(
            &mut c.output.tail,
            &[
                (frame::SETTINGS_HEADER_TABLE_SIZE, config.header_table_size),
                (frame::SETTINGS_ENABLE_PUSH, 0),
                (
                    frame::SETTINGS_MAX_CONCURRENT_STREAMS,
                    config.max_concurrent_streams,
                ),
                (
                    frame::SETTINGS_INITIAL_WINDOW_SIZE,
                    config.initial_window_size,
                ),
                (frame::SETTINGS_MAX_FRAME_SIZE, config.max_frame_size),
                (
                    frame::SETTINGS_MAX_HEADER_LIST_SIZE,
                    config.max_header_list_size,
                ),
            ],
        );
        let raise = config
            .connection_window_size
            .saturating_sub(frame::DEFAULT_WINDOW);
        if raise > 0 {
            frame::write_window_update(&mut c.output.tail, 0, raise);
            c.recv_window += raise as i64;
        }
        c
    }

    // ---- input ----

    /// The read buffer, with room for a read worth a syscall: read the socket into it.
    pub fn input(&mut self) -> &mut BytesMut {
        if self.input.capacity() - self.input.len() < 1024 {
            self.input.reserve(16 * 1024);
        }
        &mut self.input
    }

    /// Copies received bytes in (for callers that do not read into `input()`).
    pub fn receive(&mut self, bytes: &[u8]) {
        self.input.extend_from_slice(bytes);
    }

    /// The next event, or `None` once the input holds no whole frame.
    pub fn poll_event(&mut self) -> Option<Event> {
        loop {
            let step = match self.phase {
                Phase::Closed => return None,
                Phase::Preface => {
                    let have = self.input.len().min(PREFACE.len());
                    if self.input[..have] != PREFACE[..have] {
                        Err(Reason::PROTOCOL_ERROR)
                    } else if have < PREFACE.len() {
                        return None;
                    } else {
                        self.input.advance(PREFACE.len());
                        self.phase = Phase::FirstSettings;
                        Ok(Step::Nothing)
                    }
                }
                _ => {
                    if self.input.len() < frame::HEADER_LEN {
                        return None;
                    }
                    let head = Head::parse(&self.input[..frame::HEADER_LEN]);
                    if head.len > self.config.max_frame_size as usize {
                        // §4.2: a frame above our SETTINGS_MAX_FRAME_SIZE.
                        Err(Reason::FRAME_SIZE_ERROR)
                    } else if self.input.len() < frame::HEADER_LEN + head.len {
                        let want = frame::HEADER_LEN + head.len - self.input.len();
                        self.input.reserve(want);
                        return None;
                    } else {
                        let mut payload =
                            self.input.split_to(frame::HEADER_LEN + head.len).freeze();
                        payload.advance(frame::HEADER_LEN);
                        self.on_frame(head, payload)
                    }
                }
            };
            match step {
                Ok(Step::Nothing) => continue,
                Ok(Step::Event(e)) => return Some(e),
                Err(reason) => return Some(self.connection_error(reason)),
            }
        }
    }

    fn connection_error(&mut self, reason: Reason) -> Event {
        frame::write_goaway(&mut self.output.tail, self.last_client_stream, reason);
        self.goaway_sent = Some(self.last_client_stream);
        self.phase = Phase::Closed;
        self.input = BytesMut::new();
        self.streams.clear();
        self.block = None;
        Event::ConnectionError { reason }
    }

    fn on_frame(&mut self, head: Head, payload: Bytes) -> ConnResult {
        if self.phase == Phase::FirstSettings {
            // §3.4: the client preface ends with a SETTINGS frame.
            if head.kind != frame::SETTINGS || head.flags & frame::ACK != 0 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.phase = Phase::Open;
        }
        if let Some(block) = &self.block {
            // §6.10: nothing may come between HEADERS and its last CONTINUATION.
            if head.kind != frame::CONTINUATION || head.stream_id != block.stream_id {
                return Err(Reason::PROTOCOL_ERROR);
            }
        }
        match head.kind {
            frame::DATA => self.on_data(head, payload),
            frame::HEADERS => self.on_headers(head, payload),
            frame::PRIORITY => self.on_priority(head, &payload),
            frame::RST_STREAM => self.on_rst_stream(head, &payload),
            frame::SETTINGS => self.on_settings(head, &payload),
            // §8.4: a client cannot push.
            frame::PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            frame::PING => self.on_ping(head, &payload),
            frame::GOAWAY => self.on_goaway(head, payload),
            frame::WINDOW_UPDATE => self.on_window_update(head, &payload),
            frame::CONTINUATION => self.on_continuation(head, &payload),
            // §4.1: unknown types are ignored.
            _ => Ok(Step::Nothing),
        }
    }

    fn stream_index(&self, id: u32) -> Option<usize> {
        self.streams.iter().position(|s| s.id == id)
    }

    /// §5.1: a client stream id never used yet.
    fn is_idle(&self, id: u32) -> bool {
        id > self.last_client_stream
    }

    fn on_data(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        let id = head.stream_id;
        if id == 0 || self.is_idle(id) {
            // §6.1: not on stream 0; §5.1: not on an idle stream.
            return Err(Reason::PROTOCOL_ERROR);
        }
        let frame_len = head.len as i64;
        self.recv_window -= frame_len;
        if self.recv_window < 0 {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        frame::unpad(&head, &mut payload)?;
        let padding = head.len - payload.len();
        let end_stream = head.flags & frame::END_STREAM != 0;
        let Some(i) = self.stream_index(id) else {
            // §5.1 closed: STREAM_CLOSED, unless the server reset it and this was in flight.
            // The bytes count against the connection window either way.
            self.give_back_connection(head.len as u32);
            if !self.recent_local_resets.contains(&id) {
                self.count_reply()?;
                frame::write_rst_stream(&mut self.output.tail, id, Reason::STREAM_CLOSED);
            }
            return Ok(Step::Nothing);
        };
        if self.streams[i].recv_closed {
            self.give_back_connection(head.len as u32);
            return self.reset_known(i, Reason::STREAM_CLOSED);
        }
        let s = &mut self.streams[i];
        s.recv_window -= frame_len;
        if s.recv_window < 0 {
            self.give_back_connection(head.len as u32);
            return self.reset_known(i, Reason::FLOW_CONTROL_ERROR);
        }
        // §8.1.1: DATA beyond content-length, or short of it at END_STREAM, is malformed.
        if let Some(left) = s.content_left {
            let len = payload.len() as u64;
            if len > left || (end_stream && len != left) {
                self.give_back_connection(head.len as u32);
                return self.reset_known(i, Reason::PROTOCOL_ERROR);
            }
            s.content_left = Some(left - len);
        }
        if end_stream {
            s.recv_closed = true;
        }
        if padding > 0 {
            self.release_capacity(id, padding);
        }
        if end_stream {
            self.remove_if_done(i);
        } else if payload.is_empty() {
            // Nothing for the caller: an empty frame wakes no one (CVE-2019-9518).
            return Ok(Step::Nothing);
        }
        Ok(Step::Event(Event::Data {
            stream_id: id,
            data: payload,
            end_stream,
        }))
    }

    fn on_headers(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        let id = head.stream_id;
        if id == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        frame::unpad(&head, &mut payload)?;
        let mut target = None;
        if head.flags & frame::PRIORITY_FLAG != 0 {
            if payload.len() < 5 {
                return Err(Reason::FRAME_SIZE_ERROR);
            }
            let depends_on =
                u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
            payload.advance(5);
            if depends_on == id {
                // §5.3.1: a stream cannot depend on itself.
                target = Some(Target::Refuse(Reason::PROTOCOL_ERROR));
            }
        }
        let end_stream = head.flags & frame::END_STREAM != 0;
        let target = match self.stream_index(id) {
            Some(i) if self.streams[i].recv_closed => Target::Refuse(Reason::STREAM_CLOSED),
            // §8.1: trailers end the stream.
            Some(_) if !end_stream => Target::Refuse(Reason::PROTOCOL_ERROR),
            Some(_) => target.unwrap_or(Target::Trailers),
            None if id % 2 == 0 => return Err(Reason::PROTOCOL_ERROR), // §5.1.1
            // §5.1: HEADERS in flight when the server reset the stream: decoded, ignored.
            None if self.recent_local_resets.contains(&id) => Target::Ignore,
            // §5.1: HEADERS on a closed stream.
            None if !self.is_idle(id) => return Err(Reason::STREAM_CLOSED),
            None => {
                self.last_client_stream = id;
                match target {
                    Some(t) => t,
                    None if self.goaway_sent.is_some_and(|last| id > last) => Target::Ignore,
                    // §5.1.2: above our SETTINGS_MAX_CONCURRENT_STREAMS.
                    None if self.streams.len() >= self.config.max_concurrent_streams as usize => {
                        Target::Refuse(Reason::REFUSED_STREAM)
                    }
                    None => Target::NewStream,
                }
            }
        };
        if head.flags & frame::END_HEADERS != 0 {
            return self.on_header_block(id, end_stream, target, &payload);
        }
        let mut fragments = BytesMut::with_capacity(payload.len() * 2);
        fragments.extend_from_slice(&payload);
        self.block = Some(Box::new(PartialBlock {
            stream_id: id,
            end_stream,
            target,
            fragments,
            continuations: 0,
        }));
        Ok(Step::Nothing)
    }

    fn on_continuation(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let Some(block) = self.block.as_mut() else {
            // §6.10: CONTINUATION without HEADERS before it.
            return Err(Reason::PROTOCOL_ERROR);
        };
        block.continuations += 1;
        block.fragments.extend_from_slice(payload);
        // The block may compress (Huffman, 5 bits a byte at best) but is never far larger
        // than the list it encodes: twice the cap is a client flooding, not a big head.
        let raw_limit = 2 * self.config.max_header_list_size as usize + 1024;
        if block.continuations > self.config.max_continuation_frames
            || block.fragments.len() > raw_limit
        {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        if head.flags & frame::END_HEADERS == 0 {
            return Ok(Step::Nothing);
        }
        let Some(block) = self.block.take() else {
            return Ok(Step::Nothing);
        };
        self.on_header_block(
            block.stream_id,
            block.end_stream,
            block.target,
            &block.fragments,
        )
    }

    fn on_header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        target: Target,
        block: &[u8],
    ) -> ConnResult {
        let cap = self.config.max_header_list_size as usize;
        let mut collector = Collector::new(cap, block.len(), target == Target::Trailers);
        // Every block is decoded, even one refused, so the HPACK table stays in step (§4.3).
        self.decoder
            .decode(block, |n, v| collector.add(n, v))
            .map_err(|_| Reason::COMPRESSION_ERROR)?;
        match target {
            Target::Ignore => Ok(Step::Nothing),
            Target::Refuse(reason) => self.stream_error(id, reason),
            Target::NewStream => {
                let head = collector.finish_request();
                let content_left = match &head {
                    Ok(h) => h.content_length,
                    Err(_) => None,
                };
                if matches!(head, Err(Refusal::Malformed)) {
                    return self.stream_error(id, Reason::PROTOCOL_ERROR);
                }
                if end_stream && content_left.is_some_and(|n| n != 0) {
                    return self.stream_error(id, Reason::PROTOCOL_ERROR);
                }
                self.streams.push(Stream {
                    id,
                    recv_closed: end_stream,
                    head_sent: false,
                    send_ended: false,
                    send_closed: false,
                    send_window: self.peer_initial_window,
                    recv_window: self.config.initial_window_size as i64,
                    recv_unacked: 0,
                    content_left,
                    pending: VecDeque::new(),
                    pending_trailers: None,
                });
                Ok(Step::Event(match head {
                    Ok(head) => Event::Request {
                        stream_id: id,
                        head,
                        end_stream,
                    },
                    Err(_) => Event::HeadTooLarge {
                        stream_id: id,
                        end_stream,
                    },
                }))
            }
            Target::Trailers => {
                let Some(i) = self.stream_index(id) else {
                    return Ok(Step::Nothing);
                };
                match collector.finish_trailers() {
                    Ok(fields) if self.streams[i].content_left.is_none_or(|n| n == 0) => {
                        self.streams[i].recv_closed = true;
                        self.remove_if_done(i);
                        Ok(Step::Event(Event::Trailers {
                            stream_id: id,
                            fields,
                        }))
                    }
                    _ => self.reset_known(i, Reason::PROTOCOL_ERROR),
                }
            }
        }
    }

    fn on_priority(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if payload.len() != 5 {
            // §6.3: a stream error, not the connection's.
            return self.stream_error(head.stream_id, Reason::FRAME_SIZE_ERROR);
        }
        let depends_on =
            u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
        if depends_on == head.stream_id {
            return self.stream_error(head.stream_id, Reason::PROTOCOL_ERROR);
        }
        // Parsed and ignored: RFC 9113 deprecates the priority scheme (§5.3.2).
        Ok(Step::Nothing)
    }

    fn on_rst_stream(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id == 0 || self.is_idle(head.stream_id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if payload.len() != 4 {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        let reason = Reason(u32::from_be_bytes([
            payload[0], payload[1], payload[2], payload[3],
        ]));
        let Some(i) = self.stream_index(head.stream_id) else {
            return Ok(Step::Nothing);
        };
        let s = self.streams.swap_remove(i);
        if !s.send_closed {
            // Rapid reset: a stream the client abandons before its answer is complete.
            if self.client_reset_budget == 0 {
                return Err(Reason::ENHANCE_YOUR_CALM);
            }
            self.client_reset_budget -= 1;
        }
        Ok(Step::Event(Event::Reset {
            stream_id: head.stream_id,
            reason,
        }))
    }

    fn on_settings(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if head.flags & frame::ACK != 0 {
            return if payload.is_empty() {
                Ok(Step::Nothing)
            } else {
                Err(Reason::FRAME_SIZE_ERROR)
            };
        }
        if payload.len() % 6 != 0 {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        for setting in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([setting[0], setting[1]]);
            let value = u32::from_be_bytes([setting[2], setting[3], setting[4], setting[5]]);
            match id {
                frame::SETTINGS_HEADER_TABLE_SIZE => {
                    self.encoder.set_peer_table_size(value as usize)
                }
                frame::SETTINGS_ENABLE_PUSH if value > 1 => return Err(Reason::PROTOCOL_ERROR),
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value as i64 > frame::MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    // §6.9.2: the change applies to every open stream's send window.
                    let delta = value as i64 - self.peer_initial_window;
                    self.peer_initial_window = value as i64;
                    for s in &mut self.streams {
                        s.send_window += delta;
                        if s.send_window > frame::MAX_WINDOW {
                            return Err(Reason::FLOW_CONTROL_ERROR);
                        }
                    }
                }
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE).contains(&value)
                    {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    self.peer_max_frame_size = value;
                }
                // Push is never used; the others bound what the client accepts of us.
                _ => {}
            }
        }
        self.count_reply()?;
        frame::write_head(&mut self.output.tail, 0, frame::SETTINGS, frame::ACK, 0);
        self.flush_all_streams();
        Ok(Step::Event(Event::Settings))
    }

    fn on_ping(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let Ok(payload) = <[u8; 8]>::try_from(payload) else {
            return Err(Reason::FRAME_SIZE_ERROR);
        };
        if head.flags & frame::ACK == 0 {
            self.count_reply()?;
            frame::write_ping(&mut self.output.tail, frame::ACK, &payload);
        } else if payload == SHUTDOWN_PING && self.shutdown_ping_pending {
            // A round trip since the first GOAWAY: streams the client opened meanwhile are
            // in; now the real last one.
            self.shutdown_ping_pending = false;
            self.send_goaway(Reason::NO_ERROR);
        }
        Ok(Step::Event(Event::Ping { payload }))
    }

    fn on_goaway(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        if head.stream_id != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if payload.len() < 8 {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        let last_stream_id = payload.get_u32() & 0x7fff_ffff;
        let reason = Reason(payload.get_u32());
        Ok(Step::Event(Event::GoAway {
            last_stream_id,
            reason,
            debug: payload,
        }))
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(Reason::FRAME_SIZE_ERROR);
        };
        let increment = (u32::from_be_bytes(bytes) & 0x7fff_ffff) as i64;
        let id = head.stream_id;
        if id == 0 {
            // §6.9: a zero increment is an error; §6.9.1: so is a window above 2^31-1.
            if increment == 0 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return Err(Reason::FLOW_CONTROL_ERROR);
            }
            self.flush_all_streams();
            return Ok(Step::Event(Event::WindowUpdate { stream_id: 0 }));
        }
        if self.is_idle(id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let Some(i) = self.stream_index(id) else {
            // §6.9: a zero increment is a stream error even on a stream already closed (an
            // answer can complete before the client's frame arrives); a real one is ignored.
            if increment == 0 {
                return self.stream_error(id, Reason::PROTOCOL_ERROR);
            }
            return Ok(Step::Nothing);
        };
        if increment == 0 {
            return self.reset_known(i, Reason::PROTOCOL_ERROR);
        }
        self.streams[i].send_window += increment;
        if self.streams[i].send_window > frame::MAX_WINDOW {
            return self.reset_known(i, Reason::FLOW_CONTROL_ERROR);
        }
        self.flush_stream(i);
        Ok(Step::Event(Event::WindowUpdate { stream_id: id }))
    }

    /// A stream error (§5.4.2): RST_STREAM, and the caller told if it knows the stream.
    fn stream_error(&mut self, id: u32, reason: Reason) -> ConnResult {
        if let Some(i) = self.stream_index(id) {
            return self.reset_known(i, reason);
        }
        self.count_local_reset()?;
        self.write_reset(id, reason);
        Ok(Step::Nothing)
    }

    fn write_reset(&mut self, id: u32, reason: Reason) {
        frame::write_rst_stream(&mut self.output.tail, id, reason);
        self.recent_local_resets[self.next_reset_slot] = id;
        self.next_reset_slot = (self.next_reset_slot + 1) % RECENT_RESETS;
    }

    /// Resets a stream the caller knows, and tells it.
    fn reset_known(&mut self, i: usize, reason: Reason) -> ConnResult {
        self.count_local_reset()?;
        let s = self.streams.swap_remove(i);
        self.write_reset(s.id, reason);
        Ok(Step::Event(Event::StreamError {
            stream_id: s.id,
            reason,
        }))
    }

    /// A frame written only because the client asked for it (a SETTINGS or PING ack, a
    /// RST_STREAM for DATA on a closed stream): a client that sends these faster than it
    /// reads the answers is flooding (CVE-2019-9512, -9514, -9515), and is cut off past
    /// `MAX_UNWRITTEN_REPLIES` not yet written.
    fn count_reply(&mut self) -> Result<(), Reason> {
        self.unwritten_replies += 1;
        if self.unwritten_replies > MAX_UNWRITTEN_REPLIES {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }

    fn count_local_reset(&mut self) -> Result<(), Reason> {
        if self.local_reset_budget == 0 {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        self.local_reset_budget -= 1;
        Ok(())
    }

    fn give_back_connection(&mut self, n: u32) {
        self.recv_unacked += n;
        if self.recv_unacked >= self.config.connection_window_size / 2 {
            frame::write_window_update(&mut self.output.tail, 0, self.recv_unacked);
            self.recv_window += self.recv_unacked as i64;
            self.recv_unacked = 0;
        }
    }

    // ---- the caller's side ----

    /// The caller consumed `n` bytes of `stream_id`'s body: the windows are given back once
    /// half of them is consumed, so window updates go out in batches.
    pub fn release_capacity(&mut self, stream_id: u32, n: usize) {
        self.give_back_connection(n as u32);
        let half = self.config.initial_window_size / 2;
        if let Some(i) = self.stream_index(stream_id) {
            let s = &mut self.streams[i];
            if s.recv_closed {
                return;
            }
            s.recv_unacked += n as u32;
            if s.recv_unacked >= half {
                frame::write_window_update(&mut self.output.tail, stream_id, s.recv_unacked);
                s.recv_window += s.recv_unacked as i64;
                s.recv_unacked = 0;
            }
        }
    }

    /// Sends the response head; `fields` lowercase, without connection-specific ones.
    pub fn send_head<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        stream_id: u32,
        status: u16,
        fields: &[(N, V)],
        end_stream: bool,
    ) -> Result<(), SendError> {
        let pairs = fields.iter().map(|(n, v)| (n.as_ref(), v.as_ref()));
        self.send_head_fields(stream_id, status, pairs, end_stream)
    }

    /// [`send_head`](Self::send_head) for fields the caller holds in its own form (no list
    /// made for the call).
    pub fn send_head_fields<'f>(
        &mut self,
        stream_id: u32,
        status: u16,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let i = self
            .stream_index(stream_id)
            .ok_or(SendError::UnknownStream)?;
        if self.streams[i].head_sent {
            return Err(SendError::WrongState);
        }
        self.streams[i].head_sent = true;
        let mut block = std::mem::take(&mut self.output.tail);
        let start = block.len();
        // The frame header is written once the block's length is known.
        block.put_bytes(0, frame::HEADER_LEN);
        self.encoder.begin(&mut block);
        self.encoder.status(status, &mut block);
        for (n, v) in fields {
            self.encoder.field(n, v, &mut block);
        }
        let flags = if end_stream { frame::END_STREAM } else { 0 };
        self.output.tail = block;
        self.frame_header_block(start, stream_id, flags);
        if end_stream {
            self.streams[i].send_ended = true;
            self.streams[i].send_closed = true;
            self.on_answer_complete(i);
        }
        Ok(())
    }

    fn frame_header_block(&mut self, start: usize, stream_id: u32, flags: u8) {
        let max = self.peer_max_frame_size as usize;
        frame::frame_header_block(&mut self.output.tail, start, stream_id, flags, max);
    }

    /// Queues body bytes; they go out as the windows allow, without a copy for large ones.
    pub fn send_data(
        &mut self,
        stream_id: u32,
        data: Bytes,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let i = self
            .stream_index(stream_id)
            .ok_or(SendError::UnknownStream)?;
        let s = &mut self.streams[i];
        if !s.head_sent || s.send_ended {
            return Err(SendError::WrongState);
        }
        if !data.is_empty() {
            s.pending.push_back(data);
        }
        s.send_ended = end_stream;
        self.flush_stream(i);
        Ok(())
    }

    /// Ends the stream with trailers, after the queued data.
    pub fn send_trailers<N: AsRef<[u8]>, V: AsRef<[u8]>>(
        &mut self,
        stream_id: u32,
        fields: &[(N, V)],
    ) -> Result<(), SendError> {
        let pairs = fields.iter().map(|(n, v)| (n.as_ref(), v.as_ref()));
        self.send_trailers_fields(stream_id, pairs)
    }

    /// [`send_trailers`](Self::send_trailers) for fields the caller holds in its own form.
    pub fn send_trailers_fields<'f>(
        &mut self,
        stream_id: u32,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), SendError> {
        let i = self
            .stream_index(stream_id)
            .ok_or(SendError::UnknownStream)?;
        if !self.streams[i].head_sent || self.streams[i].send_ended {
            return Err(SendError::WrongState);
        }
        // Without the dynamic table, so the block may wait behind data for the window.
        let mut plain = Encoder::new(Indexing::None, self.config.huffman);
        let mut block = BytesMut::new();
        for (n, v) in fields {
            plain.field(n, v, &mut block);
        }
        let s = &mut self.streams[i];
        s.pending_trailers = Some(block.freeze());
        s.send_ended = true;
        self.flush_stream(i);
        Ok(())
    }

    /// Resets a stream (RST_STREAM); its queued data is dropped.
    pub fn send_reset(&mut self, stream_id: u32, reason: Reason) {
        if let Some(i) = self.stream_index(stream_id) {
            self.streams.swap_remove(i);
        }
        self.write_reset(stream_id, reason);
    }

    /// Starts a graceful shutdown as RFC 9113 §6.8 advises: a GOAWAY naming the highest
    /// possible stream and a PING; when the client answers the PING, the final GOAWAY names
    /// the last stream it opened, so no stream in flight is lost.
    pub fn begin_graceful_shutdown(&mut self) {
        if self.goaway_sent.is_some() || self.shutdown_ping_pending {
            return;
        }
        frame::write_goaway(
            &mut self.output.tail,
            frame::MAX_WINDOW as u32,
            Reason::NO_ERROR,
        );
        frame::write_ping(&mut self.output.tail, 0, &SHUTDOWN_PING);
        self.shutdown_ping_pending = true;
    }

    /// Sends GOAWAY at once: no stream above the last one seen will be served (§6.8).
    /// Streams below it go on; `is_done()` says when all have ended.
    pub fn send_goaway(&mut self, reason: Reason) {
        frame::write_goaway(&mut self.output.tail, self.last_client_stream, reason);
        self.goaway_sent = Some(self.last_client_stream);
    }

    /// Writes what the windows allow of stream `i`'s queue.
    fn flush_stream(&mut self, i: usize) {
        let max_frame = self.peer_max_frame_size as i64;
        loop {
            let s = &mut self.streams[i];
            let Some(front) = s.pending.front_mut() else {
                break;
            };
            let room = s.send_window.min(self.send_window).min(max_frame);
            if room <= 0 {
                return;
            }
            let n = (room as usize).min(front.len());
            let chunk = if n == front.len() {
                s.pending.pop_front().unwrap_or_default()
            } else {
                front.split_to(n)
            };
            s.send_window -= n as i64;
            self.send_window -= n as i64;
            let last = s.pending.is_empty() && s.send_ended && s.pending_trailers.is_none();
            let id = s.id;
            frame::write_head(
                &mut self.output.tail,
                n,
                frame::DATA,
                if last { frame::END_STREAM } else { 0 },
                id,
            );
            self.output.push_payload(chunk);
            if last {
                self.streams[i].send_closed = true;
                self.on_answer_complete(i);
                return;
            }
        }
        let s = &mut self.streams[i];
        if !s.send_ended || s.send_closed {
            return;
        }
        let id = s.id;
        match s.pending_trailers.take() {
            Some(block) => {
                let start = self.output.tail.len();
                self.output.tail.put_bytes(0, frame::HEADER_LEN);
                // A table size update owed to the client goes in the first block sent
                // (RFC 7541 §4.2), whichever that is.
                self.encoder.begin(&mut self.output.tail);
                self.output.tail.extend_from_slice(&block);
                self.frame_header_block(start, id, frame::END_STREAM);
            }
            // An empty DATA frame ends the stream; it needs no window.
            None => frame::write_head(&mut self.output.tail, 0, frame::DATA, frame::END_STREAM, id),
        }
        self.streams[i].send_closed = true;
        self.on_answer_complete(i);
    }

    fn flush_all_streams(&mut self) {
        let mut i = 0;
        while i < self.streams.len() {
            let before = self.streams.len();
            if !self.streams[i].pending.is_empty() {
                self.flush_stream(i);
            }
            // A finished stream was swapped out: the one now at `i` is new to the loop.
            if self.streams.len() == before {
                i += 1;
            }
        }
    }

    /// The answer on stream `i` is complete: a reset by the client no longer counts as rapid.
    fn on_answer_complete(&mut self, i: usize) {
        self.client_reset_budget =
            (self.client_reset_budget + 1).min(self.config.max_client_resets);
        self.remove_if_done(i);
    }

    fn remove_if_done(&mut self, i: usize) {
        let s = &self.streams[i];
        if s.recv_closed && s.send_closed {
            self.streams.swap_remove(i);
        }
    }

    // ---- output and state ----

    pub fn has_output(&self) -> bool {
        !self.output.is_empty()
    }

    /// Bytes waiting to be written (a caller's bound on what it queues before the socket
    /// takes it).
    pub fn output_len(&self) -> usize {
        self.output.len()
    }

    /// What to write next, as slices for a vectored write; returns how many it filled.
    pub fn output_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        self.output.slices(dst)
    }

    /// `n` bytes of the output were written.
    pub fn advance_output(&mut self, n: usize) {
        self.output.advance(n);
        if self.output.is_empty() {
            self.unwritten_replies = 0;
        }
    }

    /// All output as one buffer (a copy: for tests and plain writes).
    pub fn take_output(&mut self) -> BytesMut {
        self.unwritten_replies = 0;
        self.output.take()
    }

    /// Streams open (either direction).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Where an open stream stands (`None`: closed, reset, or never opened).
    pub fn stream_progress(&self, stream_id: u32) -> Option<StreamProgress> {
        self.stream_index(stream_id).map(|i| {
            let s = &self.streams[i];
            StreamProgress {
                request_ended: s.recv_closed,
                answer_queued: s.send_ended,
                answer_sent: s.send_closed,
            }
        })
    }

    /// Body bytes queued on a stream for lack of window.
    pub fn queued_bytes(&self, stream_id: u32) -> usize {
        self.stream_index(stream_id)
            .map_or(0, |i| self.streams[i].pending.iter().map(Bytes::len).sum())
    }

    /// After a connection error, or after GOAWAY once every stream ended: close once the
    /// output is written.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Closed || (self.goaway_sent.is_some() && self.streams.is_empty())
    }

    /// Gives every buffer back if the connection is idle (no stream, no partial frame or
    /// block, nothing to write); returns whether it did. Call it before parking the socket.
    pub fn release_idle_buffers(&mut self) -> bool {
        if !self.streams.is_empty()
            || self.block.is_some()
            || !self.input.is_empty()
            || !self.output.is_empty()
        {
            return false;
        }
        self.input = BytesMut::new();
        self.output.release();
        self.streams = Vec::new();
        self.decoder.shrink();
        true
    }

    /// Bytes this connection holds: the struct and every heap buffer it owns (the HPACK
    /// decoder's table entries included; `Bytes` handed to the caller are the caller's).
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.input.capacity()
            + self.output.heap_bytes()
            + self.streams.capacity() * std::mem::size_of::<Stream>()
            + self.decoder.heap_bytes()
            + self.encoder.heap_bytes()
            + self.block.as_ref().map_or(0, |b| {
                std::mem::size_of::<PartialBlock>() + b.fragments.capacity()
            })
    }
}
