//! One part of a `_bulk` sent to a node and its answer read whole (`send_part`), for the
//! split (`bulk.rs`) and the batches (`batch.rs`): through the service's usual tries as a
//! request weir sends of its own (`actions/subrequest.rs`) with the part in memory; weir's own
//! failures become an Elasticsearch-shaped answer, so every part has one.

use super::items::BulkItems;
use super::{error_type, es_error, plain_request_head};
use crate::actions::subrequest;
use crate::http::codec::RequestHead;
use crate::http::error::LocalError;
use crate::servers::balancer::Service;
use crate::upstream::detached::Requester;
use crate::worker::Worker;
use bytes::Bytes;

/// A part's answer, read whole.
pub(super) struct Answer {
    pub(super) status: u16,
    /// `X-Elastic-Product`, passed on in the merged answer.
    pub(super) product: Option<Bytes>,
    pub(super) body: Bytes,
    /// Its items, when already cut (a batch member's share): the merge need not cut again.
    pub(super) items: Option<BulkItems>,
    /// A failure that may have come after the node took the part (no answer, a cut one, a
    /// 502 or 504): its items may have been applied.
    pub(super) in_doubt: bool,
}

/// Sends one group's part to its server and reads the answer whole.
pub(super) async fn send_part(
    worker: &Worker,
    service: &Service,
    from: Requester,
    head: &RequestHead,
    part: Vec<u8>,
    server: Option<usize>,
) -> Answer {
    let Some(sub_head) = plain_request_head(head, part.len()) else {
        return Answer {
            status: 400,
            product: None,
            body: Bytes::from_static(b"invalid request head"),
            items: None,
            in_doubt: false,
        };
    };
    let sent = subrequest::send(
        worker,
        service,
        from,
        (&sub_head, Bytes::from(part)),
        server,
        MAX_ANSWER,
    );
    match sent.await {
        Ok(answer) => Answer {
            status: answer.head.status,
            product: answer
                .head
                .head
                .get("x-elastic-product")
                .map(Bytes::copy_from_slice),
            body: answer.body,
            items: None,
            in_doubt: status_in_doubt(answer.head.status),
        },
        // A body that broke off is in doubt too: it is none of the failures before sending.
        Err(error) => weirs_error(&error),
    }
}

/// Whether a status answered for a part may hide its being applied: a 502 or 504 from a proxy
/// in front of the node, which may have lost the node's answer.
pub(super) fn status_in_doubt(status: u16) -> bool {
    matches!(status, 502 | 504)
}

/// weir's own failure answer for a part: in doubt unless it never reached a node.
pub(super) fn weirs_failure(status: u16, text: &[u8]) -> Answer {
    Answer {
        in_doubt: !crate::upstream::forwarding::never_sent(text),
        ..weirs_answer(status, text)
    }
}

/// The same for weir's own error (`forward` failed).
pub(super) fn weirs_error(error: &LocalError) -> Answer {
    weirs_failure(error.status, error.message.as_bytes())
}

/// The largest node answer read for a merge.
const MAX_ANSWER: u64 = 256 << 20;

/// An answer of weir's own, as Elasticsearch shapes errors.
pub(super) fn weirs_answer(status: u16, reason: &[u8]) -> Answer {
    let reason = String::from_utf8_lossy(reason);
    let answer = es_error(status, error_type(status), reason.trim_end());
    Answer {
        status,
        product: None,
        body: answer.body,
        items: None,
        in_doubt: false,
    }
}
