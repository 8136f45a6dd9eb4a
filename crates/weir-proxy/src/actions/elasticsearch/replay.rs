//! Replaying an Elasticsearch service's spool (`spool.rs`) on the control thread: the oldest
//! request goes to a node, whole, and is committed once the cluster has answered for every one
//! of its items: applied (2xx; a `create` already there, 409, or a `delete` already gone, 404,
//! since an earlier try of the same request may have landed), or refused for good (another
//! 4xx), which goes to the dead-letter file with its reason. An item the cluster could not take
//! now (429, 5xx), or no answer at all, keeps the request waiting: it is tried again after a
//! backoff, 1 s doubling to 10 s. Items carry their `_id` (weir gave one to those without
//! before spooling), so a request tried twice writes each document once; its updates are
//! pinned to their documents first (`pins.rs`), so each applies once, and with them a try only
//! sends the items not yet settled.

use super::ndjson;
use super::node_client::{first_answer, NodeAccess};
use super::pins::{self, ReplayState, Sent};
use super::spool::{Spool, Spooled};
use super::EsService;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weir_config::{Config, UpstreamServer};

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How long a node may take to answer one replayed request.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);

/// When a spool is next tried, after failures.
#[derive(Debug)]
pub struct Backoff {
    next: Instant,
    delay: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: Instant::now(),
            delay: FIRST_BACKOFF,
        }
    }
}

impl Backoff {
    pub fn due(&self) -> bool {
        Instant::now() >= self.next
    }

    fn failed(&mut self) {
        self.next = Instant::now() + self.delay;
        self.delay = (self.delay * 2).min(MAX_BACKOFF);
    }
}

/// What a replay round ended with.
pub enum Replayed {
    /// Every request waiting was applied.
    Drained { applied: u64 },
    /// The cluster could not take the oldest request; try again after the backoff.
    Later { applied: u64, why: String },
}

/// Replays `spool` to `servers` (reached with `access`) until it is empty or the cluster fails
/// a request.
pub async fn replay(
    service: String,
    spool: Arc<Spool>,
    servers: Vec<UpstreamServer>,
    access: NodeAccess,
) -> Replayed {
    let mut applied = 0;
    let outcome = loop {
        let Some(record) = spool.front() else {
            break Replayed::Drained { applied };
        };
        let reading = spool.clone();
        let read = tokio::task::spawn_blocking(move || reading.read(&record).map(|r| (record, r)))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r);
        let (record, spooled) = match read {
            Ok(read) => read,
            Err(e) => {
                break Replayed::Later {
                    applied,
                    why: format!("cannot read the spool: {e}"),
                }
            }
        };
        if let Err(why) = replay_one(&spool, record.seq, spooled, &servers, &access).await {
            break Replayed::Later { applied, why };
        }
        applied += 1;
        spool.replay_went(true);
    };
    if let Replayed::Later { .. } = &outcome {
        spool.replay_went(false);
    }
    if let Replayed::Drained { applied } = &outcome {
        if *applied > 0 {
            crate::log_info!("service `{service}`: spool drained, {applied} request(s) replayed");
        }
    }
    outcome
}

/// Where a replay sends, and how.
struct Cluster {
    servers: Vec<UpstreamServer>,
    access: NodeAccess,
}

/// Each spool's backoff, kept by the control thread.
#[derive(Default)]
pub struct Replays {
    backoffs: HashMap<String, Arc<Mutex<Backoff>>>,
}

impl Replays {
    /// Starts a replay round for each spool with requests waiting whose backoff is over; takes
    /// over a spool another process held, once it is free.
    pub fn start_due(&mut self, config: &Config, services: &[Arc<EsService>]) {
        for es in services {
            let service = &es.service;
            let Some(spool) = es.spool.as_ref() else {
                continue;
            };
            if !matches!(spool.take_over(), Ok(true)) {
                continue;
            }
            let Some(configured) = config.services.iter().find(|s| s.name == service.name) else {
                continue;
            };
            let cluster = Cluster {
                servers: configured.servers.clone(),
                access: es.access.clone(),
            };
            let backoff = self.backoffs.entry(service.name.clone()).or_default();
            start(&service.name, spool, cluster, backoff);
        }
    }
}

