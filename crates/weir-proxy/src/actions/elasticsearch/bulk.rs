//! The `_bulk` action of an Elasticsearch service: the body is read whole (at most
//! `bulk.max_body`, after `Content-Encoding: gzip` or `deflate` is undone) and checked
//! (`ndjson.rs`), so a malformed one is refused before anything is sent. With `route: node`,
//! the items are grouped by the node holding their primary shard (`routing.rs`), each group is
//! sent to its node at once, and the answers are merged back into the client's order: `took`
//! the largest, `errors` if any. A group whose node failed as a whole gets an error item per
//! document, never a success it did not have. With one group (or `route: none`), the body goes
//! whole and the node's answer is relayed as it comes.
//!
//! With a spool (`spool.rs`), every `index` or `create` item without an `_id` gets one from
//! weir before it is first sent, so that whatever is sent again (a replay after a try that may
//! have landed) writes each document once. A bulk the cluster cannot take (no node reachable,
//! a 502, 503 or 504) is spooled and answered 202, its items `queued` and the spool's number in
//! `X-Weir-Spool-Id`; while anything waits in the spool, every bulk joins the queue, so writes
//! keep their order. When the try may have been applied (it reached a node and no answer came
//! back, or a 502 or 504), its `update` items are not spooled but get the failure: replayed,
//! they could apply twice.

use super::batch::{self, Joined};
use super::items::{self, BulkItems};
use super::ndjson::{self, Action, Item};
use super::part::{self, send_part, Answer};
use super::routing::Placement;
use super::spool::Spool;
use super::EsService;
use super::{body_failure, error_type, es_error, plain_request_head};
use crate::http::codec::RequestHead;
use crate::http::local::LocalResponse;
use crate::http::router::query_values;
use crate::reply::client::ClientSide;
use crate::reply::{Reply, ReplyHead};
use crate::servers::balancer::Service;
use crate::upstream;
use crate::upstream::detached::{Detached, Requester};
use crate::worker::Worker;
use bytes::Bytes;
use std::borrow::Cow;
use std::future::Future;
use std::io::Read;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use weir_config::BulkRoute;

/// Whether the request is a `_bulk` (`/_bulk`, `/INDEX/_bulk`, `/INDEX/TYPE/_bulk`).
pub(crate) fn is_bulk(head: &RequestHead) -> bool {
    let path = head.path();
    matches!(head.method(), "POST" | "PUT")
        && path.ends_with("/_bulk")
        && path.bytes().filter(|&b| b == b'/').count() <= 3
}

