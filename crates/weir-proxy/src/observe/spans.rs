//! Finished spans on their way out: what a span records, each worker's pending spans, and the
//! bounded queue they are handed to without waiting, which the exporter thread empties.
//! Only sampled requests make spans; a full queue drops them and counts them.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::http::trace_context::{AttrValue, Attributes, SpanEvent};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Server,
    Client,
}

/// A finished span as the bytes of one `ScopeSpans.spans` field, written by the worker that
/// served it (`otlp::SpanWriter`): the exporter only concatenates them.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedSpan(pub Vec<u8>);

/// A finished span described field by field (a TCP connection's; `otlp::encode_record`
/// writes it).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    pub trace_id: u128,
    pub span_id: u64,
    /// 0: a root span.
    pub parent_id: u64,
    pub tracestate: Option<Box<[u8]>>,
    pub name: String,
    pub kind: SpanKind,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: Attributes,
    pub events: Vec<SpanEvent>,
    /// The span's status is Error (a server span's 5xx, a client span's failure or 4xx/5xx).
    pub error: bool,
}

/// Finished spans waiting for the exporter, from every worker. Workers hand theirs over
/// with `try_lock`, so a worker never waits for the exporter: while it holds the lock (only
/// to take the spans), they stay with the worker until its next try.
#[derive(Default)]
pub struct SpanQueue {
    spans: Mutex<Vec<EncodedSpan>>,
    /// `server.tracing.max_queue`, set by the exporter from the configuration in place.
    pub max: AtomicUsize,
    /// `server.tracing.batch`: a worker that fills a batch wakes the exporter.
    pub batch: AtomicUsize,
    /// Spans dropped because the queue was full (`weir_tracing_spans_dropped_total`).
    pub dropped: AtomicU64,
    /// Told when a batch is ready.
    pub ready: tokio::sync::Notify,
}

impl SpanQueue {
    /// Every span queued so far, leaving the queue empty.
    pub fn take(&self) -> Vec<EncodedSpan> {
        let mut taken = Vec::new();
        self.take_into(&mut taken);
        taken
    }

    /// Moves every span queued so far to the end of `into`. An empty `into` is swapped with
    /// the queue, which keeps its room for the next spans (taken whole, the queue grew again
    /// from nothing, a reallocation and a copy at every doubling).
    pub fn take_into(&self, into: &mut Vec<EncodedSpan>) {
        let mut spans = self.spans.lock().unwrap_or_else(|e| e.into_inner());
        if into.is_empty() {
            std::mem::swap(&mut *spans, into);
        } else {
            into.append(&mut spans);
        }
    }

    /// Moves `pending` into the queue if the lock is free now (else leaves them); what does
    /// not fit is dropped and counted.
    fn offer(&self, pending: &mut Vec<EncodedSpan>) {
        let Ok(mut spans) = self.spans.try_lock() else {
            return;
        };
        let room = self.max.load(Ordering::Relaxed).saturating_sub(spans.len());
        if pending.len() > room {
            let dropped = pending.len() - room;
            pending.truncate(room);
            self.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        spans.append(pending);
        let full = spans.len() >= self.batch.load(Ordering::Relaxed);
        drop(spans);
        if full {
            self.ready.notify_one();
        }
    }
}

/// A worker's finished spans, handed to the queue in groups (one lock per group, not per
/// span): when [`HAND_OVER_AT`] are pending, and on every tick.
#[derive(Default)]
pub struct WorkerSpans {
    pending: RefCell<Vec<EncodedSpan>>,
    queue: RefCell<Option<Arc<SpanQueue>>>,
}

/// Pending spans a worker hands over at once.
const HAND_OVER_AT: usize = 64;

impl WorkerSpans {
    /// Where this worker's spans go (a worker without one, as in the in-process tests, keeps
    /// none).
    pub fn attach(&self, queue: Arc<SpanQueue>) {
        *self.queue.borrow_mut() = Some(queue);
    }

    pub fn record(&self, span: EncodedSpan) {
        let queue = self.queue.borrow();
        let Some(queue) = queue.as_ref() else { return };
        let mut pending = self.pending.borrow_mut();
        // A queue whose lock stays taken must not make a worker hold spans without bound.
        if pending.len() >= queue.max.load(Ordering::Relaxed).max(HAND_OVER_AT) {
            queue.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.push(span);
        if pending.len() >= HAND_OVER_AT {
            queue.offer(&mut pending);
        }
    }

    /// Hands pending spans over (each tick, and when the worker stops).
    pub fn flush(&self) {
        let queue = self.queue.borrow();
        let Some(queue) = queue.as_ref() else { return };
        let mut pending = self.pending.borrow_mut();
        if !pending.is_empty() {
            queue.offer(&mut pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u64) -> EncodedSpan {
        EncodedSpan(id.to_le_bytes().to_vec())
    }

    #[test]
    fn spans_beyond_the_queue_are_dropped_and_counted() {
        let queue = Arc::new(SpanQueue::default());
        queue.max.store(100, Ordering::Relaxed);
        queue.batch.store(10, Ordering::Relaxed);
        let worker = WorkerSpans::default();
        worker.attach(queue.clone());
        for id in 0..150 {
            worker.record(span(id));
        }
        worker.flush();
        assert_eq!(queue.take().len(), 100);
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 50);
        // Emptied, it takes spans again.
        worker.record(span(1));
        worker.flush();
        assert_eq!(queue.take().len(), 1);
    }

    #[test]
    fn a_taken_lock_leaves_the_spans_with_the_worker() {
        let queue = Arc::new(SpanQueue::default());
        queue.max.store(1000, Ordering::Relaxed);
        let worker = WorkerSpans::default();
        worker.attach(queue.clone());
        worker.record(span(1));
        let held = queue.spans.lock().unwrap();
        worker.flush();
        drop(held);
        assert!(queue.take().is_empty());
        worker.flush();
        assert_eq!(queue.take().len(), 1);
    }
}
