//! weir's data plane, one folder per phase of the request lifecycle (docs/architecture.md):
//! `process` (workers, control thread, reload, upgrade), `listen` (sockets, TLS settings),
//! `conn` (the HTTP/1 and HTTP/2 client drivers), `exchange` (route, filters, reply, finish),
//! `actions` (static, cache, Elasticsearch), `upstream` (balancers, pools, health, h1 and h2
//! clients), `l4` (TCP and UDP routers), `observe` (metrics, logs, admin API), and the low
//! layers `http` (the codec) and `io`.
// One measured exception, allowed where it lives: `codec::Head::text`.
#![deny(unsafe_code)]

pub(crate) mod actions;
pub(crate) mod conn;
pub(crate) mod exchange;
pub(crate) mod http;
pub(crate) mod io;
pub(crate) mod l4;
pub(crate) mod listen;
pub(crate) mod observe;
pub(crate) mod process;
pub(crate) mod upstream;

#[cfg(test)]
pub(crate) mod testkit;

// What the `weir` binary and `weir-bench` use, at the paths they know.
pub use exchange::router::Router;
pub use http::codec;
pub use io::ticker;
pub use observe::errorlog;
pub use process::runtime::Runtime;
pub use process::server::{run, RunOptions};
pub use process::upgrade;

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
    pub use crate::l4::client_hello::{parse as client_hello, Peeked, MAX_HELLO_BYTES};
    pub use crate::l4::proxy_protocol::header as proxy_protocol_header;
}
