//! Low-level I/O helpers every layer may use: the coarse clock ticker.

pub mod ticker;
