//! The client side of one HTTP/2 connection (RFC 9113), sans-IO, for weir's upstreams: the
//! caller opens streams with `send_request`, sends bodies and trailers with `send_*`, reads
//! the socket into `input()`, takes events from `poll_event()` and writes what
//! `output_slices()` shows. Owns the stream states, both directions' flow control (window
//! updates given back in batches), the server's stream limit and GOAWAY.

use crate::frame::{self, Head, Reason};
use crate::head::{Collector, HeaderBlock};
use crate::hpack::{Decoder, Encoder, Indexing};
use crate::output::Output;
use crate::shared::{self, FlushTo, OnFrame, PartialBlock, RecvWindow, SendQueue};
use crate::stream_table::StreamTable;
use crate::{SendError, PREFACE};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::VecDeque;

/// What the client announces.
#[derive(Debug, Clone, Copy)]
pub struct ClientConfig {
    /// Each stream's receive window (SETTINGS_INITIAL_WINDOW_SIZE).
    pub initial_window_size: u32,
    /// The connection's receive window, raised from 65,535 by a WINDOW_UPDATE at the start.
    pub connection_window_size: u32,
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger response head resets its stream.
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the decoder's dynamic table.
    pub header_table_size: u32,
    pub encoder: Indexing,
    pub huffman: bool,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 64 * 1024,
            header_table_size: 4096,
            encoder: Indexing::Dynamic(4096),
            huffman: false,
        }
    }
}

/// What the server did, in the order it happened.
#[derive(Debug)]
pub enum ClientEvent {
    /// The server's SETTINGS were applied and acknowledged (the first: the connection is up).
    Settings,
    /// The final response head of a stream (1xx heads are skipped); `end_stream`: nothing
    /// follows.
    Response {
        stream_id: u32,
        status: u16,
        fields: HeaderBlock,
        /// The declared `content-length`, checked against the DATA that follows.
        content_length: Option<u64>,
        end_stream: bool,
    },
    /// Body bytes. Give the window back with `release_capacity`, also for bytes dropped.
    Data {
        stream_id: u32,
        data: Bytes,
        end_stream: bool,
    },
    /// The response's trailers; the response is complete.
    Trailers { stream_id: u32, fields: HeaderBlock },
    /// The stream ended without its response: the server reset it, refused it (a GOAWAY
    /// below its id gives REFUSED_STREAM too: never processed, safe to retry), or the client
    /// reset it for the server's error.
    Reset { stream_id: u32, reason: Reason },
    /// The server will process no stream above `last_stream_id`; those are `Reset` next.
    GoAway {
        last_stream_id: u32,
        reason: Reason,
        debug: Bytes,
    },
    /// A PING, already answered.
    Ping { payload: [u8; 8] },
    /// Send window opened on a stream (0: the connection); queued data went out.
    WindowUpdate { stream_id: u32 },
    /// A connection error: GOAWAY is in the output; flush it and close. Every open stream
    /// is lost.
    ConnectionError { reason: Reason },
}

struct Stream {
    id: u32,
    /// The final (non-1xx) response head arrived.
    head_received: bool,
    /// The server sent END_STREAM.
    recv_closed: bool,
    /// The request's body and end, under the server's windows.
    send: SendQueue,
    recv: RecvWindow,
    /// Body bytes still allowed by the response's content-length (§8.1.1).
    content_left: Option<u64>,
}

/// CONTINUATION frames accepted after one HEADERS.
const MAX_CONTINUATIONS: u32 = 64;

/// Streams the server may open at most before its first SETTINGS says (RFC 9113 leaves it
/// unlimited; 100 is its recommended floor, so no well-behaved server refuses that many).
const DEFAULT_PEER_STREAMS: u32 = 100;

