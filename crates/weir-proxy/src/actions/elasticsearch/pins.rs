//! Updates replayed at most once. Replaying an `index`, `create` or `delete` with its `_id`
//! twice leaves the cluster as once; an `update` (a script, or an upsert's partial document)
//! applied twice is not. So before the spool's oldest request is first replayed, each of its
//! `update` items is pinned to the document's `_seq_no` and `_primary_term` as it is then (one
//! `_mget`), and sent with them as `if_seq_no` / `if_primary_term`: a second application meets
//! a 409 instead of changing the document again. An update of a document that does not exist
//! yet, with an upsert, goes as a `create` of the document its upsert would make (a second one
//! meets 409 too). Elasticsearch refuses those conditions beside an upsert or
//! `retry_on_conflict`, so a pinned update goes without them: the document exists.
//!
//! The pins live in `replay.json` in the spool's folder with what else a try must not forget:
//! which items are settled (applied, or dead-lettered: not sent again) and whether a try went
//! out without its answer being read (`in_doubt`: set on disk before every send, cleared once
//! an answer is judged). A conditional item answered 409 after a try in doubt is taken as
//! applied by that try; answered 409 otherwise, the document changed under the pin (another
//! writer), so it is pinned again. Requests without conditional items keep no file.
//!
//! Not covered: a `scripted_upsert` of a document that does not exist (its script must run on
//! the upsert, which only Elasticsearch can do) is sent as written.

use super::ndjson::{Action, Item};
use super::node_client::{first_answer, NodeAccess};
use crate::http::router::query_values;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use weir_config::UpstreamServer;

const FILE: &str = "replay.json";
/// How long a node may take to answer the pins' `_mget`.
const MGET_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// What a pinned document was when its update was pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Pin {
    /// It exists with this `_seq_no` and `_primary_term`.
    At(i64, i64),
    /// It does not exist.
    Missing,
}

/// The replay state of one spooled request (the spool's oldest).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ReplayState {
    pub(super) seq: u64,
    /// A try went out and its answer was not judged: what it applied is unknown.
    pub(super) in_doubt: bool,
    /// Items applied or dead-lettered, by index in the request: not sent again.
    settled: Vec<usize>,
    /// The `update` items' pins, by index in the request.
    pins: BTreeMap<usize, Pin>,
    /// Items whose client sent conditions of its own (`if_seq_no`, `version`).
    #[serde(skip)]
    client_conditional: Vec<usize>,
}

/// One item of a try: its index in the request, the action it went as, and whether it
/// carries a condition (ours or its client's), so that a repeat of it meets a 409.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sent {
    pub(super) item: usize,
    pub(super) action: Action,
    pub(super) conditional: bool,
}

/// What one try sends.
pub(super) struct Try {
    pub(super) body: Vec<u8>,
    pub(super) sent: Vec<Sent>,
}

