//! Layer 4: connections routed and proxied as bytes, before (or instead of) HTTP. [`routes`] is
//! what TCP and UDP routing compile to; [`tcp`] holds the TCP routers' detect phase and proxy, [`client_hello`] reads SNI and ALPN from peeked
//! bytes, [`relay`] moves bytes both ways, [`proxy_protocol`] writes the PROXY header; [`udp`]
//! proxies datagrams in per-client sessions.

pub mod tcp;
pub mod udp;
