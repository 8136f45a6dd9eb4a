//! Finished spans on their way out: each worker's pending spans (written by `otlp::SpanWriter`),
//! and the bounded queue they are handed to without waiting, which the exporter thread empties.
//! Only sampled requests make spans; a full queue drops them and counts them.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::observe::otlp::{SpanBytes, SpanKind, SpanRecord};
use crate::observe::otlp::{SpanIds, SpanWriter};

/// Finished spans waiting for the exporter, from every worker. Workers hand theirs over
/// with `try_lock`, so a worker never waits for the exporter: while it holds the lock (only
/// to take the spans), they stay with the worker until its next try.
#[derive(Default)]
pub struct SpanQueue {
    queued: Mutex<Queued>,
    /// `server.tracing.max_queue`, set by the exporter from the configuration in place.
    pub max: AtomicUsize,
    /// `server.tracing.batch`: a worker that fills a batch wakes the exporter.
    pub batch: AtomicUsize,
    /// Spans dropped because the queue was full (`weir_tracing_spans_dropped_total`).
    pub dropped: AtomicU64,
    /// Told when a batch is ready.
    pub ready: tokio::sync::Notify,
}

#[derive(Default)]
struct Queued {
    groups: Vec<SpanBytes>,
    spans: usize,
}

impl SpanQueue {
    /// Every span queued so far, leaving the queue empty.
    pub fn take(&self) -> Vec<SpanBytes> {
        let mut taken = Vec::new();
        self.take_into(&mut taken);
        taken
    }

    /// Moves every group of spans queued so far to the end of `into`.
    pub fn take_into(&self, into: &mut Vec<SpanBytes>) {
        let mut queued = self.queued.lock().unwrap_or_else(|e| e.into_inner());
        into.append(&mut queued.groups);
        queued.spans = 0;
    }

    /// Moves `pending` into the queue if the lock is free now (else leaves it); a group that
    /// does not fit is dropped and counted.
    fn offer(&self, pending: &mut SpanBytes) {
        let Ok(mut queued) = self.queued.try_lock() else {
            return;
        };
        let room = self
            .max
            .load(Ordering::Relaxed)
            .saturating_sub(queued.spans);
        let group = std::mem::take(pending);
        if group.spans > room {
            self.dropped
                .fetch_add(group.spans as u64, Ordering::Relaxed);
            return;
        }
        queued.spans += group.spans;
        queued.groups.push(group);
        let full = queued.spans >= self.batch.load(Ordering::Relaxed);
        drop(queued);
        if full {
            self.ready.notify_one();
        }
    }
}

/// A worker's finished spans, written into one buffer and handed to the queue as a group
/// (one lock and one allocation per group, not per span): when [`HAND_OVER_AT`] are
/// pending, and on every tick.
#[derive(Default)]
pub struct WorkerSpans {
    pending: RefCell<SpanBytes>,
    queue: RefCell<Option<Arc<SpanQueue>>>,
}

/// Pending spans a worker hands over at once.
const HAND_OVER_AT: usize = 64;

/// Room a worker's buffer starts with: a group of traced requests' spans, about 600 bytes
/// each.
const GROUP_BYTES: usize = HAND_OVER_AT * 640;

impl WorkerSpans {
    /// Where this worker's spans go (a worker without one, as in the in-process tests, keeps
    /// none).
    pub fn attach(&self, queue: Arc<SpanQueue>) {
        *self.queue.borrow_mut() = Some(queue);
    }

    /// Writes one span, `ids` of `kind` from `start_unix_nano`: `describe` names it and adds
    /// its attributes and events, and says whether its status is Error; it ends now.
    pub fn write(
        &self,
        ids: SpanIds<'_>,
        kind: SpanKind,
        start_unix_nano: u64,
        describe: impl FnOnce(&mut SpanWriter<'_>) -> bool,
    ) {
        self.write_with(|out| {
            let mut span = SpanWriter::begin(out, ids, kind, start_unix_nano);
            let error = describe(&mut span);
            span.finish(crate::http::trace_context::unix_nanos(), error);
        });
    }

    /// Writes a span described as a record.
    pub fn write_record(&self, span: &SpanRecord) {
        self.write_with(|out| crate::observe::otlp::write_record(out, span));
    }

    fn write_with(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let queue = self.queue.borrow();
        let Some(queue) = queue.as_ref() else { return };
        let mut pending = self.pending.borrow_mut();
        // A queue whose lock stays taken must not make a worker hold spans without bound.
        if pending.spans >= queue.max.load(Ordering::Relaxed).max(HAND_OVER_AT) {
            queue.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if pending.bytes.capacity() == 0 {
            pending.bytes.reserve(GROUP_BYTES);
        }
        write(&mut pending.bytes);
        pending.spans += 1;
        if pending.spans >= HAND_OVER_AT {
            queue.offer(&mut pending);
        }
    }

    /// Hands pending spans over (each tick, and when the worker stops).
    pub fn flush(&self) {
        let queue = self.queue.borrow();
        let Some(queue) = queue.as_ref() else { return };
        let mut pending = self.pending.borrow_mut();
        if pending.spans > 0 {
            queue.offer(&mut pending);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(id: u64) -> SpanRecord {
        SpanRecord {
            trace_id: 1,
            span_id: id,
            parent_id: 0,
            tracestate: None,
            name: "GET".into(),
            kind: SpanKind::Server,
            start_unix_nano: 1,
            end_unix_nano: 2,
            attributes: Vec::new(),
            events: Vec::new(),
            error: false,
        }
    }

    fn spans_in(groups: &[SpanBytes]) -> usize {
        groups.iter().map(|g| g.spans).sum()
    }

    #[test]
    fn spans_beyond_the_queue_are_dropped_and_counted() {
        let queue = Arc::new(SpanQueue::default());
        queue.max.store(100, Ordering::Relaxed);
        queue.batch.store(10, Ordering::Relaxed);
        let worker = WorkerSpans::default();
        worker.attach(queue.clone());
        for id in 0..150 {
            worker.write_record(&span(id));
        }
        worker.flush();
        // Handed over in groups of 64: the third group (22 spans) finds room for 36.
        let taken = queue.take();
        assert_eq!(spans_in(&taken), 64 + 22);
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 64);
        // Emptied, it takes spans again.
        worker.write_record(&span(1));
        worker.flush();
        assert_eq!(spans_in(&queue.take()), 1);
    }

    #[test]
    fn a_taken_lock_leaves_the_spans_with_the_worker() {
        let queue = Arc::new(SpanQueue::default());
        queue.max.store(1000, Ordering::Relaxed);
        let worker = WorkerSpans::default();
        worker.attach(queue.clone());
        worker.write_record(&span(1));
        let held = queue.queued.lock().unwrap();
        worker.flush();
        drop(held);
        assert!(queue.take().is_empty());
        worker.flush();
        assert_eq!(spans_in(&queue.take()), 1);
    }
}
