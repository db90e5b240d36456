//! Every crate is in layers: in every folder of a crate's `src/`, no module (a file, or a folder
//! with its files) names, in its code, a sibling that names it back, directly or through others.
//! Read from the sources: every `crate::` and `super::` path outside comments and test modules,
//! resolved to the module it names. The layers of each folder, bottom first, are printed with
//! `cargo test -p homeadam-tests --test layers -- --nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The crate folders: the workspace's members and the firmware (a workspace of its own).
fn crates() -> Vec<String> {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let list = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("the workspace lists its members on one line");
    let mut out: Vec<String> = list
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    out.push("firmware".into());
    out
}

/// Every `.rs` file under `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out
}

/// The module path of the file at `relative` (inside `src/`): `a/b.rs` and `a/b/mod.rs` are
/// `[a, b]`; the crate root (`lib.rs`, `main.rs`) is `[]`.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    let root_file = parts.is_empty() && (stem == "lib" || stem == "main");
    if stem != "mod" && !root_file {
        parts.push(stem.to_string());
    }
    parts
}

/// `text` without comment lines and without its `#[cfg(test)] mod tests` module.
fn code(text: &str) -> String {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    let lines: Vec<&str> = code
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    lines.join("\n")
}

/// The module paths `code` (of the module `here`) names through `crate::` and `super::` paths
/// (`crate::a::b`, `super::super::c`, `crate::{a, b::{c, d}}`), as absolute paths.
fn named(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (start, _) in code.match_indices(['c', 's']) {
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut rest = &code[start..];
        let base = if let Some(r) = rest.strip_prefix("crate::") {
            rest = r;
            Vec::new()
        } else if rest.starts_with("super::") {
            let mut up = here.to_vec();
            while let Some(r) = rest.strip_prefix("super::") {
                up.pop();
                rest = r;
            }
            up
        } else {
            continue;
        };
        expand(base, rest, &mut out);
    }
    out
}

/// Pushes onto `out` the paths of `text` after `base`: one, or one per item of its groups.
fn expand(mut path: Vec<String>, text: &str, out: &mut Vec<Vec<String>>) {
    let mut s = text.trim_start();
    loop {
        if let Some(group) = s.strip_prefix('{') {
            for item in top_level_items(group) {
                expand(path.clone(), item, out);
            }
            return;
        }
        let segment: String = s
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if segment.is_empty() {
            break;
        }
        s = &s[segment.len()..];
        path.push(segment);
        match s.strip_prefix("::") {
            Some(r) => s = r,
            None => break,
        }
    }
    out.push(path);
}

/// The comma-separated items of a `{…}` group whose opening brace is already read.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut depth, mut from, mut out) = (0, 0, Vec::new());
    for (k, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(&group[from..k]);
                return out;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&group[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    out
}

/// For each folder of `src` (as its module path), the edges among its children: child → the
/// siblings its code names.
fn edges(src: &Path) -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let mut out: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files(src) {
        let here = module_path(file.strip_prefix(src).unwrap());
        // A module of tests (`mod tests;` in a file of its own) is test code.
        if here.last().is_some_and(|m| m == "tests") {
            continue;
        }
        for target in named(&code(&fs::read_to_string(&file).unwrap()), &here) {
            let common = here.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common < here.len() && common < target.len() {
                let folder = here[..common].to_vec();
                let children = out.entry(folder).or_default();
                children
                    .entry(here[common].clone())
                    .or_default()
                    .insert(target[common].clone());
            }
        }
    }
    out
}

/// The children of the folder of `src` at `folder` that are modules: its files and folders.
fn children(src: &Path, folder: &[String]) -> BTreeSet<String> {
    let dir = folder.iter().fold(src.to_path_buf(), |d, m| d.join(m));
    let Ok(entries) = fs::read_dir(&dir) else {
        return BTreeSet::new();
    };
    entries
        .filter_map(|e| {
            let path = e.ok()?.path();
            let name = path.file_name()?.to_string_lossy().into_owned();
            match name.strip_suffix(".rs") {
                Some("mod" | "lib" | "main") => None,
                Some(stem) => Some(stem.to_string()),
                None => path.is_dir().then_some(name),
            }
        })
        .collect()
}

/// The layers of `graph`, bottom first, or the modules left on a cycle (or above one) with the
/// siblings they wait for.
fn layers(graph: &BTreeMap<String, BTreeSet<String>>) -> Result<Vec<Vec<String>>, Vec<String>> {
    let mut placed: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::new();
    while placed.len() < graph.len() {
        let layer: Vec<&str> = graph
            .iter()
            .filter(|(m, deps)| {
                !placed.contains(m.as_str()) && deps.iter().all(|d| placed.contains(d.as_str()))
            })
            .map(|(m, _)| m.as_str())
            .collect();
        if layer.is_empty() {
            return Err(graph
                .iter()
                .filter(|(m, _)| !placed.contains(m.as_str()))
                .map(|(m, deps)| {
                    let open: Vec<&str> = deps
                        .iter()
                        .map(String::as_str)
                        .filter(|d| !placed.contains(d))
                        .collect();
                    format!("{m} -> {}", open.join(", "))
                })
                .collect());
        }
        placed.extend(&layer);
        out.push(layer.into_iter().map(String::from).collect());
    }
    Ok(out)
}

#[test]
fn no_module_names_a_sibling_that_names_it_back() {
    let mut cycles = Vec::new();
    let mut folders = 0;
    for krate in crates() {
        let src = root().join(&krate).join("src");
        for (folder, edges) in edges(&src) {
            let siblings = children(&src, &folder);
            let place = folder.join("/");
            let shown = format!("{krate}/src{}{place}", if place.is_empty() { "" } else { "/" });
            let mut graph: BTreeMap<String, BTreeSet<String>> =
                siblings.iter().map(|m| (m.clone(), BTreeSet::new())).collect();
            for (from, to) in edges {
                if !siblings.contains(&from) {
                    continue;
                }
                let deps = to.into_iter().filter(|t| *t != from && siblings.contains(t));
                graph.get_mut(&from).unwrap().extend(deps);
            }
            folders += 1;
            match layers(&graph) {
                Ok(layers) => {
                    println!("{shown}:");
                    for (k, layer) in layers.iter().enumerate() {
                        println!("  layer {k}: {}", layer.join(", "));
                    }
                }
                Err(stuck) => cycles.push(format!("{shown}:\n    {}", stuck.join("\n    "))),
            }
        }
    }
    assert!(cycles.is_empty(), "module cycles:\n  {}", cycles.join("\n  "));
    assert!(folders > 20, "only {folders} folders read");
}

#[test]
fn paths_are_read_in_every_form() {
    let here = ["a".to_string(), "b".to_string()];
    let code = "use crate::x::Y;\nuse crate::{c::D, e, f::{g::H, I}};\nlet v = super::z();\n\
                use super::super::w::V;\nnot_crate::q();";
    let found: Vec<String> = named(code, &here).iter().map(|p| p.join("::")).collect();
    assert_eq!(found, ["x::Y", "c::D", "e", "f::g::H", "f::I", "a::z", "w::V"]);
    assert_eq!(module_path(Path::new("a/b/mod.rs")), ["a", "b"]);
    assert_eq!(module_path(Path::new("a/b.rs")), ["a", "b"]);
    assert!(module_path(Path::new("lib.rs")).is_empty());
}
