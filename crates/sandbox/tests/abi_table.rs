//! The host's import table is the one list of the ABI: this test fails when guest-sdk/ABI.md,
//! the C header `neuronlab.h` or the Rust SDK's extern declarations disagree with it (a name
//! missing or extra, another order, group, signature or version).

use std::path::PathBuf;

use neuronlab_sandbox::abi::{imports, WasmType};
use neuronlab_sandbox::{ABI_MAJOR, ABI_MINOR};

/// An import as one of the three documents declares it.
#[derive(Debug, PartialEq)]
struct Declared {
    name: String,
    group: Option<String>,
    since: Option<(u32, u32)>,
    signature: String,
}

fn sdk_file(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../guest-sdk")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(params) -> result` from wasm type names.
fn signature(params: &[&str], result: &str) -> String {
    format!("({}) -> {result}", params.join(", "))
}

fn version(text: &str) -> (u32, u32) {
    let (major, minor) = text.split_once('.').expect("major.minor");
    (major.parse().unwrap(), minor.parse().unwrap())
}

/// The rows of the `| import | signature | returns |` tables under `## Imports`, with the
/// `###` group they sit under and the version the group heading or the row gives.
fn abi_md() -> Vec<Declared> {
    let text = sdk_file("ABI.md");
    let section = text
        .split("\n## Imports")
        .nth(1)
        .expect("ABI.md has an Imports section");
    let section = section.split("\n## ").next().unwrap();
    let mut group = None;
    let mut group_since = None;
    let mut out = Vec::new();
    for line in section.lines() {
        if let Some(heading) = line.strip_prefix("### ") {
            let (name, since) = match heading.split_once(" (since ") {
                Some((name, v)) => (name, Some(version(v.trim_end_matches(')')))),
                None => (heading, None),
            };
            group = Some(name.trim().to_string());
            group_since = since;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // | `name` (1.3) | `(a: i32) -> i32` | prose |
        if cells.len() < 4 || !cells[1].starts_with('`') || !cells[2].starts_with("`(") {
            continue;
        }
        let (name, row_since) = match cells[1].split_once(" (") {
            Some((n, v)) => (n, Some(version(v.trim_end_matches(')')))),
            None => (cells[1], None),
        };
        let sig = cells[2].trim_matches('`');
        let (params, result) = sig.split_once(" -> ").expect("a signature has ->");
        let params: Vec<&str> = params
            .trim_start_matches('(')
            .trim_end_matches(')')
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| p.split(':').nth(1).expect("name: type").trim())
            .collect();
        out.push(Declared {
            name: name.trim_matches('`').to_string(),
            group: group.clone(),
            since: row_since.or(group_since).or(Some((1, 0))),
            signature: signature(&params, result.trim()),
        });
    }
    out
}

/// A C type as wasm32 passes it.
fn c_type(ty: &str) -> &'static str {
    let ty = ty.trim();
    if ty.contains('*') {
        "i32"
    } else if ty.starts_with("int64_t") || ty.starts_with("uint64_t") {
        "i64"
    } else if ty.starts_with("double") {
        "f64"
    } else if ty.starts_with("int32_t") || ty.starts_with("uint32_t") {
        "i32"
    } else {
        panic!("neuronlab.h: no wasm type for the C type {ty:?}")
    }
}

/// Every `NL_IMPORT("name") type nl_name(params);`, with the `/* group */` comment above it.
fn header() -> Vec<Declared> {
    let text = sdk_file("neuronlab.h");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out = Vec::new();
    let mut group = None;
    let mut rest = flat.as_str();
    loop {
        let next_import = rest.find("NL_IMPORT(\"");
        let next_group = rest
            .find("/* ")
            .filter(|&g| next_import.is_none_or(|i| g < i));
        if let Some(g) = next_group {
            let comment = &rest[g + 3..];
            let word: String = comment
                .chars()
                .take_while(|c| c.is_ascii_lowercase())
                .collect();
            let is_group = imports().any(|i| i.group.name() == word);
            if is_group && comment[word.len()..].starts_with([' ', ':']) {
                group = Some(word);
            }
            rest = &rest[g + 3..];
            continue;
        }
        let Some(i) = next_import else { break };
        rest = &rest[i + "NL_IMPORT(\"".len()..];
        let (name, after) = rest.split_once("\")").expect("NL_IMPORT(\"name\")");
        let (decl, after) = after.split_once(';').expect("a declaration ends with ;");
        let (head, params) = decl.split_once('(').expect("a function declaration");
        let params = params.trim_end_matches(')');
        let mut head = head.split_whitespace().collect::<Vec<_>>();
        let c_name = head.pop().expect("a function name");
        assert_eq!(
            c_name,
            format!("nl_{name}"),
            "neuronlab.h: the C name of {name}"
        );
        let result = c_type(&head.join(" "));
        let params: Vec<&str> = if params.trim() == "void" {
            Vec::new()
        } else {
            params.split(',').map(c_type).collect()
        };
        out.push(Declared {
            name: name.to_string(),
            group: group.clone(),
            since: None,
            signature: signature(&params, result),
        });
        rest = after;
    }
    out
}

