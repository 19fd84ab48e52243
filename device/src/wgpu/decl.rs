//! What a mul-mat shader declares about itself, read from its WGSL text:
//! the thread tile, the staging buffers, the default geometry and the
//! `enable` directives. The shim sizes the dispatch, the workgroup-memory
//! check and the device features from these, so a candidate with another
//! thread tile runs through the same shim, gate and bench.
//!
//! Only module-scope declarations count (brace depth 0, comments removed,
//! nested block comments included, as WGSL defines them):
//!
//! | declaration | meaning | when absent |
//! |---|---|---|
//! | `const TILE_M: u32 = 8u;` | outputs per invocation along m | error |
//! | `const TILE_N: u32 = 8u;` | outputs per invocation along n | error |
//! | `const STAGES: u32 = 2u;` | staging buffers (workgroup memory is `STAGES` times one buffer) | 1 |
//! | `override WG_M: u32 = 16u;` (and `WG_N`, `TILE_K`) | the default geometry | that knob of [`Geometry::default`] |
//! | `enable f16;` | needs `Features::SHADER_F16` | not requested |
//! | `enable subgroups;` | needs `Features::SUBGROUP` | not requested |
//! | `@compute ... fn dequant(...)` (an entry point) | the dequantize-then-GEMM pre-pass ([`super::QuantPath::Dequant`]) | quantized src0 only through `main` |
//!
//! The tile is a `const`, never an `override`: the shader unrolls it, and
//! the shim must know it before the pipeline exists. Values are WGSL
//! integer literals (decimal or `0x` hex, optional `u`/`i` suffix); any
//! other initializer is a [`WgpuError::Declaration`], so a shader the shim
//! would misread is refused rather than dispatched on a wrong grid.

use super::{Geometry, Result, WgpuError};

/// The declarations of one shader source (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShaderDecl {
    /// Outputs per invocation along m (`const TILE_M`), at least 1.
    pub tile_m: u32,
    /// Outputs per invocation along n (`const TILE_N`), at least 1.
    pub tile_n: u32,
    /// Staging buffers in workgroup memory (`const STAGES`, default 1).
    pub stages: u32,
    /// The defaults of the `WG_M`, `WG_N`, `TILE_K` overrides.
    pub geometry: Geometry,
    /// `enable f16;` is present.
    pub f16: bool,
    /// `enable subgroups;` is present.
    pub subgroups: bool,
    /// A module-scope `@compute ... fn dequant` is present: the entry point of the
    /// dequantize-then-GEMM pre-pass ([`super::QuantPath::Dequant`]; its ABI
    /// is the production shader's header).
    pub dequant: bool,
}

