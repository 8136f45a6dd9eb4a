//! What the server and client sides of a connection share: taking whole frames off the read
//! buffer, the parsing of connection-level frames, receive windows given back in batches, a
//! stream's send queue under the windows, and header blocks awaiting CONTINUATION frames.

use crate::frame::{self, Head, Reason};
use crate::hpack::{Encoder, Indexing};
use crate::output::Output;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use std::collections::VecDeque;

/// The methods both sides' connections have alike over their `input` and `output` fields:
/// reading into the codec and writing what it queued.
macro_rules! buffer_methods {
    () => {
        /// The read buffer, with room for a read worth a syscall: read the socket into it.
        pub fn input(&mut self) -> &mut BytesMut {
            crate::shared::read_room(&mut self.input)
        }

        /// Copies received bytes in (for callers that do not read into `input()`).
        pub fn receive(&mut self, bytes: &[u8]) {
            self.input.extend_from_slice(bytes);
        }

        pub fn has_output(&self) -> bool {
            !self.output.is_empty()
        }

        /// Bytes waiting to be written (a caller's bound on what it queues before the socket
        /// takes it).
        pub fn output_len(&self) -> usize {
            self.output.len()
        }

        /// What to write next, as slices for a vectored write; returns how many it filled.
        pub fn output_slices<'a>(&'a self, dst: &mut [std::io::IoSlice<'a>]) -> usize {
            self.output.slices(dst)
        }
    };
}
pub(crate) use buffer_methods;

/// Our first SETTINGS, then the WINDOW_UPDATE that raises the connection's receive window
/// from 65,535 to `connection_window`; returns that window.
pub(crate) fn write_first_settings(
    out: &mut BytesMut,
    settings: &[(u16, u32)],
    connection_window: u32,
) -> RecvWindow {
    frame::write_settings(out, settings);
    let mut recv = RecvWindow::new(frame::DEFAULT_WINDOW);
    let raise = connection_window.saturating_sub(frame::DEFAULT_WINDOW);
    if raise > 0 {
        frame::write_window_update(out, 0, raise);
        recv.window += raise as i64;
    }
    recv
}

/// The read buffer with room for a read worth a syscall.
#[inline]
pub(crate) fn read_room(input: &mut BytesMut) -> &mut BytesMut {
    if input.capacity() - input.len() < 1024 {
        input.reserve(16 * 1024);
    }
    input
}

/// The next whole frame off `input` (its payload a slice of the buffer), `None` until one has
/// arrived whole, or FRAME_SIZE_ERROR above our SETTINGS_MAX_FRAME_SIZE (§4.2).
// Inlined into each side's event loop: out of line it cost 100-440 instructions a request.
#[inline(always)]
pub(crate) fn take_frame(
    input: &mut BytesMut,
    max_frame_size: u32,
) -> Result<Option<(Head, Bytes)>, Reason> {
    if input.len() < frame::HEADER_LEN {
        return Ok(None);
    }
    let head = Head::parse(&input[..frame::HEADER_LEN]);
    if head.len > max_frame_size as usize {
        return Err(Reason::FRAME_SIZE_ERROR);
    }
    let whole = frame::HEADER_LEN + head.len;
    if input.len() < whole {
        input.reserve(whole - input.len());
        return Ok(None);
    }
    let mut payload = input.split_to(whole).freeze();
    payload.advance(frame::HEADER_LEN);
    Ok(Some((head, payload)))
}

