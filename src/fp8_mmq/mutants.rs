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

/// The planted bugs. The first five plant their bug in every variant
/// family that has the code they change (the anchors of `drop-k-tail`,
/// `k-tail-not-zero-filled` and `first-scale-row` occur in the native
/// e4m3 wgmma variants too; `fold-association` reaches them through
/// [`NATIVE_PLANTS`]; `subnormal-flush` has no counterpart there, since
/// those variants convert nothing); the last three exist only in the native
/// variants ([`native_only`]), the very last only in those whose tiles come
/// by tensor-map copies ([`tma_only`]).
pub const MUTANTS: [Mutant; 8] = [
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
    Mutant {
        name: "subnormal-flush",
        what: "e4m3 -> f16 by the bit hack sign | (exp + 8) << 10 | mant << 7 instead of cvt.rn.f16x2.e4m3x2: right for normal codes, subnormals flushed to zero (every variant sm_90 dispatches converts; the e4m3 mma.sync variants k0..k2, sm_89's, do not)",
        find: r#"    asm("{ .reg .b16 l, h;\n"
        "  mov.b32 {l, h}, %2;\n"
        "  cvt.rn.f16x2.e4m3x2 %0, l;\n"
        "  cvt.rn.f16x2.e4m3x2 %1, h; }\n"
        : "=r"(lo), "=r"(hi)
        : "r"(x));"#,
        replace: r#"    /* subnormal-flush: byte i -> f16 half i, sign << 15 | (exp + 8) << 10
     * | mant << 7 for exp != 0, a signed zero for exp == 0 (the
     * subnormals 0x01..0x07, 0x81..0x87). */
    u32 h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u32 b = (x >> (8 * i)) & 0xFFu;
        const u32 sign = (b & 0x80u) << 8;
        h[i] = (b & 0x78u) ? (sign | (((b & 0x7Fu) << 7) + 0x2000u)) : sign;
    }
    lo = h[0] | (h[1] << 16);
    hi = h[2] | (h[3] << 16);"#,
        // RANDOM too, statistically: on the battery the flush moves
        // rms_rel to about 1e-4 (tests/fp8_mmq_codes.rs, CPU model); on
        // shapes under 512 outputs it mostly passes RANDOM.
        caught_by: &[Arm::Codes, Arm::Random],
    },
    Mutant {
        name: "fold-unfused",
        what: "the native e4m3 wgmma variants fold one output of four as sum + (s*d)*c (two roundings) while declaring the fused fold fma(s*d, c, sum)",
        find: "sum[4 * ni + 1] = __fmaf_rn(sd1, acc[4 * ni + 1], sum[4 * ni + 1]);",
        replace: "sum[4 * ni + 1] = __fadd_rn(sum[4 * ni + 1], __fmul_rn(sd1, acc[4 * ni + 1]));",
        caught_by: &[Arm::Fold],
    },
    Mutant {
        name: "mma-chain-across-blocks",
        what: "the native e4m3 wgmma variants start each block's MMA chain from the previous block's accumulator (scale-d = 1) instead of +0",
        find: "wgmma_e4m3<BN, 0>(acc, adesc, bdesc);",
        replace: "wgmma_e4m3<BN, 1>(acc, adesc, bdesc);",
        caught_by: &[Arm::Exact, Arm::Fold, Arm::Random],
    },
    Mutant {
        name: "tma-coords-swapped",
        what: "the TMA variants ask for the activation box at (row, k) instead of (k, row): the tile holds other tokens' codes or the tensor map's zero fill (from the second 128-k block on in the first token tile, from the first in the others)",
        find: "tma_load_2d(base + T_OFF, tb, kb * BLOCK_K, col0, full);",
        replace: "tma_load_2d(base + T_OFF, tb, col0, kb * BLOCK_K, full);",
        caught_by: &[Arm::Exact, Arm::Random],
    },
];