/// Runs the `_bulk` action.
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    service: &'r Arc<Service>,
    es: &EsService,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    let max = es.bulk.max_body;
    let body = match client.read_body(worker, head, max).await {
        Ok(body) => body,
        Err(e) => {
            let limit = format!("the bulk body is larger than `bulk.max_body` ({max} bytes)");
            return local(body_failure(e, Some(limit)));
        }
    };
    let mut body = match decoded(head, body, max) {
        Ok(body) => body,
        Err(answer) => return local(answer),
    };
    let spool = es.spool.as_ref();
    if spool.is_some() {
        let rewritten = match ndjson::parse(&body) {
            Ok(items) => items.iter().any(needs_id).then(|| with_ids(&body, &items)),
            Err(malformed) => return local(es_error(400, malformed.kind, &malformed.reason)),
        };
        body = rewritten.unwrap_or(body);
    }
    let items = match ndjson::parse(&body) {
        Ok(items) => items,
        Err(malformed) => return local(es_error(400, malformed.kind, &malformed.reason)),
    };
    if let Some(spool) = spool.filter(|s| s.depth() > 0) {
        // Writes keep their order: nothing overtakes what waits. Unless the cluster is known
        // to be away, a bulk waits a moment for the replay to empty the queue (`caught_up`).
        if !spool
            .caught_up(client.watch(), &worker.clock, CATCH_UP_WAIT)
            .await
        {
            return queue_whole(spool, head, &body, &items).await;
        }
    }
    let from = Requester::of(client);
    let groups = match es.bulk.route {
        BulkRoute::Node if splittable(head) => group_by_node(service, es, head, &items),
        _ => vec![Group {
            server: None,
            items: (0..items.len()).collect(),
        }],
    };
    let batching = es.bulk.batch && splittable(head);
    if let [group] = groups.as_slice() {
        // One node takes it all: sent whole, its answer relayed as it comes; or, with a
        // request to that node in flight, in the next batch.
        let joined = batching.then(|| {
            let request = (head, &from);
            batch::join(worker, service, group.server, request, &body, items.len())
        });
        let turn = match joined {
            Some(Joined::Member(answered)) => {
                let answer = answered.await.unwrap_or_else(|_| batch::lost());
                let parts = vec![Part::Answered(answer)];
                return settle(spool, head, &body, &items, &groups, parts).await;
            }
            Some(Joined::First(turn)) => Some(turn),
            None => None,
        };
        let Some(sub_head) = plain_request_head(head, body.len()) else {
            return local(es_error(
                400,
                "illegal_argument_exception",
                "invalid request head",
            ));
        };
        let mut sender = Detached::new(worker, from, body.clone());
        let reply = upstream::forward(worker, service, &mut sender, &sub_head, group.server).await;
        if let Some(turn) = turn {
            turn.finish();
        }
        let status = reply.status();
        return match spool {
            Some(spool) if cluster_unavailable(status) => {
                let failed = failed_answer(reply);
                if failed.in_doubt && items.iter().any(|i| i.action == Action::Update) {
                    // Its updates may have been applied: they keep the failure.
                    let parts = vec![Part::Answered(failed)];
                    return settle(Some(spool), head, &body, &items, &groups, parts).await;
                }
                queue_whole(spool, head, &body, &items).await
            }
            _ => reply,
        };
    }
    let sends = groups.iter().map(|group| {
        let mut part = Vec::with_capacity(group.items.iter().map(|&i| items[i].lines.len()).sum());
        for &i in &group.items {
            part.extend_from_slice(&body[items[i].lines.clone()]);
        }
        let joined = batching.then(|| {
            let request = (head, &from);
            batch::join(
                worker,
                service,
                group.server,
                request,
                &part,
                group.items.len(),
            )
        });
        let from = from.clone();
        async move {
            match joined {
                Some(Joined::Member(answered)) => answered.await.unwrap_or_else(|_| batch::lost()),
                turn => {
                    let answer = send_part(worker, service, from, head, part, group.server).await;
                    if let Some(Joined::First(turn)) = turn {
                        turn.finish();
                    }
                    answer
                }
            }
        }
    });
    let answers = join_all(sends.collect()).await;
    let parts: Vec<Part> = answers.into_iter().map(Part::Answered).collect();
    settle(spool, head, &body, &items, &groups, parts).await
}

/// The groups' answers: those the cluster could not take spooled (with a spool), then merged.
async fn settle<'r>(
    spool: Option<&Arc<Spool>>,
    head: &RequestHead,
    body: &[u8],
    items: &[Item<'_>],
    groups: &[Group],
    mut parts: Vec<Part>,
) -> Reply<'r> {
    if let Some(spool) = spool {
        queue_unavailable(spool, head, body, items, groups, &mut parts).await;
    }
    merge(head, items, groups, parts)
}

/// The longest a bulk waits for a draining spool to empty before it joins the queue.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

/// What became of one group.
enum Part {
    Answered(Answer),
    /// In the spool, with this number; but for its `update` items when the group's try is in
    /// doubt (it may have applied them, and a replay would apply them again): they get this
    /// failure instead.
    Queued {
        seq: u64,
        doubtful: Option<Answer>,
    },
}

/// The cluster cannot take writes: a 502, 503 or 504, weir's own (no node reachable, no
/// answer in time) or the cluster's.
fn cluster_unavailable(status: u16) -> bool {
    matches!(status, 502..=504)
}

