//! Fuzz target: a circuit breaker's expression (`weir_config::breaker_expression::parse`, on
//! the shared predicate parser): never panics nor overflows the stack, an error's byte offset
//! lies within the text (or at its end), and a parsed condition can be evaluated.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weir_config::breaker_expression::{self, BreakerMetric, Threshold};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match breaker_expression::parse(text) {
        Ok(condition) => {
            let _ = condition.reads_latency();
            let _ = condition.holds(&mut |metric| match metric {
                BreakerMetric::NetworkErrorRatio | BreakerMetric::ResponseCodeRatio { .. } => {
                    Threshold::Ratio(0.5)
                }
                _ => Threshold::Whole(7),
            });
        }
        Err(e) => assert!(
            e.offset <= text.len(),
            "offset {} in {} bytes",
            e.offset,
            text.len()
        ),
    }
});
