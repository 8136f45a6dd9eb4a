//! An Elasticsearch service at the request level: weir's own failures (no server, a timeout,
//! a refused body) are rendered the way Elasticsearch answers errors (`error_answer`), a JSON body with
//! `error.type`, `error.reason` and `status`, so the official clients raise their usual
//! exception with a readable reason. weir never adds `X-Elastic-Product` to its own answers:
//! a client checking it must see it is not talking to the cluster. `_bulk` has its own
//! action (`bulk.rs`), and so have reads with a body and cached searches (`read.rs`); nodes and shards are found
//! by the control thread (`discovery.rs`, `routing.rs`).

pub mod batch;
pub mod bulk;
pub mod discovery;
pub mod items;
pub mod ndjson;
pub mod node_client;
pub mod part;
pub mod pins;
pub mod read;
pub mod replay;
pub mod routing;
pub mod search_cache;
pub mod spool;

use crate::http::codec::RequestHead;
use crate::http::error::{ErrorKind, LocalError};
use crate::http::local::LocalResponse;
use crate::io::kept::Kept;
use crate::reply::client::ClientSide;
use crate::reply::Reply;
use crate::servers::balancer::Service;
use crate::worker::Worker;
use std::rc::Rc;
use std::sync::Arc;

/// An Elasticsearch service: the HTTP service it fronts and what Elasticsearch adds to it.
/// Compiled beside the services (`EsService::new`), chosen as a route's action where the
/// route names it.
#[derive(Debug)]
pub struct EsService {
    /// The service its requests go to (by the balancer, as on any service).
    pub service: Arc<Service>,
    pub bulk: weir_config::EsBulk,
    /// Its shard map, kept across reloads by the service's name.
    pub cluster: Arc<routing::ClusterView>,
    /// Its write spool, kept across reloads by the service's name and folder.
    pub spool: Option<Arc<spool::Spool>>,
    /// Its search cache, kept across reloads that keep its settings.
    pub search_cache: Option<Arc<search_cache::SearchCache>>,
    /// How the control thread reaches the nodes (discovery, the shard map, the replay).
    pub access: node_client::NodeAccess,
}

/// The tables an Elasticsearch service's state is carried over a reload in (`state/carry.rs`).
pub struct KeptEs<'a> {
    pub clusters: &'a mut Kept<routing::ClusterView>,
    pub spools: &'a mut Kept<spool::Spool>,
    pub search_caches: &'a mut Kept<search_cache::SearchCache>,
}

impl EsService {
    /// The `Authorization` an Elasticsearch service's `auth` puts on every request to its
    /// servers in place of the client's (`None` for any other service).
    pub fn authorization(cfg: &weir_config::Service) -> Option<Box<[u8]>> {
        let es = cfg.elasticsearch.as_ref()?;
        es.authorization
            .as_deref()
            .map(|value| value.as_bytes().into())
    }

    pub fn new(
        cfg: &weir_config::Service,
        es: &weir_config::Elasticsearch,
        service: Arc<Service>,
        kept: KeptEs<'_>,
    ) -> Result<EsService, String> {
        let name = cfg.name.as_str();
        // The TLS settings its servers were given, for the control thread's own clients.
        let workers_tls = service
            .servers
            .iter()
            .find_map(|s| s.tls.as_ref().map(|t| t.config.clone()));
        let spool = match &es.spool {
            Some(cfg) => Some(
                kept.spools
                    .try_get(format!("{name} {}", cfg.path.display()), || {
                        spool::Spool::open(&cfg.path, cfg.max_size, cfg.fsync).map(Arc::new)
                    })
                    .map_err(|e| format!("service `{name}`: {e}"))?,
            ),
            None => None,
        };
        let search_cache = es.search_cache.as_ref().map(|cfg| {
            use search_cache::SearchCache;
            kept.search_caches
                .get(SearchCache::identity(name, cfg), || {
                    Arc::new(SearchCache::new(cfg))
                })
        });
        Ok(EsService {
            service,
            search_cache,
            bulk: es.bulk.clone(),
            cluster: kept.clusters.get(name.to_string(), Default::default),
            spool,
            access: node_client::NodeAccess::new(cfg, workers_tls.as_ref())?,
        })
    }
}