/// A failed reply as a part's answer (its body, if the node's, unread).
fn failed_answer(reply: Reply<'_>) -> Answer {
    match &reply.head {
        ReplyHead::Response(response) => Answer {
            in_doubt: part::status_in_doubt(response.status),
            ..part::weirs_answer(response.status, b"the node answered with an error")
        },
        ReplyHead::Local(local) => part::weirs_failure(local.status, &local.body),
        ReplyHead::Shared(local) => part::weirs_failure(local.status, &local.body),
        ReplyHead::Error(error) => part::weirs_error(error.error()),
    }
}

/// An item Elasticsearch would give an id of its own.
fn needs_id(item: &Item<'_>) -> bool {
    item.id.is_none() && matches!(item.action, Action::Index | Action::Create)
}

/// The body with an `_id` in the action line of every item that had none.
fn with_ids(body: &[u8], items: &[Item<'_>]) -> Bytes {
    let mut out = Vec::with_capacity(body.len() + items.len() * 48);
    for item in items {
        let lines = &body[item.lines.clone()];
        if !needs_id(item) {
            out.extend_from_slice(lines);
            continue;
        }
        let split = lines
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(lines.len());
        let mut action: serde_json::Value =
            serde_json::from_slice(&lines[..split]).unwrap_or_default();
        if let Some(meta) = action[item.action.name()].as_object_mut() {
            let id = format!("{:032x}", fastrand::u128(..));
            meta.insert("_id".into(), serde_json::Value::String(id));
        }
        out.extend_from_slice(action.to_string().as_bytes());
        out.extend_from_slice(&lines[split..]);
    }
    Bytes::from(out)
}

/// Spools the whole bulk: 202 with every item queued, or the spool's refusal as a 503.
async fn queue_whole<'r>(
    spool: &Arc<Spool>,
    head: &RequestHead,
    body: &[u8],
    items: &[Item<'_>],
) -> Reply<'r> {
    match spool.append(head.target(), body).await {
        Ok(seq) => {
            let group = Group {
                server: None,
                items: (0..items.len()).collect(),
            };
            let queued = Part::Queued {
                seq,
                doubtful: None,
            };
            merge(head, items, &[group], vec![queued])
        }
        Err(why) => local(es_error(
            503,
            error_type(503),
            &format!("the cluster cannot take writes, and the spool refused them: {why}"),
        )),
    }
}