pub struct ClientConnection {
    config: ClientConfig,
    closed: bool,
    input: BytesMut,
    output: Output,
    streams: StreamTable<Stream>,
    decoder: Decoder,
    encoder: Encoder,
    /// A block awaiting CONTINUATION; its target: decode only (the stream is gone).
    block: Option<Box<PartialBlock<bool>>>,
    /// Events decided together (a GOAWAY's refused streams), handed out before new frames.
    queued: VecDeque<ClientEvent>,
    settings_received: bool,
    peer_max_frame_size: u32,
    peer_initial_window: i64,
    peer_max_streams: u32,
    send_window: i64,
    recv: RecvWindow,
    next_stream_id: u32,
    goaway_received: Option<u32>,
    /// We sent GOAWAY: no stream is opened after it.
    goaway_sent: bool,
}

pub(crate) enum Step {
    Event(ClientEvent),
    Nothing,
}

type ConnResult = Result<Step, Reason>;

impl ClientConnection {
    /// A client connection; the preface, our SETTINGS and the connection window's update are
    /// in the output (requests may follow at once, §3.4).
    pub fn new(config: ClientConfig) -> ClientConnection {
        let mut c = ClientConnection {
            config,
            closed: false,
            input: BytesMut::new(),
            output: Output::default(),
            streams: StreamTable::new(),
            decoder: Decoder::new(config.header_table_size as usize),
            encoder: Encoder::new(config.encoder, config.huffman),
            block: None,
            queued: VecDeque::new(),
            settings_received: false,
            peer_max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: frame::DEFAULT_WINDOW as i64,
            peer_max_streams: DEFAULT_PEER_STREAMS,
            send_window: frame::DEFAULT_WINDOW as i64,
            recv: RecvWindow::new(frame::DEFAULT_WINDOW),
            next_stream_id: 1,
            goaway_received: None,
            goaway_sent: false,
        };
        c.output.tail.extend_from_slice(PREFACE);
        // No SETTINGS_MAX_CONCURRENT_STREAMS: the server opens no stream (push is off).
        let settings = [
            (frame::SETTINGS_ENABLE_PUSH, 0),
            (frame::SETTINGS_HEADER_TABLE_SIZE, config.header_table_size),
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
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        loop {
            if let Some(e) = self.queued.pop_front() {
                return Some(e);
            }
            if self.closed {
                return None;
            }
            let step = match shared::take_frame(&mut self.input, self.config.max_frame_size) {
                Ok(Some((head, payload))) => self.on_frame(head, payload),
                Ok(None) => return None,
                Err(reason) => Err(reason),
            };
            match step {
                Ok(Step::Nothing) => continue,
                Ok(Step::Event(e)) => return Some(e),
                Err(reason) => return Some(self.connection_error(reason)),
            }
        }
    }

    fn connection_error(&mut self, reason: Reason) -> ClientEvent {
        // The last stream the server opened: it opens none (no push).
        frame::write_goaway(&mut self.output.tail, 0, reason);
        self.closed = true;
        self.input = BytesMut::new();
        self.streams.clear();
        self.queued.clear();
        self.block = None;
        ClientEvent::ConnectionError { reason }
    }

    fn on_frame(&mut self, head: Head, payload: Bytes) -> ConnResult {
        if !self.settings_received && head.kind != frame::SETTINGS {
            // §3.4: the server's preface is a SETTINGS frame.
            return Err(Reason::PROTOCOL_ERROR);
        }
        self.dispatch(head, payload)
    }

    fn stream_index(&self, id: u32) -> Option<usize> {
        self.streams.position(id)
    }

    /// §5.1: a stream we never opened (and the server cannot: push is off).
    fn never_opened(&self, id: u32) -> bool {
        id % 2 == 0 || id >= self.next_stream_id
    }

    fn on_header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        ignore: bool,
        block: &[u8],
    ) -> ConnResult {
        let cap = self.config.max_header_list_size as usize;
        let i = self.stream_index(id);
        let trailers = i.is_some_and(|i| self.streams[i].head_received);
        let mut collector = if trailers {
            Collector::new(cap, block.len(), true)
        } else {
            Collector::new_response(cap, block.len())
        };
        self.decoder
            .decode(block, |n, v| collector.add(n, v))
            .map_err(|_| Reason::COMPRESSION_ERROR)?;
        let Some(i) = i.filter(|_| !ignore) else {
            return Ok(Step::Nothing);
        };
        if trailers {
            // §8.1: trailers end the stream.
            return match collector.finish_trailers() {
                Ok(fields) if end_stream && self.streams[i].content_left.is_none_or(|n| n == 0) => {
                    self.streams[i].recv_closed = true;
                    self.remove_if_done(i);
                    Ok(Step::Event(ClientEvent::Trailers {
                        stream_id: id,
                        fields,
                    }))
                }
                _ => Ok(self.reset_known(i, Reason::PROTOCOL_ERROR)),
            };
        }
        let (status, fields, content_length) = match collector.finish_response() {
            Ok(head) => head,
            Err(_) => return Ok(self.reset_known(i, Reason::PROTOCOL_ERROR)),
        };
        if (100..200).contains(&status) {
            // §8.1: informational heads precede the final one; 101 is not allowed (§8.6).
            if end_stream || status == 101 {
                return Ok(self.reset_known(i, Reason::PROTOCOL_ERROR));
            }
            return Ok(Step::Nothing);
        }
        let s = &mut self.streams[i];
        s.head_received = true;
        s.content_left = content_length;
        if end_stream {
            s.recv_closed = true;
            self.remove_if_done(i);
        }
        Ok(Step::Event(ClientEvent::Response {
            stream_id: id,
            status,
            fields,
            content_length,
            end_stream,
        }))
    }

