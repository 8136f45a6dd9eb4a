//! Layer 4: connections routed and proxied as bytes, before (or instead of) HTTP. [`tcp`] holds
//! the TCP routers' detect phase and proxy, [`udp`] proxies datagrams in per-client sessions.
//! What they use lives below: the compiled routes (`state/l4_routes.rs`), the ClientHello and
//! PROXY protocol parsers (`listen/`), the byte relay (`io/relay.rs`).

pub mod tcp;
pub mod udp;