/// Spools the items of the groups the cluster could not take, as one request: all of them,
/// but for the `update` items of a group whose try is in doubt, which keep its failure.
async fn queue_unavailable(
    spool: &Arc<Spool>,
    head: &RequestHead,
    body: &[u8],
    items: &[Item<'_>],
    groups: &[Group],
    parts: &mut [Part],
) {
    let spooled = |g: usize, part: &Part| {
        let Part::Answered(answer) = part else {
            return Vec::new();
        };
        if !cluster_unavailable(answer.status) {
            return Vec::new();
        }
        let items_of = groups[g].items.iter().copied();
        items_of
            .filter(|&i| !(answer.in_doubt && items[i].action == Action::Update))
            .collect()
    };
    let unavailable: Vec<(usize, Vec<usize>)> = parts
        .iter()
        .enumerate()
        .map(|(g, part)| (g, spooled(g, part)))
        .filter(|(_, spooled)| !spooled.is_empty())
        .collect();
    if unavailable.is_empty() {
        return;
    }
    let mut queued = Vec::new();
    for (_, spooled) in &unavailable {
        for &i in spooled {
            queued.extend_from_slice(&body[items[i].lines.clone()]);
        }
    }
    // Not spooled: the groups keep their failure, item by item.
    if let Ok(seq) = spool.append(head.target(), &queued).await {
        for (g, spooled) in unavailable {
            let queued = Part::Queued {
                seq,
                doubtful: None,
            };
            let Part::Answered(answer) = std::mem::replace(&mut parts[g], queued) else {
                continue;
            };
            // Items kept out (updates in doubt) keep the group's failure.
            let kept_out = spooled.len() < groups[g].items.len();
            parts[g] = Part::Queued {
                seq,
                doubtful: kept_out.then_some(answer),
            };
        }
    }
}

/// A reply of weir's own.
fn local<'r>(answer: LocalResponse) -> Reply<'r> {
    Reply::local(Cow::Owned(answer))
}

/// The body with its `Content-Encoding` (gzip or deflate) undone, at most `max` bytes.
fn decoded(head: &RequestHead, body: Bytes, max: u64) -> Result<Bytes, LocalResponse> {
    let encoding = head
        .head
        .get("content-encoding")
        .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase());
    let mut out = Vec::new();
    let read = match encoding.as_deref() {
        None | Some("identity") | Some("") => return Ok(body),
        Some("gzip") | Some("x-gzip") => flate2::read::MultiGzDecoder::new(&body[..])
            .take(max + 1)
            .read_to_end(&mut out),
        Some("deflate") => flate2::read::ZlibDecoder::new(&body[..])
            .take(max + 1)
            .read_to_end(&mut out),
        Some(other) => {
            let reason = format!("unsupported Content-Encoding [{other}] for a bulk request");
            return Err(es_error(415, "illegal_argument_exception", &reason));
        }
    };
    match read {
        Ok(n) if n as u64 > max => {
            let reason = format!("the bulk body is larger than `bulk.max_body` ({max} bytes)");
            Err(es_error(413, error_type(413), &reason))
        }
        Ok(_) => Ok(Bytes::from(out)),
        Err(e) => Err(es_error(
            400,
            "parse_exception",
            &format!("cannot decode the compressed bulk body: {e}"),
        )),
    }
}

/// Whether the answers can be merged: options that reshape the answer (`filter_path`, a
/// format other than JSON) keep the body whole.
fn splittable(head: &RequestHead) -> bool {
    let query = head.query();
    query.is_empty()
        || (query_values(query, "filter_path").next().is_none()
            && query_values(query, "format").all(|f| f == "json"))
}

/// The items that go to one server (`None`: any, by the balancer).
struct Group {
    server: Option<usize>,
    items: Vec<usize>,
}

/// The items grouped by the server holding their primary shard, in order of first item.
fn group_by_node(
    service: &Service,
    es: &EsService,
    head: &RequestHead,
    items: &[Item<'_>],
) -> Vec<Group> {
    let Some(map) = es.cluster.map() else {
        es.cluster.mark_stale();
        return vec![Group {
            server: None,
            items: (0..items.len()).collect(),
        }];
    };
    // Each node of the map as a server of the service, when it is one and usable.
    let servers: Vec<Option<usize>> = map
        .nodes
        .iter()
        .map(|url| {
            let i = service.servers.iter().position(|s| &s.url == url)?;
            service.servers[i].health.usable().then_some(i)
        })
        .collect();
    let default_index = index_in_path(head.path());
    let default_routing = query_values(head.query(), "routing").next();
    let mut groups: Vec<Group> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let target = item.index.as_deref().or(default_index);
        let routing = item.routing.as_deref().or(default_routing.as_deref());
        let server = match target.map(|t| map.place(t, item.id.as_deref(), routing)) {
            Some(Placement::Node(node)) => servers[node],
            Some(Placement::Unknown) => {
                es.cluster.mark_stale();
                None
            }
            _ => None,
        };
        match groups.iter_mut().find(|g| g.server == server) {
            Some(group) => group.items.push(i),
            None => groups.push(Group {
                server,
                items: vec![i],
            }),
        }
    }
    groups
}

/// `INDEX` of `/INDEX/_bulk` or `/INDEX/TYPE/_bulk`.
pub(super) fn index_in_path(path: &str) -> Option<&str> {
    let index = path.trim_start_matches('/').split('/').next()?;
    (index != "_bulk" && !index.is_empty()).then_some(index)
}

