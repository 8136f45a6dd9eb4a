//! Low-level I/O every layer may use: read buffers and the worker's lent buffers, deadlines and
//! the coarse clock, the ticker, the TCP relay, parked idle connections, lingering close, the open-file cache, the
//! stream to a server (plain or TLS), and the tables that carry state across a reload.

pub mod buffers;
pub mod h2_output;
pub mod idle;
pub mod kept;
pub mod linger;
pub mod open_files;
pub mod relay;
pub mod ticker;
pub mod upstream_io;
pub mod watch;
