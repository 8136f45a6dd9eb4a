//! HTTP as bytes: the HTTP/1 codec (heads, framing, chunked bodies), header-value helpers, conditional requests, weir's own answers and errors. Imports nothing else of the crate.

pub mod ascii;
pub mod codec;
pub mod conditional;
pub mod error;
pub mod file_body;
pub mod local;