/// The functions of the SDK's `#[link(wasm_import_module = "neuronlab")]` extern block.
fn sdk_externs() -> Vec<Declared> {
    let text = sdk_file("src/sys.rs");
    let block = text
        .split("#[link(wasm_import_module = \"neuronlab\")]")
        .nth(1)
        .expect("sys.rs links the neuronlab module");
    let block = &block[..block.find("\n    }\n").expect("the extern block ends")];
    let flat = block.split_whitespace().collect::<Vec<_>>().join(" ");
    let rust_type = |ty: &str| match ty.trim() {
        t if t.starts_with('*') => "i32",
        "i32" | "u32" => "i32",
        "i64" | "u64" => "i64",
        "f64" => "f64",
        t => panic!("sys.rs: no wasm type for the Rust type {t:?}"),
    };
    flat.split("pub fn ")
        .skip(1)
        .map(|f| {
            let (name, rest) = f.split_once('(').expect("fn name(");
            let (params, rest) = rest.split_once(')').expect("params)");
            let result = rest
                .split_once("->")
                .map(|(_, r)| r.trim().trim_end_matches(';'))
                .expect("every import returns a value");
            let params: Vec<&str> = params
                .split(',')
                .filter(|p| !p.trim().is_empty())
                .map(|p| rust_type(p.split(':').nth(1).expect("name: type")))
                .collect();
            Declared {
                name: name.trim().to_string(),
                group: None,
                since: None,
                signature: signature(&params, rust_type(result)),
            }
        })
        .collect()
}

/// The host's table as `source` should declare it: what that document records of each row.
fn expected(group: bool, since: bool) -> Vec<Declared> {
    imports()
        .map(|i| Declared {
            name: i.name.to_string(),
            group: group.then(|| i.group.name().to_string()),
            since: since.then_some(i.since),
            signature: i.signature(),
        })
        .collect()
}

/// Every difference between `declared` and the host's table, one line each.
fn differences(source: &str, declared: &[Declared], expected: &[Declared]) -> Vec<String> {
    let mut out = Vec::new();
    for e in expected {
        match declared.iter().find(|d| d.name == e.name) {
            None => out.push(format!(
                "{source}: missing {} {} ({:?})",
                e.name, e.signature, e.group
            )),
            Some(d) if d != e => out.push(format!(
                "{source}: {} is declared as {d:?}, the host has {e:?}",
                e.name
            )),
            Some(_) => {}
        }
    }
    for d in declared {
        if !expected.iter().any(|e| e.name == d.name) {
            out.push(format!("{source}: {} is not an import of the host", d.name));
        }
    }
    let order = |v: &[Declared]| v.iter().map(|d| d.name.clone()).collect::<Vec<_>>();
    if out.is_empty() && order(declared) != order(expected) {
        out.push(format!(
            "{source}: the imports are in another order than the host's table: {:?}",
            order(declared)
        ));
    }
    out
}

#[test]
fn abi_md_the_c_header_and_the_sdk_declare_exactly_the_host_table() {
    let mut problems = Vec::new();
    problems.extend(differences("ABI.md", &abi_md(), &expected(true, true)));
    problems.extend(differences(
        "neuronlab.h",
        &header(),
        &expected(true, false),
    ));
    problems.extend(differences(
        "guest-sdk/src/sys.rs",
        &sdk_externs(),
        &expected(false, false),
    ));
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn no_import_is_newer_than_the_abi_and_every_document_states_its_version() {
    for i in imports() {
        assert!(
            i.since <= (ABI_MAJOR, ABI_MINOR),
            "{} is from ABI {:?}, newer than {ABI_MAJOR}.{ABI_MINOR}",
            i.name,
            i.since
        );
    }
    let version = format!("{ABI_MAJOR}.{ABI_MINOR}");
    for file in ["ABI.md", "neuronlab.h"] {
        assert!(
            sdk_file(file).contains(&format!("version {version}")),
            "{file} does not say it is version {version}"
        );
    }
    let declared = format!("pub const ABI_VERSION: i32 = ({ABI_MAJOR} << 16) | {ABI_MINOR};");
    assert!(
        sdk_file("src/entry.rs").contains(&declared),
        "the SDK's entry.rs does not declare `{declared}`"
    );
}

#[test]
fn the_table_covers_every_wasm_type_it_uses_and_names_are_unique() {
    let mut names: Vec<&str> = imports().map(|i| i.name).collect();
    let n = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), n, "an import is in the table twice");
    assert!(imports().all(|i| i.params.iter().all(|t| *t != WasmType::F64)));
}
