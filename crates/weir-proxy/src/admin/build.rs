//! Which build of weir serves: what the binary hands the data plane for the start log line,
//! `/api/status` and the dashboard.

/// The running binary's version, the git commit it was built from and its target triple.
#[derive(Debug, Clone, Copy)]
pub struct BuildInfo {
    pub version: &'static str,
    pub commit: &'static str,
    pub target: &'static str,
}

impl BuildInfo {
    /// `/api/status`'s `build` object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "version": self.version,
            "commit": self.commit,
            "target": self.target,
        })
    }
}

impl std::fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (commit {}, {})",
            self.version, self.commit, self.target
        )
    }
}
