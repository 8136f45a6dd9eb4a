//! A configuration made of the file and a document from a provider (etcd): the document's
//! dynamic sections are merged into the file's as if it were appended to the file, so that
//! names refer across both, a name defined in both is an error, and every error is placed in
//! whichever of the two its node came from.

use super::{load_root, ConfigError};
use crate::model::Config;
use crate::yaml::{self, Node, Pos, Value};

/// The sections a provider's document may hold.
const DYNAMIC: &[&str] = &["routers", "services", "middlewares", "tcp", "udp", "caches"];

/// A provider's document: its text and what errors in it are labelled with
/// (`etcd:/weir/dynamic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub label: String,
    pub text: String,
}

/// Where the lines of a merged configuration came from: the file's first, then the
/// document's, numbered after them.
#[derive(Debug, Clone)]
pub struct Sources {
    file: String,
    file_lines: usize,
    document: Option<String>,
}

impl Sources {
    /// The label and the position in it of a merged position.
    fn place(&self, pos: Pos) -> (&str, Pos) {
        match &self.document {
            Some(label) if pos.line > self.file_lines => (
                label,
                Pos {
                    line: pos.line - self.file_lines,
                    column: pos.column,
                },
            ),
            _ => (&self.file, pos),
        }
    }

    fn error(&self, pos: Pos, message: String) -> ConfigError {
        let (file, pos) = self.place(pos);
        ConfigError {
            file: file.to_string(),
            pos,
            message,
        }
    }

    /// A compile error (`LINE:COLUMN: message`, or no place) as `FILE:LINE:COLUMN: message`,
    /// with the file or the document it is about.
    pub fn located(&self, error: &str) -> String {
        let place = error.split_once(": ").and_then(|(at, message)| {
            let (line, column) = at.split_once(':')?;
            let pos = Pos {
                line: line.parse().ok()?,
                column: column.parse().ok()?,
            };
            Some((pos, message))
        });
        match place {
            Some((pos, message)) => self.error(pos, message.to_string()).to_string(),
            None => super::located(&self.file, error),
        }
    }
}

/// Reads the config file and validates it with `document` merged in.
pub fn load_file_with(
    path: &str,
    document: Option<&Document>,
) -> Result<(Config, Sources), Vec<ConfigError>> {
    match std::fs::read_to_string(path) {
        Ok(text) => load_str_with(&text, path, document),
        Err(e) => Err(vec![ConfigError {
            file: path.to_string(),
            pos: Pos { line: 1, column: 1 },
            message: format!("cannot read config file: {e}"),
        }]),
    }
}

/// Validates `text` (labelled `file`) with `document` merged in.
pub fn load_str_with(
    text: &str,
    file: &str,
    document: Option<&Document>,
) -> Result<(Config, Sources), Vec<ConfigError>> {
    let sources = Sources {
        file: file.to_string(),
        file_lines: yaml_lines(text),
        document: document.map(|d| d.label.clone()),
    };
    let syntax = |label: &str, e: yaml::SyntaxError| {
        vec![ConfigError {
            file: label.to_string(),
            pos: e.pos,
            message: format!("invalid YAML: {}", e.message),
        }]
    };
    let mut root = yaml::parse(text).map_err(|e| syntax(file, e))?;
    if let Some(document) = document {
        let mut extra = yaml::parse(&document.text).map_err(|e| syntax(&document.label, e))?;
        shift(&mut extra, sources.file_lines);
        let mut errors = Vec::new();
        merge(&mut root, extra, &sources.file, &mut errors);
        if !errors.is_empty() {
            return Err(errors
                .into_iter()
                .map(|(pos, message)| sources.error(pos, message))
                .collect());
        }
    }
    match load_root(&root, file) {
        Ok(config) => Ok((config, sources)),
        Err(errors) => Err(errors
            .into_iter()
            .map(|(pos, message)| sources.error(pos, message))
            .collect()),
    }
}

/// How many lines YAML numbers in `text`: it breaks lines at LF, CRLF and a lone CR alike.
fn yaml_lines(text: &str) -> usize {
    let bytes = text.as_bytes();
    let breaks = bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' || (b == b'\r' && bytes.get(i + 1) != Some(&b'\n')))
        .count();
    breaks + 1
}

/// Numbers `node`'s lines after the file's `lines`.
fn shift(node: &mut Node, lines: usize) {
    node.pos.line += lines;
    match &mut node.value {
        Value::Seq(items) => items.iter_mut().for_each(|n| shift(n, lines)),
        Value::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            shift(k, lines);
            shift(v, lines);
        }),
        Value::Null | Value::Scalar { .. } => {}
    }
}

/// Merges the document's sections into the file's root.
fn merge(root: &mut Node, document: Node, file: &str, errors: &mut Vec<(Pos, String)>) {
    let entries = match document.value {
        Value::Null => return,
        Value::Map(entries) => entries,
        _ => {
            let found = document.kind_name();
            errors.push((
                document.pos,
                format!("the document must be a mapping of sections, found {found}"),
            ));
            return;
        }
    };
    if matches!(root.value, Value::Null) {
        root.value = Value::Map(Vec::new());
    }
    let Value::Map(sections) = &mut root.value else {
        return; // the file's own error, reported by the loader
    };
    for (key, value) in entries {
        let Some(name) = key.as_str().map(str::to_string) else {
            errors.push((key.pos, "keys in the document must be strings".into()));
            continue;
        };
        if !DYNAMIC.contains(&name.as_str()) {
            errors.push((
                key.pos,
                format!(
                    "unknown key `{name}` in the document; it may hold only {}",
                    DYNAMIC.join(", ")
                ),
            ));
            continue;
        }
        // `tcp` and `udp` hold their own `routers` and `services`: merged a level down.
        let depth = if matches!(name.as_str(), "tcp" | "udp") {
            2
        } else {
            1
        };
        match sections.iter_mut().find(|(k, _)| k.as_str() == Some(&name)) {
            Some((_, mine)) => merge_named(mine, value, &name, depth, file, errors),
            None => sections.push((key, value)),
        }
    }
}

