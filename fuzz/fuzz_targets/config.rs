//! Fuzz target: config files (`weir_config::load_str`: the YAML reader, then the loader that
//! validates it into a `Config`): never panics, and every error has a position (1-based line
//! and column within the text) and errors come sorted by it. Input with a NUL byte is a file
//! and a provider's document (`load_str_with`, the etcd provider's merge): every error is
//! placed in one of the two, within its lines. Listen addresses are resolved numerically in
//! fuzz builds (no DNS queries).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((file, document)) = text.split_once('\0') {
        merged(file, document);
        return;
    }
    let Err(errors) = weir_config::load_str(text, "fuzz.yaml") else {
        return;
    };
    assert!(!errors.is_empty());
    let lines = lines_of(text);
    let mut last = (0, 0);
    for e in &errors {
        assert!(e.pos.line >= 1 && e.pos.column >= 1, "{e}");
        assert!(e.pos.line <= lines + 1, "{e} past the last line {lines}");
        assert!((e.pos.line, e.pos.column) >= last, "errors out of order");
        last = (e.pos.line, e.pos.column);
    }
});

/// How many lines YAML sees: it breaks lines at LF, CRLF and a lone CR alike.
fn lines_of(text: &str) -> usize {
    1 + text.replace("\r\n", "\n").matches(['\r', '\n']).count()
}

fn merged(file: &str, document: &str) {
    let doc = weir_config::Document {
        label: "etcd:/k".into(),
        text: document.into(),
    };
    let Err(errors) = weir_config::load::load_str_with(file, "fuzz.yaml", Some(&doc)) else {
        return;
    };
    assert!(!errors.is_empty());
    for e in &errors {
        let lines = match e.file.as_str() {
            "fuzz.yaml" => lines_of(file),
            "etcd:/k" => lines_of(document),
            other => panic!("an error in {other}"),
        };
        assert!(e.pos.line >= 1 && e.pos.column >= 1, "{e}");
        assert!(e.pos.line <= lines + 1, "{e} past the last line {lines}");
    }
}
