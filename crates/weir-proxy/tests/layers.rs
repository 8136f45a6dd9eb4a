//! The crate's layout holds: every `crate::` path in a module's non-test code points to its own
//! folder or to a folder below it in [`LAYERS`] (the order docs/architecture.md gives), and no
//! modules import each other in a circle. Read from the source text, so a move that breaks the
//! order fails here with the offending path, before a reviewer has to notice it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// weir-proxy's folders, highest first: each may import only itself and those after it.
const LAYERS: &[&str] = &[
    "process",
    "admin",
    "l4",
    "conn",
    "exchange",
    "state",
    "middlewares",
    "lua",
    "actions",
    "upstream",
    "reply",
    "worker",
    "servers",
    "stores",
    "listen",
    "observe",
    "io",
    "http",
];

/// Outside the order: the crate root re-exports, the in-process test harness (test code).
const UNLAYERED: &[&str] = &["lib", "testkit"];

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("a readable source folder");
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// `src/a/b/mod.rs` → `a::b`; `src/a/c.rs` → `a::c`.
fn module_path(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts.join("::")
}

/// The code before the first `#[cfg(test)]`, without `//` comments (doc lines name paths
/// in prose).
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// A path's segments from `at` (`a::b::C`), stopping at `{` or anything else.
fn segments(text: &str, at: usize) -> (Vec<String>, usize) {
    let mut parts = Vec::new();
    let mut rest = &text[at..];
    let mut used = 0;
    loop {
        let len = rest.find(|c: char| !is_ident(c)).unwrap_or(rest.len());
        if len == 0 {
            break;
        }
        parts.push(rest[..len].to_string());
        used += len;
        rest = &rest[len..];
        if rest.starts_with("::") && rest[2..].starts_with(|c: char| is_ident(c)) {
            used += 2;
            rest = &rest[2..];
        } else {
            break;
        }
    }
    (parts, at + used)
}

/// Every path a module names through `crate::`, grouped imports (`crate::{a::b, c}`)
/// expanded one level, which is as deep as the crate writes them.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| is_ident(c) || c == '$') {
            continue;
        }
        let start = at + "crate::".len();
        let (prefix, end) = segments(code, start);
        let rest = &code[end..];
        let group = rest.strip_prefix("::{").or_else(|| rest.strip_prefix('{'));
        match group {
            Some(inner) => {
                let close = inner.find('}').unwrap_or(inner.len());
                for item in inner[..close].split(',') {
                    let item = item.trim();
                    let offset = item.as_ptr() as usize - code.as_ptr() as usize;
                    let (tail, _) = segments(code, offset);
                    paths.push(prefix.iter().cloned().chain(tail).collect());
                }
            }
            None => paths.push(prefix),
        }
    }
    paths
}

/// The modules of the crate and which modules each one's code names.
fn import_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .map(|f| (module_path(&src, f), f.clone()))
        .collect();
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("a readable source file");
        let mut names = BTreeSet::new();
        for path in crate_paths(&code_of(&text)) {
            // The longest prefix of the path that is a module is what the code depends on.
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate));
            if let Some(target) = target.filter(|t| t != module) {
                names.insert(target);
            }
        }
        graph.insert(module.clone(), names);
    }
    graph
}

fn folder(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

#[test]
fn layers_import_downward() {
    let graph = import_graph();
    let rank = |module: &str| LAYERS.iter().position(|l| *l == folder(module));
    let mut upward = Vec::new();
    for (module, names) in &graph {
        if UNLAYERED.contains(&folder(module)) {
            continue;
        }
        let Some(own) = rank(module) else {
            upward.push(format!("{module}: its folder is not in LAYERS"));
            continue;
        };
        for name in names {
            match rank(name) {
                Some(theirs) if theirs >= own => {}
                Some(_) => upward.push(format!("{module} -> {name}")),
                None => upward.push(format!("{module} -> {name}: not in LAYERS")),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layer order (tests/layers.rs LAYERS):\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_module_imports_in_a_circle() {
    let graph = import_graph();
    // Depth-first search; a module met again while still on the path closes a circle.
    fn visit<'g>(
        module: &'g str,
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
        circles: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|m| *m == module) {
            let mut circle = path[at..].to_vec();
            circle.push(module);
            circles.push(circle.join(" -> "));
            return;
        }
        if !done.insert(module) {
            return;
        }
        path.push(module);
        for name in graph.get(module).into_iter().flatten() {
            visit(name, graph, path, done, circles);
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    let mut circles = Vec::new();
    for module in graph.keys() {
        if !UNLAYERED.contains(&folder(module)) {
            visit(module, &graph, &mut Vec::new(), &mut done, &mut circles);
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_imports() {
    let code = "use crate::a::{b::C, d};\nlet x = crate::e::f(1); // crate::g\n$crate::h";
    let paths = crate_paths(&code_of(code));
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(joined, ["a::b::C", "a::d", "e::f"]);
}
