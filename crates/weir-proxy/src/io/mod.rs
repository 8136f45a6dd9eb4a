//! Low-level I/O helpers every layer may use: read buffers and the coarse clock ticker.

pub mod buffers;
pub mod idle;
pub mod kept;
pub mod open_files;
pub mod relay;
pub mod ticker;
pub mod watch;
