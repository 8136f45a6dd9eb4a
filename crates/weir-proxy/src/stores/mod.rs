//! The shared stores a fleet of instances agrees through: Redis (`rate_limit.redis`) and
//! etcd (`providers.etcd`).

pub mod etcd;
pub mod redis;