/// Whether the request has an action of its own on an Elasticsearch service (others are
/// proxied as on any service).
pub(crate) fn has_own_action(es: &EsService, head: &RequestHead) -> bool {
    bulk::is_bulk(head)
        || read::is_read_with_body(head)
        || (es.search_cache.is_some() && search_cache::is_search(head) && read::kept_whole(head))
}

/// Runs the request's own action (`has_own_action`).
pub(crate) async fn serve<'r, C: ClientSide>(
    worker: &Rc<Worker>,
    service: &'r Arc<Service>,
    es: &EsService,
    client: &mut C,
    head: &RequestHead,
) -> Reply<'r> {
    if bulk::is_bulk(head) {
        bulk::serve(worker, service, es, client, head).await
    } else {
        read::serve(worker, service, es, client, head).await
    }
}

/// The `error.type` for a status weir answers with.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        400 | 405 | 411 | 414 | 431 => "illegal_argument_exception",
        408 | 504 => "timeout_exception",
        413 => "content_too_long_exception",
        429 => "es_rejected_execution_exception",
        502 => "gateway_upstream_exception",
        503 => "gateway_unavailable_exception",
        _ => "gateway_exception",
    }
}

/// weir's own error in Elasticsearch's form, then the error's own header lines.
pub fn error_answer(error: &LocalError) -> LocalResponse {
    let reason = error.message.trim_end();
    es_error_with(
        error.status,
        error_type(error.status),
        reason,
        &error.headers,
    )
}

/// The answer to a client whose request body could not be read (bad framing, too slow, gone,
/// or over the limit: `too_large` then says which limit), in Elasticsearch's form.
pub(crate) fn body_failure(
    e: crate::reply::relay::BodyError,
    too_large: Option<String>,
) -> LocalResponse {
    let mut error = e.client_answer().unwrap_or_else(|| {
        LocalError::new(499, ErrorKind::ClientClosed, "client closed the connection")
    });
    if let (Some(reason), 413) = (too_large, error.status) {
        error.message = reason.into();
    }
    error_answer(&error)
}

/// The head of a request that carries `len` bytes of a plain body: the client's, with its
/// framing and encodings replaced, so the node's answer comes back plain (to be merged, or
/// kept for any client).
pub(crate) fn plain_request_head(head: &RequestHead, len: usize) -> Option<RequestHead> {
    let coding = |name: &[u8]| {
        let codings = [&b"content-encoding"[..], b"accept-encoding"];
        codings.iter().any(|c| name.eq_ignore_ascii_case(c))
    };
    let fields = head.head.iter().filter(|(name, _)| !coding(name));
    let (method, target) = (head.method(), head.target());
    crate::actions::subrequest::request_head(method, target, head.host(), fields, Some(len))
}

/// An error answer in Elasticsearch's form.
pub(crate) fn es_error(status: u16, kind: &str, reason: &str) -> LocalResponse {
    es_error_with(status, kind, reason, &[])
}

/// The same with more header lines after its `Content-Type`.
fn es_error_with(
    status: u16,
    kind: &str,
    reason: &str,
    extra: &[(String, String)],
) -> LocalResponse {
    let cause = serde_json::json!({ "type": kind, "reason": reason });
    let body = serde_json::json!({
        "error": { "root_cause": [cause], "type": kind, "reason": reason },
        "status": status,
    });
    let mut headers = Vec::with_capacity(extra.len() + 1);
    headers.push((
        "content-type".into(),
        "application/json; charset=UTF-8".into(),
    ));
    headers.extend(extra.iter().cloned());
    LocalResponse::new(status, headers, body.to_string())
}