/// Runs a replay round for `spool` if anything waits and its backoff is over, one at a time;
/// logs its depth and lag while it waits.
fn start(service: &str, spool: &Arc<Spool>, cluster: Cluster, backoff: &Arc<Mutex<Backoff>>) {
    let lock = |b: &Mutex<Backoff>| b.lock().unwrap_or_else(|e| e.into_inner()).due();
    if spool.depth() == 0 || !lock(backoff) || spool.replaying.swap(true, Ordering::AcqRel) {
        return;
    }
    let (service, spool, backoff) = (service.to_string(), spool.clone(), backoff.clone());
    tokio::spawn(async move {
        let outcome = replay(
            service.clone(),
            spool.clone(),
            cluster.servers,
            cluster.access,
        )
        .await;
        let mut backoff = backoff.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Replayed::Drained { .. } => *backoff = Backoff::default(),
            Replayed::Later { applied, why } => {
                backoff.failed();
                let lag = spool.lag_secs();
                crate::log_warn!(
                    "service `{service}`: spool holds {} request(s), {} bytes, the oldest {lag:.0} s old; {applied} replayed, then: {why}; next try in {:?}",
                    spool.depth(),
                    spool.bytes(),
                    backoff.delay / 2
                );
            }
        }
        spool.replaying.store(false, Ordering::Release);
    });
}

/// The spooled request's target without the options that reshape the answer (`filter_path`,
/// `format`): replay must read every item's result.
fn replay_target(target: &str) -> String {
    let Some((path, query)) = target.split_once('?') else {
        return target.to_string();
    };
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let key = pair.split_once('=').map_or(*pair, |(k, _)| k);
            key != "filter_path" && key != "format"
        })
        .collect();
    if kept.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", kept.join("&"))
    }
}

/// Sends the request to each server in turn until one answers (a 502 or 503 is no answer).
async fn send_anywhere(
    servers: &[UpstreamServer],
    access: &NodeAccess,
    target: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    let body = Some(("application/x-ndjson", body));
    let answered = |status| status != 502 && status != 503;
    first_answer(
        servers,
        access,
        ("POST", target),
        body,
        REPLAY_TIMEOUT,
        answered,
    )
    .await
}

/// Replays one spooled request: its updates pinned first (`pins.rs`), then its items not yet
/// settled; committed once every item is. Err says why it waits.
async fn replay_one(
    spool: &Arc<Spool>,
    seq: u64,
    spooled: Spooled,
    servers: &[UpstreamServer],
    access: &NodeAccess,
) -> Result<(), String> {
    let body = &spooled.body;
    let dir = spool.dir().to_path_buf();
    let Ok(items) = ndjson::parse(body) else {
        // Checked before it was spooled; only damage could get here.
        let line =
            serde_json::json!({"seq": seq, "reason": "the spooled body is not a valid bulk body"});
        return commit(spool, seq, vec![line.to_string()]).await;
    };
    let target = replay_target(&spooled.target);
    let mut state = ReplayState::load(&dir, seq, body, &items);
    if state.all_settled(items.len()) {
        // Settled by a try before a crash that came ahead of the commit; its refusals are
        // written already.
        let committed = commit(spool, seq, Vec::new()).await;
        ReplayState::clear(&dir);
        return committed;
    }
    let unpinned = state.unpinned(&items);
    if !unpinned.is_empty() {
        state.pin(pins::fetch(servers, access, &target, &items, &unpinned).await?);
    }
    let kept = state.kept();
    let was_in_doubt = state.in_doubt;
    if kept {
        state.in_doubt = true;
        let saved = state.save(&dir).await;
        saved.map_err(|e| format!("cannot keep the replay state of request {seq}: {e}"))?;
    }
    let attempt = state.next_try(body, &items);
    let (status, answer) = send_anywhere(servers, access, &target, &attempt.body).await?;
    let outcomes = judge(&attempt.sent, &state, was_in_doubt, status, &answer)?;
    let mut dead = Vec::new();
    let mut waits = None;
    for (sent, outcome) in attempt.sent.iter().zip(outcomes) {
        match outcome {
            Outcome::Applied => state.settle(sent.item),
            Outcome::Refused(status, reason) => {
                dead.push(dead_line(seq, body, &items[sent.item], status, &reason));
                state.settle(sent.item);
            }
            Outcome::Repin => {
                state.unpin(sent.item);
                waits.get_or_insert_with(|| "a pinned document changed: pinned again".to_string());
            }
            Outcome::NotNow(why) => {
                waits.get_or_insert(why);
            }
        }
    }
    if state.all_settled(items.len()) {
        let committed = commit(spool, seq, dead).await;
        ReplayState::clear(&dir);
        return committed;
    }
    if kept {
        // What this try settled is not sent again: its refusals are written now.
        if !dead.is_empty() {
            write_dead(spool, dead).await?;
        }
        state.in_doubt = false;
        let saved = state.save(&dir).await;
        saved.map_err(|e| format!("cannot keep the replay state of request {seq}: {e}"))?;
    }
    Err(waits.unwrap_or_else(|| "items wait".into()))
}

