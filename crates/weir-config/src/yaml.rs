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

#[derive(Default)]
struct Builder {
    stack: Vec<Open>,
    anchors: HashMap<usize, Node>,
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
                let node = self.anchors.get(&id).cloned().ok_or(SyntaxError {
                    pos,
                    message: "alias refers to an unknown anchor".into(),
                })?;
                self.finish(node, 0)?;
            }
            Event::DocumentEnd => return Ok(self.root.is_some()),
            _ => {}
        }
        Ok(false)
    }

    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), SyntaxError> {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
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
    fn anchors_resolve() {
        let root = parse("x: &v {k: 1}\ny: *v\n").unwrap();
        let Value::Map(entries) = &root.value else {
            panic!()
        };
        assert!(matches!(entries[1].1.value, Value::Map(_)));
    }
}
