//! flashattn-sys must declare exactly the C API that bindings/spec/flashattn_api.json describes: every function with
//! its parameters (count, names, types in order) and return type, every enum value, the constants and the handle
//! types, and nothing the spec does not have.
//!
//! The declarations are read from src/lib.rs as text: Rust has no reflection over `extern` blocks, and the text is
//! what a reviewer reads. The spec comes from FLASHATTN_SPEC_JSON when set (CTest points it at a spec generated from
//! the header being built, so a header edit that this crate misses fails here), else from the checked-in file.
//!
//! C types map to Rust as: int32_t i32, int64_t i64, size_t usize, float f32, char c_char, void c_void, an enum or
//! handle typedef to the alias of the same name, `struct S` to the opaque type S; `T *` is `*mut T`, `const T *` is
//! `*const T`, and in `const T **` the const binds to the innermost pointee (`*mut *const T`).

#[path = "../../testsupport/json.rs"]
mod json;

use json::Json;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn spec_path() -> PathBuf {
    match std::env::var_os("FLASHATTN_SPEC_JSON") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/flashattn_api.json"),
    }
}

fn load_spec() -> Json {
    let path = spec_path();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {}", path.display(), e));
    Json::parse(&text).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

fn source_text() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = std::fs::read_to_string(&path).unwrap();
    // Line comments only: the file has no block comments, and doc comments are line comments too.
    text.lines().map(|l| match l.find("//") { Some(i) => &l[..i], None => l }).collect::<Vec<_>>().join("\n")
}

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The Rust spelling of a normalized C type of the spec.
fn rust_type(c: &str) -> String {
    let mut t = c.trim();
    let is_const = t.starts_with("const ");
    if is_const {
        t = &t["const ".len()..];
    }
    let stars = t.matches('*').count();
    let base = t.replace('*', "");
    let base = base.trim();
    let base = base.strip_prefix("struct ").unwrap_or(base);
    let base = match base {
        "int32_t" => "i32",
        "int64_t" => "i64",
        "uint8_t" => "u8",
        "uint32_t" => "u32",
        "uint64_t" => "u64",
        "size_t" => "usize",
        "float" => "f32",
        "double" => "f64",
        "char" => "c_char",
        "void" => "c_void",
        other => other,
    };
    let mut out = String::new();
    for level in 0..stars {
        let innermost = level + 1 == stars;
        out.push_str(if innermost && is_const { "*const " } else { "*mut " });
    }
    out.push_str(base);
    out
}

struct Decl {
    params: Vec<(String, String)>,
    ret: Option<String>,
}

fn extern_functions(src: &str) -> BTreeMap<String, Decl> {
    let mut out = BTreeMap::new();
    let mut rest = src;
    while let Some(start) = rest.find("extern \"C\" {") {
        let body_start = start + "extern \"C\" {".len();
        let end = body_start + rest[body_start..].find('}').expect("unterminated extern block");
        for item in rest[body_start..end].split(';') {
            let item = squash(item);
            if item.is_empty() {
                continue;
            }
            let item = item.strip_prefix("pub fn ").unwrap_or_else(|| panic!("not a `pub fn`: {}", item));
            let open = item.find('(').unwrap();
            let close = item.rfind(')').unwrap();
            let name = item[..open].trim().to_string();
            let params = item[open + 1..close]
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let colon = p.find(':').unwrap_or_else(|| panic!("{}: parameter without a type: {}", name, p));
                    (p[..colon].trim().to_string(), squash(&p[colon + 1..]))
                })
                .collect();
            let ret = item[close + 1..].trim().strip_prefix("->").map(|r| squash(r));
            assert!(out.insert(name.clone(), Decl { params, ret }).is_none(), "{} declared twice", name);
        }
        rest = &rest[end..];
    }
    out
}

/// `pub const NAME: TYPE = VALUE;` and `pub type NAME = TYPE;` items.
fn items(src: &str, keyword: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for stmt in src.split(';') {
        let stmt = squash(stmt);
        let prefix = format!("pub {} ", keyword);
        if let Some(pos) = stmt.find(&prefix) {
            let item = &stmt[pos + prefix.len()..];
            if let Some(eq) = item.find('=') {
                out.insert(item[..eq].trim().to_string(), item[eq + 1..].trim().to_string());
            }
        }
    }
    out
}