/// Polls every future until all are done: the groups' sends run at once on this worker.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// The groups' answers as one, in the client's order.
fn merge<'r>(
    head: &RequestHead,
    items: &[Item<'_>],
    groups: &[Group],
    mut parts: Vec<Part>,
) -> Reply<'r> {
    let parsed: Vec<Option<BulkItems>> = parts
        .iter_mut()
        .zip(groups)
        .map(|(part, group)| {
            let Part::Answered(answer) = part else {
                return None;
            };
            let parsed = answer.items.take().or_else(|| items::cut(&answer.body))?;
            (answer.status == 200 && parsed.items.len() == group.items.len()).then_some(parsed)
        })
        .collect();
    let queued = parts.iter().find_map(|part| match part {
        Part::Queued { seq, .. } => Some(*seq),
        Part::Answered(_) => None,
    });
    if let (true, None, Some(Part::Answered(first))) =
        (parsed.iter().all(Option::is_none), queued, parts.first())
    {
        // Every node refused the whole request: the first refusal is the answer.
        let answer = if serde_json::from_slice::<serde_json::Value>(&first.body).is_ok() {
            LocalResponse::new(
                first.status,
                json_headers(first.product.as_ref(), None),
                first.body.clone(),
            )
        } else {
            es_error(
                first.status,
                error_type(first.status),
                &String::from_utf8_lossy(&first.body),
            )
        };
        return local(answer);
    }
    let default_index = index_in_path(head.path());
    let mut slots: Vec<Cow<'_, [u8]>> = vec![Cow::Borrowed(b"null"); items.len()];
    let (mut took, mut errors) = (0, false);
    let mut all_queued = true;
    for ((part, group), parsed) in parts.iter().zip(groups).zip(&parsed) {
        let item_result = |i: usize, result: serde_json::Value| {
            let item = &items[i];
            let mut meta = serde_json::json!({
                "_index": item.index.as_deref().or(default_index),
                "_id": item.id.as_deref(),
            });
            if let (Some(meta), serde_json::Value::Object(result)) = (meta.as_object_mut(), result)
            {
                meta.extend(result);
            }
            serde_json::json!({ item.action.name(): meta })
                .to_string()
                .into_bytes()
        };
        match (part, parsed) {
            (Part::Answered(answer), Some(parsed)) => {
                all_queued = false;
                took = took.max(parsed.took);
                errors |= parsed.errors;
                for (&i, at) in group.items.iter().zip(&parsed.items) {
                    slots[i] = Cow::Borrowed(&answer.body[at.clone()]);
                }
            }
            (Part::Queued { doubtful, .. }, _) => {
                for &i in &group.items {
                    let result = match doubtful {
                        Some(answer) if items[i].action == Action::Update => {
                            all_queued = false;
                            errors = true;
                            let (kind, reason) = failure_of(answer);
                            let reason = format!(
                                "{reason}; the node may have applied this update before its answer was lost, so it was not queued (a replay could apply it twice)"
                            );
                            serde_json::json!({
                                "status": answer.status,
                                "error": { "type": kind, "reason": reason },
                            })
                        }
                        _ => serde_json::json!({ "status": 202, "result": "queued" }),
                    };
                    slots[i] = Cow::Owned(item_result(i, result));
                }
            }
            (Part::Answered(answer), None) => {
                all_queued = false;
                errors = true;
                let (kind, reason) = failure_of(answer);
                for &i in &group.items {
                    let failed = serde_json::json!({
                        "status": answer.status,
                        "error": { "type": kind, "reason": reason },
                    });
                    slots[i] = Cow::Owned(item_result(i, failed));
                }
            }
        }
    }
    let mut body = Vec::with_capacity(64 + slots.iter().map(|s| s.len() + 1).sum::<usize>());
    body.extend_from_slice(format!("{{\"took\":{took},\"errors\":{errors},\"items\":[").as_bytes());
    for (n, slot) in slots.iter().enumerate() {
        if n > 0 {
            body.push(b',');
        }
        body.extend_from_slice(slot);
    }
    body.extend_from_slice(b"]}");
    let product = parts.iter().find_map(|part| match part {
        Part::Answered(answer) => answer.product.as_ref(),
        Part::Queued { .. } => None,
    });
    // Every item queued: 202, the request accepted and not yet applied.
    let status = if all_queued { 202 } else { 200 };
    local(LocalResponse::new(
        status,
        json_headers(product, queued),
        body,
    ))
}

