//! What `weir check` prints when a config that loads does not compile: compiling stops at
//! the first error, so every certificate is tried again here and each one's error listed, one
//! a line, with their count, as for the errors of loading.

use std::process::ExitCode;
use weir_config::{located, Config};

/// Prints `first` (the compile error) and every other certificate error, then the count.
pub fn report(path: &str, config: &Config, first: &str) -> ExitCode {
    let mut errors = weir_proxy::certificate_errors(config);
    if !errors.iter().any(|e| e == first) {
        errors.push(first.to_string());
        errors.sort_by_key(|e| position(e));
    }
    for error in &errors {
        eprintln!("{}", located(path, error));
    }
    eprintln!("{path}: {} error(s)", errors.len());
    ExitCode::FAILURE
}

/// `LINE:COLUMN` at the start of an error, for the file's order; errors without one go last.
fn position(error: &str) -> (usize, usize) {
    let mut parts = error.splitn(3, ':');
    let mut number = || parts.next().and_then(|n| n.parse().ok());
    match (number(), number()) {
        (Some(line), Some(column)) => (line, column),
        _ => (usize::MAX, usize::MAX),
    }
}
