//! Low-level I/O helpers every layer may use: read buffers and the coarse clock ticker.

pub mod buffers;
pub mod ticker;
