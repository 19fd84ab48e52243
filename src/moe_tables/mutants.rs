//! Planted bugs in `cu/moe_tables.cu`, one textual change each, so the gate
//! and the fuzzer can be shown to catch a wrong kernel.
//!
//! `kernel-oracle mutant moe-tables NAME -o FILE` writes one; point
//! `KERNEL_ORACLE_MOE_TABLES_CU` at the file and run the gate or the fuzzer.
//! A test checks that every anchor occurs exactly once in the builtin
//! source and that every mutant compiles.

/// One planted bug; `caught_by` lists the gate cases (labels) expected to
/// fail with it.
pub type Mutant = crate::mutate::Mutant<&'static str>;

/// The planted bugs.
pub const MUTANTS: [Mutant; 3] = [
    Mutant {
        name: "stride-product-32bit",
        what: "computes expert * stride in 32 bits: pointers wrap once a slab passes 4 GiB (the overflow check still sees the 64-bit product, so nothing is flagged)",
        find: "const u64 off = e * stride; /* the 64-bit product */",
        replace: "const u64 off = (u64)((unsigned)e * (unsigned)stride);",
        caught_by: &["serving-strides-past-4GiB", "no-macros", "spread-selection"],
    },
    Mutant {
        name: "gate-scale-from-up-plane",
        what: "the gate scale reads macro_u instead of macro_g",
        find: "g_bits = ((const u32 *)macro_g)[e];",
        replace: "g_bits = ((const u32 *)macro_u)[e];",
        caught_by: &["small-strides", "serving-strides-past-4GiB"],
    },
    Mutant {
        name: "down-scale-subnormal-flushed",
        what: "a subnormal down scale (routing weight times the down macro scale) is flushed to a signed zero, as a kernel built with flush-to-zero would",
        find: "if (down != down) down = __uint_as_float(MOE_CANONICAL_NAN);",
        replace: "if (down != down) down = __uint_as_float(MOE_CANONICAL_NAN); if ((__float_as_uint(down) & 0x7F800000u) == 0u) down = __uint_as_float(__float_as_uint(down) & 0x80000000u);",
        caught_by: &["nan-subnormal-negative"],
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