impl ShaderDecl {
    /// Reads the declarations of `text`; `source_desc` names the source in
    /// errors ([`super::ShaderSource::describe`]).
    ///
    /// # Errors
    /// [`WgpuError::Declaration`] when `TILE_M` or `TILE_N` is missing, is
    /// an `override`, or either of them, `STAGES` or a geometry default is
    /// not an integer literal of at least 1 that fits a u32, or when an
    /// `enable` names an extension other than `f16` and `subgroups`.
    pub fn parse(text: &str, source_desc: &str) -> Result<ShaderDecl> {
        let bad = |name: &str, reason: String| WgpuError::Declaration {
            source_desc: source_desc.to_string(),
            name: name.to_string(),
            reason,
        };
        let code = strip_comments(text);
        let mut tile_m = None;
        let mut tile_n = None;
        let mut stages = None;
        let mut geometry = Geometry::default();
        let (mut f16, mut subgroups) = (false, false);
        for stmt in module_statements(&code) {
            // `@id(0) override WG_M ...` declares WG_M as much as the bare form.
            let stmt = without_attributes(stmt);
            let words: Vec<&str> = stmt.split_whitespace().collect();
            match words.first().copied() {
                Some("enable") => {
                    for ext in stmt["enable".len()..].split(',').map(str::trim) {
                        match ext {
                            "f16" => f16 = true,
                            "subgroups" => subgroups = true,
                            "" => {}
                            other => {
                                return Err(bad(
                                    "enable",
                                    format!("extension {other:?} is not one the shim can request (f16, subgroups)"),
                                ))
                            }
                        }
                    }
                }
                Some(kw @ ("const" | "override")) => {
                    let Some((name, init)) = split_decl(&stmt[kw.len()..]) else {
                        continue;
                    };
                    let slot = match name {
                        "TILE_M" => &mut tile_m,
                        "TILE_N" => &mut tile_n,
                        "STAGES" => &mut stages,
                        "WG_M" | "WG_N" | "TILE_K" => {
                            if let Some(init) = init {
                                let v = int_literal(init).ok_or_else(|| {
                                    bad(name, format!("default {init:?} is not an integer literal of at least 1"))
                                })?;
                                match name {
                                    "WG_M" => geometry.wg_m = v,
                                    "WG_N" => geometry.wg_n = v,
                                    _ => geometry.tile_k = v,
                                }
                            }
                            continue;
                        }
                        _ => continue,
                    };
                    if kw == "override" {
                        return Err(bad(
                            name,
                            "must be a `const`: the shim sizes the dispatch from it before the pipeline exists".into(),
                        ));
                    }
                    let init = init.unwrap_or("");
                    *slot = Some(int_literal(init).ok_or_else(|| {
                        bad(
                            name,
                            format!("value {init:?} is not an integer literal of at least 1"),
                        )
                    })?);
                }
                _ => {}
            }
        }
        let missing = |name: &str| {
            bad(
                name,
                format!("not declared: the shader must say `const {name}: u32 = ...;` (outputs per invocation)"),
            )
        };
        Ok(ShaderDecl {
            tile_m: tile_m.ok_or_else(|| missing("TILE_M"))?,
            tile_n: tile_n.ok_or_else(|| missing("TILE_N"))?,
            stages: stages.unwrap_or(1),
            geometry,
            f16,
            subgroups,
            dequant: declares_fn(&code, "dequant"),
        })
    }
}

/// Whether comment-free `code` declares a `@compute` entry point `fn name`
/// at module scope (brace depth 0; the attributes between the previous
/// declaration's end and the `fn` must hold `@compute`). A plain helper of
/// that name does not count.
fn declares_fn(code: &str, name: &str) -> bool {
    // Module scope only, each function body replaced by a `;` so that every
    // declaration, its attributes first, ends at one.
    let mut top = String::with_capacity(code.len());
    let mut depth = 0usize;
    for c in code.chars() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    top.push(';');
                }
            }
            _ if depth == 0 => top.push(c),
            _ => {}
        }
    }
    top.split(';').any(|decl| {
        let words: Vec<&str> = decl
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '@'))
            .filter(|w| !w.is_empty())
            .collect();
        let named = words.windows(2).any(|w| w[0] == "fn" && w[1] == name);
        named && words.contains(&"@compute")
    })
}

/// `text` with every `//` line comment and `/* */` block comment (nested,
/// as WGSL allows) replaced by spaces, newlines kept.
pub(crate) fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut depth = 0usize;
    while i < b.len() {
        let two = (b[i], b.get(i + 1).copied());
        if depth == 0 && two == (b'/', Some(b'/')) {
            while i < b.len() && b[i] != b'\n' {
                out.push(b' ');
                i += 1;
            }
        } else if two == (b'/', Some(b'*')) {
            depth += 1;
            out.extend_from_slice(b"  ");
            i += 2;
        } else if depth > 0 && two == (b'*', Some(b'/')) {
            depth -= 1;
            out.extend_from_slice(b"  ");
            i += 2;
        } else {
            out.push(if depth > 0 && b[i] != b'\n' {
                b' '
            } else {
                b[i]
            });
            i += 1;
        }
    }
    // Only ASCII bytes were replaced, by ASCII: still UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// The statements at brace depth 0 of comment-free `code`, each the text