/// Writes dead-letter lines (on a blocking thread).
async fn write_dead(spool: &Arc<Spool>, dead: Vec<String>) -> Result<(), String> {
    let writing = spool.clone();
    tokio::task::spawn_blocking(move || writing.dead_letter(&dead))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| format!("cannot write dead letters: {e}")))
}

/// Marks request `seq` applied, its refused items written to the dead-letter file first.
async fn commit(spool: &Arc<Spool>, seq: u64, dead: Vec<String>) -> Result<(), String> {
    if !dead.is_empty() {
        write_dead(spool, dead).await?;
    }
    let committing = spool.clone();
    tokio::task::spawn_blocking(move || committing.commit(seq))
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| format!("cannot commit request {seq}: {e}")))
}

/// What the cluster's answer says of one item sent.
#[derive(Debug, PartialEq)]
enum Outcome {
    Applied,
    /// Refused for good: the dead-letter file, with this status and reason.
    Refused(u16, String),
    /// Its pin is stale (another writer changed the document): pinned again, sent again.
    Repin,
    /// Not taken now (429, 5xx): sent again later.
    NotNow(String),
}

/// What the cluster's answer to a try means for each item sent; Err when it took none of
/// them now (429, 5xx) or the answer cannot be read.
fn judge(
    sent: &[Sent],
    state: &ReplayState,
    was_in_doubt: bool,
    status: u16,
    answer: &[u8],
) -> Result<Vec<Outcome>, String> {
    let text = || {
        String::from_utf8_lossy(answer)
            .chars()
            .take(500)
            .collect::<String>()
    };
    if status == 429 || status >= 500 {
        return Err(format!("status {status}: {}", text()));
    }
    if status != 200 {
        // The whole request refused for good (a bad query string, say): every item is dead.
        let reason = text();
        return Ok(sent
            .iter()
            .map(|_| Outcome::Refused(status, reason.clone()))
            .collect());
    }
    let parsed: serde_json::Value =
        serde_json::from_slice(answer).map_err(|e| format!("an answer that is not JSON: {e}"))?;
    let answered = parsed["items"]
        .as_array()
        .filter(|a| a.len() == sent.len())
        .ok_or("an answer whose items do not match the request")?;
    let outcomes = sent.iter().zip(answered).map(|(sent, answer)| {
        let result = &answer[sent.action.name()];
        let status = result["status"].as_u64().unwrap_or(0) as u16;
        match status {
            200..=299 => Outcome::Applied,
            // A conditional item met its condition changed: by the try in doubt, which then
            // applied it; or by another writer, under weir's pin (pinned again) or the
            // client's own condition (refused, as it would be without weir).
            409 if sent.conditional && was_in_doubt => Outcome::Applied,
            409 if sent.conditional && state.pinned(sent.item) => Outcome::Repin,
            // Already there, or already gone: an earlier try of the same item landed.
            409 if sent.action == ndjson::Action::Create => Outcome::Applied,
            404 if sent.action == ndjson::Action::Delete => Outcome::Applied,
            0 | 429 | 500.. => Outcome::NotNow(format!("an item answered {status}")),
            _ => Outcome::Refused(status, result["error"].to_string()),
        }
    });
    Ok(outcomes.collect())
}

