//! What a route does with a request besides proxying: static files, the response cache, the
//! Elasticsearch service, whole-body reads, and requests weir sends of its own.

pub mod cache;
pub mod elasticsearch;
pub mod static_files;
pub mod subrequest;
pub mod whole_body;
