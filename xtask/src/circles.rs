//! No file circles: within a crate, no file names another (by `crate::` or `super::` paths)
//! that names it back, directly or through others. A file and its own submodules (a parent
//! that declares and re-exports them, children that `use super::*`) are one concept and do not
//! count; two siblings that call each other are two concepts tangled, which a reader must take
//! in at once.
//!
//! One pair is not a circle: a platform module (`sys`, `platform`: a concept's half per
//! platform, chosen by `cfg`) returns the types of the concept it serves and calls its pure
//! parsers and decisions, as STYLE.md asks ("parsing and decisions are pure functions that
//! every platform's tests run"), while the concept calls it. Its edges back are one concept
//! split by platform, and are not counted.
//!
//! Checked by a test over every crate's `src/` (issue 37), so that a new circle fails CI.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The names of the platform modules whose edges back to the concepts they serve are not
/// counted (the module's documentation says why).
const PLATFORM_MODULES: [&str; 2] = ["sys", "platform"];

/// A module path within its crate: `[]` for the root, `["service", "admit"]` for
/// `service/admit.rs`.
type Module = Vec<String>;

/// Every `.rs` file of `src` by module path, test files (`tests.rs`, `tests/`) left out.
fn modules(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("below src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match parts.last().map(String::as_str) {
                Some("lib" | "main") if parts.len() == 1 => parts.clear(),
                Some("mod") => {
                    parts.pop();
                }
                Some("tests") => continue,
                _ => {}
            }
            out.insert(parts, path);
        }
    }
    out
}

/// The paths a file's code names, each as written after `crate::` (absolute) or `super::`
/// (relative, with how many levels up), its test module left out.
fn references(text: &str) -> Vec<(usize, Vec<String>)> {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    // Comments (doc links included) name modules for a reader, not for the code.
    let code: String = code
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let code = code.as_str();
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let (up, skip) = if rest.starts_with("crate::") {
            (0, "crate::".len())
        } else if rest.starts_with("super::") {
            let mut up = 0;
            let mut at = 0;
            while code[i + at..].starts_with("super::") {
                up += 1;
                at += "super::".len();
            }
            (up, at)
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        // Not part of a longer name (`my_crate::`).
        if i > 0 && (bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_') {
            i += skip;
            continue;
        }
        let after = &code[i + skip..];
        for path in paths_after(after) {
            out.push((up, path));
        }
        i += skip;
    }
    out
}

/// The module paths written at the start of `text`: `a::b::C` gives `[a, b, C]`; a group
/// `a::{b::c, d}` gives `[a, b, c]` and `[a, d]`.
fn paths_after(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut end = group.len();
            let mut items = Vec::new();
            let mut from = 0;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        end = k;
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&group[from..k]);
                        from = k + 1;
                    }
                    _ => {}
                }
            }
            items.push(&group[from..end]);
            return items
                .into_iter()
                .flat_map(|item| paths_after(item.trim()))
                .map(|tail| prefix.iter().cloned().chain(tail).collect::<Vec<_>>())
                .filter(|p: &Vec<String>| !p.is_empty())
                .collect();
        }
        let seg: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if seg.is_empty() {
            return if prefix.is_empty() {
                Vec::new()
            } else {
                vec![prefix]
            };
        }
        rest = &rest[seg.len()..];
        prefix.push(seg);
        match rest.strip_prefix("::") {
            Some(more) => rest = more,
            None => return vec![prefix],
        }
    }
}

/// The longest prefix of `path` that is a module of `known`.
fn module_of(path: &[String], known: &BTreeMap<Module, PathBuf>) -> Option<Module> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| known.contains_key(m))
}

