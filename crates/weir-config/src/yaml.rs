//! A YAML document as a tree of nodes that remember where they were written, so every later
//! error can name `line:column`. Built from saphyr-parser's event stream; anchors and aliases
//! are resolved by cloning the anchored node.

use saphyr_parser::{Event, Parser, ScalarStyle, Span};
use std::collections::HashMap;

/// A position in the source text, both 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

#[derive(Debug, Clone)]
pub enum Value {
    Null,
    Scalar { text: String, quoted: bool },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

impl Node {
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "nothing",
            Value::Scalar { .. } => "a scalar",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar { text, .. } => Some(text),
            _ => None,
        }
    }
}

/// A YAML syntax error with its position.
#[derive(Debug)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

fn pos_of(span: &Span) -> Pos {
    Pos {
        line: span.start.line(),
        column: span.start.col() + 1,
    }
}

/// Parses one YAML document. An empty document yields a `Null` node at 1:1.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    let mut parser = Parser::new_from_str(text);
    let mut builder = Builder::default();
    while let Some(event) = parser.next_event() {
        let (event, span) = event.map_err(|e| SyntaxError {
            pos: Pos {
                line: e.marker().line(),
                column: e.marker().col() + 1,
            },
            message: e.info().to_string(),
        })?;
        if builder.push(event, pos_of(&span))? {
            break;
        }
    }
    Ok(builder.root.unwrap_or(Node {
        pos: Pos { line: 1, column: 1 },
        value: Value::Null,
    }))
}

enum Open {
    Seq(Node, usize),
    Map(Node, usize, Option<Node>),
}

/// Most nodes that aliases may copy into one document. Aliases of aliases (`b: [*a, *a]`,
/// `c: [*b, *b]`, ...) expand exponentially: 430 bytes took gigabytes before this bound.
const MAX_ALIASED_NODES: usize = 100_000;

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    /// Each anchored node with its size in nodes.
    anchors: HashMap<usize, (Node, usize)>,
    /// Nodes copied by aliases so far.
    aliased: usize,
    root: Option<Node>,
}

impl Builder {
    /// Returns true when the first document is complete.
    fn push(&mut self, event: Event<'_>, pos: Pos) -> Result<bool, SyntaxError> {
        match event {
            Event::Scalar(text, style, anchor, _tag) => {
                let quoted = !matches!(style, ScalarStyle::Plain);
                let value = if !quoted && matches!(&*text, "~" | "null" | "Null" | "NULL" | "") {
                    Value::Null
                } else {
                    Value::Scalar {
                        text: text.into_owned(),
                        quoted,
                    }
                };
                self.finish(Node { pos, value }, anchor)?;
            }
            Event::SequenceStart(anchor, _) => self.stack.push(Open::Seq(
                Node {
                    pos,
                    value: Value::Seq(Vec::new()),
                },
                anchor,
            )),
            Event::MappingStart(anchor, _) => self.stack.push(Open::Map(
                Node {
                    pos,
                    value: Value::Map(Vec::new()),
                },
                anchor,
                None,
            )),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(open) = self.stack.pop() {
                    let (node, anchor) = match open {
                        Open::Seq(node, anchor) | Open::Map(node, anchor, _) => (node, anchor),
                    };
                    self.finish(node, anchor)?;
                }
            }
            Event::Alias(id) => {
                let (node, size) = self.anchors.get(&id).ok_or(SyntaxError {
                    pos,
                    message: "alias refers to an unknown anchor".into(),
                })?;
                self.aliased += size;
                if self.aliased > MAX_ALIASED_NODES {
                    return Err(SyntaxError {
                        pos,
                        message: format!("aliases expand to more than {MAX_ALIASED_NODES} nodes"),
                    });
                }
                let node = node.clone();
                self.finish(node, 0)?;
            }
            Event::DocumentEnd => return Ok(self.root.is_some()),
            _ => {}
        }
        Ok(false)
    }

    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), SyntaxError> {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size(&node)));
        }
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq(seq, _)) => {
                if let Value::Seq(items) = &mut seq.value {
                    items.push(node);
                }
            }
            Some(Open::Map(map, _, pending)) => match pending.take() {
                None => *pending = Some(node),
                Some(key) => {
                    if let Value::Map(entries) = &mut map.value {
                        if let Some(k) = key.as_str() {
                            if entries.iter().any(|(other, _)| other.as_str() == Some(k)) {
                                return Err(SyntaxError {
                                    pos: key.pos,
                                    message: format!("duplicate key `{k}`"),
                                });
                            }
                        }
                        entries.push((key, node));
                    }
                }
            },
        }
        Ok(())
    }
}

/// The number of nodes in the tree under `node`, itself included (without recursion: the
/// tree may be deep).
fn size(node: &Node) -> usize {
    let mut stack = vec![node];
    let mut count = 0;
    while let Some(node) = stack.pop() {
        count += 1;
        match &node.value {
            Value::Seq(items) => stack.extend(items),
            Value::Map(entries) => stack.extend(entries.iter().flat_map(|(k, v)| [k, v])),
            Value::Null | Value::Scalar { .. } => {}
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based() {
        let root = parse("a:\n  b: 1\n  c: [x, y]\n").unwrap();
        let Value::Map(entries) = &root.value else {
            panic!("not a map")
        };
        assert_eq!(entries[0].0.pos, Pos { line: 1, column: 1 });
        let Value::Map(inner) = &entries[0].1.value else {
            panic!("not a map")
        };
        assert_eq!(inner[1].0.pos, Pos { line: 3, column: 3 });
        assert_eq!(inner[1].1.pos, Pos { line: 3, column: 6 });
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.pos, Pos { line: 2, column: 1 });
    }

    #[test]
    fn aliases_of_aliases_cannot_expand_without_bound() {
        // Nine levels of ten aliases each: 10^9 nodes from 430 bytes, which took gigabytes
        // before the expansion was bounded (found by reading, for the fuzz target config).
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let err = parse(&text).unwrap_err();
        assert!(
            err.message.contains("aliases expand to more than"),
            "{err:?}"
        );
        assert_eq!(err.pos.line, 5, "{err:?}");
        // Ordinary reuse stays well inside the bound.
        assert!(parse("a: &a {k: [1, 2]}\nb: [*a, *a, *a]\nc: *a\n").is_ok());
    }

    #[test]
    fn anchors_resolve() {
        let root = parse("x: &v {k: 1}\ny: *v\n").unwrap();
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        assert!(matches!(entries[1].1.value, Value::Map(_)));
    }
}
