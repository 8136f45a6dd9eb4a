//! weir's shared HTTP cache, the policy half (RFC 9111, with RFC 5861's stale extensions and
//! RFC 9211's `Cache-Status`): pure functions over header fields and times, unit-tested here;
//! the store and the action that wraps a route live in `weir-proxy`.
#![forbid(unsafe_code)]

mod cache_control;
mod policy;

pub use cache_control::{listed_fields, Directives};
pub use policy::{
    cache_status, current_age, freshness_lifetime, http_date_secs, secondary_key, storable,
    updated_by_304, Fields, NotStorable, Outcome, Stored, Usable, HEURISTIC_CAP,
};
