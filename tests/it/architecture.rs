//! Guards the layering stated at the top of `src/lib.rs`: the table there is the one list of
//! layers and modules, and this test reads it rather than keeping a copy.
//!
//! Rules, checked over every file under `src/`:
//! - a module refers to top-level modules (`crate::name`, `crate::{a::X, b::Y}`, or
//!   `super::super::name` climbing to the crate) only when they are listed before it in the
//!   table, its own layer included, so the module graph has no cycle by construction;
//! - inside a folder, the files (and sub-folders, and the folder's `mod.rs` with what it
//!   defines itself) depend on each other without a cycle; a name `mod.rs` re-exports
//!   (`pub use child::Name`) counts as the child's;
//! - nothing outside `commands` uses clap (flags belong to the command layer);
//! - every module file opens with a `//!` line saying its role;
//! - the table and `lib.rs`'s `pub mod` lines name the same modules.

use std::collections::{BTreeMap, BTreeSet};
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

/// The module path of a file under `src/` (`commands/replay/mod.rs` → `commands::replay`).
fn module_of(rel: &str) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The code of a file without comments and string contents, line for line; without its
/// test items (each item under a `#[cfg(test)]` attribute, wherever it stands: the inline
/// `mod tests`, a test-only helper in the middle of production code) when `library` is set,
/// so only what builds the library counts. A skipped line stays as an empty one.
fn blank(text: &str, library: bool) -> String {
    let mut out = String::new();
    // Inside a test item: the brace depth of the item, and whether it opened one yet.
    let mut skipping: Option<(i32, bool)> = None;
    for line in text.lines() {
        let blanked = blank_line(code_of(line));
        if library && skipping.is_none() && blanked.trim_start().starts_with("#[cfg(test)]") {
            skipping = Some((0, false));
        }
        if let Some((depth, opened)) = skipping.as_mut() {
            let after_attribute = blanked
                .trim_start()
                .strip_prefix("#[cfg(test)]")
                .unwrap_or(&blanked);
            for c in after_attribute.chars() {
                match c {
                    '{' => {
                        *depth += 1;
                        *opened = true;
                    }
                    '}' => *depth -= 1,
                    _ => {}
                }
            }
            let ended =
                (*opened && *depth <= 0) || (!*opened && after_attribute.trim_end().ends_with(';'));
            if ended {
                skipping = None;
            }
            out.push('\n');
            continue;
        }
        out.push_str(&blanked);
        out.push('\n');
    }
    out
}

/// One line's code with the contents of its strings taken out.
fn blank_line(code: &str) -> String {
    let mut blanked = String::with_capacity(code.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in code.chars() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    in_string = false;
                    blanked.push('"');
                }
                _ => {}
            }
        } else {
            if c == '"' {
                in_string = true;
            }
            blanked.push(c);
        }
    }
    blanked
}

/// Splits the inside of a `{…}` group at its top-level commas.
fn split_group(body: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&body[start..]);
    out
}

/// The paths of one group member, each as its segments (`a::{b, c::D}` → `a::b`, `a::c::D`).
fn expand_group(prefix: &[String], member: &str, out: &mut Vec<Vec<String>>) {
    let member = member.trim();
    if member.is_empty() {
        return;
    }
    if let Some(open) = member.find('{') {
        let close = member.rfind('}').unwrap_or(member.len());
        let mut head = prefix.to_vec();
        head.extend(
            member[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        for inner in split_group(&member[open + 1..close]) {
            expand_group(&head, inner, out);
        }
        return;
    }
    let name = member.split(" as ").next().unwrap_or(member);
    let mut path = prefix.to_vec();
    path.extend(
        name.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    out.push(path);
}

/// Every path starting at `crate`, `super` or `self` in `code`, grouped imports expanded,
/// with the byte offset where it starts.
fn rooted_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let root = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|r| rest.starts_with(r));
        let before = (i > 0).then(|| bytes[i - 1] as char);
        let Some(root) = root.filter(|_| {
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == ':')
        }) else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        // The path: identifiers and `::`, then maybe a `{…}` group.
        let mut end = i;
        while end < code.len() {
            let c = bytes[end] as char;
            if c.is_ascii_alphanumeric() || c == '_' || c == ':' {
                end += 1;
            } else {
                break;
            }
        }
        let head = &code[i..end];
        let segments: Vec<String> = head
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if head.ends_with("::") && code[end..].starts_with('{') {
            let mut depth = 0;
            let mut close = code.len();
            for (k, c) in code[end..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            close = end + k;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let mut members = Vec::new();
            for member in split_group(&code[end + 1..close]) {
                expand_group(&segments, member, &mut members);
            }
            out.extend(members.into_iter().map(|m| (i, m)));
            i = close + 1;
        } else {
            out.push((i, segments));
            i = end.max(i + root.len());
        }
    }
    out
}

