//! Where a document lives, so a `_bulk` item can go straight to the node holding its primary
//! shard: Elasticsearch's own routing (murmur3 of the item's `routing`, else its `_id`, over
//! the index's routing shards), and the shard map it needs, built by the control thread from
//! `_nodes/http`, `_cluster/state` and `_alias` (`discovery.rs` asks) and read by the workers.

use arc_swap::ArcSwapOption;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One Elasticsearch service's view of its cluster, kept across reloads by the service's name.
#[derive(Debug, Default)]
pub struct ClusterView {
    /// The last shard map built; `None` until the first one is.
    pub shards: ArcSwapOption<ShardMap>,
    /// A worker met an index the map does not know (created since): build it again soon.
    pub stale: AtomicBool,
}

impl ClusterView {
    pub fn mark_stale(&self) {
        if !self.stale.load(Ordering::Relaxed) {
            self.stale.store(true, Ordering::Relaxed);
        }
    }
}

/// Which node holds the primary of each shard of each index, by the nodes' HTTP URLs.
#[derive(Debug, Default)]
pub struct ShardMap {
    /// Node HTTP URLs (`http://IP:PORT`, as discovery writes them).
    pub nodes: Vec<String>,
    indices: HashMap<String, IndexRouting>,
    /// Aliases and data streams: the one index an alias writes to without routing of its
    /// own, else `None` (any node).
    aliases: HashMap<String, Option<String>>,
}

#[derive(Debug)]
struct IndexRouting {
    routing_num_shards: u32,
    number_of_shards: u32,
    partition_size: u32,
    /// The node (index into `nodes`) of each shard's started primary.
    primaries: Vec<Option<u16>>,
}

/// Where an item goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Placement {
    /// The node (index into [`ShardMap::nodes`]) that holds the item's primary shard.
    Node(usize),
    /// Any node: no `_id`, an alias with routing or over several indices, a data stream, or
    /// a shard whose primary is not started.
    Any,
    /// The map has never heard of the target (created since it was built).
    Unknown,
}

impl ShardMap {
    /// Where the item for `target` (an index or alias) with `id` and `routing` goes.
    pub fn place(&self, target: &str, id: Option<&str>, routing: Option<&str>) -> Placement {
        let index = match self.indices.get(target) {
            Some(index) => index,
            None => match self.aliases.get(target) {
                Some(Some(index)) => match self.indices.get(index) {
                    Some(index) => index,
                    None => return Placement::Any,
                },
                Some(None) => return Placement::Any,
                None => return Placement::Unknown,
            },
        };
        let Some(id) = id else {
            return Placement::Any;
        };
        match index.shard(id, routing) {
            Some(shard) => match index.primaries.get(shard as usize) {
                Some(Some(node)) => Placement::Node(*node as usize),
                _ => Placement::Any,
            },
            None => Placement::Any,
        }
    }

