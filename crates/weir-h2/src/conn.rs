//! The server side of one HTTP/2 connection (RFC 9113), sans-IO: the caller reads the socket
//! into `input()`, takes events from `poll_event()`, answers with `send_*`, and writes what
//! `output_slices()` shows. Owns the stream states, both directions' flow control, the limits
//! (concurrent streams, header list size, CONTINUATION flood, rapid reset) and GOAWAY.

use crate::frame::{self, Head, Reason};
use crate::head::{Collector, HeaderBlock, Refusal, RequestHead};
use crate::hpack::{Decoder, Encoder, Indexing};
use crate::output::Output;
use crate::shared::{self, FlushTo, OnFrame, PartialBlock, RecvWindow, SendQueue};
use crate::stream_table::StreamTable;
use bytes::{Buf, BufMut, Bytes, BytesMut};

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
    /// The answer's body and end, under the client's windows.
    send: SendQueue,
    recv: RecvWindow,
    /// Body bytes still allowed by content-length (§8.1.1).
    content_left: Option<u64>,
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

pub struct Connection {
    config: Config,
    phase: Phase,
    input: BytesMut,
    output: Output,
    streams: StreamTable<Stream>,
    decoder: Decoder,
    encoder: Encoder,
    block: Option<Box<PartialBlock<Target>>>,
    peer_max_frame_size: u32,
    peer_initial_window: i64,
    send_window: i64,
    recv: RecvWindow,
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

pub(crate) enum Step {
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
            streams: StreamTable::new(),
            decoder: Decoder::new(config.header_table_size as usize),
            encoder: Encoder::new(config.encoder, config.huffman),
            block: None,
            peer_max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            send_window: frame::DEFAULT_WINDOW as i64,
            recv: RecvWindow::new(frame::DEFAULT_WINDOW),
            last_client_stream: 0,
            goaway_sent: None,
            client_reset_budget: config.max_client_resets,
            local_reset_budget: config.max_local_resets,
            recent_local_resets: [0; RECENT_RESETS],
            next_reset_slot: 0,
            shutdown_ping_pending: false,
            unwritten_replies: 0,
        };
        let settings = [
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
        ];
        let window = config.connection_window_size;
        c.recv = shared::write_first_settings(&mut c.output.tail, &settings, window);
        c
    }

    // ---- input ----

    shared::buffer_methods!();

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
                _ => match shared::take_frame(&mut self.input, self.config.max_frame_size) {
                    Ok(Some((head, payload))) => self.on_frame(head, payload),
                    Ok(None) => return None,
                    Err(reason) => Err(reason),
                },
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
        self.dispatch(head, payload)
    }

    fn stream_index(&self, id: u32) -> Option<usize> {
        self.streams.position(id)
    }

    /// §5.1: a client stream id never used yet.
    fn is_idle(&self, id: u32) -> bool {
        id > self.last_client_stream
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
                self.streams.push(
                    id,
                    Stream {
                        id,
                        recv_closed: end_stream,
                        head_sent: false,
                        send: SendQueue::new(self.peer_initial_window, false),
                        recv: RecvWindow::new(self.config.initial_window_size),
                        content_left,
                    },
                );
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
        let batch = self.config.connection_window_size / 2;
        self.recv.give_back(n, batch, 0, &mut self.output.tail);
    }

    // ---- the caller's side ----

    /// The caller consumed `n` bytes of `stream_id`'s body: the windows are given back once
    /// half of them is consumed, so window updates go out in batches.
    pub fn release_capacity(&mut self, stream_id: u32, n: usize) {
        self.give_back_connection(n as u32);
        let half = self.config.initial_window_size / 2;
        if let Some(i) = self.stream_index(stream_id) {
            let s = &mut self.streams[i];
            if !s.recv_closed {
                s.recv
                    .give_back(n as u32, half, stream_id, &mut self.output.tail);
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
            self.streams[i].send.ended = true;
            self.streams[i].send.closed = true;
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
        if !s.head_sent || s.send.ended {
            return Err(SendError::WrongState);
        }
        if !data.is_empty() {
            s.send.pending.push_back(data);
        }
        s.send.ended = end_stream;
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
        if !self.streams[i].head_sent || self.streams[i].send.ended {
            return Err(SendError::WrongState);
        }
        let s = &mut self.streams[i];
        s.send.trailers = Some(shared::trailer_block(self.config.huffman, fields));
        s.send.ended = true;
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
        let s = &mut self.streams[i];
        let to = FlushTo {
            connection_window: &mut self.send_window,
            max_frame: self.peer_max_frame_size,
            output: &mut self.output,
            encoder: &mut self.encoder,
        };
        if s.send.flush(s.id, to) {
            self.on_answer_complete(i);
        }
    }

    fn flush_all_streams(&mut self) {
        let mut i = 0;
        while i < self.streams.len() {
            let before = self.streams.len();
            if !self.streams[i].send.pending.is_empty() {
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
        if s.recv_closed && s.send.closed {
            self.streams.swap_remove(i);
        }
    }

    // ---- output and state ----

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
                answer_queued: s.send.ended,
                answer_sent: s.send.closed,
            }
        })
    }

    /// Body bytes queued on a stream for lack of window.
    pub fn queued_bytes(&self, stream_id: u32) -> usize {
        self.stream_index(stream_id)
            .map_or(0, |i| self.streams[i].send.queued_bytes())
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
        self.streams.release();
        self.decoder.shrink();
        true
    }

    /// Bytes this connection holds: the struct and every heap buffer it owns (the HPACK
    /// decoder's table entries included; `Bytes` handed to the caller are the caller's).
    pub fn state_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.input.capacity()
            + self.output.heap_bytes()
            + self.streams.allocated_bytes()
            + self.decoder.heap_bytes()
            + self.encoder.heap_bytes()
            + self.block.as_ref().map_or(0, |b| {
                std::mem::size_of::<PartialBlock<Target>>() + b.fragments.capacity()
            })
    }
}

