//! Response-body filters: what a response-head filter installs for one response, and the
//! driver runs the body through (`reply/relay.rs`, `Sink`). A closed enum, so the relay pays no
//! dynamic dispatch: compression, and gRPC-Web's answer (which takes the trailers into the
//! body).

use crate::http::compress::Compressor;
use crate::http::grpc_web::GrpcWebBody;
use std::io;

/// A response-body filter, installed by a response-head filter for one response. Each call
/// returns the bytes it produced for the client.
pub enum BodyFilter {
    /// Boxed: a reply carries an `Option<BodyFilter>`, which stays small this way.
    Compress(Box<Compressor>),
    /// The `grpc_web` middleware's: the service's trailers become the body's last frame.
    GrpcWeb(Box<GrpcWebBody>),
}

impl BodyFilter {
    /// The next piece of the body.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.write(data),
            BodyFilter::GrpcWeb(g) => g.write(data),
        }
    }

    /// The source has nothing more for now: emit what is held back.
    pub fn flush(&mut self) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.flush(),
            BodyFilter::GrpcWeb(g) => g.flush(),
        }
    }

    /// The body has ended.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        match self {
            BodyFilter::Compress(c) => c.finish(),
            BodyFilter::GrpcWeb(g) => g.finish(),
        }
    }

    /// Whether the filter writes the body's trailers itself (into the body): the driver
    /// then hands them over before the end and sends none.
    pub fn takes_trailers(&self) -> bool {
        matches!(self, BodyFilter::GrpcWeb(_))
    }

    /// The body's trailers, for a filter that [takes them](BodyFilter::takes_trailers).
    pub fn take_trailers(&mut self, trailers: Option<http::HeaderMap>) {
        if let BodyFilter::GrpcWeb(g) = self {
            g.take_trailers(trailers);
        }
    }
}
