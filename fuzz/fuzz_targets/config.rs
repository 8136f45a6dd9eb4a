//! Fuzz target: config files (`weir_config::load_str`: the YAML reader, then the loader that
//! validates it into a `Config`): never panics, and every error has a position (1-based line
//! and column within the text) and errors come sorted by it. Listen addresses are resolved
//! numerically in fuzz builds (no DNS queries).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Err(errors) = weir_config::load_str(text, "fuzz.yaml") else {
        return;
    };
    assert!(!errors.is_empty());
    // YAML breaks lines at LF, CRLF and a lone CR alike.
    let lines = 1 + text.replace("\r\n", "\n").matches(['\r', '\n']).count();
    let mut last = (0, 0);
    for e in &errors {
        assert!(e.pos.line >= 1 && e.pos.column >= 1, "{e}");
        assert!(e.pos.line <= lines + 1, "{e} past the last line {lines}");
        assert!((e.pos.line, e.pos.column) >= last, "errors out of order");
        last = (e.pos.line, e.pos.column);
    }
});
