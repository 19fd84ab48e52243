//! Planted bugs: candidate kernels made from the builtin `cu/fp8_mmq.cu` by
//! one textual change each, so that the gate and the fuzzers can be shown
//! to catch a wrong kernel (and how fast), not only to pass a right one.
//!
//! `kernel-oracle mutant fp8-mmq NAME -o FILE` writes one; point
//! `KERNEL_ORACLE_FP8_MMQ_CU` at the file and run the gate or the fuzzer.
//! The bug is planted at every occurrence of its anchor (the kernel file has
//! several variants that share code). A test checks that every anchor still
//! occurs in the builtin source, so a rewrite of the kernel that moves an
//! anchor fails loudly instead of silently producing an unchanged "mutant".

use super::generate::Arm;

/// One planted bug; `caught_by` lists the gate arms expected to catch it
/// (at least one shape fails). `find` is replaced at every occurrence (at
/// least one).
pub type Mutant = crate::mutate::Mutant<Arm>;

/// The planted bugs.
pub const MUTANTS: [Mutant; 4] = [
    Mutant {
        name: "drop-k-tail",
        what: "iterates over floor(in_f/128) scale blocks: the partial last block (the k tail) is dropped",
        find: "const int nblk = (in_f + BLOCK_K - 1) / BLOCK_K; /* scols */",
        replace: "const int nblk = in_f / BLOCK_K; /* scols */",
        caught_by: &[Arm::Fold, Arm::Random],
    },
    Mutant {
        name: "fold-association",
        what: "folds as s * (d * c) instead of (s * d) * c: one rounding in another place",
        find: "c[a][b][0] = __fmul_rn(sd0, c[a][b][0]);",
        replace: "c[a][b][0] = __fmul_rn(s_blk, __fmul_rn(dcol[jl], c[a][b][0]));",
        caught_by: &[Arm::Fold],
    },
    Mutant {
        name: "k-tail-not-zero-filled",
        what: "on unaligned rows, the last 16-byte chunk of a weight row reads past in_f (into the next row) instead of zeros",
        find: "nvalid = nvalid < 0 ? 0 : (nvalid > 16 ? 16 : nvalid);",
        replace: "nvalid = nvalid < 0 ? 0 : 16;",
        caught_by: &[Arm::Fold],
    },
    Mutant {
        name: "first-scale-row",
        what: "every output row reads scale-grid row 0",
        find: "const float *s_row = s + (u64)(row0 / 128) * (u64)nblk;",
        replace: "const float *s_row = s;",
        caught_by: &[Arm::Exact, Arm::Fold, Arm::Random],
    },
];

/// The mutant called `name`.
pub fn by_name(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

/// `source` with `mutant` planted at every occurrence of its anchor.
///
/// # Errors
/// A message if the anchor does not occur in `source`.
pub fn apply(mutant: &Mutant, source: &str) -> Result<String, String> {
    if source.contains(mutant.find) {
        Ok(source.replace(mutant.find, mutant.replace))
    } else {
        Err(format!(
            "mutant {}: its anchor no longer occurs in the source: {:?}",
            mutant.name, mutant.find
        ))
    }
}
