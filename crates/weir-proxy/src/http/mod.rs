//! HTTP as bytes: the HTTP/1 codec (heads, framing, chunked bodies), header-value helpers and conditional requests. Imports nothing else of the crate.

pub mod ascii;
pub mod codec;
pub mod conditional;
pub mod file_body;
pub mod local;
