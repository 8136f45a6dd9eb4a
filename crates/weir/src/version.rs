//! What this binary is: its version, the git commit it was built from and its target, as
//! `weir version` prints them, the start logs them and the admin API shows them.

/// This build's identity, set at compile time by `build.rs`.
pub const BUILD: weir_proxy::BuildInfo = weir_proxy::BuildInfo {
    version: env!("CARGO_PKG_VERSION"),
    commit: env!("WEIR_BUILD_COMMIT"),
    target: env!("WEIR_BUILD_TARGET"),
};

/// `weir --version`'s text after the name: `0.1.0 (commit 1a2b3c4d5e6f, x86_64-unknown-linux-gnu)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WEIR_BUILD_COMMIT"),
    ", ",
    env!("WEIR_BUILD_TARGET"),
    ")"
);

/// `weir version`: the same as `weir --version`, one line.
pub fn print() {
    println!("weir {LONG}");
}
