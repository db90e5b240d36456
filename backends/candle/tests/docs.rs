//! The documentation links only to what `cargo doc --workspace --no-deps` documents: an
//! intra-doc link to another crate's item (candle's) resolves, so rustdoc's
//! `broken_intra_doc_links` passes it, but has no page to point to and renders as the literal
//! `[path]`. Such items are named in code spans instead (or linked by URL).

use std::fs;
use std::path::Path;

/// The crates whose items a link may name: this one and the workspace's.
const DOCUMENTED: [&str; 5] = ["crate", "self", "super", "Self", "homeadam_core"];

/// The `[path]` or ``[`path`]`` links of `text` not followed by `(` whose first path segment
/// is a crate's name (lower case; types in scope are capitalised) not in [`DOCUMENTED`].
fn foreign_links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(']') else { break };
        let inner = rest[..close].trim_matches('`');
        let explicit = rest[close + 1..].starts_with('(');
        let path_like = inner.chars().all(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if let Some((root, _)) = inner.split_once("::") {
            let a_crate = root.starts_with(|c: char| c.is_ascii_lowercase());
            if path_like && a_crate && !explicit && !DOCUMENTED.contains(&root) {
                found.push(inner.to_string());
            }
        }
    }
    found
}

#[test]
fn links_name_documented_items_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    for entry in fs::read_dir(root.join("src")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let mut bad = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let docs: String = if file.extension().is_some_and(|e| e == "rs") {
            let doc_lines = text.lines().map(str::trim_start).filter(|l| l.starts_with("//"));
            doc_lines.collect::<Vec<_>>().join("\n")
        } else {
            text
        };
        for link in foreign_links(&docs) {
            bad.push(format!("{}: [{link}]", file.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "links rustdoc renders as literal brackets:\n{}",
        bad.join("\n")
    );
    assert_eq!(foreign_links("see [`candle_nn::AdamW`]"), ["candle_nn::AdamW"]);
    assert!(foreign_links("[`homeadam_core::Config`], [a](x::y), b[k]").is_empty());
}
