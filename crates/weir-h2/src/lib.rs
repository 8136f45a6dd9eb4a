//! weir's own HTTP/2 codec (RFC 9113 framing and stream states, RFC 7541 HPACK), sans-IO:
//! on the server side [`Connection`] takes received bytes and yields [`Event`]s, takes the
//! caller's answers and writes frames into an output the caller flushes; on the client side
//! [`ClientConnection`] does the same for requests sent and [`ClientEvent`]s received. The
//! caller owns the socket. See docs/h2-codec.md.

mod client;
mod conn;
mod frame;
mod head;
pub mod hpack;
mod output;
mod shared;
mod stream_table;

pub use client::{ClientConfig, ClientConnection, ClientEvent};
pub use conn::{Config, Connection, Event, SendError, StreamProgress, PREFACE};
pub use frame::Reason;
pub use head::{is_connection_specific, HeaderBlock, RequestHead};
pub use hpack::Indexing;
pub use stream_table::StreamTable;
