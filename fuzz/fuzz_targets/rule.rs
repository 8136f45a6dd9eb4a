//! Fuzz target: router rules, HTTP and TCP (`weir_config::rule::parse`, `parse_tcp`), as read
//! from a config file: never panics, an error's character offset lies within the rule (or at
//! its end), and a parsed rule can be evaluated. The host helpers the matchers use run on the
//! text too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_config::rule;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let chars = text.chars().count();
    match rule::parse(text) {
        Ok(parsed) => {
            let _ = parsed.eval(&|_| true);
            let _ = parsed.any_matcher(&|m| matches!(m, rule::Matcher::Host(_)));
        }
        Err(e) => assert!(
            e.offset <= chars,
            "offset {} in {chars} characters",
            e.offset
        ),
    }
    match rule::parse_tcp(text) {
        Ok(parsed) => {
            let _ = parsed.eval(&|_| false);
        }
        Err(e) => assert!(
            e.offset <= chars,
            "offset {} in {chars} characters",
            e.offset
        ),
    }
    let host = rule::canonical_host(text);
    assert!(text.to_ascii_lowercase().contains(&*host));
    assert!(text.starts_with(rule::strip_port(text)));
    let _ = rule::Cidr::parse(text);
    let _ = rule::from_go_syntax(text);
});
