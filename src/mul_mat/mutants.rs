//! Planted bugs: candidate shaders made from the builtin
//! `shaders/mul_mat_reg_tile.wgsl` by one textual change each, so the gate
//! and the fuzzer can be shown to catch a wrong kernel, not only to pass a
//! right one. `kernel-oracle mutant mul-mat NAME -o FILE` writes one; point
//! `KERNEL_ORACLE_MUL_MAT_WGSL` (or the bench's `SHADER=`) at the file.
//!
//! The subgroup form (`device::wgpu::subgroup`) is derived from the text
//! that carries the bug, so every planted bug lands in both forms, and the
//! gate, which runs both, meets it in each. One bug
//! ([`Mutant::subgroup_only`]) is in the subgroup form's exchange, which
//! the plain form never runs: only the subgroup form can catch it, and on
//! an adapter without subgroups it survives (the gate's header says why
//! that form was skipped). One (`k-pair-swap`) only changes the order of
//! two additions: every arm but ORDER passes it (rule `MM-ORDER`; see
//! `super::judge`). Bugs whose anchor only the production shader has
//! ([`Mutant::production_only`]) do not carry over to the candidates.

/// One planted bug.
#[derive(Clone, Copy, Debug)]
pub struct Mutant {
    /// The name on the command line.
    pub name: &'static str,
    /// What the bug does.
    pub what: &'static str,
    /// The text replaced, which must occur exactly once.
    pub find: &'static str,
    /// Its replacement.
    pub replace: &'static str,
    /// The bug is in code only the subgroup form runs (its anchor is in
    /// the production shader's "The subgroup form" section, which the
    /// candidates in `shaders/candidates/` do not have).
    pub subgroup_only: bool,
    /// The anchor is in code only the production shader has (its subgroup
    /// form's exchange, its `step4`), not in the candidates in
    /// `shaders/candidates/`, so the bug does not carry over to them.
    pub production_only: bool,
}

/// The planted bugs.
pub const MUTANTS: [Mutant; 9] = [
    Mutant {
        name: "drop-f16-sign",
        what: "the f16 scale decode drops the sign bit: every negative scale reads as positive (seed 004's masked-sign generator let this pass)",
        find: "let sign = (h & 0x8000u) << 16u;",
        replace: "let sign = 0u;",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "missing-barrier",
        what: "no workgroup barrier between staging a tile and reading it: threads read tile entries other threads have not written yet",
        find: "workgroupBarrier(); // staged tiles complete before anyone reads them",
        replace: "// (barrier removed)",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "q4k-min-added",
        what: "q4_K adds the sub-block min instead of subtracting it",
        find: "return dj * f32(q) - mj;",
        replace: "return dj * f32(q) + mj;",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "drop-k-tail",
        what: "the k loop runs whole TILE_K tiles only: the last K % TILE_K products of every output are dropped (one output of K = 256 with TILE_K = 40 passed the RANDOM arm's bound; the BAL arm fails it)",
        find: "for (var k0 = 0u; k0 < kdim; k0 += TILE_K) {",
        replace: "for (var k0 = 0u; k0 + TILE_K <= kdim; k0 += TILE_K) {",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "unguarded-column",
        what: "the store checks the row n but not the column m: a partial workgroup block writes columns m >= M into the next row, and from the last row past dst into the guard band",
        find: "if (gm < m && gn < n) {",
        replace: "if (gn < n) {",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "dequant-last-unit-dropped",
        what: "the dequantize-then-GEMM pre-pass stops one invocation short: the last four elements of src0's last row keep the scratch's poison (NaN), so every output of that row is NaN (with a zeroed scratch, as before it was poisoned, they missed their last four products) (the fused path never runs the pre-pass)",
        find: "if (i >= params.m * kq) {",
        replace: "if (i + 1u >= params.m * kq) {",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "q6k-element-hi-shift",
        what: "q6_K's one-element loader takes the 2-bit high code at shift 2h (the half) instead of 2t (the quarter): quantized rows at a TILE_K that is not a multiple of 4 (the only geometry that runs the one-element loaders) decode three of every four quarters wrong (the gate and the fuzzer never ran such a TILE_K until gate::ELEMENT_GEOMETRY)",
        find: "let hi = (src0_byte(blk + 128u + 32u * h + l) >> (2u * t)) & 3u;",
        replace: "let hi = (src0_byte(blk + 128u + 32u * h + l) >> (2u * h)) & 3u;",
        subgroup_only: false,
        production_only: false,
    },
    Mutant {
        name: "sg-shuffle-wrong-lane",
        what: "the subgroup form's exchange takes staged src1 row j + 1 (mod SG_C) for row j: every output's products pair w[k] with x[k + 1] within each group of SG_C k rows (the plain form never runs the exchange)",
        find: "    let src = plan.g0 + j % SG_C;",
        replace: "    let src = plan.g0 + (j + 1u) % SG_C;",
        subgroup_only: true,
        production_only: true,
    },
    Mutant {
        name: "k-pair-swap",
        what: "step4 adds staged k rows 1 and 2 of every four in swapped order: each product is right and each is added once, only the order of two additions changes (rule MM-ORDER), which the EXACT arm (exact sums), RANDOM and BAL (any order within the bound) all pass; the ORDER arm's rounded sums fail it. The subgroup form's whole steps of eight k take their own path and keep the order there",
        find: "    step_at(acc, a + SM, b + SN);\n    step_at(acc, a + 2u * SM, b + 2u * SN);",
        replace: "    step_at(acc, a + 2u * SM, b + 2u * SN);\n    step_at(acc, a + SM, b + SN);",
        subgroup_only: false,
        production_only: true,
    },
];

/// The mutant called `name`.
pub fn by_name(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

/// `source` with `mutant` planted.
///
/// # Errors
/// A message if the anchor does not occur exactly once in `source`.
pub fn apply(mutant: &Mutant, source: &str) -> Result<String, String> {
    crate::mutate::apply_once(mutant.name, mutant.find, mutant.replace, source)
}
