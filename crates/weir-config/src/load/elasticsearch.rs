//! `services.NAME.elasticsearch`: an Elasticsearch (or OpenSearch) cluster as a service. Its
//! `hosts` are the seeds the service starts with; with discovery on (the default), the
//! control thread replaces them by the cluster's nodes.

use super::{bad_server_url, Loader};
use crate::model::*;
use crate::yaml::Node;

impl Loader<'_> {
    /// Reads the block; its hosts go into `servers`.
    pub(super) fn elasticsearch(
        &mut self,
        node: &Node,
        servers: &mut Vec<UpstreamServer>,
    ) -> Option<Elasticsearch> {
        let f = self.fields(node, "`elasticsearch`", &["hosts", "discovery", "bulk"])?;
        match f.get("hosts") {
            Some(list) => {
                for (url, pos) in self.string_list(list, "`hosts`") {
                    match UpstreamServer::from_url(&url, 1) {
                        Some(server) => servers.push(server),
                        None => self.error(pos, bad_server_url(&url)),
                    }
                }
            }
            None => self.error(
                f.pos,
                "`elasticsearch` needs `hosts`, e.g. `hosts: [\"http://127.0.0.1:9200\"]`",
            ),
        }
        let mut discovery = Some(EsDiscovery {
            refresh: DEFAULT_ES_REFRESH,
            roles: Vec::new(),
        });
        if let Some(d) = f.get("discovery") {
            let d = self.fields(d, "`discovery`", &["enabled", "refresh", "roles"])?;
            if let Some(n) = d.get("refresh") {
                if let (Some(refresh), Some(found)) =
                    (self.duration(n, "`discovery.refresh`"), discovery.as_mut())
                {
                    found.refresh = refresh;
                }
            }
            if let Some(n) = d.get("roles") {
                let roles = self.string_list(n, "`discovery.roles`");
                if let Some(found) = discovery.as_mut() {
                    found.roles = roles.into_iter().map(|(role, _)| role).collect();
                }
            }
            if let Some(n) = d.get("enabled") {
                if self.boolean(n, "`discovery.enabled`") == Some(false) {
                    discovery = None;
                }
            }
        }
        let mut bulk = EsBulk::default();
        if let Some(b) = f.get("bulk") {
            let b = self.fields(b, "`bulk`", &["route", "max_body"])?;
            if let Some(n) = b.get("route") {
                match self.string(n, "`bulk.route`").as_deref() {
                    Some("node") => bulk.route = BulkRoute::Node,
                    Some("none") => bulk.route = BulkRoute::None,
                    Some(other) => self.error(
                        n.pos,
                        format!("unknown bulk route `{other}`; expected `node` or `none`"),
                    ),
                    None => {}
                }
            }
            if let Some(n) = b.get("max_body") {
                if let Some(size) = self.size(n, "`bulk.max_body`") {
                    bulk.max_body = size;
                }
            }
        }
        Some(Elasticsearch { discovery, bulk })
    }
}
