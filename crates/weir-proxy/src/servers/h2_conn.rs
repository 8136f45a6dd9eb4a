//! One multiplexed HTTP/2 connection to a server on weir's own codec (`weir-h2`'s client side,
//! sans-IO). Its task owns the socket: it writes the codec's output with vectored writes,
//! reads into it, and hands each stream's events to the stream's handles; the handles
//! ([`SendStream`], [`ResponseFuture`], [`RecvStream`]) queue frames in the codec and wake
//! the task. A stream both of whose handles are dropped before it ended is reset (CANCEL).

use crate::io::h2_output;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;

use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite};
use weir_h2::{ClientConnection, ClientEvent, HeaderBlock, Reason, StreamTable};

/// Body bytes a stream may have queued in the codec (waiting for the server's window or the
/// socket) before its sender waits: the `h2` crate's send buffer was `FLUSH_AT * 4` (the
/// relay's flush size, `reply/relay.rs`, a layer above).
const SEND_LIMIT: usize = 256 * 1024;

/// The stream, or the whole connection, failed: reset by the server, refused, or gone.
#[derive(Debug, Clone, Copy)]
pub struct StreamGone;

/// The connection's state, borrowed only between awaits.
pub(crate) type SharedUp = Rc<RefCell<UpConn>>;

pub(crate) struct UpConn {
    pub(crate) codec: ClientConnection,
    /// By stream id: looked up for every frame received.
    slots: StreamTable<Slot>,
    /// The connection task, woken when a stream queued something.
    task: Option<Waker>,
    /// The socket failed or closed, or the codec found a connection error.
    failed: bool,
    /// The pool let it go: it ends once its last stream has.
    abandoned: bool,
}

/// One stream's response as received and not yet taken, and who waits for what.
#[derive(Default)]
struct Slot {
    head: Option<ResponseHead>,
    body: VecDeque<Bytes>,
    recv_ended: bool,
    trailers: Option<HeaderBlock>,
    /// Reset (or refused) by the server, or lost with the connection.
    failed: bool,
    /// Handles alive: the sender, and the response future then body.
    handles: u8,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// A response head: the status, the fields, and whether the head ended the stream.
pub struct ResponseHead {
    pub status: u16,
    pub fields: HeaderBlock,
    pub end_stream: bool,
}

impl UpConn {
    pub(crate) fn new(codec: ClientConnection) -> SharedUp {
        Rc::new(RefCell::new(UpConn {
            codec,
            slots: StreamTable::new(),
            task: None,
            failed: false,
            abandoned: false,
        }))
    }

    fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.slots.get_mut(id)
    }

    fn kick(&mut self) {
        if let Some(task) = self.task.take() {
            task.wake();
        }
    }

    /// Whether it takes new streams: up, and no GOAWAY came.
    pub(crate) fn usable(&self) -> bool {
        !self.failed && !self.abandoned && self.codec.goaway_received().is_none()
    }

    /// Let go by the pool, and no stream left: time to close.
    fn finished(&self) -> bool {
        self.abandoned && self.slots.is_empty() && self.codec.open_streams() == 0
    }

    /// The pool let it go (the last request's handle dropped it): it closes once idle.
    pub(crate) fn abandon(&mut self) {
        self.abandoned = true;
        self.kick();
    }

    /// A handle of stream `id` was dropped; with the last, the stream is reset if still open.
    fn drop_handle(&mut self, id: u32) {
        let Some(i) = self.slots.position(id) else {
            return;
        };
        let slot = &mut self.slots[i];
        slot.handles -= 1;
        if slot.handles > 0 {
            return;
        }
        let unread: usize = slot.body.iter().map(Bytes::len).sum();
        self.slots.swap_remove(i);
        self.codec.release_capacity(id, unread);
        if self.codec.is_open(id) {
            self.codec.send_reset(id, Reason::CANCEL);
        }
        self.kick();
    }
}

