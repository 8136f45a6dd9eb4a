//! What a route does with a request besides proxying: static files, the response cache, the
//! Elasticsearch service, and whole-body reads.

pub mod cache;
pub mod elasticsearch;
pub mod static_files;
pub mod whole_body;
