//! weir's data plane: workers and listeners, TLS, the HTTP/1.1 codec and connection driver, the
//! request lifecycle (router, filters with compression, actions), services with their balancers and per-worker
//! keep-alive pools. See docs/architecture.md and docs/lifecycle-h1.md.
// One measured exception, allowed where it lives: `codec::Head::text`.
#![deny(unsafe_code)]

pub mod accesslog;
pub mod admin;
pub mod ascii;
pub mod balancer;
pub mod body_filter;
pub mod cache;
pub mod carry;
pub mod client;
pub mod codec;
pub mod compress;
pub mod conditional;
pub mod conn;
pub mod control;
pub mod detached;
pub mod elasticsearch;
pub mod errorlog;
pub mod exchange;
pub mod filter;
pub mod forwarding;
pub mod grpc;
pub mod health;
pub mod health_check;
pub mod l4;
pub mod listeners;
pub mod metrics;
pub mod open_files;
pub mod pool;
pub mod prometheus;
pub mod reload;
pub mod reply;
pub mod router;
pub mod runtime;
pub mod server;
pub mod static_files;
pub mod ticker;
pub mod tls;
pub mod upgrade;
pub mod upstream;
pub mod upstream_h2;
pub mod whole_body;
pub mod worker;

pub use runtime::Runtime;
pub use server::{run, RunOptions};

/// The parsers the fuzz targets (`fuzz/`, outside the workspace) drive, named in one place: a
/// module moved inside this crate then breaks this list, in the workspace's own build, rather
/// than the fuzz crate, which only `fuzz/run` builds.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::codec::{
        parse_request, parse_response, ChunkEvent, ChunkedDecoder, Framing, HeadError, MAX_HEADERS,
        MAX_HEAD_BYTES,
    };
    pub use crate::elasticsearch::items::{cut as bulk_answer_items, BulkItems};
    pub use crate::elasticsearch::ndjson::{parse as bulk_request_items, Action};
    pub use crate::l4::client_hello::{parse as client_hello, Peeked, MAX_HELLO_BYTES};
    pub use crate::l4::proxy_protocol::header as proxy_protocol_header;
}
