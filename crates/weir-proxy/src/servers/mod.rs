//! The servers behind services and what a worker keeps of them: each service's balancer and
//! its servers' health (passive and active checks), the pooled HTTP/1 connections and the
//! multiplexed HTTP/2 ones.

pub mod balancer;
pub mod h2_conn;
pub mod h2_pool;
pub mod health;
pub mod health_check;
pub mod pool;