/// Adds the document's `theirs` definitions to the file's `mine` (both mappings of names,
/// `depth` levels deep); a name in both is an error.
fn merge_named(
    mine: &mut Node,
    theirs: Node,
    what: &str,
    depth: usize,
    file: &str,
    errors: &mut Vec<(Pos, String)>,
) {
    if matches!(theirs.value, Value::Null) {
        return;
    }
    if matches!(mine.value, Value::Null) {
        *mine = theirs;
        return;
    }
    let (Value::Map(own), Value::Map(added)) = (&mut mine.value, theirs.value) else {
        errors.push((
            theirs.pos,
            format!("`{what}` must be a mapping of names to definitions in both the file and the document"),
        ));
        return;
    };
    for (key, value) in added {
        let name = key.as_str().unwrap_or_default().to_string();
        match own.iter_mut().find(|(k, _)| k.as_str() == Some(&name)) {
            Some((_, inner)) if depth > 1 => merge_named(
                inner,
                value,
                &format!("{what}.{name}"),
                depth - 1,
                file,
                errors,
            ),
            Some((defined, _)) => {
                let at = defined.pos;
                errors.push((
                    key.pos,
                    format!(
                        "`{what}.{name}` is defined in {file} too (line {}); a name may be defined once",
                        at.line
                    ),
                ));
            }
            None => own.push((key, value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "entrypoints:\n  web: { address: \"127.0.0.1:0\" }\nservices:\n  app: { servers: [{ url: \"http://127.0.0.1:9\" }] }\nrouters:\n  own: { rule: \"Path(`/own`)\", service: app }\n";

    fn doc(text: &str) -> Document {
        Document {
            label: "etcd:/weir/dynamic".into(),
            text: text.into(),
        }
    }

    fn errors(text: &str) -> Vec<String> {
        match load_str_with(FILE, "w.yaml", Some(&doc(text))) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect(),
        }
    }

    /// The document's routers name the file's services and middlewares and the other way
    /// round; TCP routers merge a level down.
    #[test]
    fn merges_sections_and_names_across_both() {
        let text = "routers:\n  theirs: { rule: \"Path(`/t`)\", service: app, middlewares: [strip] }\nmiddlewares:\n  strip: { strip_prefix: [/t] }\ntcp:\n  services:\n    db: { servers: [{ address: \"127.0.0.1:5432\" }] }\n";
        let (config, _) = load_str_with(FILE, "w.yaml", Some(&doc(text))).unwrap();
        let names: Vec<_> = config.routers.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["own", "theirs"]);
        assert_eq!(config.middlewares[0].name, "strip");
        assert_eq!(config.tcp.services[0].name, "db");
        let (alone, _) = load_str_with(FILE, "w.yaml", Some(&doc(""))).unwrap();
        assert_eq!(alone.routers.len(), 1);
    }

    /// Errors in the document are placed in it; a name in both, a section the document may
    /// not hold, and a reference to nothing are all reported.
    #[test]
    fn errors_are_placed_in_the_document() {
        assert_eq!(
            errors("routers:\n  own: { rule: \"Path(`/x`)\", service: app }\nserver: { workers: 2 }\n"),
            [
                "etcd:/weir/dynamic:2:3: `routers.own` is defined in w.yaml too (line 6); a name may be defined once",
                "etcd:/weir/dynamic:3:1: unknown key `server` in the document; it may hold only routers, services, middlewares, tcp, udp, caches",
            ]
        );
        assert_eq!(
            errors("routers:\n  theirs: { rule: \"Path(`/x`)\", service: nowhere }\n"),
            ["etcd:/weir/dynamic:2:42: router `theirs` names service `nowhere`, which is not defined; defined: app"]
        );
        assert_eq!(
            errors("routers: [a]\n"),
            ["etcd:/weir/dynamic:1:10: `routers` must be a mapping of names to definitions in both the file and the document"]
        );
        assert_eq!(
            errors("routers:\n  x: {\n"),
            ["etcd:/weir/dynamic:3:1: invalid YAML: while parsing a node, did not find expected node content"]
        );
    }

    /// A file whose lines end in a lone CR (found by the `config` fuzz target): the document's
    /// errors are still placed in the document.
    #[test]
    fn files_with_cr_line_breaks_keep_the_document_apart() {
        let file = "entrypoints:\r  web: { address: \"127.0.0.1:0\" }\r\r\rbogus: 1\r";
        let errors = match load_str_with(file, "w.yaml", Some(&doc("routers: {}\n"))) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        };
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("w.yaml:5:1: unknown key `bogus`"),
            "{errors:?}"
        );
        let errors = match load_str_with(FILE, "w.yaml", Some(&doc("[1]: x\n"))) {
            Ok(_) => Vec::new(),
            Err(errors) => errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        };
        assert_eq!(
            errors,
            ["etcd:/weir/dynamic:1:1: keys in the document must be strings"]
        );
    }

    #[test]
    fn compile_errors_are_placed_too() {
        let (_, sources) = load_str_with(FILE, "w.yaml", Some(&doc("routers: {}\n"))).unwrap();
        assert_eq!(sources.located("9:4: bad"), "etcd:/weir/dynamic:2:4: bad");
        assert_eq!(sources.located("2:4: bad"), "w.yaml:2:4: bad");
        assert_eq!(sources.located("no place"), "w.yaml: no place");
    }
}
