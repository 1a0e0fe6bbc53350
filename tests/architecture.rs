//! Guards the layering stated at the top of `src/lib.rs`: the table there is the one list of
//! layers and modules, and this test reads it rather than keeping a copy.
//!
//! Rules, checked over every file under `src/`:
//! - a module refers (`crate::name`) only to modules listed before it in the table, its own
//!   layer included, so the module graph has no cycle by construction;
//! - nothing outside `commands` uses clap (flags belong to the command layer);
//! - every module file opens with a `//!` line saying its role;
//! - the table and `lib.rs`'s `pub mod` lines name the same modules.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Layer name and modules, in the table's order.
fn layers() -> Vec<(String, Vec<String>)> {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut out = Vec::new();
    for line in lib.lines() {
        let Some(row) = line.strip_prefix("//! |") else {
            continue;
        };
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0] == "layer" || cells[0].starts_with("---") {
            continue;
        }
        let modules = cells[1]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_owned())
            .filter(|m| !m.is_empty())
            .collect();
        out.push((cells[0].to_owned(), modules));
    }
    assert!(
        out.len() >= 3,
        "no layer table found at the top of src/lib.rs"
    );
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a line without its comment (`//` outside a string literal).
fn code_of(line: &str) -> &str {
    let mut in_string = false;
    let mut escaped = false;
    let bytes = line.as_bytes();
    for i in 0..bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else if b == b'"' {
            in_string = true;
        } else if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
            return &line[..i];
        }
    }
    line
}

/// Every `crate::NAME` a line of code refers to.
fn crate_refs(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at + "crate::".len()..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // `creb_crate::x` or `$crate::x` are not this crate's paths.
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            out.push(&tail[..end]);
        }
        rest = &tail[end..];
    }
    out
}

#[test]
fn modules_import_only_from_their_layer_or_the_ones_before_it() {
    let layers = layers();
    // Position of each module in the table: layer index, then order within it.
    let mut rank: BTreeMap<String, (usize, usize, String)> = BTreeMap::new();
    let mut position = 0;
    for (l, (name, modules)) in layers.iter().enumerate() {
        for m in modules {
            let previous = rank.insert(m.clone(), (l, position, name.clone()));
            assert!(previous.is_none(), "`{m}` is listed twice in the table");
            position += 1;
        }
    }
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    files.sort();
    let mut violations = Vec::new();
    for path in &files {
        let rel = path
            .strip_prefix(SRC)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let text = fs::read_to_string(path).unwrap();
        let first = text.lines().next().unwrap_or_default();
        if !first.starts_with("//!") {
            violations.push(format!(
                "{rel}: does not open with a `//!` line saying its role"
            ));
        }
        let top = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        if top == "lib" || top == "main" {
            continue;
        }
        let Some((layer, pos, layer_name)) = rank.get(&top).cloned() else {
            violations.push(format!("{rel}: module `{top}` is not in the layer table"));
            continue;
        };
        let is_commands = layers.last().is_some_and(|(_, m)| m.contains(&top));
        for (n, line) in text.lines().enumerate() {
            let code = code_of(line);
            if !is_commands && (code.contains("clap::") || code.contains("use clap")) {
                violations.push(format!(
                    "{rel}:{}: `{top}` ({layer_name}) uses clap; flags belong to the command layer",
                    n + 1
                ));
            }
            for target in crate_refs(code) {
                if target == top || target.is_empty() {
                    continue;
                }
                match rank.get(target) {
                    None => violations.push(format!(
                        "{rel}:{}: `crate::{target}` is not a module of the table",
                        n + 1
                    )),
                    Some((tl, tpos, tname)) if *tpos > pos => violations.push(format!(
                        "{rel}:{}: `{top}` ({layer_name}) imports `{target}` ({tname}), listed after it{}",
                        n + 1,
                        if *tl > layer { ": an upward import" } else { "" }
                    )),
                    Some(_) => {}
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "the layering of src/lib.rs does not hold:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_table_names_every_module_of_the_library_and_no_other() {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut declared: Vec<String> = lib
        .lines()
        .filter_map(|l| {
            l.strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("mod "))
        })
        .map(|m| m.trim_end_matches(';').to_owned())
        .collect();
    let mut listed: Vec<String> = layers().into_iter().flat_map(|(_, m)| m).collect();
    declared.sort();
    listed.sort();
    assert_eq!(
        declared, listed,
        "lib.rs's modules and its layer table differ"
    );
}

#[test]
fn the_checker_sees_imports_and_ignores_comments_and_strings() {
    assert_eq!(crate_refs("use crate::oci::Digest;"), ["oci"]);
    assert_eq!(crate_refs("let x = crate::a::f(crate::b::G);"), ["a", "b"]);
    assert!(crate_refs("$crate::x; my_crate::y").is_empty());
    assert_eq!(code_of("use crate::a; // crate::b"), "use crate::a; ");
    assert_eq!(
        code_of(r#"let s = "// not a comment"; // crate::c"#),
        r#"let s = "// not a comment"; "#
    );
}
