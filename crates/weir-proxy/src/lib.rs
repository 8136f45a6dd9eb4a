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
