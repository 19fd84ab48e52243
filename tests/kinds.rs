//! The kind registry: every kind is complete (at least three planted bugs
//! that plant, a fuzz target that exists, a candidate variable), reachable
//! through every command, and `kernel-oracle kinds` prints it for the
//! scripts.

use kernel_oracle::kind::{self, Plant, KINDS};
use std::process::Command;

fn kernel_oracle(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kernel-oracle"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// Names, short names and variables are unique; every kind has at least
/// three planted bugs, each of which plants (its anchor is in the builtin
/// and the text changes), and a fuzz target that fuzz/Cargo.toml builds.
#[test]
fn every_kind_is_complete() {
    let fuzz =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/Cargo.toml")).unwrap();
    for (i, k) in KINDS.iter().enumerate() {
        for other in &KINDS[i + 1..] {
            assert_ne!(k.name, other.name);
            assert_ne!(k.short, other.short);
            assert_ne!(k.env, other.env);
        }
        assert!(k.env.starts_with("KERNEL_ORACLE_"), "{}", k.env);
        assert!(
            fuzz.contains(&format!("name = \"{}\"", k.fuzz_target)),
            "{}: no fuzz target {}",
            k.name,
            k.fuzz_target
        );
        let planted = (k.planted)();
        assert!(
            planted.len() >= 3,
            "{}: {} planted bugs",
            k.name,
            planted.len()
        );
        for p in &planted {
            if let Plant::Source(t) = &p.plant {
                let t = t.as_ref().unwrap_or_else(|e| panic!("{}: {e}", k.name));
                assert!(!t.is_empty(), "{} {}", k.name, p.name);
            }
        }
        assert_eq!(kind::by_name(k.name).map(|x| x.name), Some(k.name));
    }
}

/// `kernel-oracle kinds` prints the table, one line per kind with its
/// fields in the order of the header.
#[test]
fn kinds_prints_the_table() {
    let out = kernel_oracle(&["kinds"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.trim_end(), kind::table());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], kind::TABLE_HEADER);
    assert_eq!(lines.len(), KINDS.len() + 1);
    for (k, l) in KINDS.iter().zip(&lines[1..]) {
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(
            f[..6],
            [k.name, k.short, k.env, k.fuzz_target, k.ext, k.backend]
        );
        assert_eq!(f[7].split(',').count(), (k.planted)().len());
    }
}

/// Every kind has its `check`, `case`, `mutant` and `fuzz` subcommand, and
/// `mutant KIND` lists every planted bug.
#[test]
fn every_command_reaches_every_kind() {
    for k in KINDS {
        for cmd in ["check", "case", "mutant", "fuzz"] {
            let out = kernel_oracle(&[cmd, k.name, "--help"]);
            assert_eq!(out.status.code(), Some(0), "{cmd} {}", k.name);
        }
        let list = String::from_utf8(kernel_oracle(&["mutant", k.name]).stdout).unwrap();
        for p in (k.planted)() {
            assert!(
                list.lines().any(|l| l.starts_with(p.name)),
                "{}: {} not listed",
                k.name,
                p.name
            );
        }
    }
}

/// `score` refuses what it cannot do with exit 2 (an unknown bug, --also
/// without a kind), and `fuzz` without the kind's device exits 2, not 1
/// (a missing device is not a divergence).
#[test]
fn score_and_fuzz_refusals() {
    let out = kernel_oracle(&["score", "mul-mat", "--bug", "no-such-bug"]);
    assert_eq!(out.status.code(), Some(2));
    let out = kernel_oracle(&["score", "--also", "x.wgsl"]);
    assert_eq!(out.status.code(), Some(2));
    let out = kernel_oracle(&["fuzz", "gdn", "--secs", "1"]);
    match out.status.code() {
        Some(2) => assert!(String::from_utf8_lossy(&out.stderr).contains("cannot run gdn")),
        Some(0) => assert!(String::from_utf8_lossy(&out.stdout).contains("fuzz-result: survived")),
        other => panic!("fuzz gdn: exit {other:?}"),
    }
}

/// `fuzz --max-len` below a kind's selector bytes is refused (exit 2,
/// before any engine opens): inputs that short never reach some of its
/// paths. At the selector bytes it is accepted (exit 0 with a device, 2
/// naming the missing device without one).
#[test]
fn fuzz_refuses_a_max_len_below_the_selector_bytes() {
    for k in KINDS {
        assert!(k.selector_bytes >= 1, "{}", k.name);
        let short = (k.selector_bytes - 1).to_string();
        let out = kernel_oracle(&["fuzz", k.name, "--secs", "1", "--max-len", &short]);
        assert_eq!(out.status.code(), Some(2), "{}", k.name);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("selector bytes"), "{}: {err}", k.name);
        assert!(!err.contains("cannot run"), "{}: {err}", k.name);
    }
}

/// README's registry table names every kind's planted bugs, so the table
/// cannot fall behind a bug planted later.
#[test]
fn the_readme_table_lists_every_planted_bug() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    for k in KINDS {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{}` |", k.name)))
            .unwrap_or_else(|| panic!("README has no table row for {}", k.name));
        let bugs = row.rsplit('|').nth(1).unwrap();
        for p in (k.planted)() {
            let named = bugs
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .any(|w| w == p.name);
            assert!(named, "README's {} row lacks {}", k.name, p.name);
        }
    }
}