impl OnFrame for Connection {
    type Step = Step;

    fn on_data(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        let id = head.stream_id;
        if id == 0 || self.is_idle(id) {
            // §6.1: not on stream 0; §5.1: not on an idle stream.
            return Err(Reason::PROTOCOL_ERROR);
        }
        let (padding, end_stream) = shared::data_frame(&mut self.recv, &head, &mut payload)?;
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
        if !s.recv.take(head.len) {
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
        self.block = Some(PartialBlock::new(id, end_stream, target, &payload));
        Ok(Step::Nothing)
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
        if !s.send.closed {
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
        for (id, value) in shared::settings_entries(&head, payload)? {
            match id {
                frame::SETTINGS_HEADER_TABLE_SIZE => {
                    self.encoder.set_peer_table_size(value as usize)
                }
                frame::SETTINGS_ENABLE_PUSH if value > 1 => return Err(Reason::PROTOCOL_ERROR),
                frame::SETTINGS_INITIAL_WINDOW_SIZE => {
                    if value as i64 > frame::MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    let delta = value as i64 - self.peer_initial_window;
                    self.peer_initial_window = value as i64;
                    let windows = self.streams.iter_mut().map(|s| &mut s.send.window);
                    shared::shift_windows(windows, delta)?;
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
        let payload = shared::ping_payload(&head, payload)?;
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

    fn on_goaway(&mut self, head: Head, payload: Bytes) -> ConnResult {
        let (last_stream_id, reason, debug) = shared::goaway_fields(&head, payload)?;
        Ok(Step::Event(Event::GoAway {
            last_stream_id,
            reason,
            debug,
        }))
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let increment = shared::window_increment(payload)?;
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
        self.streams[i].send.window += increment;
        if self.streams[i].send.window > frame::MAX_WINDOW {
            return self.reset_known(i, Reason::FLOW_CONTROL_ERROR);
        }
        self.flush_stream(i);
        Ok(Step::Event(Event::WindowUpdate { stream_id: id }))
    }

    fn on_continuation(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let Some(block) = self.block.as_mut() else {
            // §6.10: CONTINUATION without HEADERS before it.
            return Err(Reason::PROTOCOL_ERROR);
        };
        let (frames, list) = (
            self.config.max_continuation_frames,
            self.config.max_header_list_size,
        );
        block.append(payload, frames, list)?;
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

    fn ignored(&mut self) -> Step {
        Step::Nothing
    }

    fn continuing(&self) -> Option<u32> {
        self.block.as_ref().map(|b| b.stream_id)
    }
}