/// Opens a stream with the request head; its sender and its response.
pub(crate) fn send_request<'f>(
    conn: &SharedUp,
    pseudo: [&[u8]; 4],
    fields: impl IntoIterator<Item = (&'f [u8], &'f [u8])>,
    end_stream: bool,
) -> Result<(ResponseFuture, SendStream), StreamGone> {
    let mut up = conn.borrow_mut();
    if !up.usable() {
        return Err(StreamGone);
    }
    let [method, scheme, authority, path] = pseudo;
    let id = up
        .codec
        .send_request(method, scheme, authority, path, fields, end_stream)
        .map_err(|_| StreamGone)?;
    up.slots.push(
        id,
        Slot {
            handles: 2,
            ..Slot::default()
        },
    );
    up.kick();
    let handle = || Handle {
        conn: conn.clone(),
        id,
    };
    Ok((ResponseFuture(Some(handle())), SendStream(handle())))
}

/// A stream's place on its connection, dropped with the handle that holds it.
struct Handle {
    conn: SharedUp,
    id: u32,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.conn.borrow_mut().drop_handle(self.id);
    }
}

/// The request's sending side.
pub struct SendStream(Handle);

impl SendStream {
    fn queue(
        &mut self,
        send: impl FnOnce(&mut ClientConnection, u32) -> Result<(), weir_h2::SendError>,
    ) -> Result<(), StreamGone> {
        let mut up = self.0.conn.borrow_mut();
        let failed = up.failed || up.slot(self.0.id).is_none_or(|s| s.failed);
        if failed {
            return Err(StreamGone);
        }
        send(&mut up.codec, self.0.id).map_err(|_| StreamGone)?;
        up.kick();
        Ok(())
    }

    /// Queues body bytes (no copy); `send_in_window` waits for room after.
    pub fn send_data(&mut self, data: Bytes, end_stream: bool) -> Result<(), StreamGone> {
        self.queue(|codec, id| codec.send_data(id, data, end_stream))
    }

    /// Ends the request with trailers.
    pub fn send_trailers(&mut self, trailers: http::HeaderMap) -> Result<(), StreamGone> {
        let fields = trailers
            .iter()
            .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
        self.queue(|codec, id| codec.send_trailers(id, fields))
    }

    /// Resets the stream (the client's body failed, say).
    pub fn send_reset(&mut self, reason: Reason) {
        let mut up = self.0.conn.borrow_mut();
        up.codec.send_reset(self.0.id, reason);
        up.kick();
    }

