//! `_bulk` batching on a worker, a group commit: while a bulk request to a node is in flight,
//! the parts of other bulks bound for the same node (same target, credentials and
//! `X-Opaque-Id`) wait in
//! one pending batch, sent as one request when the one in flight is answered; each waiting
//! part then gets its own items of the answer back. An idle lane sends at once, so a lone
//! bulk waits for nothing. Elasticsearch pays much of a bulk's cost per request (parsing,
//! coordination, a translog sync per shard), so under concurrent small bulks fewer, larger
//! requests carry more documents per second. The batch goes with the first waiting part's
//! head (so its client's address in `X-Forwarded-For`).

use super::items::{self, BulkItems};
use super::part::{send_part, weirs_answer, Answer};
use crate::http::codec::RequestHead;
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use bytes::Bytes;
use serde::Deserialize;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// A pending batch past this size is sent at once, beside the request in flight.
const MAX_BATCH_BYTES: usize = 16 << 20;

thread_local! {
    /// This worker thread's lanes: one per service, node, target and credentials with a
    /// request in flight. A worker is one thread, and its batches never leave it.
    static LANES: RefCell<HashMap<LaneKey, Lane>> = RefCell::default();
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct LaneKey {
    /// The service, by address: a reload's new service gets lanes of its own.
    service: usize,
    server: Option<usize>,
    target: Box<str>,
    authorization: Option<Bytes>,
    /// `X-Opaque-Id`: Elasticsearch names a request by it in its tasks and logs, so requests
    /// named differently never share one.
    opaque_id: Option<Bytes>,
}

#[derive(Default)]
struct Lane {
    in_flight: usize,
    pending: Option<Pending>,
}

struct Pending {
    head: RequestHead,
    from: Requester,
    body: Vec<u8>,
    /// Each waiting part: how many items it added, and where its answer goes.
    members: Vec<(usize, oneshot::Sender<Answer>)>,
}

/// A part's way to the cluster: its own request (the lane was idle), or a place in a batch.
pub(super) enum Joined {
    /// Send it: the lane counts this request in flight until its `Turn` is finished.
    First(Turn),
    /// Its share of a batch's answer, once the batch is answered.
    Member(oneshot::Receiver<Answer>),
}

/// A request in flight in a lane. `finish` it once it is answered: what waits behind it goes
/// then. Dropped unfinished (its exchange was given up), the waiting parts are answered as
/// lost rather than sent from wherever the drop happens.
pub(super) struct Turn {
    worker: Rc<Worker>,
    service: Arc<Service>,
    key: LaneKey,
    finished: bool,
}

impl Turn {
    /// A request in flight in `key`'s lane (already counted there).
    fn new(worker: &Rc<Worker>, service: &Arc<Service>, key: LaneKey) -> Turn {
        Turn {
            worker: worker.clone(),
            service: service.clone(),
            key,
            finished: false,
        }
    }

    /// The request was answered: the next batch (if any) goes now, on a task of this worker.
    pub(super) fn finish(mut self) {
        self.finished = true;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let next = LANES.with_borrow_mut(|lanes| {
            let lane = lanes.get_mut(&self.key)?;
            lane.in_flight = lane.in_flight.saturating_sub(1);
            // Unfinished, the batch waits for another request in flight, if there is one.
            let next = if self.finished || lane.in_flight == 0 {
                lane.pending.take()
            } else {
                None
            };
            if next.is_some() && self.finished {
                lane.in_flight += 1;
            } else if lane.in_flight == 0 && lane.pending.is_none() {
                lanes.remove(&self.key);
            }
            next
        });
        match next {
            // Spawned only from a finished turn: an exchange on the worker's task set.
            Some(pending) if self.finished => {
                dispatch(&self.worker, &self.service, self.key.clone(), pending)
            }
            // Its members' answers are dropped: each gets `lost`.
            _ => {}
        }
    }
}

/// Joins the lane of a part of `head` (`part`, `items` items) bound for `server`.
pub(super) fn join(
    worker: &Rc<Worker>,
    service: &Arc<Service>,
    server: Option<usize>,
    (head, from): (&RequestHead, &Requester),
    part: &[u8],
    items: usize,
) -> Joined {
    let key = LaneKey {
        service: Arc::as_ptr(service) as usize,
        server,
        target: head.target().into(),
        authorization: head.head.get("authorization").map(Bytes::copy_from_slice),
        opaque_id: head.head.get("x-opaque-id").map(Bytes::copy_from_slice),
    };
    let joined = LANES.with_borrow_mut(|lanes| {
        let lane = lanes.entry(key.clone()).or_default();
        if lane.in_flight == 0 {
            lane.in_flight = 1;
            return None;
        }
        let pending = lane.pending.get_or_insert_with(|| Pending {
            head: head.clone(),
            from: from.clone(),
            body: Vec::with_capacity(part.len() * 4),
            members: Vec::new(),
        });
        pending.body.extend_from_slice(part);
        let (answer, answered) = oneshot::channel();
        pending.members.push((items, answer));
        let full = pending.body.len() >= MAX_BATCH_BYTES;
        let batch = if full { lane.pending.take() } else { None };
        if batch.is_some() {
            lane.in_flight += 1;
        }
        Some((batch, answered))
    });
    let Some((batch, answered)) = joined else {
        return Joined::First(Turn::new(worker, service, key));
    };
    if let Some(batch) = batch {
        dispatch(worker, service, key, batch);
    }
    Joined::Member(answered)
}

/// Sends a batch on a task of this worker (counted in flight already), and hands each
/// member its items of the answer.
fn dispatch(worker: &Rc<Worker>, service: &Arc<Service>, key: LaneKey, batch: Pending) {
    let turn = Turn::new(worker, service, key);
    tokio::task::spawn_local(async move {
        let Pending {
            head,
            from,
            body,
            members,
        } = batch;
        let answer = send_part(
            &turn.worker,
            &turn.service,
            from,
            &head,
            body,
            turn.key.server,
        )
        .await;
        // What waits behind goes now, while the answer is shared out.
        turn.finish();
        let sizes: Vec<usize> = members.iter().map(|(items, _)| *items).collect();
        for ((_, member), share) in members.into_iter().zip(shares(&answer, &sizes)) {
            let _ = member.send(share);
        }
    });
}

/// An item's status, whatever its action.
#[derive(Deserialize)]
struct ItemStatus {
    status: u16,
}

/// Each member's answer: its items of a 200 with every item, with `errors` its own; else the
/// whole answer, whose failure then stands for each member's items.
fn shares(answer: &Answer, sizes: &[usize]) -> Vec<Answer> {
    let whole = || {
        sizes
            .iter()
            .map(|_| Answer {
                status: answer.status,
                product: answer.product.clone(),
                body: answer.body.clone(),
                items: None,
                in_doubt: answer.in_doubt,
            })
            .collect()
    };
    if sizes.len() == 1 {
        // A batch of one: its answer is the member's as it came.
        return whole();
    }
    let total: usize = sizes.iter().sum();
    let parsed = match items::cut(&answer.body) {
        Some(parsed) if answer.status == 200 && parsed.items.len() == total => parsed,
        _ => return whole(),
    };
    let mut answer_items = parsed.items.iter().map(|at| &answer.body[at.clone()]);
    sizes
        .iter()
        .map(|&n| {
            let mine: Vec<&[u8]> = answer_items.by_ref().take(n).collect();
            // Items are read only when the batch had an error: which member's was it?
            let errors = parsed.errors
                && mine.iter().any(|item| {
                    serde_json::from_slice::<HashMap<&str, ItemStatus>>(item)
                        .map(|actions| actions.values().any(|a| a.status >= 300))
                        .unwrap_or(true)
                });
            let mut body = Vec::with_capacity(48 + mine.iter().map(|i| i.len() + 1).sum::<usize>());
            body.extend_from_slice(
                format!("{{\"took\":{},\"errors\":{errors},\"items\":[", parsed.took).as_bytes(),
            );
            let mut at = Vec::with_capacity(mine.len());
            for (i, item) in mine.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                at.push(body.len()..body.len() + item.len());
                body.extend_from_slice(item);
            }
            body.extend_from_slice(b"]}");
            Answer {
                status: 200,
                product: answer.product.clone(),
                body: Bytes::from(body),
                items: Some(BulkItems {
                    took: parsed.took,
                    errors,
                    items: at,
                }),
                in_doubt: false,
            }
        })
        .collect()
}

