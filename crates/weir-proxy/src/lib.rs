//! weir's data plane: workers and listeners, the HTTP/1.1 codec, the router, middlewares,
//! services with their balancers and per-worker keep-alive pools. See docs/architecture.md.
// One measured exception, allowed where it lives: `h1::Head::text`.
#![deny(unsafe_code)]

pub mod accesslog;
pub mod balancer;
pub mod h1;
pub mod middleware;
pub mod pool;
pub mod proxy;
pub mod response;
pub mod router;
pub mod runtime;
pub mod watch;
pub mod worker;

pub use runtime::Runtime;
pub use worker::run;
