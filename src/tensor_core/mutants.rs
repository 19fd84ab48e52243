//! Planted bugs in the probes `cu/tensor_core.cu`, one textual change
//! each, so the gate can be shown to catch a probe that does not run the
//! instruction on the operands it is given.
//!
//! `kernel-oracle mutant tensor-core NAME -o FILE` writes one; point
//! `KERNEL_ORACLE_TENSOR_CORE_CU` at the file and run `kernel-oracle check
//! tensor-core` or the `tensor_core` fuzzer. `tests/tensor_core_mutants.rs`
//! checks that every anchor occurs exactly once, that every mutant compiles
//! for sm_90a, and, on the CPU model, that the gate has rows whose answer
//! the bug changes.

/// One planted bug; `caught_by` names the gate rows (the `vectors` column)
/// expected to fail with it.
pub type Mutant = crate::mutate::Mutant<&'static str>;

/// The planted bugs.
pub const MUTANTS: [Mutant; 3] = [
    Mutant {
        name: "b-fragment-k-slip",
        what: "the mma.sync probe loads B's second fragment register from k 0..15 instead of 16..31 (an index slip in the fragment layout: b1 = b0's columns), so the upper half of k multiplies the wrong B codes",
        find: "b1 = tc_word(B + g * TC_K + 16 + 4 * t);",
        replace: "b1 = tc_word(B + g * TC_K + 4 * t);",
        caught_by: &["uniform", "band", "sparse", "large"],
    },
    Mutant {
        name: "scale-d-ignored",
        what: "the wgmma probe sets the scale-d predicate true whatever scale_d says: with the accumulator input disabled, c is still added",
        find: "setp.ne.b32 p, %6, 0;",
        replace: "setp.eq.b32 p, %6, %6;",
        caught_by: &["uniform-c, no accumulator"],
    },
    Mutant {
        name: "subnormal-c-flushed",
        what: "the mma.sync probe flushes subnormal accumulator inputs to a signed zero before the instruction (as a kernel compiled with -ftz that stages c through an FP32 multiply would)",
        find: "f32 d0, d1, d2, d3;",
        replace: "f32 d0, d1, d2, d3; c0 = (__float_as_uint(c0) & 0x7F800000u) ? c0 : __uint_as_float(__float_as_uint(c0) & 0x80000000u); c1 = (__float_as_uint(c1) & 0x7F800000u) ? c1 : __uint_as_float(__float_as_uint(c1) & 0x80000000u); c2 = (__float_as_uint(c2) & 0x7F800000u) ? c2 : __uint_as_float(__float_as_uint(c2) & 0x80000000u); c3 = (__float_as_uint(c3) & 0x7F800000u) ? c3 : __uint_as_float(__float_as_uint(c3) & 0x80000000u);",
        caught_by: &["targeted"],
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
