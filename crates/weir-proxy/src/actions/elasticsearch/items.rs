//! A node's `_bulk` answer cut into its items for the split's merge (`bulk.rs`) and the
//! batches' sharing out (`batch.rs`). The items are passed on as the node wrote them, so a
//! scanner that follows only strings and nesting finds their ends: a full JSON parse of every
//! item was the largest part of weir's CPU on a 1,000-document bulk. What lies inside an item
//! is not checked: a node's malformed item reaches the client as the node wrote it.

use std::ops::Range;

/// `took`, `errors` and the items of a `_bulk` answer, each item where its object lies in
/// the body. Public (hidden) for the fuzz target `bulk_answer`, through `crate::fuzzing`.
#[doc(hidden)]
pub struct BulkItems {
    pub took: u64,
    pub errors: bool,
    pub items: Vec<Range<usize>>,
}

/// The answer's parts, or `None` when it is not a JSON object with a numeric `took`, a
/// boolean `errors` and an `items` array. Other members (`ingest_took`) are skipped.
#[doc(hidden)]
pub fn cut(body: &[u8]) -> Option<BulkItems> {
    let mut scan = Scan { body, at: 0 };
    scan.expect(b'{')?;
    let (mut took, mut errors, mut items) = (None, None, None);
    if scan.peek()? == b'}' {
        return None;
    }
    loop {
        let key = scan.string()?;
        scan.expect(b':')?;
        match key {
            b"took" => {
                let value = &body[scan.value()?];
                took = Some(std::str::from_utf8(value).ok()?.parse().ok()?)
            }
            b"errors" => {
                errors = Some(match &body[scan.value()?] {
                    b"true" => true,
                    b"false" => false,
                    _ => return None,
                })
            }
            b"items" => items = Some(scan.array()?),
            _ => {
                scan.value()?;
            }
        }
        match scan.next()? {
            b',' => continue,
            b'}' => break,
            _ => return None,
        }
    }
    scan.skip_space();
    (scan.at == body.len()).then_some(())?;
    Some(BulkItems {
        took: took?,
        errors: errors?,
        items: items?,
    })
}

/// A position in the answer.
struct Scan<'a> {
    body: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.body.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte that is not white space, without taking it.
    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.body.get(self.at).copied()
    }

    /// The next byte that is not white space, taken.
    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    /// A string's contents, escapes left as written.
    fn string(&mut self) -> Option<&'a [u8]> {
        self.expect(b'"')?;
        let start = self.at;
        self.string_rest()?;
        Some(&self.body[start..self.at - 1])
    }

    /// Past the closing quote of a string whose opening quote is taken.
    fn string_rest(&mut self) -> Option<()> {
        loop {
            match *self.body.get(self.at)? {
                b'"' => {
                    self.at += 1;
                    return Some(());
                }
                // The escaped byte cannot end the string.
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    /// Where one value lies: a string, an object or array (with all it holds), or a scalar.
    fn value(&mut self) -> Option<Range<usize>> {
        self.skip_space();
        let start = self.at;
        match *self.body.get(self.at)? {
            b'"' => {
                self.at += 1;
                self.string_rest()?;
            }
            b'{' | b'[' => self.nested()?,
            _ => {
                while let Some(byte) = self.body.get(self.at) {
                    if matches!(byte, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        break;
                    }
                    self.at += 1;
                }
                (self.at > start).then_some(())?;
            }
        }
        Some(start..self.at)
    }

    /// Past an object or array, its opening byte under the position.
    fn nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            let byte = *self.body.get(self.at)?;
            self.at += 1;
            match byte {
                b'"' => self.string_rest()?,
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some(());
                    }
                }
                _ => {}
            }
        }
    }

    /// The values of an array.
    fn array(&mut self) -> Option<Vec<Range<usize>>> {
        self.expect(b'[')?;
        let mut values = Vec::new();
        if self.peek()? == b']' {
            self.at += 1;
            return Some(values);
        }
        loop {
            values.push(self.value()?);
            match self.next()? {
                b',' => continue,
                b']' => return Some(values),
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_are_cut_as_written() {
        let body = br#"{"took":30,"errors":true,"items":[{"index":{"_index":"t","_id":"a\"}]","status":201,"_shards":{"total":2}}},
 {"delete":{"_index":"t","_id":"b","status":404,"error":{"reason":"x\\","caused_by":[{"type":"y"}]}}} ],"ingest_took":0}"#;
        let cut = cut(body).expect("a bulk answer");
        assert_eq!(cut.took, 30);
        assert!(cut.errors);
        assert_eq!(cut.items.len(), 2);
        for item in &cut.items {
            serde_json::from_slice::<serde_json::Value>(&body[item.clone()])
                .expect("each item whole");
        }
        assert!(body[cut.items[0].clone()].starts_with(br#"{"index""#));
        assert!(body[cut.items[1].clone()].ends_with(br#"}]}}}"#));
    }

    #[test]
    fn pretty_printed_and_empty_answers() {
        let body = b"{\n  \"ingest_took\" : 3,\n  \"took\" : 7,\n  \"errors\" : false,\n  \"items\" : [ ]\n}\n";
        let cut = cut(body).expect("a bulk answer");
        assert_eq!((cut.took, cut.errors, cut.items.len()), (7, false, 0));
    }

    #[test]
    fn other_shapes_are_refused() {
        for body in [
            &br#"{"error":{"type":"x"},"status":400}"#[..],
            br#"{"took":1,"errors":false}"#,
            br#"{"took":"1","errors":false,"items":[]}"#,
            br#"{"took":1,"errors":0,"items":[]}"#,
            br#"{"took":1,"errors":false,"items":[{"index":{}}"#,
            br#"{"took":1,"errors":false,"items":[]} x"#,
            b"",
            b"[]",
        ] {
            assert!(cut(body).is_none(), "{}", String::from_utf8_lossy(body));
        }
    }
}
