//! The core is layered: no module of `src/` (a file, or a folder with its files) names, in
//! its code, a module that names it back, directly or through others. Read from the sources:
//! every `crate::` path outside comments and the `tests` modules. The layers, bottom first, are
//! printed with `--nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

/// The code of every top-level module (comments and `#[cfg(test)] mod tests` removed), by
/// name; `lib.rs`, the crate root that re-exports, is not a module here.
fn modules() -> BTreeMap<String, String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    let mut pending = vec![src.clone()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path.strip_prefix(&src).unwrap();
            let top = relative
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let name = top.trim_end_matches(".rs").to_string();
            if name == "lib" || path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let text = fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
            let code: Vec<&str> = code
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect();
            let all: &mut String = out.entry(name).or_default();
            all.push_str(&code.join("\n"));
            all.push('\n');
        }
    }
    out
}

/// The top-level modules `code` names through `crate::` paths (`crate::a::b`, `crate::{a, b}`).
fn named(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&item));
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
            out.insert(ident(&item));
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

#[test]
fn no_module_names_one_that_names_it_back() {
    let modules = modules();
    let edges: BTreeMap<&str, BTreeSet<&str>> = modules
        .iter()
        .map(|(name, code)| {
            let deps = named(code);
            let deps = modules
                .keys()
                .filter(|m| *m != name && deps.contains(*m))
                .map(String::as_str)
                .collect();
            (name.as_str(), deps)
        })
        .collect();
    // Peel the layers: each one the modules whose imports all lie below.
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut layers = Vec::new();
    while placed.len() < edges.len() {
        let layer: Vec<&str> = edges
            .iter()
            .filter(|(m, deps)| !placed.contains(*m) && deps.iter().all(|d| placed.contains(d)))
            .map(|(m, _)| *m)
            .collect();
        if layer.is_empty() {
            let stuck: Vec<String> = edges
                .iter()
                .filter(|(m, _)| !placed.contains(*m))
                .map(|(m, deps)| {
                    let open: Vec<&str> = deps.iter().copied().filter(|d| !placed.contains(d)).collect();
                    format!("{m} -> {}", open.join(", "))
                })
                .collect();
            panic!("module cycle among:\n  {}", stuck.join("\n  "));
        }
        placed.extend(&layer);
        layers.push(layer);
    }
    for (k, layer) in layers.iter().enumerate() {
        println!("layer {k}: {}", layer.join(", "));
    }
    // Every module was found, and the bottom holds the leaves the rest is built on.
    assert!(edges.len() > 20 && layers[0].contains(&"bits"), "{layers:?}");
}

#[test]
fn crate_paths_are_read_in_both_forms() {
    let code = "use crate::a::B;\nuse crate::{c::D, e, f::{G, H}};\nlet x = crate::i::j();";
    let found: Vec<String> = named(code).into_iter().collect();
    assert_eq!(found, ["a", "c", "e", "f", "i"]);
}