    /// §6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's send window.
    fn set_peer_initial_window(&mut self, value: u32) -> Result<(), Reason> {
        if value as i64 > frame::MAX_WINDOW {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        let delta = value as i64 - self.peer_initial_window;
        self.peer_initial_window = value as i64;
        shared::shift_windows(self.streams.iter_mut().map(|s| &mut s.send.window), delta)
    }

    /// Resets stream `i` for the server's error and tells the caller.
    fn reset_known(&mut self, i: usize, reason: Reason) -> Step {
        let s = self.streams.swap_remove(i);
        frame::write_rst_stream(&mut self.output.tail, s.id, reason);
        Step::Event(ClientEvent::Reset {
            stream_id: s.id,
            reason,
        })
    }

    fn give_back_connection(&mut self, n: u32) {
        let batch = self.config.connection_window_size / 2;
        self.recv.give_back(n, batch, 0, &mut self.output.tail);
    }

    // ---- the caller's side ----

    /// Whether a new stream may be opened now: no GOAWAY, no connection error, and fewer
    /// open than the server allows.
    pub fn can_open(&self) -> bool {
        !self.closed
            && self.goaway_received.is_none()
            && !self.goaway_sent
            && self.streams.len() < self.peer_max_streams as usize
            && self.next_stream_id <= frame::MAX_WINDOW as u32
    }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (100 until it says).
    pub fn max_concurrent_streams(&self) -> u32 {
        self.peer_max_streams
    }

    /// Opens a stream with the request head (`fields` lowercase, without connection-specific
    /// ones); returns its id. `WrongState` if `can_open()` says no.
    pub fn send_request<'f>(
        &mut self,
        method: &[u8],
        scheme: &[u8],
        authority: &[u8],
        path: &[u8],
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
        end_stream: bool,
    ) -> Result<u32, SendError> {
        if !self.can_open() {
            return Err(SendError::WrongState);
        }
        let id = self.next_stream_id;
        self.next_stream_id += 2;
        let tail = &mut self.output.tail;
        let start = tail.len();
        tail.put_bytes(0, frame::HEADER_LEN);
        self.encoder.begin(tail);
        self.encoder.field(b":method", method, tail);
        self.encoder.field(b":scheme", scheme, tail);
        self.encoder.field(b":authority", authority, tail);
        self.encoder.field(b":path", path, tail);
        for (n, v) in fields {
            self.encoder.field(n, v, tail);
        }
        let flags = if end_stream { frame::END_STREAM } else { 0 };
        let max = self.peer_max_frame_size as usize;
        frame::frame_header_block(tail, start, id, flags, max);
        self.streams.push(
            id,
            Stream {
                id,
                head_received: false,
                recv_closed: false,
                send: SendQueue::new(self.peer_initial_window, end_stream),
                recv: RecvWindow::new(self.config.initial_window_size),
                content_left: None,
            },
        );
        Ok(id)
    }

