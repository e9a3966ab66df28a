//! The layering rules of `src/`, read off the source: no import circle between modules,
//! the queue client knows nothing of the rest, and the controller's decisions do no I/O.
//! See docs/architecture.md.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every module of the crate (`queue::client`, `controller`, ...) and its source text,
/// with `#[cfg(test)]` blocks left out (tests may reach anywhere).
fn modules() -> BTreeMap<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&root).unwrap().with_extension("");
        let mut parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            parts.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            parts.pop();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        out.insert(parts.join("::"), without_tests(&text));
    }
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text before the first `#[cfg(test)]` (test modules close every file here).
fn without_tests(text: &str) -> String {
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text.to_string(),
    }
}

/// The modules `module` refers to by path (`crate::a::b`, `super::c`), each resolved to
/// the deepest module that exists. A module's references to its own descendants are
/// left out: a parent declaring and re-exporting its children is not a circle.
fn references(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let own: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut out = BTreeSet::new();
    let mut paths = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        if !is_path_start(text, i) {
            continue;
        }
        paths.push((Vec::new(), path_after(&text[i + "crate::".len()..])));
    }
    for (i, _) in text.match_indices("super::") {
        if !is_path_start(text, i) {
            continue;
        }
        let mut base = own.clone();
        let mut rest = &text[i..];
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        paths.push((base, path_after(rest)));
    }
    // `use super::{a, b::c}` and `use crate::{x, y}`: each item of a group.
    for (base, path) in paths {
        for item in expand(&path) {
            let mut full: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            full.extend(item.split("::").map(str::to_string));
            let mut target = None;
            for n in (0..=full.len()).rev() {
                let candidate = full[..n].join("::");
                if known.contains(&candidate) {
                    target = Some(candidate);
                    break;
                }
            }
            let Some(target) = target else { continue };
            let descendant = if module.is_empty() {
                !target.is_empty()
            } else {
                target.starts_with(&format!("{module}::"))
            };
            if target != module && !descendant {
                out.insert(target);
            }
        }
    }
    out
}

fn is_path_start(text: &str, i: usize) -> bool {
    i == 0 || {
        let c = text.as_bytes()[i - 1];
        !(c.is_ascii_alphanumeric() || c == b'_' || c == b':')
    }
}

/// The path written after `crate::`/`super::`, with a brace group kept whole.
fn path_after(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0;
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth > 0 => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => break,
            _ => {}
        }
        out.push(c);
        if depth == 0 && c == '}' {
            break;
        }
    }
    out.trim_end_matches(':').to_string()
}

/// `a::{b, c::d}` → `a::b`, `a::c::d`; `a::b` → `a::b`.
fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_string()];
    };
    let head = path[..open].trim_end_matches(':');
    let inner = &path[open + 1..path.rfind('}').unwrap_or(path.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .map(|s| s.split_whitespace().collect::<String>())
        .filter(|s| !s.is_empty() && s != "self")
        .flat_map(|s| expand(&s))
        .map(|s| {
            if head.is_empty() {
                s
            } else {
                format!("{head}::{s}")
            }
        })
        .collect()
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .iter()
        .map(|(m, text)| (m.clone(), references(m, text, &known)))
        .collect()
}

#[test]
fn no_import_circle_between_modules() {
    let graph = graph();
    // Depth-first search for a back edge; report the circle it closes.
    fn visit(
        m: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        circles: &mut Vec<String>,
    ) {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut circle = stack[at..].to_vec();
            circle.push(m.to_string());
            circles.push(circle.join(" → "));
            return;
        }
        if !done.insert(m.to_string()) {
            return;
        }
        stack.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            visit(next, graph, stack, done, circles);
        }
        stack.pop();
    }
    let mut circles = Vec::new();
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new(), &mut done, &mut circles);
    }
    assert!(circles.is_empty(), "import circles in src/: {circles:#?}");
}

#[test]
fn the_queue_client_knows_nothing_of_the_rest() {
    for (module, refs) in graph() {
        if module != "queue" && !module.starts_with("queue::") {
            continue;
        }
        let outside: Vec<&String> = refs
            .iter()
            .filter(|r| {
                ["controller", "crd", "worker", "cli"]
                    .iter()
                    .any(|top| *r == top || r.starts_with(&format!("{top}::")))
            })
            .collect();
        assert!(
            outside.is_empty(),
            "src/{module} imports {outside:?}: the queue client must not depend on them"
        );
    }
}

#[test]
fn controller_decisions_do_no_io() {
    let modules = modules();
    for module in [
        "controller::scaling",
        "controller::status",
        "controller::lifecycle",
        "controller::partitions",
    ] {
        let text = modules
            .get(module)
            .unwrap_or_else(|| panic!("no module {module}"));
        for io in [
            "kube::Client",
            "kube::Api",
            "kube::api::Api",
            "Api<",
            "crate::queue::Queue",
        ] {
            assert!(
                !text.contains(io),
                "{module} uses {io}: decisions do no I/O"
            );
        }
        assert!(
            !text.contains(".await"),
            "{module} awaits: decisions do no I/O"
        );
    }
}

#[test]
fn the_graph_reader_sees_real_edges() {
    // The reader itself: a known edge is found, so an empty circle list means something.
    let graph = graph();
    assert!(
        graph["controller::reconcile"].contains("controller::status"),
        "{:?}",
        graph["controller::reconcile"]
    );
    assert!(graph["cli"].iter().any(|m| m.starts_with("queue")));
    assert_eq!(
        expand("a::{b, c::{d, e}}"),
        vec!["a::b", "a::c::d", "a::c::e"]
    );
}
