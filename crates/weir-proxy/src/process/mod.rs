//! The process: starting workers and the control thread, signals, reload, binary upgrade, the compiled configuration snapshot and the state carried across reloads.

pub mod control;
pub mod reload;
pub mod server;
pub mod upgrade;
pub mod worker;
