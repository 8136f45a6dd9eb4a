//! Response-body filters: what a response-head filter installs for one response, and the
//! driver runs the body through (`reply/relay.rs`, `Sink`). A closed enum, so the relay pays no
//! dynamic dispatch: compression, and gRPC-Web's answer (which takes the trailers into the
//! body); a `lua` middleware's `body_filter` comes in through [`PieceFilter`].

use crate::http::compress::Compressor;
use crate::http::grpc_web::GrpcWebBody;
use std::io;

/// A response-body filter, installed by a response-head filter for one response. Each call
/// returns the bytes it produced for the client. Boxed whole: a reply carries an
/// `Option<BodyFilter>`, which stays one word this way, whatever the kinds.
pub struct BodyFilter(Box<Kind>);

enum Kind {
    Compress(Compressor),
    /// The `grpc_web` middleware's: the service's trailers become the body's last frame.
    GrpcWeb(GrpcWebBody),
    /// One a layer above defines (a `lua` middleware's `body_filter`).
    Pieces(Box<dyn PieceFilter>),
}

/// A body filter that sees the body piece by piece with whether it is the last (a `lua`
/// middleware's `body_filter`, as lua-nginx-module's `ngx.arg`); it holds nothing back.
pub trait PieceFilter {
    /// What goes to the client for `data`; `eof`: the body ends after it.
    fn piece(&mut self, data: &[u8], eof: bool) -> io::Result<&[u8]>;
}

impl BodyFilter {
    pub fn compress(compressor: Compressor) -> BodyFilter {
        BodyFilter(Box::new(Kind::Compress(compressor)))
    }

    pub fn grpc_web(body: GrpcWebBody) -> BodyFilter {
        BodyFilter(Box::new(Kind::GrpcWeb(body)))
    }

    pub fn pieces(filter: Box<dyn PieceFilter>) -> BodyFilter {
        BodyFilter(Box::new(Kind::Pieces(filter)))
    }

    /// The next piece of the body.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.write(data),
            Kind::GrpcWeb(g) => g.write(data),
            Kind::Pieces(p) => p.piece(data, false),
        }
    }

    /// The source has nothing more for now: emit what is held back.
    pub fn flush(&mut self) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.flush(),
            Kind::GrpcWeb(g) => g.flush(),
            Kind::Pieces(_) => Ok(&[]),
        }
    }

    /// The body has ended.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.finish(),
            Kind::GrpcWeb(g) => g.finish(),
            Kind::Pieces(p) => p.piece(&[], true),
        }
    }

    /// Whether the filter writes the body's trailers itself (into the body): the driver
    /// then hands them over before the end and sends none.
    pub fn takes_trailers(&self) -> bool {
        matches!(*self.0, Kind::GrpcWeb(_))
    }

    /// The body's trailers, for a filter that [takes them](BodyFilter::takes_trailers).
    pub fn take_trailers(&mut self, trailers: Option<http::HeaderMap>) {
        if let Kind::GrpcWeb(g) = &mut *self.0 {
            g.take_trailers(trailers);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_s_filter_stays_one_word() {
        assert_eq!(
            std::mem::size_of::<Option<BodyFilter>>(),
            std::mem::size_of::<usize>()
        );
    }
}
