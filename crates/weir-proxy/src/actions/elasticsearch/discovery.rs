//! Finding an Elasticsearch service's nodes (`services.NAME.elasticsearch.discovery`). Every
//! `refresh`, the control thread asks a node it knows for `GET /_nodes/http`: the nodes it
//! already serves, then the configured `hosts`. Each node's HTTP publish address (filtered by
//! role) becomes a server. A changed list is compiled in like a reload (`process/reload.rs`), so the
//! pools and health of the nodes that stay are kept. For services that route `_bulk` items
//! by node, it also builds the shard map (`routing.rs`) every [`SHARDS_REFRESH`], and within
//! a second of a worker meeting an index the map does not know.

use super::node_client::{get, NodeAccess};
use super::routing::{publish_url, ClusterView, ShardMap};
use super::EsService;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;
use weir_config::{BulkRoute, Config, EsDiscovery, UpstreamServer};

/// How long one node may take to connect and answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the shard map is built again.
pub const SHARDS_REFRESH: Duration = Duration::from_secs(10);
/// The soonest the shard map is built again when a worker finds it stale.
const SHARDS_SOONEST: Duration = Duration::from_secs(1);

/// The cluster state weir reads for the shard map, and no more.
const CLUSTER_STATE: &str = "/_cluster/state/metadata,routing_table?filter_path=\
metadata.indices.*.routing_num_shards,metadata.indices.*.settings.index.number_of_shards,\
metadata.indices.*.settings.index.routing_partition_size,metadata.data_stream.data_stream.*.name,\
routing_table.indices.*.shards.*.primary,routing_table.indices.*.shards.*.node,\
routing_table.indices.*.shards.*.state";
const ALIASES: &str = "/_alias?filter_path=*.aliases.*.index_routing,*.aliases.*.is_write_index";

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
    /// When each service's shard map was last asked for.
    shards_asked: HashMap<String, Instant>,
}

impl Schedule {
    /// Starts a round for every service whose time has come; answers arrive on `found`.
    /// `seeds` are the configured hosts of each service (the running config holds the nodes
    /// found last).
    pub fn start_due(
        &mut self,
        config: &Config,
        services: &[Arc<EsService>],
        seeds: &HashMap<String, Vec<UpstreamServer>>,
        found: &UnboundedSender<Discovered>,
    ) {
        let now = Instant::now();
        for service in &config.services {
            let routes_by_node = service
                .elasticsearch
                .as_ref()
                .is_some_and(|es| es.bulk.route == BulkRoute::Node);
            let compiled = services.iter().find(|es| es.service.name == service.name);
            let view = compiled.map(|es| es.cluster.clone());
            let access = compiled.map(|es| es.access.clone()).unwrap_or_default();
            if let (true, Some(view)) = (routes_by_node, view) {
                let asked = self.shards_asked.get(&service.name).copied();
                let due = asked.is_none_or(|at| {
                    let since = now.duration_since(at);
                    since >= SHARDS_REFRESH || (since >= SHARDS_SOONEST && view.take_stale())
                });
                if due {
                    self.shards_asked.insert(service.name.clone(), now);
                    let mut ask: Vec<UpstreamServer> = service.servers.clone();
                    ask.extend(seeds.get(&service.name).into_iter().flatten().cloned());
                    let name = service.name.clone();
                    tokio::spawn(build_shard_map(name, ask, access.clone(), view));
                }
            }
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
                let nodes = ask_any(&ask, &access, &discovery).await;
                let _ = found.send(Discovered {
                    service: name,
                    nodes,
                });
            });
        }
    }
}

/// Builds the shard map from the first server that answers, and puts it in `view`.
async fn build_shard_map(
    service: String,
    servers: Vec<UpstreamServer>,
    access: NodeAccess,
    view: Arc<ClusterView>,
) {
    let mut last_error = String::from("no server to ask");
    for server in &servers {
        let asking = async {
            let nodes = get(
                server,
                &access,
                "/_nodes/http?filter_path=nodes.*.http.publish_address",
            )
            .await?;
            let state = get(server, &access, CLUSTER_STATE).await?;
            let aliases = get(server, &access, ALIASES).await?;
            ShardMap::parse(&nodes, &state, &aliases, server.tls)
        };
        match tokio::time::timeout(ASK_TIMEOUT, asking).await {
            Ok(Ok(map)) => {
                view.shards.store(Some(Arc::new(map)));
                return;
            }
            Ok(Err(e)) => last_error = format!("{}: {e}", server.url),
            Err(_) => last_error = format!("{}: no answer within {ASK_TIMEOUT:?}", server.url),
        }
    }
    crate::log_error!("service `{service}`: shard map not built: {last_error}");
}

/// Asks each server in turn until one answers.
async fn ask_any(
    servers: &[UpstreamServer],
    access: &NodeAccess,
    discovery: &EsDiscovery,
) -> Result<Vec<String>, String> {
    let mut last_error = String::from("no server to ask");
    for server in servers {
        match tokio::time::timeout(ASK_TIMEOUT, get(server, access, "/_nodes/http")).await {
            // The nodes are spoken to as the one that named them is.
            Ok(Ok(body)) => return parse_nodes(&body, &discovery.roles, server.tls),
            Ok(Err(e)) => last_error = format!("{}: {e}", server.url),
            Err(_) => last_error = format!("{}: no answer within {ASK_TIMEOUT:?}", server.url),
        }
    }
    Err(last_error)
}

/// The HTTP URLs of the nodes in a `_nodes/http` answer that have one of `roles` (any node
/// when `roles` is empty), sorted; https:// ones with `tls`.
fn parse_nodes(body: &[u8], roles: &[String], tls: bool) -> Result<Vec<String>, String> {
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
            urls.push(publish_url(address, tls));
        }
    }
    if urls.is_empty() {
        return Err("no node with HTTP (and the roles asked for)".into());
    }
    urls.sort();
    urls.dedup();
    Ok(urls)
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
            parse_nodes(body, &[], false).unwrap(),
            ["http://10.0.0.2:9200", "http://127.0.0.1:9201"]
        );
        assert_eq!(
            parse_nodes(body, &["data".to_string()], true).unwrap(),
            ["https://127.0.0.1:9201"]
        );
        assert!(parse_nodes(body, &["ml".to_string()], false).is_err());
        assert!(parse_nodes(b"<html>", &[], false).is_err());
    }
}
