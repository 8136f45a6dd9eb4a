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
    /// Two filters of one route, the body through `inner` first (see [`BodyFilter::then`]).
    Chain(Chain),
}

/// `inner`'s output goes through `outer`; `joined` holds what `outer` produced on a flush or
/// the end, where it may answer twice.
struct Chain {
    inner: BodyFilter,
    outer: BodyFilter,
    joined: Vec<u8>,
}

impl Chain {
    /// `outer`'s output for what `inner`'s `step` produced, then `outer`'s own `step`.
    fn both(&mut self, step: impl Fn(&mut BodyFilter) -> io::Result<&[u8]>) -> io::Result<&[u8]> {
        let Chain {
            inner,
            outer,
            joined,
        } = self;
        joined.clear();
        joined.extend_from_slice(outer.write(step(inner)?)?);
        joined.extend_from_slice(step(outer)?);
        Ok(joined)
    }
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

    /// A route whose filters install two body filters (a `lua` middleware's `body_filter`
    /// inside `compress`): the body goes through `self`, the inner one (installed by the later
    /// middleware), and then through `outer`, as the middlewares nest.
    pub fn then(self, outer: BodyFilter) -> BodyFilter {
        BodyFilter(Box::new(Kind::Chain(Chain {
            inner: self,
            outer,
            joined: Vec::new(),
        })))
    }

    /// The next piece of the body.
    pub fn write(&mut self, data: &[u8]) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.write(data),
            Kind::GrpcWeb(g) => g.write(data),
            Kind::Pieces(p) => p.piece(data, false),
            Kind::Chain(Chain { inner, outer, .. }) => outer.write(inner.write(data)?),
        }
    }

    /// The source has nothing more for now: emit what is held back.
    pub fn flush(&mut self) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.flush(),
            Kind::GrpcWeb(g) => g.flush(),
            Kind::Pieces(_) => Ok(&[]),
            Kind::Chain(chain) => chain.both(BodyFilter::flush),
        }
    }

    /// The body has ended.
    pub fn finish(&mut self) -> io::Result<&[u8]> {
        match &mut *self.0 {
            Kind::Compress(c) => c.finish(),
            Kind::GrpcWeb(g) => g.finish(),
            Kind::Pieces(p) => p.piece(&[], true),
            Kind::Chain(chain) => chain.both(BodyFilter::finish),
        }
    }

    /// Whether the filter writes the body's trailers itself (into the body): the driver
    /// then hands them over before the end and sends none.
    pub fn takes_trailers(&self) -> bool {
        match &*self.0 {
            Kind::GrpcWeb(_) => true,
            Kind::Chain(chain) => chain.inner.takes_trailers() || chain.outer.takes_trailers(),
            _ => false,
        }
    }

    /// The body's trailers, for a filter that [takes them](BodyFilter::takes_trailers).
    pub fn take_trailers(&mut self, trailers: Option<http::HeaderMap>) {
        match &mut *self.0 {
            Kind::GrpcWeb(g) => g.take_trailers(trailers),
            // The one that takes them (the inner one, when both would).
            Kind::Chain(chain) if chain.inner.takes_trailers() => {
                chain.inner.take_trailers(trailers)
            }
            Kind::Chain(chain) => chain.outer.take_trailers(trailers),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Appends its mark to each piece, and `end` at the end.
    struct Mark(&'static str, Vec<u8>);

    impl PieceFilter for Mark {
        fn piece(&mut self, data: &[u8], eof: bool) -> io::Result<&[u8]> {
            self.1.clear();
            self.1.extend_from_slice(data);
            self.1.extend_from_slice(self.0.as_bytes());
            if eof {
                self.1.extend_from_slice(b"end");
            }
            Ok(&self.1)
        }
    }

    #[test]
    fn two_filters_nest_the_inner_one_first() {
        let inner = BodyFilter::pieces(Box::new(Mark("i", Vec::new())));
        let outer = BodyFilter::pieces(Box::new(Mark("o", Vec::new())));
        let mut both = inner.then(outer);
        assert_eq!(both.write(b"a").unwrap(), b"aio");
        // The inner one's last piece goes through the outer one, then the outer one ends.
        assert_eq!(both.finish().unwrap(), b"iendooend");
    }

    #[test]
    fn a_reply_s_filter_stays_one_word() {
        assert_eq!(
            std::mem::size_of::<Option<BodyFilter>>(),
            std::mem::size_of::<usize>()
        );
    }
}
