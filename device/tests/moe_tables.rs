//! The MoE tables shim without a GPU: `cu/moe_tables.cu` compiles with
//! NVRTC for sm_90 (CI; fails, not skips, without libnvrtc), the length
//! checks return the oracle's errors, and the status decoding turns the
//! kernel's words into exactly the oracle's error.

use device::cuda::{
    check_moe_tables, compile, decode_moe_status, nvrtc_available, DeviceError, KernelSource,
    ENV_MOE_TABLES_CU, MOE_TABLES_KERNEL,
};
use oracle::moe_tables::{vrows_tables, Bank, Plane, Slab, TablesError};

fn assert_compiles(source: &KernelSource) {
    if let Err(e) = nvrtc_available() {
        panic!("{e}");
    }
    let c = compile(source, "sm_90").unwrap_or_else(|e| panic!("{e}"));
    assert!(
        c.ptx.contains(&format!(".entry {MOE_TABLES_KERNEL}(")),
        "{}: {MOE_TABLES_KERNEL} is not in the PTX",
        source.describe()
    );
    assert!(!c.cubin.is_empty(), "no CUBIN for sm_90");
    eprintln!(
        "{}: {} bytes of PTX, {} of CUBIN\n{}",
        source.describe(),
        c.ptx.len(),
        c.cubin.len(),
        c.log
    );
}

#[test]
fn builtin_moe_tables_compiles_for_sm_90_without_fma_in_the_down_scale() {
    let source = KernelSource::builtin_moe_tables();
    assert!(source.describe().starts_with("builtin cu/moe_tables.cu"));
    assert_compiles(&source);
    let c = compile(&source, "sm_90").unwrap();
    assert!(!c.ptx.contains("fma.rn.f32"), "the PTX holds an f32 FMA");
    assert!(c.ptx.contains("mul.hi.u64"), "no 64-bit high product");
}

#[test]
fn candidate_moe_tables_compiles_when_named() {
    match std::env::var_os(ENV_MOE_TABLES_CU) {
        Some(p) if !p.is_empty() => {
            assert_compiles(&KernelSource::moe_tables_from_env().unwrap_or_else(|e| panic!("{e}")))
        }
        _ => eprintln!("{ENV_MOE_TABLES_CU} is not set: no candidate to compile"),
    }
}

fn bank(n_expert: usize, macros: Option<[&[f32]; 3]>) -> Bank<'_> {
    Bank {
        n_expert,
        slabs: [Slab {
            base: u64::MAX - 100,
            stride: 10,
        }; 3],
        macros,
    }
}

#[test]
fn length_errors_are_the_oracles() {
    let m = [1.0f32; 4];
    let short = [1.0f32; 3];
    let b = bank(4, Some([&m, &m, &short]));
    let mut p = [0u64; 6];
    let mut s = [0f32; 6];
    let want = vrows_tables(&b, &[0, 1], &[1.0, 1.0], &mut p, &mut s).unwrap_err();
    let got = check_moe_tables(&b, 2, 2, None, None).unwrap_err();
    assert_eq!(got.moe_tables_error(), Some(&want));
    assert_eq!(
        got.to_string(),
        "MoE verify-rows tables refused before launch: macro_d has 3 elements, the tables need 4"
    );
    let b = bank(4, None);
    let got = check_moe_tables(&b, 2, 1, None, None).unwrap_err();
    assert!(matches!(
        got,
        DeviceError::MoeTables(TablesError::Len {
            arg: "weights",
            want: 2,
            got: 1
        })
    ));
    assert!(matches!(
        check_moe_tables(&b, 2, 2, Some(6), Some(7)),
        Err(DeviceError::MoeTables(TablesError::Len {
            arg: "scales",
            ..
        }))
    ));
    assert!(matches!(
        check_moe_tables(&b, 1 << 31, 1 << 31, None, None),
        Err(DeviceError::IndexRange {
            what: "n_pairs",
            ..
        })
    ));
    check_moe_tables(&b, 2, 2, Some(6), Some(6)).unwrap();
}

/// The status words the ABI says the kernel leaves for the lowest bad pair.
fn status(count: u64, pair: u64, code: u64, expert: i32) -> [u64; 2] {
    [
        count,
        !((pair << 34) | (code << 32) | u64::from(expert as u32)),
    ]
}

#[test]
fn status_decodes_to_exactly_the_oracles_error() {
    let b = bank(10, None);
    assert!(decode_moe_status([0, 0], &b, 5, "k").is_ok());
    // Pair 1 out of range (-3), pair 2 overflows: the oracle names pair 1.
    let sel = [0, -3, 20, 11, 9];
    let mut p = [0u64; 15];
    let mut s = [0f32; 15];
    let want = vrows_tables(&b, &sel, &[1.0; 5], &mut p, &mut s).unwrap_err();
    let got = decode_moe_status(status(2, 1, 0, -3), &b, 5, "k").unwrap_err();
    assert_eq!(got.moe_tables_error(), Some(&want));
    // Expert 9 fits the gate plane and overflows the up plane.
    let b2 = Bank {
        slabs: [
            Slab { base: 0, stride: 1 },
            Slab {
                base: u64::MAX - 5,
                stride: 1,
            },
            Slab { base: 0, stride: 1 },
        ],
        ..b
    };
    let want = vrows_tables(&b2, &[9], &[1.0], &mut [0; 3], &mut [0.0; 3]).unwrap_err();
    assert_eq!(
        want,
        TablesError::AddressOverflow {
            plane: Plane::Up,
            pair: 0,
            expert: 9,
            base: u64::MAX - 5,
            stride: 1
        }
    );
    let got = decode_moe_status(status(1, 0, 2, 9), &b2, 1, "k").unwrap_err();
    assert_eq!(got.moe_tables_error(), Some(&want));
}

#[test]
fn an_inconsistent_status_is_bad_status_not_tables() {
    let b = bank(10, None);
    for words in [
        [1, 0],                      // a count without a key
        [0, 5],                      // a key without a count
        [9, status(1, 0, 0, -1)[1]], // more bad pairs than pairs
        status(1, 7, 0, -1),         // a pair beyond n_pairs
        status(1, 0, 0, 3),          // "out of range" for an id in range
        status(1, 0, 1, -1),         // "overflow" for an id out of range
    ] {
        match decode_moe_status(words, &b, 5, "cand") {
            Err(DeviceError::MoeBadStatus { source_desc, .. }) => assert_eq!(source_desc, "cand"),
            other => panic!("{words:x?}: {other:?}"),
        }
    }
}