    /// Built from the answers to `GET /_nodes/http`, `GET /_cluster/state/metadata,routing_table`
    /// and `GET /_alias`; the nodes named https:// with `tls`.
    pub fn parse(
        nodes: &[u8],
        state: &[u8],
        aliases: &[u8],
        tls: bool,
    ) -> Result<ShardMap, String> {
        let nodes: serde_json::Value =
            serde_json::from_slice(nodes).map_err(|e| format!("_nodes/http: not JSON: {e}"))?;
        let state: serde_json::Value =
            serde_json::from_slice(state).map_err(|e| format!("_cluster/state: not JSON: {e}"))?;
        let aliases: serde_json::Value =
            serde_json::from_slice(aliases).map_err(|e| format!("_alias: not JSON: {e}"))?;
        let mut map = ShardMap::default();
        let mut node_index: HashMap<&str, u16> = HashMap::new();
        for (id, node) in nodes["nodes"].as_object().into_iter().flatten() {
            if let Some(address) = node["http"]["publish_address"].as_str() {
                node_index.insert(id, map.nodes.len() as u16);
                map.nodes.push(publish_url(address, tls));
            }
        }
        let metadata = &state["metadata"]["indices"];
        let table = &state["routing_table"]["indices"];
        for (name, meta) in metadata.as_object().into_iter().flatten() {
            let settings = &meta["settings"]["index"];
            let number = |v: &serde_json::Value| {
                v.as_u64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            };
            let Some(number_of_shards) = number(&settings["number_of_shards"]) else {
                continue;
            };
            let routing_num_shards =
                number(&meta["routing_num_shards"]).unwrap_or(number_of_shards);
            let partition_size = number(&settings["routing_partition_size"]).unwrap_or(1);
            if number_of_shards == 0 || routing_num_shards % number_of_shards != 0 {
                continue;
            }
            let mut primaries = vec![None; number_of_shards as usize];
            for (shard, copies) in table[name]["shards"].as_object().into_iter().flatten() {
                let Some(slot) = shard
                    .parse::<usize>()
                    .ok()
                    .and_then(|s| primaries.get_mut(s))
                else {
                    continue;
                };
                for copy in copies.as_array().into_iter().flatten() {
                    if copy["primary"] == true && copy["state"] == "STARTED" {
                        *slot = copy["node"]
                            .as_str()
                            .and_then(|n| node_index.get(n))
                            .copied();
                    }
                }
            }
            map.indices.insert(
                name.clone(),
                IndexRouting {
                    routing_num_shards: routing_num_shards as u32,
                    number_of_shards: number_of_shards as u32,
                    partition_size: partition_size.max(1) as u32,
                    primaries,
                },
            );
        }
        // alias -> the indices it names, and whether any of them routes or writes elsewhere
        let mut named: HashMap<&str, Vec<(&str, bool, bool)>> = HashMap::new();
        for (index, entry) in aliases.as_object().into_iter().flatten() {
            for (alias, settings) in entry["aliases"].as_object().into_iter().flatten() {
                let routed = !settings["index_routing"].is_null();
                let writes = settings["is_write_index"] == true;
                named
                    .entry(alias)
                    .or_default()
                    .push((index, routed, writes));
            }
        }
        for (alias, indices) in named {
            let target = match indices.as_slice() {
                [(index, false, _)] => Some(*index),
                several => {
                    let writers: Vec<_> = several.iter().filter(|(_, _, w)| *w).collect();
                    match writers.as_slice() {
                        [(index, false, _)] => Some(*index),
                        _ => None,
                    }
                }
            };
            map.aliases
                .insert(alias.to_string(), target.map(str::to_string));
        }
        let streams = &state["metadata"]["data_stream"]["data_stream"];
        for stream in streams
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, _)| name)
        {
            map.aliases.insert(stream.clone(), None);
        }
        Ok(map)
    }
}

/// `HOST/IP:PORT` or `IP:PORT` (as nodes publish it) as a URL, by the address.
pub(super) fn publish_url(address: &str, tls: bool) -> String {
    let address = address.rsplit_once('/').map_or(address, |(_, ip)| ip);
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{address}")
}

impl IndexRouting {
    /// The shard for a document (Elasticsearch's `OperationRouting.generateShardId`); `None`
    /// when a partitioned index's item has no routing (Elasticsearch will refuse it).
    fn shard(&self, id: &str, routing: Option<&str>) -> Option<u32> {
        let partitioned = self.partition_size > 1;
        let (effective, offset) = match (routing, partitioned) {
            (Some(routing), false) => (routing, 0),
            (None, false) => (id, 0),
            (Some(routing), true) => (
                routing,
                routing_hash(id).rem_euclid(self.partition_size as i32),
            ),
            (None, true) => return None,
        };
        let hash = routing_hash(effective).wrapping_add(offset);
        let factor = self.routing_num_shards / self.number_of_shards;
        Some(hash.rem_euclid(self.routing_num_shards as i32) as u32 / factor)
    }
}

/// Elasticsearch's `Murmur3HashFunction.hash(String)`: murmur3 (x86, 32 bits, seed 0) of the
/// string's UTF-16 code units, each as two bytes, low byte first. Two units make a block, so
/// the bytes are never gathered in memory.
fn routing_hash(routing: &str) -> i32 {
    let mut h = 0u32;
    let mut units = routing.encode_utf16();
    let mut len = 0u32;
    loop {
        match (units.next(), units.next()) {
            (Some(low), Some(high)) => {
                h = murmur3_block(h, (low as u32) | ((high as u32) << 16));
                len += 4;
            }
            (Some(last), None) => {
                h ^= murmur3_mix(last as u32);
                len += 2;
                break;
            }
            _ => break,
        }
    }
    murmur3_finish(h, len) as i32
}

fn murmur3_mix(k: u32) -> u32 {
    k.wrapping_mul(0xcc9e_2d51)
        .rotate_left(15)
        .wrapping_mul(0x1b87_3593)
}