/// How a side takes each frame type; [`dispatch`](OnFrame::dispatch) routes a frame there.
pub(crate) trait OnFrame {
    type Step;
    fn on_data(&mut self, head: Head, payload: Bytes) -> Result<Self::Step, Reason>;
    fn on_headers(&mut self, head: Head, payload: Bytes) -> Result<Self::Step, Reason>;
    fn on_priority(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    fn on_rst_stream(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    fn on_settings(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    fn on_ping(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    fn on_goaway(&mut self, head: Head, payload: Bytes) -> Result<Self::Step, Reason>;
    fn on_window_update(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    fn on_continuation(&mut self, head: Head, payload: &[u8]) -> Result<Self::Step, Reason>;
    /// What a frame of an unknown type yields: nothing (§4.1).
    fn ignored(&mut self) -> Self::Step;
    /// The stream whose header block awaits CONTINUATION frames, if one does.
    fn continuing(&self) -> Option<u32>;

    fn dispatch(&mut self, head: Head, payload: Bytes) -> Result<Self::Step, Reason> {
        if let Some(id) = self.continuing() {
            // §6.10: nothing may come between HEADERS and its last CONTINUATION.
            if head.kind != frame::CONTINUATION || head.stream_id != id {
                return Err(Reason::PROTOCOL_ERROR);
            }
        }
        match head.kind {
            frame::DATA => self.on_data(head, payload),
            frame::HEADERS => self.on_headers(head, payload),
            frame::PRIORITY => self.on_priority(head, &payload),
            frame::RST_STREAM => self.on_rst_stream(head, &payload),
            frame::SETTINGS => self.on_settings(head, &payload),
            // §8.4: a client cannot push, and weir's client disables push.
            frame::PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            frame::PING => self.on_ping(head, &payload),
            frame::GOAWAY => self.on_goaway(head, payload),
            frame::WINDOW_UPDATE => self.on_window_update(head, &payload),
            frame::CONTINUATION => self.on_continuation(head, &payload),
            _ => Ok(self.ignored()),
        }
    }
}

/// A DATA frame (§6.1) counted against the connection's receive window and stripped of its
/// padding; returns the padding's length and END_STREAM.
#[inline]
pub(crate) fn data_frame(
    recv: &mut RecvWindow,
    head: &Head,
    payload: &mut Bytes,
) -> Result<(usize, bool), Reason> {
    if !recv.take(head.len) {
        return Err(Reason::FLOW_CONTROL_ERROR);
    }
    frame::unpad(head, payload)?;
    Ok((
        head.len - payload.len(),
        head.flags & frame::END_STREAM != 0,
    ))
}

/// A SETTINGS frame's entries (§6.5), once its framing is checked.
pub(crate) fn settings_entries<'p>(
    head: &Head,
    payload: &'p [u8],
) -> Result<impl Iterator<Item = (u16, u32)> + 'p, Reason> {
    if head.stream_id != 0 {
        return Err(Reason::PROTOCOL_ERROR);
    }
    if payload.len() % 6 != 0 {
        return Err(Reason::FRAME_SIZE_ERROR);
    }
    Ok(payload.chunks_exact(6).map(|s| {
        (
            u16::from_be_bytes([s[0], s[1]]),
            u32::from_be_bytes([s[2], s[3], s[4], s[5]]),
        )
    }))
}

/// A PING frame's payload (§6.7).
pub(crate) fn ping_payload(head: &Head, payload: &[u8]) -> Result<[u8; 8], Reason> {
    if head.stream_id != 0 {
        return Err(Reason::PROTOCOL_ERROR);
    }
    <[u8; 8]>::try_from(payload).map_err(|_| Reason::FRAME_SIZE_ERROR)
}

/// A GOAWAY frame's last stream id, error code and debug data (§6.8).
pub(crate) fn goaway_fields(
    head: &Head,
    mut payload: Bytes,
) -> Result<(u32, Reason, Bytes), Reason> {
    if head.stream_id != 0 {
        return Err(Reason::PROTOCOL_ERROR);
    }
    if payload.len() < 8 {
        return Err(Reason::FRAME_SIZE_ERROR);
    }
    let last_stream_id = payload.get_u32() & 0x7fff_ffff;
    let reason = Reason(payload.get_u32());
    Ok((last_stream_id, reason, payload))
}

/// A WINDOW_UPDATE frame's increment (§6.9), zero included (the caller decides its error).
#[inline]
pub(crate) fn window_increment(payload: &[u8]) -> Result<i64, Reason> {
    let bytes = <[u8; 4]>::try_from(payload).map_err(|_| Reason::FRAME_SIZE_ERROR)?;
    Ok((u32::from_be_bytes(bytes) & 0x7fff_ffff) as i64)
}

/// §6.9.2: a new SETTINGS_INITIAL_WINDOW_SIZE moves every open stream's send window by the
/// difference; none may pass 2^31-1.
pub(crate) fn shift_windows<'a>(
    windows: impl Iterator<Item = &'a mut i64>,
    delta: i64,
) -> Result<(), Reason> {
    for window in windows {
        *window += delta;
        if *window > frame::MAX_WINDOW {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
    }
    Ok(())
}

/// A receive window (a stream's or the connection's), given back in batches.
pub(crate) struct RecvWindow {
    pub window: i64,
    /// Bytes the caller released that the peer has not been given back yet.
    pub unacked: u32,
}

impl RecvWindow {
    pub fn new(size: u32) -> RecvWindow {
        RecvWindow {
            window: size as i64,
            unacked: 0,
        }
    }

    /// Counts `n` bytes received; `false` if they overran the window.
    #[inline]
    pub fn take(&mut self, n: usize) -> bool {
        self.window -= n as i64;
        self.window >= 0
    }

    /// `n` bytes were released: a WINDOW_UPDATE for `id` is written once `batch` are owed.
    #[inline]
    pub fn give_back(&mut self, n: u32, batch: u32, id: u32, out: &mut BytesMut) {
        self.unacked += n;
        if self.unacked >= batch {
            frame::write_window_update(out, id, self.unacked);
            self.window += self.unacked as i64;
            self.unacked = 0;
        }
    }
}

/// A stream's sending side: the peer's window for it and what waits for that window.
pub(crate) struct SendQueue {
    pub window: i64,
    pub pending: VecDeque<Bytes>,
    /// Trailers written once `pending` drains: a whole HEADERS block, encoded without the
    /// dynamic table so it does not depend on when it goes out.
    pub trailers: Option<Bytes>,
    /// END_STREAM queued by the caller (sent once `pending` drains).
    pub ended: bool,
    /// END_STREAM written to the output.
    pub closed: bool,
}

/// Where a flush leaves a stream's frames, and how large they may be.
pub(crate) struct FlushTo<'a> {
    pub connection_window: &'a mut i64,
    pub max_frame: u32,
    pub output: &'a mut Output,
    pub encoder: &'a mut Encoder,
}

impl SendQueue {
    pub fn new(window: i64, ended: bool) -> SendQueue {
        SendQueue {
            window,
            pending: VecDeque::new(),
            trailers: None,
            ended,
            closed: ended,
        }
    }

    /// Writes what the windows allow of the queue, then the end (trailers or an empty DATA
    /// frame with END_STREAM); returns whether the end went out now.
    #[inline]
    pub fn flush(&mut self, id: u32, to: FlushTo<'_>) -> bool {
        let max_frame = to.max_frame as i64;
        while let Some(front) = self.pending.front_mut() {
            let room = self.window.min(*to.connection_window).min(max_frame);
            if room <= 0 {
                return false;
            }
            let n = (room as usize).min(front.len());
            let chunk = match n == front.len() {
                true => self.pending.pop_front().unwrap_or_default(),
                false => front.split_to(n),
            };
            self.window -= n as i64;
            *to.connection_window -= n as i64;
            let last = self.pending.is_empty() && self.ended && self.trailers.is_none();
            let flags = if last { frame::END_STREAM } else { 0 };
            frame::write_head(&mut to.output.tail, n, frame::DATA, flags, id);
            to.output.push_payload(chunk);
            if last {
                self.closed = true;
                return true;
            }
        }
        if !self.ended || self.closed {
            return false;
        }
        self.closed = true;
        let tail = &mut to.output.tail;
        match self.trailers.take() {
            Some(block) => {
                let start = tail.len();
                tail.put_bytes(0, frame::HEADER_LEN);
                // A table size update owed to the peer goes in the first block sent (RFC
                // 7541 §4.2), whichever that is.
                to.encoder.begin(tail);
                tail.extend_from_slice(&block);
                let max = to.max_frame as usize;
                frame::frame_header_block(tail, start, id, frame::END_STREAM, max);
            }
            // An empty DATA frame ends the stream; it needs no window.
            None => frame::write_head(tail, 0, frame::DATA, frame::END_STREAM, id),
        }
        true
    }

    pub fn queued_bytes(&self) -> usize {
        self.pending.iter().map(Bytes::len).sum()
    }
}

/// A trailers block, encoded without the dynamic table so it may wait behind data.
pub(crate) fn trailer_block<'f>(
    huffman: bool,
    fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
) -> Bytes {
    let mut plain = Encoder::new(Indexing::None, huffman);
    let mut block = BytesMut::new();
    for (n, v) in fields {
        plain.field(n, v, &mut block);
    }
    block.freeze()
}

/// A header block awaiting CONTINUATION frames; `target` says what it opens or ends.
pub(crate) struct PartialBlock<T> {
    pub stream_id: u32,
    pub end_stream: bool,
    pub target: T,
    pub fragments: BytesMut,
    pub continuations: u32,
}

impl<T> PartialBlock<T> {
    pub fn new(stream_id: u32, end_stream: bool, target: T, first: &[u8]) -> Box<Self> {
        let mut fragments = BytesMut::with_capacity(first.len() * 2);
        fragments.extend_from_slice(first);
        Box::new(PartialBlock {
            stream_id,
            end_stream,
            target,
            fragments,
            continuations: 0,
        })
    }

    /// Adds a CONTINUATION frame's fragment; ENHANCE_YOUR_CALM past `max_frames` frames or a
    /// block far larger than `max_list` (the CONTINUATION flood, CVE-2024-27316): the block
    /// may compress (Huffman, 5 bits a byte at best) but is never far larger than the list it
    /// encodes.
    pub fn append(&mut self, payload: &[u8], max_frames: u32, max_list: u32) -> Result<(), Reason> {
        self.continuations += 1;
        self.fragments.extend_from_slice(payload);
        let raw_limit = 2 * max_list as usize + 1024;
        if self.continuations > max_frames || self.fragments.len() > raw_limit {
            return Err(Reason::ENHANCE_YOUR_CALM);
        }
        Ok(())
    }
}
