//! The process: starting workers and the control thread, signals, reload, binary upgrade.
//! The snapshot they serve from is `state/`; what a worker owns is `worker/`.

pub mod acme;
pub mod control;
pub mod exporter;
pub mod notify;
pub mod provider;
pub mod reload;
pub mod server;
pub mod upgrade;
pub mod worker;
