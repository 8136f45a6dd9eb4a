//! Fuzz target: Elasticsearch `_bulk` answers as a node sends them (`elasticsearch::items::cut`,
//! a scanner that follows strings and nesting only): never panics, the items it cuts lie in the
//! body, and on any body that a full JSON parser reads as a bulk answer it finds the same
//! `took`, `errors` and items.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use weir_proxy::fuzzing::bulk_answer_items;

fuzz_target!(|data: &[u8]| {
    let cut = bulk_answer_items(data);
    if let Some(cut) = &cut {
        let mut at = 0;
        for item in &cut.items {
            assert!(item.start >= at && item.start < item.end && item.end <= data.len());
            at = item.end;
        }
    }
    // Escapes are left as written by the scanner (a key spelled with `\u` escapes is not
    // `took` to it): compare only where there are none.
    if data.contains(&b'\\') {
        return;
    }
    // A member written twice is the last one to a JSON parser; the scanner refuses an `items`
    // that is not an array wherever it stands. Nodes write each member once.
    let twice = |key: &[u8]| data.windows(key.len()).filter(|w| w == &key).count() > 1;
    if twice(b"\"took\"") || twice(b"\"errors\"") || twice(b"\"items\"") {
        return;
    }
    let Ok(Value::Object(answer)) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let (Some(took), Some(Value::Bool(errors)), Some(Value::Array(items))) = (
        answer.get("took").and_then(Value::as_u64),
        answer.get("errors"),
        answer.get("items"),
    ) else {
        return;
    };
    let cut = cut.unwrap_or_else(|| panic!("a bulk answer was not cut: {answer:?}"));
    assert_eq!((cut.took, cut.errors), (took, *errors));
    assert_eq!(cut.items.len(), items.len());
    for (range, item) in cut.items.iter().zip(items) {
        let read: Value = serde_json::from_slice(&data[range.clone()]).expect("an item is JSON");
        assert_eq!(&read, item);
    }
});
