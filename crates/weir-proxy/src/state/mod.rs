//! What a worker serves from: the compiled configuration snapshot (entrypoints, routes,
//! services, TCP and UDP routes), built off the hot path on every (re)load, and the state a
//! compile carries over from the previous snapshot.

pub mod carry;
pub mod l4_routes;
pub mod runtime;