impl ReplayState {
    /// The state kept for request `seq`, or a fresh one (a blocking read).
    pub(super) fn load(dir: &Path, seq: u64, body: &[u8], items: &[Item<'_>]) -> ReplayState {
        let kept = std::fs::read(dir.join(FILE))
            .ok()
            .and_then(|text| serde_json::from_slice::<ReplayState>(&text).ok())
            .filter(|state| state.seq == seq);
        let mut state = kept.unwrap_or(ReplayState {
            seq,
            in_doubt: false,
            settled: Vec::new(),
            pins: BTreeMap::new(),
            client_conditional: Vec::new(),
        });
        state.client_conditional = items
            .iter()
            .enumerate()
            .filter(|(_, item)| has_client_condition(action_meta(body, item).as_ref()))
            .map(|(i, _)| i)
            .collect();
        state
    }

    /// Whether this request needs its state on disk: it has conditional items.
    pub(super) fn kept(&self) -> bool {
        !self.pins.is_empty() || !self.client_conditional.is_empty()
    }

    /// Writes the state whole (on a blocking thread: synced, then renamed into place).
    pub(super) async fn save(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec(self).map_err(std::io::Error::other)?;
        let dir = dir.to_path_buf();
        tokio::task::spawn_blocking(move || super::spool::write_durably(&dir, FILE, &text))
            .await
            .map_err(std::io::Error::other)?
    }

    /// Forgets the state once its request is committed.
    pub(super) fn clear(dir: &Path) {
        let _ = std::fs::remove_file(dir.join(FILE));
    }

    /// The `update` items still to send that need a pin: not settled, not pinned, with an
    /// `_id`, and without conditions of their client's.
    pub(super) fn unpinned(&self, items: &[Item<'_>]) -> Vec<usize> {
        (0..items.len())
            .filter(|i| {
                items[*i].action == Action::Update
                    && items[*i].id.is_some()
                    && !self.settled.contains(i)
                    && !self.pins.contains_key(i)
                    && !self.client_conditional.contains(i)
            })
            .collect()
    }

    pub(super) fn pin(&mut self, pins: Vec<(usize, Pin)>) {
        self.pins.extend(pins);
    }

    /// Drops an item's pin: the document changed under it, and it is pinned again.
    pub(super) fn unpin(&mut self, item: usize) {
        self.pins.remove(&item);
    }

    pub(super) fn settle(&mut self, item: usize) {
        if !self.settled.contains(&item) {
            self.settled.push(item);
        }
    }

    pub(super) fn all_settled(&self, items: usize) -> bool {
        (0..items).all(|i| self.settled.contains(&i))
    }

    /// The body of the next try: the items not settled, pinned ones with their conditions.
    pub(super) fn next_try(&self, body: &[u8], items: &[Item<'_>]) -> Try {
        let mut out = Vec::with_capacity(body.len() + self.pins.len() * 48);
        let mut sent = Vec::new();
        for (i, item) in items.iter().enumerate() {
            if self.settled.contains(&i) {
                continue;
            }
            let lines = &body[item.lines.clone()];
            let rewritten = self
                .pins
                .get(&i)
                .and_then(|pin| conditional_lines(lines, item, *pin));
            match rewritten {
                Some((action, text)) => {
                    out.extend_from_slice(&text);
                    sent.push(Sent {
                        item: i,
                        action,
                        conditional: true,
                    });
                }
                None => {
                    out.extend_from_slice(lines);
                    sent.push(Sent {
                        item: i,
                        action: item.action,
                        conditional: self.client_conditional.contains(&i),
                    });
                }
            }
        }
        Try { body: out, sent }
    }

    /// Whether the item was pinned by weir (not conditional by its client's wish).
    pub(super) fn pinned(&self, item: usize) -> bool {
        self.pins.contains_key(&item)
    }
}

/// The item's action metadata, parsed (the object under its action's name).
fn action_meta(body: &[u8], item: &Item<'_>) -> Option<serde_json::Value> {
    let lines = &body[item.lines.clone()];
    let end = lines
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(lines.len());
    let mut action: serde_json::Value = serde_json::from_slice(&lines[..end]).ok()?;
    Some(action.get_mut(item.action.name())?.take())
}

fn has_client_condition(meta: Option<&serde_json::Value>) -> bool {
    meta.is_some_and(|m| m.get("if_seq_no").is_some() || m.get("version").is_some())
}

/// An `update` item's lines made conditional on its pin: the action it goes as and its lines.
/// None when it goes as written (a missing document without a plain upsert).
fn conditional_lines(lines: &[u8], item: &Item<'_>, pin: Pin) -> Option<(Action, Vec<u8>)> {
    let split = lines.iter().position(|&b| b == b'\n')?;
    let action: serde_json::Value = serde_json::from_slice(&lines[..split]).ok()?;
    let mut meta = action.get(item.action.name())?.as_object()?.clone();
    let mut source: serde_json::Value = serde_json::from_slice(&lines[split + 1..]).ok()?;
    let source = source.as_object_mut()?;
    meta.remove("retry_on_conflict");
    let (action, document) = match pin {
        Pin::At(seq_no, primary_term) => {
            meta.insert("if_seq_no".into(), seq_no.into());
            meta.insert("if_primary_term".into(), primary_term.into());
            // The document exists: the upsert would not be used, and may not go with conditions.
            for key in ["upsert", "doc_as_upsert", "scripted_upsert"] {
                source.remove(key);
            }
            (Action::Update, serde_json::Value::Object(source.clone()))
        }
        Pin::Missing => {
            let flag = |key: &str| source.get(key).and_then(|v| v.as_bool()) == Some(true);
            let document = if flag("doc_as_upsert") {
                source.get("doc")?.clone()
            } else if flag("scripted_upsert") {
                return None;
            } else {
                source.get("upsert")?.clone()
            };
            meta.retain(|key, _| {
                matches!(key.as_str(), "_index" | "_id" | "routing" | "require_alias")
            });
            (Action::Create, document)
        }
    };
    let mut out = serde_json::json!({ action.name(): meta })
        .to_string()
        .into_bytes();
    out.push(b'\n');
    out.extend_from_slice(document.to_string().as_bytes());
    out.push(b'\n');
    Some((action, out))
}

/// Pins `wanted` (update items of the request to `target`) to their documents as they are now,
/// asking the first server that answers `_mget`.
pub(super) async fn fetch(
    servers: &[UpstreamServer],
    access: &NodeAccess,
    target: &str,
    items: &[Item<'_>],
    wanted: &[usize],
) -> Result<Vec<(usize, Pin)>, String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let default_index = super::bulk::index_in_path(path);
    let default_routing = query_values(query, "routing").next();
    let docs: Vec<serde_json::Value> = wanted
        .iter()
        .map(|&i| {
            let item = &items[i];
            let mut doc = serde_json::json!({
                "_index": item.index.as_deref().or(default_index),
                "_id": item.id.as_deref(),
                "_source": false,
            });
            if let Some(routing) = item.routing.as_deref().or(default_routing.as_deref()) {
                doc["routing"] = routing.into();
            }
            doc
        })
        .collect();
    let body = serde_json::json!({ "docs": docs }).to_string();
    let body = Some(("application/json", body.as_bytes()));
    let asked = first_answer(
        servers,
        access,
        ("POST", "/_mget"),
        body,
        MGET_TIMEOUT,
        |s| s == 200,
    );
    let (_, answer) = asked
        .await
        .map_err(|e| format!("cannot pin the updates: {e}"))?;
    pins_of(&answer, wanted)
}

/// The pins an `_mget` answer gives, in the order asked. A document whose index does not exist
/// is missing.
fn pins_of(answer: &[u8], wanted: &[usize]) -> Result<Vec<(usize, Pin)>, String> {
    let parsed: serde_json::Value =
        serde_json::from_slice(answer).map_err(|e| format!("an _mget answer: {e}"))?;
    let docs = parsed["docs"]
        .as_array()
        .filter(|docs| docs.len() == wanted.len())
        .ok_or("an _mget answer without a doc per item asked")?;
    wanted
        .iter()
        .zip(docs)
        .map(|(&i, doc)| {
            let pin = match (doc["_seq_no"].as_i64(), doc["_primary_term"].as_i64()) {
                (Some(seq_no), Some(term)) if doc["found"] == true => Pin::At(seq_no, term),
                _ if doc["found"] == false || doc.get("error").is_some() => Pin::Missing,
                _ => return Err(format!("an _mget doc without its sequence number: {doc}")),
            };
            Ok((i, pin))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actions::elasticsearch::ndjson;

    fn text(t: &Try) -> String {
        String::from_utf8(t.body.clone()).unwrap()
    }

    #[tokio::test]
    async fn pinned_updates_go_with_their_conditions_and_without_what_forbids_them() {
        let body = b"{\"update\":{\"_index\":\"a\",\"_id\":\"1\",\"retry_on_conflict\":3}}\n{\"doc\":{\"n\":1},\"upsert\":{\"n\":0}}\n\
{\"update\":{\"_id\":\"2\",\"routing\":\"r\"}}\n{\"doc\":{\"b\":2},\"upsert\":{\"a\":1}}\n\
{\"update\":{\"_id\":\"3\"}}\n{\"doc\":{\"c\":3},\"doc_as_upsert\":true}\n\
{\"update\":{\"_id\":\"4\"}}\n{\"script\":{\"source\":\"x\"},\"scripted_upsert\":true,\"upsert\":{}}\n\
{\"index\":{\"_id\":\"5\",\"if_seq_no\":1,\"if_primary_term\":1}}\n{}\n\
{\"delete\":{\"_id\":\"6\"}}\n";
        let items = ndjson::parse(body).unwrap();
        let dir = std::env::temp_dir().join(format!("weir-pins-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut state = ReplayState::load(&dir, 9, body, &items);
        // Item 4 carries its client's own condition.
        assert_eq!(state.client_conditional, vec![4]);
        assert!(state.kept());
        assert_eq!(state.unpinned(&items), vec![0, 1, 2, 3]);
        state.pin(vec![
            (0, Pin::At(7, 1)),
            (1, Pin::Missing),
            (2, Pin::Missing),
            (3, Pin::Missing),
        ]);
        let first = state.next_try(body, &items);
        let lines: Vec<String> = text(&first).lines().map(String::from).collect();
        assert_eq!(
            lines[0],
            r#"{"update":{"_id":"1","_index":"a","if_primary_term":1,"if_seq_no":7}}"#
        );
        assert_eq!(lines[1], r#"{"doc":{"n":1}}"#);
        // A missing document with a plain upsert: created as the upsert would make it.
        assert_eq!(lines[2], r#"{"create":{"_id":"2","routing":"r"}}"#);
        assert_eq!(lines[3], r#"{"a":1}"#);
        assert_eq!(lines[4], r#"{"create":{"_id":"3"}}"#);
        assert_eq!(lines[5], r#"{"c":3}"#);
        // A scripted upsert goes as written.
        assert!(lines[6].starts_with(r#"{"update":{"_id":"4"}}"#));
        let kinds: Vec<(Action, bool)> = first
            .sent
            .iter()
            .map(|s| (s.action, s.conditional))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (Action::Update, true),
                (Action::Create, true),
                (Action::Create, true),
                (Action::Update, false),
                (Action::Index, true),
                (Action::Delete, false),
            ]
        );
        // Settled items are not sent again; the state comes back from disk.
        state.settle(0);
        state.settle(5);
        state.in_doubt = true;
        state.save(&dir).await.unwrap();
        let again = ReplayState::load(&dir, 9, body, &items);
        assert!(again.in_doubt);
        let second = again.next_try(body, &items);
        assert_eq!(
            second.sent.iter().map(|s| s.item).collect::<Vec<_>>(),
            vec![1, 2, 3, 4]
        );
        // Another request's state is not this one's.
        assert!(!ReplayState::load(&dir, 10, body, &items).in_doubt);
        ReplayState::clear(&dir);
        assert!(!ReplayState::load(&dir, 9, body, &items).in_doubt);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_mget_answer_gives_pins_in_order() {
        let answer = br#"{"docs":[
            {"_index":"a","_id":"1","_version":2,"_seq_no":5,"_primary_term":3,"found":true},
            {"_index":"a","_id":"2","found":false},
            {"_index":"gone","_id":"3","error":{"type":"index_not_found_exception"}}]}"#;
        assert_eq!(
            pins_of(answer, &[4, 7, 9]).unwrap(),
            vec![(4, Pin::At(5, 3)), (7, Pin::Missing), (9, Pin::Missing)]
        );
        assert!(pins_of(answer, &[1]).is_err());
    }
}
