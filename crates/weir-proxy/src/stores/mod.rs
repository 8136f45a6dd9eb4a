//! The shared stores a fleet of instances agrees through: Redis (`rate_limit.redis`).

pub mod redis;