    /// Queues body bytes; they go out as the windows allow, without a copy for large ones.
    pub fn send_data(
        &mut self,
        stream_id: u32,
        data: Bytes,
        end_stream: bool,
    ) -> Result<(), SendError> {
        let i = self.open_to_send(stream_id)?;
        let s = &mut self.streams[i];
        if !data.is_empty() {
            s.send.pending.push_back(data);
        }
        s.send.ended = end_stream;
        self.flush_stream(i);
        Ok(())
    }

    /// Ends the request with trailers, after the queued data.
    pub fn send_trailers<'f>(
        &mut self,
        stream_id: u32,
        fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    ) -> Result<(), SendError> {
        let i = self.open_to_send(stream_id)?;
        let s = &mut self.streams[i];
        s.send.trailers = Some(shared::trailer_block(self.config.huffman, fields));
        s.send.ended = true;
        self.flush_stream(i);
        Ok(())
    }

    fn open_to_send(&self, stream_id: u32) -> Result<usize, SendError> {
        let i = self
            .stream_index(stream_id)
            .ok_or(SendError::UnknownStream)?;
        match self.streams[i].send.ended {
            true => Err(SendError::WrongState),
            false => Ok(i),
        }
    }

    /// Resets a stream (RST_STREAM CANCEL, say, when the caller gives up on it); its queued
    /// data is dropped. Nothing if it already ended.
    pub fn send_reset(&mut self, stream_id: u32, reason: Reason) {
        if let Some(i) = self.stream_index(stream_id) {
            self.streams.swap_remove(i);
            frame::write_rst_stream(&mut self.output.tail, stream_id, reason);
        }
    }

    /// The caller consumed `n` bytes of `stream_id`'s body: the windows are given back once
    /// half of them is consumed, so window updates go out in batches.
    pub fn release_capacity(&mut self, stream_id: u32, n: usize) {
        self.give_back_connection(n as u32);
        let half = self.config.initial_window_size / 2;
        if let Some(i) = self.stream_index(stream_id) {
            let s = &mut self.streams[i];
            // After END_STREAM the stream's window no longer matters.
            if !s.recv_closed {
                let out = &mut self.output.tail;
                s.recv.give_back(n as u32, half, stream_id, out);
            }
        }
    }

    /// Writes what the windows allow of stream `i`'s queue, then its end.
    fn flush_stream(&mut self, i: usize) {
        let s = &mut self.streams[i];
        let to = FlushTo {
            connection_window: &mut self.send_window,
            max_frame: self.peer_max_frame_size,
            output: &mut self.output,
            encoder: &mut self.encoder,
        };
        if s.send.flush(s.id, to) {
            self.remove_if_done(i);
        }
    }

    /// Flushes every stream with queued data, newest first: a stream flushed to its end is
    /// swapped out from behind the loop.
    fn flush_all_streams(&mut self) {
        for i in (0..self.streams.len()).rev() {
            if !self.streams[i].send.pending.is_empty() {
                self.flush_stream(i);
            }
        }
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
    }

    /// All output as one buffer (a copy: for tests and plain writes).
    pub fn take_output(&mut self) -> BytesMut {
        self.output.take()
    }

    /// Streams open (either direction).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Whether the stream is still open (its response not complete, not reset).
    pub fn is_open(&self, stream_id: u32) -> bool {
        self.stream_index(stream_id).is_some()
    }

    /// Body bytes queued on a stream for lack of window.
    pub fn queued_bytes(&self, stream_id: u32) -> usize {
        self.stream_index(stream_id)
            .map_or(0, |i| self.streams[i].send.queued_bytes())
    }

    /// The last stream id of the server's GOAWAY, if one came.
    pub fn goaway_received(&self) -> Option<u32> {
        self.goaway_received
    }

    /// Sends GOAWAY (closing the connection gracefully: no stream is opened after it).
    pub fn send_goaway(&mut self, reason: Reason) {
        frame::write_goaway(&mut self.output.tail, 0, reason);
        self.goaway_sent = true;
    }

    /// After a connection error: close once the output is written.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
}

