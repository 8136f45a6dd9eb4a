//! weir's data plane, one folder per part of the request lifecycle, each importing only the
//! folders listed after it (docs/architecture.md, checked by `layers_import_downward` below):
//! `process` (workers, control thread, reload, upgrade), `admin` (the admin API, Prometheus,
//! dashboard), `l4` (TCP and UDP routers), `conn` (the HTTP/1 and HTTP/2 client drivers, TLS),
//! `exchange` (one request: route, filters, action, finish), `state` (the compiled
//! snapshot), `middlewares`, `actions` (static, cache, Elasticsearch), `upstream` (the proxy
//! action's tries), `reply` (what an action answers, what the lifecycle asks of a client),
//! `worker` (what a worker thread lends every phase), `servers` (balancers, health, pools),
//! `stores` (the shared stores a fleet agrees through: Redis), `listen` (sockets, detection,
//! TLS settings), `observe` (counters and logs), `io` and `http`.
// One measured exception, allowed where it lives: `codec::Head::text`.
#![deny(unsafe_code)]

pub(crate) mod actions;
pub(crate) mod admin;
pub(crate) mod conn;
pub(crate) mod exchange;
pub(crate) mod http;
pub(crate) mod io;
pub(crate) mod l4;
pub(crate) mod listen;
pub(crate) mod lua;
pub(crate) mod middlewares;
pub(crate) mod observe;
pub(crate) mod process;
pub(crate) mod reply;
pub(crate) mod servers;
pub(crate) mod state;
pub(crate) mod stores;
pub(crate) mod upstream;
pub(crate) mod worker;

#[cfg(test)]
pub(crate) mod testkit;

// What the `weir` binary and `weir-bench` use, at the paths they know.
pub use admin::build::BuildInfo;
pub use http::codec;
pub use http::router::Router;
pub use io::ticker;
pub use listen::tls::certificate_errors;
pub use observe::errorlog;
pub use process::server::{run, RunOptions};
pub use process::upgrade;
pub use state::runtime::Runtime;

/// The parsers the fuzz targets (`fuzz/`, outside the workspace) drive, named in one place: a
/// module moved inside this crate then breaks this list, in the workspace's own build, rather
/// than the fuzz crate, which only `fuzz/run` builds.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::actions::elasticsearch::items::{cut as bulk_answer_items, BulkItems};
    pub use crate::actions::elasticsearch::ndjson::{parse as bulk_request_items, Action};
    pub use crate::http::codec::{
        parse_request, parse_response, ChunkEvent, ChunkedDecoder, Framing, HeadError, MAX_HEADERS,
        MAX_HEAD_BYTES,
    };
    pub use crate::listen::client_hello::{parse as client_hello, Peeked, MAX_HELLO_BYTES};
    pub use crate::listen::proxy_protocol::header as proxy_protocol_header;
    pub use crate::stores::redis::{
        parse as redis_reply, Parsed as RedisParsed, Value as RedisValue,
    };
}