/// A dead-letter line: the request's number, the item's lines, and why it was refused.
fn dead_line(seq: u64, body: &[u8], item: &ndjson::Item<'_>, status: u16, reason: &str) -> String {
    let lines = String::from_utf8_lossy(&body[item.lines.clone()]);
    serde_json::json!({
        "seq": seq,
        "status": status,
        "reason": reason,
        "item": lines.trim_end(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_reads_every_item_whatever_the_client_asked() {
        assert_eq!(replay_target("/a/_bulk"), "/a/_bulk");
        assert_eq!(
            replay_target("/a/_bulk?refresh=true&filter_path=items.*.error&format=yaml"),
            "/a/_bulk?refresh=true"
        );
        assert_eq!(replay_target("/_bulk?filter_path=took"), "/_bulk");
    }

    fn sent(kinds: &[(ndjson::Action, bool)]) -> Vec<Sent> {
        kinds
            .iter()
            .enumerate()
            .map(|(item, &(action, conditional))| Sent {
                item,
                action,
                conditional,
            })
            .collect()
    }

    fn state_of(body: &[u8]) -> ReplayState {
        let items = ndjson::parse(body).unwrap();
        ReplayState::load(std::path::Path::new("/nonexistent"), 1, body, &items)
    }

    #[test]
    fn answers_are_judged_per_item() {
        use ndjson::Action::*;
        let body = b"{\"create\":{\"_id\":\"1\"}}\n{}\n{\"delete\":{\"_id\":\"2\"}}\n{\"index\":{\"_id\":\"3\"}}\n{}\n";
        let state = state_of(body);
        let sent = sent(&[(Create, false), (Delete, false), (Index, false)]);
        let answer = br#"{"took":1,"errors":true,"items":[
            {"create":{"_id":"1","status":409}},
            {"delete":{"_id":"2","status":404}},
            {"index":{"_id":"3","status":400,"error":{"type":"mapper_parsing_exception"}}}]}"#;
        let outcomes = judge(&sent, &state, false, 200, answer).unwrap();
        assert_eq!(outcomes[..2], [Outcome::Applied, Outcome::Applied]);
        assert!(
            matches!(&outcomes[2], Outcome::Refused(400, why) if why.contains("mapper_parsing_exception")),
            "{outcomes:?}"
        );
        let busy = br#"{"took":1,"errors":true,"items":[
            {"create":{"status":201}},{"delete":{"status":200}},{"index":{"status":429}}]}"#;
        let outcomes = judge(&sent, &state, false, 200, busy).unwrap();
        assert!(matches!(outcomes[2], Outcome::NotNow(_)), "{outcomes:?}");
        assert!(judge(&sent, &state, false, 503, b"{}").is_err());
        let refused = judge(&sent, &state, false, 400, b"{\"error\":\"bad\"}").unwrap();
        assert!(refused
            .iter()
            .all(|o| matches!(o, Outcome::Refused(400, _))));
    }

    #[test]
    fn a_conditional_items_conflict_is_its_earlier_try_or_another_writer() {
        use ndjson::Action::*;
        let body = b"{\"update\":{\"_id\":\"1\"}}\n{\"doc\":{}}\n{\"index\":{\"_id\":\"2\",\"if_seq_no\":3,\"if_primary_term\":1}}\n{}\n";
        let mut state = state_of(body);
        state.pin(vec![(0, pins::Pin::At(4, 1))]);
        let sent = sent(&[(Update, true), (Index, true)]);
        let conflict = br#"{"took":1,"errors":true,"items":[
            {"update":{"status":409}},{"index":{"status":409}}]}"#;
        // After a try in doubt, the conflict is that try's own write.
        let outcomes = judge(&sent, &state, true, 200, conflict).unwrap();
        assert_eq!(outcomes, [Outcome::Applied, Outcome::Applied]);
        // Otherwise another writer: weir's pin is taken again, the client's condition stands.
        let outcomes = judge(&sent, &state, false, 200, conflict).unwrap();
        assert_eq!(outcomes[0], Outcome::Repin);
        assert!(matches!(outcomes[1], Outcome::Refused(409, _)));
    }
}
