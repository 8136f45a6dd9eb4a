//! Where connections come from and what they are: bound listening sockets, the detect phase's
//! peek and parsers (ClientHello, PROXY protocol), and the TLS settings (certificates by SNI,
//! upstream client configurations), and QUIC's server settings and runtime (`quic.rs`). The accept loop that uses them is `process/server.rs`.

pub mod acme;
pub mod client_hello;
pub mod listeners;
pub mod peek;
pub mod proxy_protocol;
pub mod quic;
pub mod tls;