impl OnFrame for ClientConnection {
    type Step = Step;

    fn on_data(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        let id = head.stream_id;
        if id == 0 || self.never_opened(id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let (padding, end_stream) = shared::data_frame(&mut self.recv, &head, &mut payload)?;
        let Some(i) = self.stream_index(id) else {
            // A stream we reset or that ended: frames in flight are dropped, their bytes
            // still counted against the connection's window.
            self.give_back_connection(head.len as u32);
            return Ok(Step::Nothing);
        };
        let s = &mut self.streams[i];
        let overrun = !s.recv.take(head.len);
        let malformed = !s.head_received
            || s.recv_closed
            || s.content_left.is_some_and(|left| {
                let len = payload.len() as u64;
                len > left || (end_stream && len != left)
            });
        if overrun || malformed {
            self.give_back_connection(head.len as u32);
            let reason = if malformed {
                Reason::PROTOCOL_ERROR
            } else {
                Reason::FLOW_CONTROL_ERROR
            };
            return Ok(self.reset_known(i, reason));
        }
        if let Some(left) = &mut s.content_left {
            *left -= payload.len() as u64;
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
            return Ok(Step::Nothing);
        }
        Ok(Step::Event(ClientEvent::Data {
            stream_id: id,
            data: payload,
            end_stream,
        }))
    }

    fn on_headers(&mut self, head: Head, mut payload: Bytes) -> ConnResult {
        let id = head.stream_id;
        if id == 0 || self.never_opened(id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        frame::unpad(&head, &mut payload)?;
        if head.flags & frame::PRIORITY_FLAG != 0 {
            if payload.len() < 5 {
                return Err(Reason::FRAME_SIZE_ERROR);
            }
            payload.advance(5);
        }
        let end_stream = head.flags & frame::END_STREAM != 0;
        // A stream we reset or that ended: decoded only, to keep HPACK in step.
        let ignore = self.stream_index(id).is_none();
        if head.flags & frame::END_HEADERS != 0 {
            return self.on_header_block(id, end_stream, ignore, &payload);
        }
        self.block = Some(PartialBlock::new(id, end_stream, ignore, &payload));
        Ok(Step::Nothing)
    }

    fn on_rst_stream(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id == 0 || self.never_opened(head.stream_id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let Ok(code) = <[u8; 4]>::try_from(payload) else {
            return Err(Reason::FRAME_SIZE_ERROR);
        };
        let Some(i) = self.stream_index(head.stream_id) else {
            return Ok(Step::Nothing);
        };
        self.streams.swap_remove(i);
        Ok(Step::Event(ClientEvent::Reset {
            stream_id: head.stream_id,
            reason: Reason(u32::from_be_bytes(code)),
        }))
    }

    fn on_settings(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        if head.stream_id != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if head.flags & frame::ACK != 0 {
            if !payload.is_empty() {
                return Err(Reason::FRAME_SIZE_ERROR);
            }
            // §3.4: the server's first frame is its own SETTINGS, not an ack of ours.
            return match self.settings_received {
                true => Ok(Step::Nothing),
                false => Err(Reason::PROTOCOL_ERROR),
            };
        }
        for (id, value) in shared::settings_entries(&head, payload)? {
            match id {
                frame::SETTINGS_HEADER_TABLE_SIZE => {
                    self.encoder.set_peer_table_size(value as usize)
                }
                // §6.5.2: a server may only announce that it will not push.
                frame::SETTINGS_ENABLE_PUSH if value != 0 => return Err(Reason::PROTOCOL_ERROR),
                frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.peer_max_streams = value,
                frame::SETTINGS_INITIAL_WINDOW_SIZE => self.set_peer_initial_window(value)?,
                frame::SETTINGS_MAX_FRAME_SIZE => {
                    let valid = frame::DEFAULT_MAX_FRAME_SIZE..=frame::MAX_MAX_FRAME_SIZE;
                    if !valid.contains(&value) {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    self.peer_max_frame_size = value;
                }
                _ => {}
            }
        }
        self.settings_received = true;
        frame::write_head(&mut self.output.tail, 0, frame::SETTINGS, frame::ACK, 0);
        self.flush_all_streams();
        Ok(Step::Event(ClientEvent::Settings))
    }

    fn on_ping(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let payload = shared::ping_payload(&head, payload)?;
        if head.flags & frame::ACK != 0 {
            return Ok(Step::Nothing);
        }
        frame::write_ping(&mut self.output.tail, frame::ACK, &payload);
        Ok(Step::Event(ClientEvent::Ping { payload }))
    }

    fn on_goaway(&mut self, head: Head, payload: Bytes) -> ConnResult {
        let (last_stream_id, reason, debug) = shared::goaway_fields(&head, payload)?;
        // §6.8: a later GOAWAY may lower the last id, never raise it.
        let last = self
            .goaway_received
            .map_or(last_stream_id, |l| l.min(last_stream_id));
        self.goaway_received = Some(last);
        // Streams above it were never processed: refused, for the caller to retry.
        let mut k = 0;
        while k < self.streams.len() {
            if self.streams[k].id > last {
                let s = self.streams.swap_remove(k);
                self.queued.push_back(ClientEvent::Reset {
                    stream_id: s.id,
                    reason: Reason::REFUSED_STREAM,
                });
            } else {
                k += 1;
            }
        }
        Ok(Step::Event(ClientEvent::GoAway {
            last_stream_id,
            reason,
            debug,
        }))
    }

    fn on_window_update(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let increment = shared::window_increment(payload)?;
        let id = head.stream_id;
        if id == 0 {
            self.send_window += increment;
            if increment == 0 || self.send_window > frame::MAX_WINDOW {
                let zero = increment == 0;
                return Err(if zero {
                    Reason::PROTOCOL_ERROR
                } else {
                    Reason::FLOW_CONTROL_ERROR
                });
            }
            self.flush_all_streams();
            return Ok(Step::Event(ClientEvent::WindowUpdate { stream_id: 0 }));
        }
        if self.never_opened(id) {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let Some(i) = self.stream_index(id) else {
            return Ok(Step::Nothing);
        };
        self.streams[i].send.window += increment;
        if increment == 0 {
            return Ok(self.reset_known(i, Reason::PROTOCOL_ERROR));
        }
        if self.streams[i].send.window > frame::MAX_WINDOW {
            return Ok(self.reset_known(i, Reason::FLOW_CONTROL_ERROR));
        }
        self.flush_stream(i);
        Ok(Step::Event(ClientEvent::WindowUpdate { stream_id: id }))
    }

    fn on_continuation(&mut self, head: Head, payload: &[u8]) -> ConnResult {
        let Some(block) = self.block.as_mut() else {
            return Err(Reason::PROTOCOL_ERROR);
        };
        block.append(payload, MAX_CONTINUATIONS, self.config.max_header_list_size)?;
        if head.flags & frame::END_HEADERS == 0 {
            return Ok(Step::Nothing);
        }
        let Some(block) = self.block.take() else {
            return Ok(Step::Nothing);
        };
        let (id, end, ignore) = (block.stream_id, block.end_stream, block.target);
        self.on_header_block(id, end, ignore, &block.fragments)
    }

    /// PRIORITY is deprecated (§5.3.2): ignored.
    fn on_priority(&mut self, _head: Head, _payload: &[u8]) -> ConnResult {
        Ok(Step::Nothing)
    }

    fn ignored(&mut self) -> Step {
        Step::Nothing
    }

    fn continuing(&self) -> Option<u32> {
        self.block.as_ref().map(|b| b.stream_id)
    }
}