/// up to its `;` (trimmed). Function bodies and struct members are
/// skipped.
fn module_statements(code: &str) -> Vec<&str> {
    let mut stmts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    start = i + 1;
                }
            }
            ';' if depth == 0 => {
                stmts.push(code[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    stmts
}

/// `stmt` without its leading attributes (`@id(0)`, `@must_use`, ...), so
/// an attributed declaration is read like a bare one (WGSL, "Attributes").
fn without_attributes(stmt: &str) -> &str {
    let mut s = stmt.trim_start();
    while let Some(rest) = s.strip_prefix('@') {
        let name_end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let mut after = rest[name_end..].trim_start();
        if after.starts_with('(') {
            let mut depth = 0usize;
            let mut end = after.len();
            for (i, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            after = &after[end..];
        }
        s = after.trim_start();
    }
    s
}

/// `NAME (: TYPE)? (= INIT)?` after `const`/`override`: the name and the
/// initializer's text.
fn split_decl(rest: &str) -> Option<(&str, Option<&str>)> {
    let (head, init) = match rest.split_once('=') {
        Some((h, i)) => (h, Some(i.trim())),
        None => (rest, None),
    };
    let name = head.split(':').next()?.trim();
    Some((name, init))
}

/// A WGSL integer literal (`8`, `8u`, `0x10u`, `8i`) of at least 1 that
/// fits a u32.
fn int_literal(s: &str) -> Option<u32> {
    let s = s.trim();
    let s = s
        .strip_suffix('u')
        .or_else(|| s.strip_suffix('i'))
        .unwrap_or(s);
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
        None => s.parse().ok()?,
    };
    (v >= 1).then_some(v)
}

/// `text` with its `enable subgroups;` directive blanked (spaces, so line
/// and column numbers of compiler messages stay right). naga 30 provides
/// the subgroup built-ins once the device has `Features::SUBGROUP` but
/// rejects the directive itself as not yet implemented
/// (`EnableExtensionNotYetImplemented`), while WGSL requires it; the shim
/// requests the feature from the declaration and hands naga the rest.
pub(crate) fn without_subgroups_enable(text: &str) -> String {
    let code = strip_comments(text);
    let mut out = text.to_string();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in code.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    start = i + 1;
                }
            }
            ';' if depth == 0 => {
                let stmt = code[start..i].trim_start();
                let exts: Vec<&str> = match stmt.strip_prefix("enable") {
                    Some(list) => list.split(',').map(str::trim).collect(),
                    None => Vec::new(),
                };
                if exts.contains(&"subgroups") {
                    // The statement and its `;`, rewritten in place to the
                    // same length (only ASCII here), newlines kept.
                    let (begin, end) = (i - stmt.len(), i + 1);
                    let kept: Vec<&str> = exts
                        .into_iter()
                        .filter(|e| *e != "subgroups" && !e.is_empty())
                        .collect();
                    let mut new: Vec<u8> = if kept.is_empty() {
                        Vec::new()
                    } else {
                        format!("enable {};", kept.join(", ")).into_bytes()
                    };
                    for &b in &text.as_bytes()[begin + new.len().min(end - begin)..end] {
                        new.push(if b == b'\n' { b'\n' } else { b' ' });
                    }
                    new.truncate(end - begin);
                    out.replace_range(begin..end, &String::from_utf8_lossy(&new));
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ShaderDecl> {
        ShaderDecl::parse(text, "test")
    }

    #[test]
    fn builtin_declares_a_4x4_tile_two_stages_and_its_geometry() {
        let d = parse(super::super::BUILTIN_MUL_MAT_WGSL).unwrap();
        assert_eq!((d.tile_m, d.tile_n, d.stages), (4, 4, 2));
        assert_eq!(
            d.geometry,
            Geometry {
                wg_m: 16,
                wg_n: 16,
                tile_k: 16
            }
        );
        assert!(!d.f16 && !d.subgroups);
        assert!(d.dequant);
    }

    /// `fn dequant` counts as a `@compute` entry at module scope only, as a
    /// whole word, with comments removed.
    #[test]
    fn the_dequant_entry_is_found_at_module_scope_only() {
        let base = "const TILE_M: u32 = 4u;\nconst TILE_N: u32 = 4u;\n";
        for (extra, want) in [
            (
                "@compute @workgroup_size(64) fn dequant(@builtin(workgroup_id) w: vec3<u32>) {}",
                true,
            ),
            (
                "@compute\n@workgroup_size(64, 1, 1)\nfn  dequant ( ) { }",
                true,
            ),
            ("fn dequant() { }", false),
            (
                "@compute @workgroup_size(1) fn main() {}\nfn dequant() {}",
                false,
            ),
            ("// fn dequant() {}", false),
            ("/* fn dequant() {} */", false),
            ("fn dequantize() {}", false),
            ("fn main() { let fn_dequant = 0u; }", false),
            ("struct S { dequant: u32 }", false),
        ] {
            let d = parse(&format!("{base}{extra}\n")).unwrap();
            assert_eq!(d.dequant, want, "{extra}");
        }
    }

    #[test]
    fn tile_stages_geometry_and_enables_are_read() {
        let d = parse(
            "enable f16, subgroups;\n// const TILE_M: u32 = 2u;\n/* const TILE_N: u32 = 2u; /* nested */ */\n\
             const TILE_M: u32 = 8u;\nconst TILE_N = 0x4;\nconst STAGES: u32 = 2u;\n\
             override WG_M: u32 = 8u;\noverride WG_N: u32;\noverride TILE_K: u32 = 32u;\n\
             fn f() { const TILE_M: u32 = 3u; }\n",
        )
        .unwrap();
        assert_eq!((d.tile_m, d.tile_n, d.stages), (8, 4, 2));
        assert_eq!(
            d.geometry,
            Geometry {
                wg_m: 8,
                wg_n: Geometry::default().wg_n,
                tile_k: 32
            }
        );
        assert!(d.f16 && d.subgroups);
    }

    #[test]
    fn attributed_declarations_are_read() {
        let d = parse(
            "const TILE_M: u32 = 4u; const TILE_N: u32 = 4u;\n\
             @id(0) override WG_M: u32 = 8u;\n@id( 1 ) @must_use override TILE_K: u32 = 32u;\n",
        )
        .unwrap();
        assert_eq!((d.geometry.wg_m, d.geometry.tile_k), (8, 32));
        assert_eq!(
            without_attributes("@a(b(c)) @d const X = 1;"),
            "const X = 1;"
        );
    }

    #[test]
    fn missing_override_or_non_literal_tile_is_refused() {
        for text in [
            "const TILE_N: u32 = 4u;",
            "override TILE_M: u32 = 4u; const TILE_N: u32 = 4u;",
            "const TILE_M: u32 = 2u * 2u; const TILE_N: u32 = 4u;",
            "const TILE_M: u32 = 0u; const TILE_N: u32 = 4u;",
            "const TILE_M: u32 = 4u; const TILE_N: u32 = 4u; enable wgpu_int16;",
        ] {
            let r = parse(text);
            assert!(
                matches!(r, Err(WgpuError::Declaration { .. })),
                "{text}: {r:?}"
            );
        }
    }

    #[test]
    fn subgroups_enable_is_blanked_and_other_extensions_kept() {
        let t = "enable subgroups;\nenable f16, subgroups;\nconst A = 1;";
        let out = without_subgroups_enable(t);
        assert_eq!(out.len(), t.len());
        assert_eq!(out.lines().count(), 3);
        assert_eq!(out.lines().next().unwrap().trim(), "");
        assert_eq!(out.lines().nth(1).unwrap().trim(), "enable f16;");
        assert!(out.ends_with("const A = 1;"));
    }
}
