//! Response-body filters: what a response-head filter installs for one response, and the
//! driver runs the body through (`reply/relay.rs`, `Sink`). A closed enum, so the relay pays no
//! dynamic dispatch; compression is the one kind today.

use crate::http::compress::Compressor;
use std::io;

/// A response-body filter, installed by a response-head filter for one response. Each call
/// returns the bytes it produced for the client.
pub enum BodyFilter {
    /// Boxed: a reply carries an `Option<BodyFilter>`, which stays one word this way.
    Compress(Box<Compressor>),
}

impl BodyFilter {
    /// The next piece of the body.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.write(data),
        }
    }

    /// The source has nothing more for now: emit what is held back.
    pub fn flush(&mut self) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.flush(),
        }
    }

    /// The body has ended.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.finish(),
        }
    }
}
