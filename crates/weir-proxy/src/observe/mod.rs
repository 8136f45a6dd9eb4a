//! What a worker records for operators: metric cells, the access log, the error log, finished trace spans and their OTLP form. The
//! admin listener that shows them (API, Prometheus exposition, dashboard) is `admin/`.

pub mod accesslog;
pub mod errorlog;
pub mod metrics;
pub mod otlp;
pub mod spans;