    /// Ready once the stream's queued bytes are below [`SEND_LIMIT`]: the server's window
    /// and the socket have taken the rest.
    pub fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamGone>> {
        let mut up = self.0.conn.borrow_mut();
        let id = self.0.id;
        if up.failed || up.slot(id).is_none_or(|s| s.failed) {
            return Poll::Ready(Err(StreamGone));
        }
        if !up.codec.is_open(id) {
            // Ended (the response may be complete before the request is): nothing to wait for.
            return Poll::Ready(Ok(()));
        }
        if up.codec.queued_bytes(id) + up.codec.output_len() < SEND_LIMIT {
            return Poll::Ready(Ok(()));
        }
        if let Some(slot) = up.slot(id) {
            slot.writer = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// The response head to come; then the body's handle.
pub struct ResponseFuture(Option<Handle>);

impl std::future::Future for ResponseFuture {
    type Output = Result<(ResponseHead, RecvStream), StreamGone>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(handle) = self.0.as_ref() else {
            return Poll::Ready(Err(StreamGone));
        };
        {
            let mut up = handle.conn.borrow_mut();
            let failed = up.failed;
            let Some(slot) = up.slot(handle.id) else {
                return Poll::Ready(Err(StreamGone));
            };
            if slot.head.is_none() {
                if slot.failed || failed {
                    return Poll::Ready(Err(StreamGone));
                }
                slot.reader = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        let Some(handle) = self.0.take() else {
            return Poll::Ready(Err(StreamGone));
        };
        let head = handle
            .conn
            .borrow_mut()
            .slot(handle.id)
            .and_then(|s| s.head.take());
        match head {
            Some(head) => Poll::Ready(Ok((head, RecvStream(handle)))),
            None => Poll::Ready(Err(StreamGone)),
        }
    }
}

/// The response body: DATA payloads as they arrive (slices of the read buffer), then maybe
/// trailers. The reader gives the window back with [`release_capacity`](Self::release_capacity)
/// once it has used the bytes, so a slow client slows the server.
pub struct RecvStream(Handle);

impl RecvStream {
    pub fn poll_data(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Bytes, StreamGone>>> {
        let mut up = self.0.conn.borrow_mut();
        let lost = up.failed;
        let Some(slot) = up.slot(self.0.id) else {
            return Poll::Ready(Some(Err(StreamGone)));
        };
        if let Some(data) = slot.body.pop_front() {
            return Poll::Ready(Some(Ok(data)));
        }
        if slot.recv_ended {
            return Poll::Ready(None);
        }
        if slot.failed || lost {
            return Poll::Ready(Some(Err(StreamGone)));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    pub async fn data(&mut self) -> Option<Result<Bytes, StreamGone>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }

    /// The trailers once the body has ended (`None` if it ended without).
    pub fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<http::HeaderMap>, StreamGone>> {
        let mut up = self.0.conn.borrow_mut();
        let lost = up.failed;
        let Some(slot) = up.slot(self.0.id) else {
            return Poll::Ready(Err(StreamGone));
        };
        if slot.recv_ended {
            let trailers = slot.trailers.take().map(|fields| {
                let mut map = http::HeaderMap::with_capacity(fields.len());
                for (name, value) in fields.iter() {
                    if let (Ok(n), Ok(v)) = (
                        http::HeaderName::from_bytes(name),
                        http::HeaderValue::from_bytes(value),
                    ) {
                        map.append(n, v);
                    }
                }
                map
            });
            return Poll::Ready(Ok(trailers));
        }
        if slot.failed || lost {
            return Poll::Ready(Err(StreamGone));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    /// The body has ended and all of it (trailers too) was taken.
    pub fn is_end_stream(&self) -> bool {
        let mut up = self.0.conn.borrow_mut();
        up.slot(self.0.id)
            .is_some_and(|s| s.recv_ended && s.body.is_empty() && s.trailers.is_none() && !s.failed)
    }

    /// `n` bytes of this body were used: the codec gives the windows back in batches.
    pub fn release_capacity(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let mut up = self.0.conn.borrow_mut();
        up.codec.release_capacity(self.0.id, n);
        if up.codec.has_output() {
            up.kick();
        }
    }
}

/// Sends `data` and waits until the stream's queue is below its limit again.
pub(crate) async fn send_in_window(send: &mut SendStream, data: Bytes) -> Result<(), StreamGone> {
    send.send_data(data, false)?;
    std::future::poll_fn(|cx| send.poll_room(cx)).await
}

/// Runs the connection until it fails, the server closes it, or the pool let it go and its
/// last stream ended (then GOAWAY is written first).
pub(crate) async fn drive<S: AsyncRead + AsyncWrite + Unpin>(mut io: S, conn: SharedUp) {
    loop {
        let closed = std::future::poll_fn(|cx| poll_drive(&mut io, &conn, cx)).await;
        if closed {
            let mut up = conn.borrow_mut();
            up.failed = true;
            for slot in up.slots.iter_mut() {
                slot.failed = true;
                wake(slot);
            }
            return;
        }
        let finished = {
            let mut up = conn.borrow_mut();
            let finished = up.finished();
            if finished {
                up.codec.send_goaway(Reason::NO_ERROR);
            }
            finished
        };
        if finished {
            let _ = std::future::poll_fn(|cx| {
                let mut up = conn.borrow_mut();
                match write_output(&mut io, &mut up, cx) {
                    Err(_) => Poll::Ready(()),
                    Ok(()) if !up.codec.has_output() => Poll::Ready(()),
                    Ok(()) => Poll::Pending,
                }
            })
            .await;
            conn.borrow_mut().failed = true;
            return;
        }
    }
}

fn wake(slot: &mut Slot) {
    if let Some(reader) = slot.reader.take() {
        reader.wake();
    }
    if let Some(writer) = slot.writer.take() {
        writer.wake();
    }
}

/// Writes and reads until the connection closes (`true`) or the pool's abandonment needs a
/// look (`false`).
fn poll_drive<S: AsyncRead + AsyncWrite + Unpin>(
    io: &mut S,
    conn: &SharedUp,
    cx: &mut Context<'_>,
) -> Poll<bool> {
    let mut up = conn.borrow_mut();
    let up = &mut *up;
    loop {
        if write_output(io, up, cx).is_err() {
            return Poll::Ready(true);
        }
        if take_events(up) {
            // A connection error: the GOAWAY goes out if the socket takes it now.
            let _ = write_output(io, up, cx);
            return Poll::Ready(true);
        }
        if up.codec.has_output() && !up.codec.is_closed() {
            // Events queued frames (acks, window updates): written before reading on.
            if write_output(io, up, cx).is_err() {
                return Poll::Ready(true);
            }
        }
        if up.finished() {
            return Poll::Ready(false);
        }
        match tokio_util::io::poll_read_buf(Pin::new(&mut *io), cx, up.codec.input()) {
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => return Poll::Ready(true),
            Poll::Ready(Ok(_)) => continue,
            Poll::Pending => {
                if up.codec.has_output() {
                    // Written above as far as the socket took it; its readiness wakes us.
                    if write_output(io, up, cx).is_err() {
                        return Poll::Ready(true);
                    }
                }
                up.task = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
    }
}

/// Writes what the socket takes of the codec's output; wakes the senders waiting for room.
fn write_output<S: AsyncWrite + Unpin>(
    io: &mut S,
    up: &mut UpConn,
    cx: &mut Context<'_>,
) -> std::io::Result<()> {
    if h2_output::write_output(io, &mut up.codec, cx)? {
        wake_writers(&mut up.slots);
    }
    Ok(())
}

fn wake_writers(slots: &mut StreamTable<Slot>) {
    for slot in slots.iter_mut() {
        if let Some(writer) = slot.writer.take() {
            writer.wake();
        }
    }
}

/// Hands the codec's events to the streams; `true` on a connection error.
fn take_events(up: &mut UpConn) -> bool {
    while let Some(event) = up.codec.poll_event() {
        match event {
            ClientEvent::Response {
                stream_id,
                status,
                fields,
                end_stream,
                ..
            } => {
                if let Some(slot) = up.slot(stream_id) {
                    slot.head = Some(ResponseHead {
                        status,
                        fields,
                        end_stream,
                    });
                    slot.recv_ended = end_stream;
                    wake(slot);
                }
            }
            ClientEvent::Data {
                stream_id,
                data,
                end_stream,
            } => match up.slots.get_mut(stream_id) {
                Some(slot) => {
                    if !data.is_empty() {
                        slot.body.push_back(data);
                    }
                    slot.recv_ended |= end_stream;
                    if let Some(reader) = slot.reader.take() {
                        reader.wake();
                    }
                }
                // Nobody reads it: its window goes back at once.
                None => up.codec.release_capacity(stream_id, data.len()),
            },
            ClientEvent::Trailers { stream_id, fields } => {
                if let Some(slot) = up.slot(stream_id) {
                    slot.trailers = Some(fields);
                    slot.recv_ended = true;
                    wake(slot);
                }
            }
            ClientEvent::Reset { stream_id, .. } => {
                if let Some(slot) = up.slot(stream_id) {
                    slot.failed = true;
                    wake(slot);
                }
            }
            ClientEvent::Settings | ClientEvent::WindowUpdate { .. } => wake_writers(&mut up.slots),
            ClientEvent::GoAway { .. } | ClientEvent::Ping { .. } => {}
            ClientEvent::ConnectionError { .. } => return true,
        }
    }
    false
}