fn json_headers(product: Option<&Bytes>, spooled: Option<u64>) -> Vec<(String, String)> {
    let mut headers = vec![(
        "content-type".to_string(),
        "application/json; charset=UTF-8".to_string(),
    )];
    if let Some(product) = product {
        headers.push((
            "x-elastic-product".into(),
            String::from_utf8_lossy(product).into_owned(),
        ));
    }
    if let Some(seq) = spooled {
        headers.push(("x-weir-spool-id".into(), seq.to_string()));
    }
    headers
}

/// `error.type` and `error.reason` of a group's failed answer.
fn failure_of(answer: &Answer) -> (String, String) {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
    let error = parsed.as_ref().map(|v| &v["error"]);
    let kind = error.and_then(|e| e["type"].as_str()).map(str::to_string);
    let reason = error
        .and_then(|e| e["reason"].as_str().or_else(|| e.as_str()))
        .map(str::to_string);
    (
        kind.unwrap_or_else(|| error_type(answer.status).to_string()),
        reason.unwrap_or_else(|| {
            if answer.status == 200 {
                "the node's answer did not match the items sent".to_string()
            } else {
                String::from_utf8_lossy(&answer.body).trim_end().to_string()
            }
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::codec;
    use bytes::BytesMut;

    fn head(raw: &str) -> RequestHead {
        codec::parse_request(&mut BytesMut::from(raw.as_bytes()))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn bulk_paths_and_their_index() {
        let bulk = |line: &str| is_bulk(&head(&format!("{line}\r\nhost: x\r\n\r\n")));
        assert!(bulk("POST /_bulk HTTP/1.1"));
        assert!(bulk("PUT /logs/_bulk?refresh=true HTTP/1.1"));
        assert!(bulk("POST /logs/_doc/_bulk HTTP/1.1"));
        assert!(!bulk("GET /_bulk HTTP/1.1"));
        assert!(!bulk("POST /logs/_doc/1/_bulk HTTP/1.1"));
        assert!(!bulk("POST /_bulkx HTTP/1.1"));
        assert_eq!(index_in_path("/logs/_bulk"), Some("logs"));
        assert_eq!(index_in_path("/_bulk"), None);
    }

    #[test]
    fn a_sub_request_is_plain_with_its_own_length() {
        let client = head("POST /a/_bulk?refresh=wait_for HTTP/1.1\r\nhost: x\r\ncontent-encoding: gzip\r\naccept-encoding: gzip\r\ntransfer-encoding: chunked\r\nx-opaque-id: 7\r\n\r\n");
        let sub = plain_request_head(&client, 42).unwrap();
        assert_eq!(sub.target(), "/a/_bulk?refresh=wait_for");
        assert_eq!(sub.framing, codec::Framing::Length(42));
        assert_eq!(sub.head.get("x-opaque-id"), Some(&b"7"[..]));
        assert!(sub.head.get("content-encoding").is_none());
        assert!(sub.head.get("accept-encoding").is_none());
        assert!(!splittable(&head(
            "POST /_bulk?filter_path=items.*.error HTTP/1.1\r\nhost: x\r\n\r\n"
        )));
        assert!(splittable(&head(
            "POST /_bulk?refresh=true&format=json HTTP/1.1\r\nhost: x\r\n\r\n"
        )));
    }
}
