//! Replaying an Elasticsearch service's spool (`spool.rs`) on the control thread: the oldest
//! request goes to a node, whole, and is committed once the cluster has answered for every one
//! of its items: applied (2xx; a `create` already there, 409, or a `delete` already gone, 404,
//! since an earlier try of the same request may have landed), or refused for good (another
//! 4xx), which goes to the dead-letter file with its reason. An item the cluster could not take
//! now (429, 5xx), or no answer at all, keeps the request waiting: it is tried again after a
//! backoff, 1 s doubling to 10 s. Items carry their `_id` (weir gave one to those without
//! before spooling), so a request tried twice writes each document once.

use super::ndjson;
use super::node_client::request;
use super::spool::Spool;
use crate::balancer::Service;
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

/// Replays `spool` to `servers` (with the service's `authorization`) until it is empty or the
/// cluster fails a request.
pub async fn replay(
    service: String,
    spool: Arc<Spool>,
    servers: Vec<UpstreamServer>,
    authorization: Option<String>,
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
        let target = replay_target(&spooled.target);
        let answer =
            send_anywhere(&servers, authorization.as_deref(), &target, &spooled.body).await;
        let verdict = match answer {
            Ok((status, body)) => judge(record.seq, &spooled.body, status, &body),
            Err(why) => Verdict::Later(why),
        };
        let dead = match verdict {
            Verdict::Later(why) => break Replayed::Later { applied, why },
            Verdict::Done(dead) => dead,
        };
        let committing = spool.clone();
        let seq = record.seq;
        let committed = tokio::task::spawn_blocking(move || {
            if !dead.is_empty() {
                committing.dead_letter(&dead)?;
            }
            committing.commit(seq)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        if let Err(e) = committed {
            break Replayed::Later {
                applied,
                why: format!("cannot commit request {seq}: {e}"),
            };
        }
        applied += 1;
        spool.replay_went(true);
    };
    if let Replayed::Later { .. } = &outcome {
        spool.replay_went(false);
    }
    if let Replayed::Drained { applied } = &outcome {
        if *applied > 0 {
            eprintln!("weir: service `{service}`: spool drained, {applied} request(s) replayed");
        }
    }
    outcome
}

/// Where a replay sends, and with which credentials.
struct Cluster {
    servers: Vec<UpstreamServer>,
    authorization: Option<String>,
}

/// Each spool's backoff, kept by the control thread.
#[derive(Default)]
pub struct Replays {
    backoffs: HashMap<String, Arc<Mutex<Backoff>>>,
}

impl Replays {
    /// Starts a replay round for each spool with requests waiting whose backoff is over; takes
    /// over a spool another process held, once it is free.
    pub fn start_due(&mut self, config: &Config, services: &[Arc<Service>]) {
        for service in services {
            let spool = service
                .elasticsearch
                .as_ref()
                .and_then(|es| es.spool.as_ref());
            let Some(spool) = spool else {
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
                authorization: super::discovery::authorization(configured),
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
            cluster.authorization,
        )
        .await;
        let mut backoff = backoff.lock().unwrap_or_else(|e| e.into_inner());
        match outcome {
            Replayed::Drained { .. } => *backoff = Backoff::default(),
            Replayed::Later { applied, why } => {
                backoff.failed();
                let lag = spool.lag_secs();
                eprintln!(
                    "weir: service `{service}`: spool holds {} request(s), {} bytes, the oldest {lag:.0} s old; {applied} replayed, then: {why}; next try in {:?}",
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

/// Sends the request to each server in turn until one answers.
async fn send_anywhere(
    servers: &[UpstreamServer],
    authorization: Option<&str>,
    target: &str,
    body: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    let mut last = String::from("no server to send to");
    for server in servers.iter().filter(|s| !s.tls) {
        let sending = request(
            server,
            authorization,
            "POST",
            target,
            Some(("application/x-ndjson", body)),
        );
        match tokio::time::timeout(REPLAY_TIMEOUT, sending).await {
            Ok(Ok((status, answer))) if status != 502 && status != 503 => {
                return Ok((status, answer))
            }
            Ok(Ok((status, _))) => last = format!("{}: status {status}", server.url),
            Ok(Err(e)) => last = format!("{}: {e}", server.url),
            Err(_) => last = format!("{}: no answer within {REPLAY_TIMEOUT:?}", server.url),
        }
    }
    Err(last)
}

enum Verdict {
    /// Answered for every item; these were refused for good (dead-letter lines).
    Done(Vec<String>),
    Later(String),
}

/// What the cluster's answer to a replayed request means for it.
fn judge(seq: u64, body: &[u8], status: u16, answer: &[u8]) -> Verdict {
    let text = || {
        String::from_utf8_lossy(answer)
            .chars()
            .take(500)
            .collect::<String>()
    };
    if status == 429 || status >= 500 {
        return Verdict::Later(format!("status {status}: {}", text()));
    }
    let Ok(items) = ndjson::parse(body) else {
        // Checked before it was spooled; only damage could get here.
        let line = serde_json::json!({"seq": seq, "status": status, "reason": "the spooled body is not a valid bulk body"});
        return Verdict::Done(vec![line.to_string()]);
    };
    if status != 200 {
        // The whole request refused for good (a bad query string, say): every item is dead.
        let reason = text();
        let dead = items
            .iter()
            .map(|item| dead_line(seq, body, item, status, &reason))
            .collect();
        return Verdict::Done(dead);
    }
    let parsed: serde_json::Value = match serde_json::from_slice(answer) {
        Ok(parsed) => parsed,
        Err(e) => return Verdict::Later(format!("an answer that is not JSON: {e}")),
    };
    let Some(answered) = parsed["items"]
        .as_array()
        .filter(|a| a.len() == items.len())
    else {
        return Verdict::Later("an answer whose items do not match the request".into());
    };
    let mut dead = Vec::new();
    for (item, answer) in items.iter().zip(answered) {
        let result = &answer[item.action.name()];
        let status = result["status"].as_u64().unwrap_or(0) as u16;
        let applied = (200..300).contains(&status)
            || (status == 409 && item.action == ndjson::Action::Create)
            || (status == 404 && item.action == ndjson::Action::Delete);
        if applied {
            continue;
        }
        if status == 429 || status >= 500 || status == 0 {
            return Verdict::Later(format!("an item answered {status}"));
        }
        let reason = result["error"].to_string();
        dead.push(dead_line(seq, body, item, status, &reason));
    }
    Verdict::Done(dead)
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

    #[test]
    fn answers_are_judged_per_item() {
        let body = b"{\"create\":{\"_id\":\"1\"}}\n{}\n{\"delete\":{\"_id\":\"2\"}}\n{\"index\":{\"_id\":\"3\"}}\n{}\n";
        let answer = br#"{"took":1,"errors":true,"items":[
            {"create":{"_id":"1","status":409}},
            {"delete":{"_id":"2","status":404}},
            {"index":{"_id":"3","status":400,"error":{"type":"mapper_parsing_exception"}}}]}"#;
        let Verdict::Done(dead) = judge(7, body, 200, answer) else {
            panic!("not done");
        };
        assert_eq!(dead.len(), 1);
        assert!(dead[0].contains("mapper_parsing_exception"), "{}", dead[0]);
        assert!(dead[0].contains("\"seq\":7"), "{}", dead[0]);
        let busy = br#"{"took":1,"errors":true,"items":[
            {"create":{"status":201}},{"delete":{"status":200}},{"index":{"status":429}}]}"#;
        assert!(matches!(judge(7, body, 200, busy), Verdict::Later(_)));
        assert!(matches!(judge(7, body, 503, b"{}"), Verdict::Later(_)));
        let Verdict::Done(dead) = judge(7, body, 400, b"{\"error\":\"bad\"}") else {
            panic!("not done");
        };
        assert_eq!(dead.len(), 3);
    }
}
