//! Where connections come from: bound listening sockets and the TLS server configuration (certificates by SNI).

pub mod client_hello;
pub mod listeners;
pub mod peek;
pub mod proxy_protocol;
pub mod tls;
