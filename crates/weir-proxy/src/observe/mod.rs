//! What operators see: metric cells, the access and error logs, the Prometheus exposition and the admin API with its dashboard.

pub mod accesslog;
pub mod errorlog;
pub mod metrics;