/// A member whose batch was dropped before it was answered.
pub(super) fn lost() -> Answer {
    Answer {
        in_doubt: true,
        ..weirs_answer(502, b"the batch this part joined was not answered")
    }
}

#[cfg(test)]
mod tests {
    use super::shares as shares_of;
    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            product: Some(Bytes::from_static(b"Elasticsearch")),
            body: Bytes::from(body.to_string()),
            items: None,
            in_doubt: false,
        }
    }

    #[test]
    fn each_member_gets_its_items_and_its_own_errors() {
        let batch = answer(
            200,
            r#"{"took":7,"errors":true,"items":[{"index":{"_id":"a","status":201}},{"create":{"_id":"b","status":409,"error":{"type":"version_conflict_engine_exception"}}},{"delete":{"_id":"c","status":200}}]}"#,
        );
        let shares = shares(&batch, &[1, 2]);
        let bodies: Vec<serde_json::Value> = shares
            .iter()
            .map(|s| serde_json::from_slice(&s.body).unwrap())
            .collect();
        assert_eq!(bodies[0]["errors"], false);
        assert_eq!(bodies[0]["items"][0]["index"]["_id"], "a");
        assert_eq!(bodies[1]["errors"], true);
        assert_eq!(bodies[1]["took"], 7);
        assert_eq!(bodies[1]["items"].as_array().unwrap().len(), 2);
        assert_eq!(bodies[1]["items"][1]["delete"]["_id"], "c");
        assert!(shares
            .iter()
            .all(|s| s.status == 200 && s.product.is_some()));
        // Each share comes already cut, as a fresh cut of its body would be.
        for share in &shares {
            let given = share.items.as_ref().expect("a share is cut");
            let fresh = items::cut(&share.body).expect("a share is a bulk answer");
            assert_eq!(given.items, fresh.items);
            assert_eq!((given.took, given.errors), (fresh.took, fresh.errors));
        }
        // Without an error in the batch, nobody has one; a batch of one is passed as it came.
        let clean = answer(
            200,
            r#"{"took":2,"errors":false,"items":[{"index":{"status":201}},{"index":{"status":201}}]}"#,
        );
        for share in shares_of(&clean, &[1, 1]) {
            let body: serde_json::Value = serde_json::from_slice(&share.body).unwrap();
            assert_eq!(body["errors"], false);
        }
        assert_eq!(shares_of(&clean, &[2])[0].body, clean.body);
    }

    #[test]
    fn a_failed_or_mismatched_batch_stands_for_every_member() {
        for (status, body) in [
            (
                429,
                r#"{"error":{"type":"es_rejected_execution_exception"},"status":429}"#,
            ),
            (
                200,
                r#"{"took":1,"errors":false,"items":[{"index":{"status":201}}]}"#,
            ),
        ] {
            let shares = shares(&answer(status, body), &[1, 1]);
            assert_eq!(shares.len(), 2);
            assert!(shares
                .iter()
                .all(|s| s.status == status && s.body == body.as_bytes()));
        }
    }
}
