//! What an HTTP/2 client connection's task (`conn/h2.rs`, which owns the socket) shares with
//! its streams' tasks: weir-h2's codec, and per stream the request body received and not yet
//! taken and who waits for what. The request body as the upstream side reads it ([`EdgeBody`])
//! lives here, below the driver, so the layers that relay it can name it.

use crate::servers::h2_conn::{send_in_window, SendStream};
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use weir_h2::{Connection, StreamTable};

/// The connection's state, borrowed only between awaits.
pub(crate) type SharedConn = Rc<RefCell<EdgeConn>>;

pub(crate) struct EdgeConn {
    pub(crate) codec: Connection,
    /// The streams a task serves, by id: looked up for every frame received.
    pub(crate) slots: StreamTable<Slot>,
    /// The connection task, woken when a stream wrote something or gave window back.
    pub(crate) task: Option<Waker>,
    /// Streams whose answer is queued behind the client's window and whose request body nobody
    /// reads: reset (NO_ERROR) once the answer is out, as RFC 9113 §8.1 allows.
    pub(crate) reset_when_sent: Vec<u32>,
}

/// One stream's request body and waiters.
#[derive(Default)]
pub(crate) struct Slot {
    /// DATA payloads received, slices of the connection's read buffer.
    pub(crate) body: VecDeque<Bytes>,
    pub(crate) recv_ended: bool,
    pub(crate) trailers: Option<http::HeaderMap>,
    /// Reset by the client, or by the codec for the client's error.
    pub(crate) failed: bool,
    /// Nobody will read the body: what arrives is given back at once.
    pub(crate) body_dropped: bool,
    pub(crate) reader: Option<Waker>,
    pub(crate) writer: Option<Waker>,
}

impl EdgeConn {
    pub(crate) fn new(codec: Connection) -> EdgeConn {
        EdgeConn {
            codec,
            slots: StreamTable::new(),
            task: None,
            reset_when_sent: Vec::new(),
        }
    }

    pub(crate) fn slot(&mut self, id: u32) -> Option<&mut Slot> {
        self.slots.get_mut(id)
    }

    /// Wakes the connection task (to write what a stream queued).
    pub(crate) fn kick(&mut self) {
        if let Some(task) = self.task.take() {
            task.wake();
        }
    }

    /// `n` body bytes of stream `id` were used: the codec gives the windows back in batches.
    pub(crate) fn release(&mut self, id: u32, n: usize) {
        if n == 0 {
            return;
        }
        self.codec.release_capacity(id, n);
        if self.codec.has_output() {
            self.kick();
        }
    }
}

/// The stream was reset: its body cannot be read to its end.
#[derive(Debug)]
pub(crate) struct StreamReset;

/// An HTTP/2 client's request body: DATA payloads as they arrive (without a copy), then maybe
/// trailers. The reader gives each piece's window back once it has used it
/// ([`release_capacity`](EdgeBody::release_capacity)), so a slow upstream slows the client.
pub(crate) struct EdgeBody {
    conn: SharedConn,
    id: u32,
}

impl EdgeBody {
    pub(crate) fn new(conn: SharedConn, id: u32) -> EdgeBody {
        EdgeBody { conn, id }
    }

    pub(crate) fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Bytes, StreamReset>>> {
        let mut conn = self.conn.borrow_mut();
        let Some(slot) = conn.slot(self.id) else {
            return Poll::Ready(Some(Err(StreamReset)));
        };
        if slot.failed {
            return Poll::Ready(Some(Err(StreamReset)));
        }
        if let Some(data) = slot.body.pop_front() {
            return Poll::Ready(Some(Ok(data)));
        }
        if slot.recv_ended {
            return Poll::Ready(None);
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    pub(crate) async fn data(&mut self) -> Option<Result<Bytes, StreamReset>> {
        std::future::poll_fn(|cx| self.poll_data(cx)).await
    }

    /// The body has ended and every piece of it was taken.
    pub(crate) fn is_end_stream(&self) -> bool {
        let mut conn = self.conn.borrow_mut();
        conn.slot(self.id)
            .is_some_and(|s| s.recv_ended && s.body.is_empty() && !s.failed)
    }

    /// The trailers, once the body has ended (`None` if it ended without).
    pub(crate) fn poll_trailers(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<http::HeaderMap>, StreamReset>> {
        let mut conn = self.conn.borrow_mut();
        let Some(slot) = conn.slot(self.id) else {
            return Poll::Ready(Err(StreamReset));
        };
        if slot.failed {
            return Poll::Ready(Err(StreamReset));
        }
        if slot.recv_ended {
            return Poll::Ready(Ok(slot.trailers.take()));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }

    pub(crate) async fn trailers(&mut self) -> Result<Option<http::HeaderMap>, StreamReset> {
        std::future::poll_fn(|cx| self.poll_trailers(cx)).await
    }

    /// `n` bytes taken from this body were used (written on, or dropped).
    pub(crate) fn release_capacity(&mut self, n: usize) {
        self.conn.borrow_mut().release(self.id, n);
    }
}

impl Drop for EdgeBody {
    /// What arrived and is not read is given back; what arrives later is given back on arrival.
    fn drop(&mut self) {
        let mut conn = self.conn.borrow_mut();
        let Some(slot) = conn.slot(self.id) else {
            return;
        };
        slot.body_dropped = true;
        let unread: usize = slot.body.drain(..).map(|b| b.len()).sum();
        conn.release(self.id, unread);
    }
}

/// Moves an HTTP/2 client's body into an HTTP/2 upstream's stream as it arrives, each piece
/// once the server's window takes it (its window given back then), so a streaming call flows
/// both ways at once; trailers pass on, and a reset of the client's stream resets the
/// upstream's.
pub(crate) async fn pump_h2(mut body: EdgeBody, first: Option<Bytes>, mut send: SendStream) {
    let mut next = first;
    loop {
        let data = match next.take() {
            Some(data) => data,
            None => match body.data().await {
                None => break,
                Some(Ok(data)) => data,
                Some(Err(StreamReset)) => return send.send_reset(weir_h2::Reason::CANCEL),
            },
        };
        let len = data.len();
        let sent = send_in_window(&mut send, data).await;
        body.release_capacity(len);
        if sent.is_err() {
            return;
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => {
            let _ = send.send_trailers(trailers);
        }
        Ok(None) => {
            let _ = send.send_data(Bytes::new(), true);
        }
        Err(StreamReset) => send.send_reset(weir_h2::Reason::CANCEL),
    }
}