/// A mutant's second anchor, in the native e4m3 wgmma variants (section
/// 4c of `cu/fp8_mmq.cu`), where its own anchor does not occur: planted
/// together with it by [`apply`].
#[derive(Clone, Copy, Debug)]
pub struct NativePlant {
    /// The mutant's name.
    pub name: &'static str,
    /// The text replaced (every occurrence, at least one).
    pub find: &'static str,
    /// Its replacement.
    pub replace: &'static str,
}

/// The native variants' counterparts of the planted bugs whose anchor is
/// elsewhere.
pub const NATIVE_PLANTS: [NativePlant; 1] = [NativePlant {
    name: "fold-association",
    find: "sum[4 * ni + 0] = __fmaf_rn(sd0, acc[4 * ni + 0], sum[4 * ni + 0]);",
    replace:
        "sum[4 * ni + 0] = __fmaf_rn(rs[0], __fmul_rn(rd[tok0], acc[4 * ni + 0]), sum[4 * ni + 0]);",
}];

/// Whether the mutant changes only the native e4m3 wgmma variants, so
/// that a gate run reaches it only when the plan picks (or the engine
/// forces) one of them.
pub fn native_only(m: &Mutant) -> bool {
    matches!(
        m.name,
        "fold-unfused" | "mma-chain-across-blocks" | "tma-coords-swapped"
    )
}

/// Whether the mutant changes only the native variants whose tiles come by
/// tensor-map copies (`plan[16]` = 1), so that only those, forced or
/// picked, reach it.
pub fn tma_only(m: &Mutant) -> bool {
    m.name == "tma-coords-swapped"
}

/// Whether the mutant plants its bug in the native e4m3 wgmma variants
/// (every mutant but `subnormal-flush`, whose conversion they do not run).
pub fn reaches_native(m: &Mutant) -> bool {
    m.name != "subnormal-flush"
}

/// What `subnormal-flush` computes for one e4m3 code, as f16 bits: the
/// model of its CUDA (same expression, per byte), for CPU tests;
/// `tests/fp8_mmq_mutants.rs` parses the mutant's CUDA statements and
/// checks that they evaluate to this on every code. E4M3 has
/// bias 7 and f16 bias 15, so a normal code's exponent field gains 8 and
/// its 3 mantissa bits move to the top of f16's 10; a code with exponent
/// field 0 (zero and the subnormals `m * 2^-9`) gives a signed zero. The
/// NaN magnitudes 0x7F/0xFF come out as ±480.0 (never decoded: weights are
/// refused by rule NAN-W, and activations reach them only under
/// `QUANT-TINY`, `QUANT-INF` or `QUANT-NAN`, which the generators avoid).
pub fn subnormal_flush_f16_bits(code: u8) -> u16 {
    let b = u16::from(code);
    let sign = (b & 0x80) << 8;
    if b & 0x78 != 0 {
        sign | (((b & 0x7F) << 7) + 0x2000)
    } else {
        sign
    }
}

/// The mutant called `name`.
pub fn by_name(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

/// `source` with `mutant` planted at every occurrence of its anchor, and
/// of its native-variant anchor ([`NATIVE_PLANTS`]) if it has one.
///
/// # Errors
/// A message if the anchor does not occur in `source`.
pub fn apply(mutant: &Mutant, source: &str) -> Result<String, String> {
    if !source.contains(mutant.find) {
        return Err(format!(
            "mutant {}: its anchor no longer occurs in the source: {:?}",
            mutant.name, mutant.find
        ));
    }
    let mut text = source.replace(mutant.find, mutant.replace);
    for p in NATIVE_PLANTS.iter().filter(|p| p.name == mutant.name) {
        if !text.contains(p.find) {
            return Err(format!(
                "mutant {}: its native-variant anchor no longer occurs in the source: {:?}",
                mutant.name, p.find
            ));
        }
        text = text.replace(p.find, p.replace);
    }
    Ok(text)
}