/// `path` as seen from module `here`, made absolute: `crate`, `super` and `self` resolved.
fn absolute(here: &[String], path: &[String]) -> Vec<String> {
    let mut base: Vec<String> = match path.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        _ => here.to_vec(),
    };
    for segment in path {
        match segment.as_str() {
            "crate" | "self" => {}
            "super" => {
                base.pop();
            }
            other => base.push(other.to_owned()),
        }
    }
    base
}

#[test]
fn the_checker_reads_grouped_and_climbing_paths() {
    let paths =
        rooted_paths("use crate::{plan::X,\n commands::{a::Y, b}}; super::super::exec::f();");
    let here = vec!["commands".to_owned(), "replay".to_owned(), "x".to_owned()];
    let absolute: Vec<String> = paths
        .iter()
        .map(|(_, p)| absolute(&here, p).join("::"))
        .collect();
    assert_eq!(
        absolute,
        [
            "plan::X",
            "commands::a::Y",
            "commands::b",
            "commands::exec::f"
        ]
    );
    assert!(rooted_paths("pub(super) fn f() {}").is_empty());
    assert_eq!(
        blank("let s = \"crate::x\"; // crate::y\n", true),
        "let s = \"\"; \n"
    );
    assert_eq!(
        blank("f();\n#[cfg(test)]\nmod tests {}\n", true),
        "f();\n\n\n"
    );
    // A test-only item in the middle of production code hides only itself.
    let code = "#[cfg(test)]\nuse crate::a;\n#[cfg(test)]\nfn t() {\n  crate::b();\n}\nfn g() { crate::c(); }\n";
    let kept = blank(code, true);
    assert_eq!(crate_refs(&kept), ["c"], "{kept}");
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
        // The top-level module each path of the file reaches, by line.
        let code = blank(&text, false);
        let here = module_of(&rel);
        // Paths in the test module (from the first `#[cfg(test)]`, by convention the inline
        // `mod tests` at the end) start one module deeper.
        let tests_at = code.find("#[cfg(test)]").unwrap_or(code.len());
        let mut in_tests = here.clone();
        in_tests.push("tests".into());
        let mut paths_by_line: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (at, path) in rooted_paths(&code) {
            let line = code[..at].matches('\n').count() + 1;
            let from = if at >= tests_at { &in_tests } else { &here };
            if let Some(top) = absolute(from, &path).first() {
                let tops = paths_by_line.entry(line).or_default();
                if !tops.contains(top) {
                    tops.push(top.clone());
                }
            }
        }
        for (n, line) in text.lines().enumerate() {
            let code = code_of(line);
            if !is_commands && (code.contains("clap::") || code.contains("use clap")) {
                violations.push(format!(
                    "{rel}:{}: `{top}` ({layer_name}) uses clap; flags belong to the command layer",
                    n + 1
                ));
            }
            let targets = paths_by_line.get(&(n + 1)).cloned().unwrap_or_default();
            for target in &targets {
                let target = target.as_str();
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

/// The modules `src/lib.rs` declares, each with whether it is `pub` (part of the face).
fn declared_modules(lib: &str) -> Vec<(String, bool)> {
    lib.lines()
        .filter_map(|l| {
            let (rest, public) = match l.strip_prefix("pub mod ") {
                Some(rest) => (rest, true),
                None => (
                    l.strip_prefix("pub(crate) mod ")
                        .or_else(|| l.strip_prefix("mod "))?,
                    false,
                ),
            };
            Some((rest.trim_end_matches(';').to_owned(), public))
        })
        .collect()
}

/// ARCHITECTURE.md's table of the library's face: (face, internal) modules.
fn face_table() -> (Vec<String>, Vec<String>) {
    let doc = fs::read_to_string(Path::new(SRC).join("../ARCHITECTURE.md")).unwrap();
    let section = doc
        .split("## The library's face")
        .nth(1)
        .expect("ARCHITECTURE.md has no section \"The library's face\"");
    let row = |name: &str| -> Vec<String> {
        let line = section
            .lines()
            .find_map(|l| l.strip_prefix(&format!("| {name} |")))
            .unwrap_or_else(|| panic!("the face table has no row '{name}'"));
        line.split(',')
            .map(|m| {
                m.trim()
                    .trim_end_matches('|')
                    .trim()
                    .trim_matches('`')
                    .to_owned()
            })
            .filter(|m| !m.is_empty())
            .collect()
    };
    (row("face"), row("internal"))
}

#[test]
fn the_face_is_what_lib_rs_makes_public_and_nothing_else() {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let declared = declared_modules(&lib);
    let (mut face, mut internal) = face_table();
    let mut public: Vec<String> = declared
        .iter()
        .filter(|d| d.1)
        .map(|d| d.0.clone())
        .collect();
    let mut hidden: Vec<String> = declared
        .iter()
        .filter(|d| !d.1)
        .map(|d| d.0.clone())
        .collect();
    for list in [&mut face, &mut internal, &mut public, &mut hidden] {
        list.sort();
    }
    assert_eq!(
        public, face,
        "src/lib.rs's pub modules and ARCHITECTURE.md's face differ"
    );
    assert_eq!(
        hidden, internal,
        "src/lib.rs's internal modules and ARCHITECTURE.md's differ"
    );
}

#[test]
fn the_face_check_reads_pub_crate_and_private_modules_as_internal() {
    let lib = "pub mod a;\npub(crate) mod b;\nmod c;\n// mod d;\n";
    assert_eq!(
        declared_modules(lib),
        [("a".into(), true), ("b".into(), false), ("c".into(), false)]
    );
}

#[test]
fn the_table_names_every_module_of_the_library_and_no_other() {
    let lib = fs::read_to_string(Path::new(SRC).join("lib.rs")).unwrap();
    let mut declared: Vec<String> = declared_modules(&lib).into_iter().map(|(m, _)| m).collect();
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

/// Each `pub use` statement of `code` (a re-export, not a use): its byte range and text.
fn reexports(code: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("pub") {
        let start = from + at;
        from = start + 3;
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let mut rest = &code[start + 3..];
        if rest.starts_with('(') {
            let Some(close) = rest.find(')') else {
                continue;
            };
            rest = &rest[close + 1..];
        }
        let Some(body) = rest.trim_start().strip_prefix("use ") else {
            continue;
        };
        let Some(end) = body.find(';') else { continue };
        let body_start = code.len() - body.len();
        out.push((start..body_start + end + 1, &body[..end]));
    }
    out
}

/// The longest prefix of `path` that is a module, and where that prefix ends.
fn module_prefix<'a>(
    modules: &BTreeSet<Vec<String>>,
    path: &'a [String],
) -> Option<(Vec<String>, &'a [String])> {
    (0..=path.len())
        .rev()
        .find(|&k| modules.contains(&path[..k].to_vec()))
        .map(|k| (path[..k].to_vec(), &path[k..]))
}

/// The module a path names, a re-exported name standing for the module it comes from.
fn target_module(
    modules: &BTreeSet<Vec<String>>,
    reexported: &BTreeMap<(Vec<String>, String), Vec<String>>,
    path: &[String],
) -> Option<Vec<String>> {
    let (module, rest) = module_prefix(modules, path)?;
    match rest.first() {
        Some(name) => Some(
            reexported
                .get(&(module.clone(), name.clone()))
                .cloned()
                .unwrap_or(module),
        ),
        None => Some(module),
    }
}

/// Every file of `src/` as (module path, library code).
fn library_files() -> Vec<(Vec<String>, String)> {
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    files.sort();
    files
        .iter()
        .map(|path| {
            let rel = path
                .strip_prefix(SRC)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (
                module_of(&rel),
                blank(&fs::read_to_string(path).unwrap(), true),
            )
        })
        .collect()
}

#[test]
fn no_folder_has_a_cycle_between_its_files() {
    let files = library_files();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    // What each module re-exports, and from which module.
    let mut reexported: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
    for (here, code) in &files {
        for (_, statement) in reexports(code) {
            let mut paths = Vec::new();
            expand_group(&[], statement, &mut paths);
            for path in paths {
                let absolute = match path.first().map(String::as_str) {
                    Some("crate" | "super" | "self") => absolute(here, &path),
                    _ => here.iter().chain(&path).cloned().collect(),
                };
                let name = statement_name(statement, &path);
                if let (Some(name), Some((module, _))) = (name, module_prefix(&modules, &absolute))
                {
                    reexported.insert((here.clone(), name), module);
                }
            }
        }
    }
    // What each module uses (re-exports left out), with the text that shows it.
    let mut uses: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (here, code) in &files {
        let mut code = code.clone();
        for (range, _) in reexports(&code.clone()) {
            code.replace_range(range.clone(), &" ".repeat(range.len()));
        }
        let deps = uses.entry(here.clone()).or_default();
        for (_, path) in rooted_paths(&code) {
            let absolute = absolute(here, &path);
            if let Some(target) = target_module(&modules, &reexported, &absolute) {
                deps.entry(target).or_insert_with(|| path.join("::"));
            }
        }
        // A child module named without a root (`use child::X`, `child::f()`).
        let bytes = code.as_bytes();
        for (at, _) in code.match_indices("::") {
            let start = code[..at]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            if start == at || (start >= 1 && bytes[start - 1] == b':') {
                continue;
            }
            let mut child = here.clone();
            child.push(code[start..at].to_owned());
            if modules.contains(&child) {
                deps.entry(child)
                    .or_insert_with(|| code[start..at].to_owned());
            }
        }
    }
    let mut cycles = Vec::new();
    for folder in &modules {
        let node = |m: &Vec<String>| -> Option<Vec<String>> {
            (m.len() >= folder.len() && m[..folder.len()] == folder[..])
                .then(|| m[..(folder.len() + 1).min(m.len())].to_vec())
        };
        let mut graph: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
        for (from, deps) in &uses {
            let Some(a) = node(from) else { continue };
            for (to, why) in deps {
                if let Some(b) = node(to).filter(|b| *b != a) {
                    graph
                        .entry(a.clone())
                        .or_default()
                        .entry(b)
                        .or_insert_with(|| format!("{} uses {why}", from.join("::")));
                }
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            let name = |m: &Vec<String>| {
                if m == folder {
                    format!("{}/mod.rs", folder.join("/"))
                } else {
                    m.join("/")
                }
            };
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|w| {
                    format!(
                        "{} -> {} ({})",
                        name(&w[0]),
                        name(&w[1]),
                        graph[&w[0]][&w[1]]
                    )
                })
                .collect();
            cycles.push(format!("in {}/: {}", folder.join("/"), steps.join("; ")));
        }
    }
    assert!(
        cycles.is_empty(),
        "files of a folder depend on each other in a cycle:\n{}",
        cycles.join("\n")
    );
}

/// The name a re-export makes visible for `path` (its last segment, or the `as` name).
fn statement_name(statement: &str, path: &[String]) -> Option<String> {
    let last = path.last()?;
    if last == "*" || last == "self" {
        return None;
    }
    let renamed = statement.split(',').find_map(|m| {
        let (from, to) = m.split_once(" as ")?;
        from.trim()
            .ends_with(last.as_str())
            .then(|| to.trim().trim_end_matches('}').trim().to_owned())
    });
    Some(renamed.unwrap_or_else(|| last.clone()))
}

/// A cycle of `graph` (its nodes in order, the first repeated at the end), if it has one.
fn find_cycle(
    graph: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
) -> Option<Vec<Vec<String>>> {
    fn visit(
        node: &Vec<String>,
        graph: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        state.insert(node.clone(), 1);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, state, stack) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0 {
            if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

#[test]
fn the_cycle_check_finds_a_cycle_and_only_then() {
    let edge = |a: &str, b: &str| (vec![a.to_owned()], vec![b.to_owned()]);
    let mut graph: BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    for (a, b) in [edge("a", "b"), edge("b", "c")] {
        graph.entry(a).or_default().insert(b, String::new());
    }
    assert!(find_cycle(&graph).is_none());
    let (a, b) = edge("c", "a");
    graph.entry(a).or_default().insert(b, String::new());
    assert_eq!(find_cycle(&graph).map(|c| c.len()), Some(4));
    assert_eq!(
        reexports("pub use a::{B, C};\nuse d::E;\npub(crate) use f::G;").len(),
        2
    );
}

/// Every place in the library code of the files under `folder` (a module path like
/// `plan`) where one of `names` stands, but for the files `allowed` names (with why).
fn uses_in(folder: &str, names: &[&str], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (module, code) in library_files() {
        let path = module.join("::");
        if module.first().map(String::as_str) != Some(folder)
            || allowed.iter().any(|(m, _)| *m == path)
        {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            for name in names {
                if line.contains(name) {
                    found.push(format!("{path}:{}: {name}", n + 1));
                }
            }
        }
    }
    found
}

/// The plan is pure: the same trace, seed, shard and options give the same operations on
/// every host, so it names no client, network, file system, thread or clock API. The digest
/// store (the cache file, digests computed on threads) lives in `content`, beside it, and
/// what a prewarm learns in `exec`: nothing in the plan changes behind a shared reference
/// (no lock, no cell, no atomic), so a sealed catalog changes only through `&mut`.
#[test]
fn the_plan_names_no_client_network_file_thread_or_clock_api() {
    let forbidden = [
        "crate::client",
        "crate::net",
        "crate::exec",
        "crate::auth",
        "std::fs",
        "std::net",
        "std::thread",
        "tokio",
        "Instant::now",
        "SystemTime::now",
        "Mutex",
        "RwLock",
        "RefCell",
        "OnceCell",
        "OnceLock",
        "atomic",
    ];
    let found = uses_in("plan", &forbidden, &[]);
    assert!(
        found.is_empty(),
        "the plan is not pure:\n{}",
        found.join("\n")
    );
}

/// The client's request methods: every `pub async fn` of `src/client/`, read from the code
/// (so a new one is watched the day it is written), less those that send nothing.
fn client_request_methods() -> Vec<String> {
    /// `pub async fn`s of the client that send no request of their own.
    const SEND_NOTHING: [&str; 1] = ["record_cut_off"];
    let mut methods: Vec<String> = library_files()
        .into_iter()
        .filter(|(module, _)| module.first().map(String::as_str) == Some("client"))
        .flat_map(|(_, code)| {
            code.lines()
                .filter_map(|line| line.trim_start().strip_prefix("pub async fn "))
                .map(|rest| {
                    rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect::<Vec<_>>()
        })
        .filter(|name| !name.is_empty() && !SEND_NOTHING.contains(&name.as_str()))
        .collect();
    methods.sort();
    methods.dedup();
    methods
}

/// Load requests are driven in `exec/`: no other module sends one itself (every module is
/// scanned but the client, which defines them, and `exec`), but for the listed exceptions:
/// the connection check every load run makes (`GET /v2/`, in `session::connect`), the
/// replay's probe (a few HEADs before a run alone, what the prewarm left absent) and the
/// health probe of a distributed registry's endpoints (`route::health`).
#[test]
fn load_requests_are_driven_in_exec_only() {
    let methods = client_request_methods();
    for expected in [
        "blob_get",
        "manifest_read",
        "mount_blob",
        "ping",
        "upload_blob",
    ] {
        assert!(
            methods.iter().any(|m| m == expected),
            "the client's methods as read: {methods:?}"
        );
    }
    let calls: Vec<String> = methods.iter().map(|m| format!(".{m}(")).collect();
    let requests: Vec<&str> = calls.iter().map(String::as_str).collect();
    let allowed = [
        ("session::connect", "the connection check, GET /v2/"),
        ("replay::probe", "what a run alone finds absent"),
        ("route::health", "the health probe of each endpoint"),
    ];
    let folders: BTreeSet<String> = library_files()
        .into_iter()
        .filter_map(|(module, _)| module.first().cloned())
        .filter(|m| m != "client" && m != "exec")
        .collect();
    assert!(
        ["capacity", "synthetic", "route", "commands"]
            .iter()
            .all(|f| folders.contains(*f)),
        "{folders:?}"
    );
    let mut found = Vec::new();
    for folder in &folders {
        found.extend(uses_in(folder, &requests, &allowed));
    }
    assert!(
        found.is_empty(),
        "load requests sent outside exec/ (drive them there):\n{}",
        found.join("\n")
    );
}

/// The settings a load run is given reach `summary.json` and `meta.json` only through the
/// results' own `config` blocks (`results::config`): the setting types themselves are not
/// serialized, so renaming one of their fields cannot change a file unnoticed.
#[test]
fn run_settings_reach_the_files_only_through_their_config_blocks() {
    let settings = [
        ("replay::config", "ReplayConfig"),
        ("session::connect", "RegistryConfig"),
        ("synthetic::push", "PushConfig"),
        ("synthetic::pull", "PullConfig"),
        ("exec::options", "Mode"),
        ("exec::options", "Phase"),
    ];
    let files = library_files();
    for (module, name) in settings {
        let (_, code) = files
            .iter()
            .find(|(m, _)| m.join("::") == module)
            .unwrap_or_else(|| panic!("{module} is not a module of the library"));
        let at = code
            .find(&format!("pub struct {name} "))
            .or_else(|| code.find(&format!("pub enum {name} ")))
            .unwrap_or_else(|| panic!("{name} is not declared in {module}"));
        // The attributes of the declaration: from the end of the item before it.
        let before = &code[..at];
        let start = before.rfind(['}', ';']).map_or(0, |i| i + 1);
        assert!(
            !before[start..].contains("Serialize"),
            "{module}::{name} is serialized itself; the files take its `config` block (results::config)"
        );
    }
}