/// Whether `a` is `b`, or one lies within the other.
fn related(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The edges between unrelated module trees of the crate at `src`: who names whom.
fn edges(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let known = modules(src);
    let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (module, file) in &known {
        if module
            .first()
            .is_some_and(|top| PLATFORM_MODULES.contains(&top.as_str()))
        {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        for (up, path) in references(&text) {
            let base: &[String] = if up == 0 {
                &[]
            } else if up <= module.len() {
                &module[..module.len() - up]
            } else {
                continue;
            };
            let full: Vec<String> = base.iter().cloned().chain(path).collect();
            if let Some(target) = module_of(&full, &known)
                && !related(module, &target)
            {
                // Lifted to the two siblings under the modules' common parent: a file of one
                // module tree naming a file of another is that tree naming the other.
                let common = module
                    .iter()
                    .zip(&target)
                    .take_while(|(a, b)| a == b)
                    .count();
                out.entry(module[..=common].to_vec())
                    .or_default()
                    .insert(target[..=common].to_vec());
            }
        }
    }
    out
}

/// Every circle of the crate at `src`, each as the module trees around it.
fn circles(src: &Path) -> Vec<Vec<Module>> {
    let graph = edges(src);
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for start in graph.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in graph.get(&at).into_iter().flatten() {
                if next == start {
                    let mut key = trail.clone();
                    key.sort();
                    if seen.insert(key) {
                        found.push(trail.clone());
                    }
                } else if !trail.contains(next) && trail.len() < 8 {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(path: &str) -> Module {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn paths_are_read_from_plain_and_grouped_uses() {
        assert_eq!(
            references("use crate::store::{db::Error, Attempt};\nlet x = super::super::a::b();"),
            vec![
                (0, module("store/db/Error")),
                (0, module("store/Attempt")),
                (2, module("a/b")),
            ]
        );
        assert!(references("use my_crate::x;").is_empty(), "not `crate::`");
        assert!(
            references("fn f() {}\n#[cfg(test)]\nmod tests { use crate::x; }").is_empty(),
            "tests left out"
        );
    }

    #[test]
    fn a_circle_of_two_siblings_is_found_and_a_parent_and_child_are_not_one() {
        let temp = tempfile::tempdir().expect("temp");
        let src = temp.path();
        std::fs::create_dir(src.join("service")).expect("dir");
        std::fs::write(src.join("lib.rs"), "mod service; mod store;").expect("lib");
        std::fs::write(src.join("service.rs"), "mod admit; pub use admit::x;").expect("service");
        std::fs::write(
            src.join("service/admit.rs"),
            "use super::*; use crate::store::y;",
        )
        .expect("admit");
        std::fs::write(src.join("store.rs"), "fn f() { crate::service::chain(); }").expect("store");
        let found = circles(src);
        assert_eq!(found.len(), 1, "{found:?}");
        let mut trees = found[0].clone();
        trees.sort();
        assert_eq!(
            trees,
            vec![module("service"), module("store")],
            "a file of service/ names store, which names service back"
        );
        std::fs::write(src.join("store.rs"), "fn f() {}").expect("store");
        assert!(circles(src).is_empty(), "one way only");
        // A platform half names the concept it serves, which calls it: one concept.
        std::fs::create_dir(src.join("sys")).expect("dir");
        std::fs::write(src.join("sys/linux.rs"), "use crate::place::Place;").expect("sys");
        std::fs::write(src.join("place.rs"), "fn f() { crate::sys::read(); }").expect("place");
        assert!(circles(src).is_empty(), "{:?}", circles(src));
        std::fs::write(src.join("other.rs"), "use crate::place::Place;").expect("other");
        std::fs::write(src.join("place.rs"), "fn f() { crate::other::read(); }").expect("place");
        assert_eq!(circles(src).len(), 1, "any other module is counted");
    }

    /// Every crate of the workspace (and xtask) is free of file circles.
    #[test]
    fn no_crate_has_a_file_circle() {
        let root = crate::workspace_root();
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
            .expect("crates")
            .flatten()
            .map(|e| e.path().join("src"))
            .filter(|p| p.is_dir())
            .collect();
        dirs.push(root.join("xtask/src"));
        dirs.sort();
        let mut all = Vec::new();
        for src in dirs {
            for circle in circles(&src) {
                let names: Vec<String> = circle
                    .iter()
                    .map(|m| {
                        if m.is_empty() {
                            "lib.rs".to_owned()
                        } else {
                            m.join("/") + ".rs"
                        }
                    })
                    .collect();
                all.push(format!("{}: {}", src.display(), names.join(" -> ")));
            }
        }
        assert!(
            all.is_empty(),
            "files that name each other:\n{}",
            all.join("\n")
        );
    }
}