#[test]
fn functions_match_the_spec() {
    let spec = load_spec();
    let declared = extern_functions(&source_text());
    let mut problems = Vec::new();
    let mut named = BTreeSet::new();
    for f in spec.get("functions").as_array() {
        let name = f.get("name").as_str();
        named.insert(name.to_string());
        let decl = match declared.get(name) {
            Some(d) => d,
            None => {
                problems.push(format!("{}: not declared", name));
                continue;
            }
        };
        let params = f.get("params").as_array();
        if params.len() != decl.params.len() {
            problems.push(format!("{}: {} parameters in the spec, {} declared", name, params.len(), decl.params.len()));
        }
        for (i, (p, (dname, dtype))) in params.iter().zip(&decl.params).enumerate() {
            let want = rust_type(p.get("type").as_str());
            if p.get("name").as_str() != dname || &want != dtype {
                problems.push(format!(
                    "{} parameter {}: spec `{}: {}` (C `{}`), declared `{}: {}`",
                    name,
                    i,
                    p.get("name").as_str(),
                    want,
                    p.get("type").as_str(),
                    dname,
                    dtype
                ));
            }
        }
        let ret = f.get("return").as_str();
        let want = if ret == "void" { None } else { Some(rust_type(ret)) };
        if want != decl.ret {
            problems.push(format!("{}: returns {:?} in the spec, {:?} declared", name, want, decl.ret));
        }
    }
    for name in declared.keys() {
        if !named.contains(name) {
            problems.push(format!("{}: declared but not in the spec", name));
        }
    }
    assert!(problems.is_empty(), "flashattn-sys differs from {}:\n  {}", spec_path().display(), problems.join("\n  "));
}

#[test]
fn enums_handles_and_constants_match_the_spec() {
    let spec = load_spec();
    let src = source_text();
    let consts = items(&src, "const");
    let types = items(&src, "type");
    let mut problems = Vec::new();
    let mut expected_consts = BTreeSet::new();
    for e in spec.get("enums").as_array() {
        let ename = e.get("name").as_str();
        if types.get(ename).map(String::as_str) != Some("i32") {
            problems.push(format!("enum {}: want `pub type {} = i32`, have {:?}", ename, ename, types.get(ename)));
        }
        for v in e.get("values").as_array() {
            let vname = v.get("name").as_str();
            expected_consts.insert(vname.to_string());
            let want = format!("{} = {}", ename, v.get("value").as_i64());
            let have = consts.get(&format!("{}: {}", vname, ename)).map(|value| format!("{} = {}", ename, value));
            if have.as_deref() != Some(want.as_str()) {
                problems.push(format!("{}: want `{}: {}`, not declared so", vname, vname, want));
            }
        }
    }
    for c in spec.opt("constants").map(Json::as_array).unwrap_or(&[]) {
        let cname = c.get("name").as_str();
        expected_consts.insert(cname.to_string());
        let have = consts.get(&format!("{}: i32", cname));
        if have.map(|v| v.parse::<i64>().ok()) != Some(Some(c.get("value").as_i64())) {
            problems.push(format!("{}: want `{}: i32 = {}`, have {:?}", cname, cname, c.get("value").as_i64(), have));
        }
    }
    for key in consts.keys() {
        let cname = key.split(':').next().unwrap().trim();
        if cname.starts_with("FLASHATTN_") && !expected_consts.contains(cname) {
            problems.push(format!("{}: declared but not in the spec", cname));
        }
    }
    for h in spec.get("handles").as_array() {
        let hname = h.as_str();
        match types.get(hname) {
            Some(t) if t.starts_with("*mut ") => {}
            other => problems.push(format!("handle {}: want `pub type {} = *mut <opaque>`, have {:?}", hname, hname, other)),
        }
    }
    assert!(problems.is_empty(), "flashattn-sys differs from {}:\n  {}", spec_path().display(), problems.join("\n  "));
}

#[test]
fn the_type_map_reads_the_spec_forms() {
    assert_eq!(rust_type("const int64_t *"), "*const i64");
    assert_eq!(rust_type("const float **"), "*mut *const f32");
    assert_eq!(rust_type("struct CUstream_st **"), "*mut *mut CUstream_st");
    assert_eq!(rust_type("flashAttnHandle_t *"), "*mut flashAttnHandle_t");
    assert_eq!(rust_type("size_t"), "usize");
}

#[test]
fn the_loaded_library_is_the_spec_version() {
    let spec = load_spec();
    let v = spec.get("version");
    let want = v.get("major").as_i64() * 10000 + v.get("minor").as_i64() * 100 + v.get("patch").as_i64();
    assert_eq!(unsafe { flashattn_sys::flashAttnGetVersion() } as i64, want);
}
