//! Finding an Elasticsearch service's nodes (`services.NAME.elasticsearch.discovery`). Every
//! `refresh`, the control thread asks a node it knows for `GET /_nodes/http`: the nodes it
//! already serves, then the configured `hosts`. Each node's HTTP publish address (filtered by
//! role) becomes a server. A changed list is compiled in like a reload (`reload.rs`), so the
//! pools and health of the nodes that stay are kept.

use crate::codec::{ChunkEvent, ChunkedDecoder};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc::UnboundedSender;
use weir_config::{Config, EsDiscovery, UpstreamServer};

/// An answer from `_nodes/http` larger than this is refused.
const MAX_ANSWER: usize = 8 << 20;
/// How long one node may take to connect and answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

/// The outcome of one round of asking, for one service.
pub struct Discovered {
    pub service: String,
    /// The nodes' URLs, sorted; or why no node answered.
    pub nodes: Result<Vec<String>, String>,
}

/// When each Elasticsearch service is next asked.
#[derive(Default)]
pub struct Schedule {
    due: HashMap<String, Instant>,
}

impl Schedule {
    /// Starts a round for every service whose time has come; answers arrive on `found`.
    /// `seeds` are the configured hosts of each service (the running config holds the nodes
    /// found last).
    pub fn start_due(
        &mut self,
        config: &Config,
        seeds: &HashMap<String, Vec<UpstreamServer>>,
        found: &UnboundedSender<Discovered>,
    ) {
        let now = Instant::now();
        for service in &config.services {
            let Some(discovery) = service
                .elasticsearch
                .as_ref()
                .and_then(|es| es.discovery.as_ref())
            else {
                continue;
            };
            if self.due.get(&service.name).is_some_and(|due| *due > now) {
                continue;
            }
            self.due
                .insert(service.name.clone(), now + discovery.refresh);
            let mut ask: Vec<UpstreamServer> = service.servers.clone();
            ask.extend(seeds.get(&service.name).into_iter().flatten().cloned());
            let (name, discovery, found) = (service.name.clone(), discovery.clone(), found.clone());
            tokio::spawn(async move {
                let nodes = ask_any(&ask, &discovery).await;
                let _ = found.send(Discovered {
                    service: name,
                    nodes,
                });
            });
        }
    }
}

/// Asks each server in turn until one answers.
async fn ask_any(
    servers: &[UpstreamServer],
    discovery: &EsDiscovery,
) -> Result<Vec<String>, String> {
    let mut last_error = String::from("no server to ask");
    for server in servers {
        if server.tls {
            last_error = format!("{}: discovery over https is not supported yet", server.url);
            continue;
        }
        match tokio::time::timeout(ASK_TIMEOUT, nodes_http(server)).await {
            Ok(Ok(body)) => return parse_nodes(&body, &discovery.roles),
            Ok(Err(e)) => last_error = format!("{}: {e}", server.url),
            Err(_) => last_error = format!("{}: no answer within {ASK_TIMEOUT:?}", server.url),
        }
    }
    Err(last_error)
}

/// `GET /_nodes/http` on `server`: the answer's body.
async fn nodes_http(server: &UpstreamServer) -> Result<Vec<u8>, String> {
    let mut conn = TcpStream::connect((server.host.as_str(), server.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = format!(
        "GET /_nodes/http HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nConnection: close\r\n\r\n",
        server.authority
    );
    conn.write_all(request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    (&mut conn)
        .take(MAX_ANSWER as u64 + 1)
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if answer.len() > MAX_ANSWER {
        return Err("the answer is too large".into());
    }
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err("no complete answer".into());
    };
    let head = String::from_utf8_lossy(&answer[..split]).to_ascii_lowercase();
    let body = &answer[split + 4..];
    let status = head.split_whitespace().nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!("status {status}"));
    }
    if head.contains("\r\ntransfer-encoding: chunked") {
        return dechunk(body);
    }
    Ok(body.to_vec())
}

fn dechunk(mut input: &[u8]) -> Result<Vec<u8>, String> {
    let mut decoder = ChunkedDecoder::default();
    let mut body = Vec::new();
    loop {
        match decoder.decode(input) {
            Ok((ChunkEvent::Data(start, end), used)) => {
                body.extend_from_slice(&input[start..end]);
                input = &input[used..];
            }
            Ok((ChunkEvent::End(..), _)) => return Ok(body),
            Ok((ChunkEvent::NeedMore, _)) => return Err("the answer ended early".into()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// The HTTP URLs of the nodes in a `_nodes/http` answer that have one of `roles` (any node
/// when `roles` is empty), sorted.
fn parse_nodes(body: &[u8], roles: &[String]) -> Result<Vec<String>, String> {
    let answer: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let nodes = answer
        .get("nodes")
        .and_then(|n| n.as_object())
        .ok_or("no `nodes` in the answer")?;
    let mut urls = Vec::new();
    for node in nodes.values() {
        let has_role = roles.is_empty()
            || node["roles"]
                .as_array()
                .is_some_and(|r| r.iter().any(|role| roles.iter().any(|want| role == want)));
        let address = node["http"]["publish_address"].as_str();
        if let (true, Some(address)) = (has_role, address) {
            urls.push(publish_url(address));
        }
    }
    if urls.is_empty() {
        return Err("no node with HTTP (and the roles asked for)".into());
    }
    urls.sort();
    urls.dedup();
    Ok(urls)
}

/// `HOST/IP:PORT` or `IP:PORT` (as nodes publish it) as a URL, by the address.
fn publish_url(address: &str) -> String {
    let address = address.rsplit_once('/').map_or(address, |(_, ip)| ip);
    format!("http://{address}")
}

/// `config` with each discovering service's servers replaced by the nodes found for it.
pub fn apply(config: &mut Config, found: &HashMap<String, Vec<String>>) {
    for service in &mut config.services {
        let discovers = service
            .elasticsearch
            .as_ref()
            .is_some_and(|es| es.discovery.is_some());
        let Some(nodes) = found.get(&service.name).filter(|_| discovers) else {
            continue;
        };
        let servers: Vec<UpstreamServer> = nodes
            .iter()
            .filter_map(|url| UpstreamServer::from_url(url, 1))
            .collect();
        if !servers.is_empty() {
            service.servers = servers;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_read_by_role_and_publish_address() {
        let body = br#"{"nodes": {
            "a": {"roles": ["data", "ingest"], "http": {"publish_address": "127.0.0.1:9201"}},
            "b": {"roles": ["cluster_manager"], "http": {"publish_address": "es-b/10.0.0.2:9200"}},
            "c": {"roles": ["data"]}
        }}"#;
        assert_eq!(
            parse_nodes(body, &[]).unwrap(),
            ["http://10.0.0.2:9200", "http://127.0.0.1:9201"]
        );
        assert_eq!(
            parse_nodes(body, &["data".to_string()]).unwrap(),
            ["http://127.0.0.1:9201"]
        );
        assert!(parse_nodes(body, &["ml".to_string()]).is_err());
        assert!(parse_nodes(b"<html>", &[]).is_err());
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
    }
}
