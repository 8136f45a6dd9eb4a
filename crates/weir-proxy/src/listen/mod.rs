//! Where connections come from: bound listening sockets and the TLS server configuration (certificates by SNI).

pub mod listeners;
pub mod tls;