fn murmur3_block(h: u32, k: u32) -> u32 {
    (h ^ murmur3_mix(k))
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

fn murmur3_finish(mut h: u32, len: u32) -> u32 {
    h ^= len;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// murmur3 x86-32 of bytes (the reference the UTF-16 version is checked against).
#[cfg(test)]
fn murmur3_x86_32(data: &[u8], seed: u32) -> u32 {
    let mut h = seed;
    let blocks = data.chunks_exact(4);
    let tail = blocks.remainder();
    for block in blocks {
        h = murmur3_block(
            h,
            u32::from_le_bytes([block[0], block[1], block[2], block[3]]),
        );
    }
    if !tail.is_empty() {
        let mut k = 0u32;
        for (i, byte) in tail.iter().enumerate() {
            k |= (*byte as u32) << (8 * i);
        }
        h ^= murmur3_mix(k);
    }
    murmur3_finish(h, data.len() as u32)
}

impl ClusterView {
    /// The current map, if one was built.
    pub fn map(&self) -> Option<Arc<ShardMap>> {
        self.shards.load_full()
    }

    /// Takes the stale mark (the control thread, when it builds the map again).
    pub fn take_stale(&self) -> bool {
        self.stale.swap(false, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_utf16_hash_is_murmur3_of_the_utf16_bytes() {
        for text in ["", "a", "ab", "abc", "héllo wörld", "😀x", "1234567890"] {
            let bytes: Vec<u8> = text.encode_utf16().flat_map(u16::to_le_bytes).collect();
            assert_eq!(
                routing_hash(text),
                murmur3_x86_32(&bytes, 0) as i32,
                "{text}"
            );
        }
    }

    #[test]
    fn murmur3_matches_the_reference_vectors() {
        assert_eq!(murmur3_x86_32(b"", 0), 0);
        assert_eq!(murmur3_x86_32(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_x86_32(b"hello", 0), 0x248b_fa47);
        assert_eq!(murmur3_x86_32(b"Hello, world!", 1234), 0xfaf6_cdb3);
    }

    /// Shards an OpenSearch 2.19 index with 5 shards (640 routing shards) gave for these
    /// routing values (`GET t1/_search_shards?routing=...`).
    #[test]
    fn shards_match_opensearch() {
        let index = IndexRouting {
            routing_num_shards: 640,
            number_of_shards: 5,
            partition_size: 1,
            primaries: vec![Some(0); 5],
        };
        for (id, shard) in [("abc", 4), ("1", 4), ("2", 3), ("hello", 4)] {
            assert_eq!(index.shard(id, None), Some(shard), "{id}");
            assert_eq!(index.shard("other", Some(id)), Some(shard), "{id}");
        }
    }

    #[test]
    fn the_map_places_by_index_and_alias() {
        let nodes = br#"{"nodes":{"n0":{"http":{"publish_address":"127.0.0.1:9200"}},
            "n1":{"http":{"publish_address":"127.0.0.1:9201"}}}}"#;
        let state = br#"{"metadata":{"indices":{"t1":{"routing_num_shards":640,
              "settings":{"index":{"number_of_shards":"5"}}}}},
            "routing_table":{"indices":{"t1":{"shards":{
              "0":[{"state":"STARTED","primary":true,"node":"n0"}],
              "1":[{"state":"STARTED","primary":true,"node":"n1"}],
              "2":[{"state":"STARTED","primary":true,"node":"n1"}],
              "3":[{"state":"INITIALIZING","primary":true,"node":"n1"}],
              "4":[{"state":"STARTED","primary":false,"node":"n0"},
                   {"state":"STARTED","primary":true,"node":"n1"}]}}}}}"#;
        let aliases = br#"{"t1":{"aliases":{"plain":{},"routed":{"index_routing":"x"}}}}"#;
        let map = ShardMap::parse(nodes, state, aliases, false).unwrap();
        assert_eq!(
            map.nodes,
            ["http://127.0.0.1:9200", "http://127.0.0.1:9201"]
        );
        // "abc" is on shard 4, "2" on shard 3 (not started)
        assert_eq!(map.place("t1", Some("abc"), None), Placement::Node(1));
        assert_eq!(map.place("plain", Some("abc"), None), Placement::Node(1));
        assert_eq!(map.place("t1", Some("2"), None), Placement::Any);
        assert_eq!(map.place("t1", None, None), Placement::Any);
        assert_eq!(map.place("routed", Some("abc"), None), Placement::Any);
        assert_eq!(
            map.place("new-index", Some("abc"), None),
            Placement::Unknown
        );
    }
}
