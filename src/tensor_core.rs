//! The FP8 tensor-core probe (`kernel-oracle check tensor-core`): one MMA
//! instruction run on given operands ([`device::cuda::TensorCoreEngine`])
//! against [`oracle::tensor_core`], bit for bit.
//!
//! - [`CaseSpec`]: which instruction, operand formats, input class, seed
//!   and tile count; `Arbitrary` takes every choice that selects a path from
//!   the leading bytes (see [`CaseSpec::from_bytes`]);
//! - [`Tiles`]: the operands of one case ([`CaseSpec::generate`], or
//!   [`targeted`]: one vector per rule of the model);
//! - [`judge`]: every output against the model, the first difference with
//!   its operands; [`Divergence::report`] prints a runnable reproduction;
//! - [`gate`]: targeted vectors and at least 2^20 random vectors per
//!   operand-format pair;
//! - [`mutants`]: planted bugs in the probes `cu/tensor_core.cu`;
//! - [`cli`]: the kind's registry entry (`kernel_oracle::kind`).

pub mod cli;
pub mod mutants;

use device::cuda::{DeviceError, ProbeTiles, TensorCoreEngine, TILE_K, TILE_M, TILE_N};
use oracle::tensor_core::{mma_k32, Fp8Kind, Instruction, Model, MMA_K};
use rayon::prelude::*;
use std::sync::OnceLock;

use crate::rng::Rng;

/// The input classes of the random arm: each stresses one part of the
/// model. Chosen by the first byte of a fuzz input (`byte % 8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Uniform codes finite in both formats, `c = +0`.
    Uniform,
    /// Uniform codes, `c` random over 2^-40 .. 2^40.
    UniformC,
    /// Codes from a band of three exponents (heavy cancellation), `c = +0`.
    Band,
    /// A band with `c` near the products (a quarter of them ±0).
    BandC,
    /// Each operand non-zero with probability 1/4 (two non-zero products
    /// expected per output: `TC-ALIGN` read directly); `c` random, half of
    /// them ±0, one in eight subnormal (about one output in eight has no
    /// non-zero product, so a subnormal accumulator alone reaches it: a
    /// probe that flushes subnormal inputs shows there).
    Sparse,
    /// The largest codes (e4m3 up to 448; for e5m2 these are infinities
    /// and NaNs: `TC-INF`, `TC-NAN`).
    Large,
    /// Special codes (NaN, ±inf, -0, smallest subnormals) among uniform
    /// ones, and special accumulators (±inf, NaN, subnormal).
    Specials,
    /// `c` far from the products, 2^-60 .. 2^60 (alignment to `c`).
    Dominant,
}

impl Class {
    /// Every class, in the order of their selector values.
    pub const ALL: [Class; 8] = [
        Class::Uniform,
        Class::UniformC,
        Class::Band,
        Class::BandC,
        Class::Sparse,
        Class::Large,
        Class::Specials,
        Class::Dominant,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Class::Uniform => "uniform",
            Class::UniformC => "uniform-c",
            Class::Band => "band",
            Class::BandC => "band-c",
            Class::Sparse => "sparse",
            Class::Large => "large",
            Class::Specials => "specials",
            Class::Dominant => "dominant",
        }
    }

    /// The class named `s` ([`Class::name`]).
    pub fn parse(s: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// The four operand-format pairs (A, B), in the kernels' order.
pub const PAIRS: [(Fp8Kind, Fp8Kind); 4] = [
    (Fp8Kind::E4m3, Fp8Kind::E4m3),
    (Fp8Kind::E4m3, Fp8Kind::E5m2),
    (Fp8Kind::E5m2, Fp8Kind::E4m3),
    (Fp8Kind::E5m2, Fp8Kind::E5m2),
];

/// The name of an instruction on the command line (`wgmma`, `mma-sync`).
pub fn instruction_name(i: Instruction) -> &'static str {
    match i {
        Instruction::Wgmma => "wgmma",
        Instruction::MmaSync => "mma-sync",
    }
}

/// One case: `tiles` probe tiles of `class` drawn from `seed`, run on
/// `instruction` with A in `fa` and B in `fb`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseSpec {
    /// The instruction probed.
    pub instruction: Instruction,
    /// A's format.
    pub fa: Fp8Kind,
    /// B's format.
    pub fb: Fp8Kind,
    /// The input class.
    pub class: Class,
    /// false: the accumulator input disabled (`wgmma` scale-d = 0).
    pub scale_d: bool,
    /// The data seed (splitmix64).
    pub seed: u64,
    /// Tiles of 64 x 8 outputs each (at least 1).
    pub tiles: usize,
}

/// The operands of a case, in the probe's ABI (see
/// [`device::cuda::ProbeTiles`]).
#[derive(Clone, Debug, Default)]
pub struct Tiles {
    /// `[tiles x 64 x 32]` A codes.
    pub a: Vec<u8>,
    /// `[tiles x 8 x 32]` B codes, transposed.
    pub bt: Vec<u8>,
    /// `[tiles x 64 x 8]` accumulators.
    pub c: Vec<f32>,
}

impl Tiles {
    /// `n` tiles of zeros.
    pub fn zeros(n: usize) -> Tiles {
        Tiles {
            a: vec![0; n * TILE_M * TILE_K],
            bt: vec![0; n * TILE_N * TILE_K],
            c: vec![0.0; n * TILE_M * TILE_N],
        }
    }

    /// The number of tiles.
    pub fn count(&self) -> usize {
        self.a.len() / (TILE_M * TILE_K)
    }

    /// Row `i` of A in tile `t` and column `j` of B, and `c[t][i][j]`.
    pub fn vector(&self, t: usize, i: usize, j: usize) -> ([u8; MMA_K], [u8; MMA_K], f32) {
        let a = self.a[(t * TILE_M + i) * TILE_K..][..MMA_K]
            .try_into()
            .expect("32 codes");
        let b = self.bt[(t * TILE_N + j) * TILE_K..][..MMA_K]
            .try_into()
            .expect("32 codes");
        (a, b, self.c[(t * TILE_M + i) * TILE_N + j])
    }
}

/// Codes finite in both e4m3 and e5m2 (`|code| < 0x7C`).
fn safe_code(r: &mut Rng) -> u8 {
    loop {
        let c = r.u8();
        if c & 0x7F < 0x7C {
            return c;
        }
    }
}

/// A random f32 `±(1 + f) * 2^e`, `e` uniform in `lo..=hi`, 23 random
/// fraction bits; `±0` with probability `p_zero`.
fn rand_c(r: &mut Rng, lo: i32, hi: i32, p_zero: f32) -> f32 {
    if p_zero > 0.0 && r.f01() < p_zero {
        return if r.u8() & 1 == 0 { 0.0 } else { -0.0 };
    }
    let e = (lo + r.below((hi - lo + 1) as usize) as i32 + 127).clamp(1, 254) as u32;
    let bits = ((r.u8() as u32 & 1) << 31) | (e << 23) | (r.next_u64() as u32 & 0x7F_FFFF);
    f32::from_bits(bits)
}

/// The leading bytes of a fuzz input that choose its paths (class,
/// format pair, instruction, accumulator input, tile count): see
/// [`CaseSpec::from_bytes`].
pub const SELECTOR_BYTES: usize = 3;

impl CaseSpec {
    /// Draws a case from fuzz bytes. The leading bytes choose every path:
    /// byte 0 the class (`% 8`), byte 1 the format pair (`% 4`), the
    /// instruction (bit 2: `mma.sync`; so 1 in 2) and the accumulator
    /// input (bits 3-4 all set: disabled; 1 in 4); byte 2 the tile count
    /// (`1 + b % 4`); then up to 8 bytes of seed (missing bytes read 0).
    pub fn from_bytes(data: &[u8]) -> CaseSpec {
        let byte = |i: usize| data.get(i).copied().unwrap_or(0);
        let mut seed = [0u8; 8];
        for (k, s) in seed.iter_mut().enumerate() {
            *s = byte(3 + k);
        }
        let (fa, fb) = PAIRS[usize::from(byte(1) & 3)];
        CaseSpec {
            instruction: if byte(1) & 4 != 0 {
                Instruction::MmaSync
            } else {
                Instruction::Wgmma
            },
            fa,
            fb,
            class: Class::ALL[usize::from(byte(0) % 8)],
            scale_d: byte(1) & 0x18 != 0x18,
            seed: u64::from_le_bytes(seed),
            tiles: 1 + usize::from(byte(2) % 4),
        }
    }

    /// The operands of this case.
    pub fn generate(&self) -> Tiles {
        let mut t = Tiles::zeros(self.tiles);
        let mut r = Rng(self.seed ^ 0x7C0D_E5EE_D000_0000);
        for tile in 0..self.tiles {
            fill_tile(&mut t, tile, self.class, &mut r);
        }
        t
    }

    /// The command line that reruns this case: `kernel-oracle case
    /// tensor-core ...` with the candidate's variable
    /// (`KERNEL_ORACLE_TENSOR_CORE_CU`, when set: without it the rerun
    /// would probe the builtin kernel), the program as
    /// [`crate::paths::rerun_prefix`] prints it.
    pub fn command(&self) -> String {
        format!(
            "{}{} case tensor-core --instruction {} --a {} --b {} --class {} --seed {:#x} --tiles {}{}",
            crate::candidate_env(device::cuda::ENV_TENSOR_CORE_CU),
            crate::paths::rerun_prefix(),
            instruction_name(self.instruction),
            self.fa.name(),
            self.fb.name(),
            self.class.name(),
            self.seed,
            self.tiles,
            if self.scale_d { "" } else { " --no-accumulator" }
        )
    }
}

fn fill_tile(t: &mut Tiles, tile: usize, class: Class, r: &mut Rng) {
    let a = &mut t.a[tile * TILE_M * TILE_K..][..TILE_M * TILE_K];
    let bt = &mut t.bt[tile * TILE_N * TILE_K..][..TILE_N * TILE_K];
    let c = &mut t.c[tile * TILE_M * TILE_N..][..TILE_M * TILE_N];
    match class {
        Class::Uniform | Class::UniformC | Class::Dominant | Class::Specials => {
            a.iter_mut().for_each(|x| *x = safe_code(r));
            bt.iter_mut().for_each(|x| *x = safe_code(r));
        }
        Class::Band | Class::BandC => {
            // Exponent field (bits 3..6 as e4m3) within lo..=lo+2.
            let lo = r.below(12) as u8;
            let band = |r: &mut Rng| loop {
                let x = safe_code(r);
                let e = (x >> 3) & 15;
                if e >= lo && e <= lo + 2 {
                    return x;
                }
            };
            a.iter_mut().for_each(|x| *x = band(r));
            bt.iter_mut().for_each(|x| *x = band(r));
        }
        Class::Sparse => {
            let sparse = |r: &mut Rng| if r.below(4) == 0 { safe_code(r) } else { 0 };
            a.iter_mut().for_each(|x| *x = sparse(r));
            bt.iter_mut().for_each(|x| *x = sparse(r));
        }
        Class::Large => {
            let large = |r: &mut Rng| (0x60 + r.below(0x1F) as u8) | (r.u8() & 0x80);
            a.iter_mut().for_each(|x| *x = large(r));
            bt.iter_mut().for_each(|x| *x = large(r));
        }
    }
    for x in c.iter_mut() {
        *x = match class {
            Class::Uniform | Class::Band => 0.0,
            Class::UniformC => rand_c(r, -40, 40, 0.0),
            Class::BandC => rand_c(r, -12, 20, 0.25),
            Class::Sparse if r.below(8) == 0 => {
                let bits = 1 + r.below(0x7F_FFFF) as u32;
                f32::from_bits(bits | (u32::from(r.u8() & 1) << 31))
            }
            Class::Sparse | Class::Specials => rand_c(r, -30, 30, 0.5),
            Class::Large => rand_c(r, -10, 30, 0.3),
            Class::Dominant => rand_c(r, -60, 60, 0.0),
        };
    }
    if class == Class::Specials {
        const CODES: [u8; 8] = [0x7F, 0xFF, 0x7C, 0xFC, 0x80, 0x00, 0x01, 0x81];
        const CS: [u32; 7] = [
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x0000_0001,
            0x8000_0001,
            0x007F_FFFF,
            0x0040_0000,
        ];
        for x in a.iter_mut() {
            if r.below(64) == 0 {
                *x = CODES[r.below(8)];
            }
        }
        for x in bt.iter_mut() {
            if r.below(32) == 0 {
                *x = CODES[r.below(8)];
            }
        }
        for x in c.iter_mut() {
            if r.below(10) == 0 {
                *x = f32::from_bits(CS[r.below(7)]);
            }
        }
    }
}

/// One targeted vector: `d = c + sum a[k] * b[k]` on values, and the rule
/// it exercises.
struct Targeted {
    rule: &'static str,
    pairs: Vec<(f32, f32)>,
    c: f32,
}

/// Targeted vectors, one or more per rule of [`oracle::tensor_core`], for
/// the format pair (`fa`, `fb`), packed eight to a tile on the diagonal
/// (vector r in row r % 8 of A and column r % 8 of B; the other 504
/// outputs of each tile mix them and are compared too).
///
/// The labels name the `wgmma` rules (`TC-*`); run through `mma.sync` the
/// same vectors exercise its counterparts (`MMA-*`).
pub fn targeted(fa: Fp8Kind, fb: Fp8Kind) -> (Tiles, Vec<&'static str>) {
    let p2 = |e: i32| 2f32.powi(e);
    let big = |k: Fp8Kind| if k == Fp8Kind::E4m3 { 448.0 } else { 57344.0 };
    let mut v = vec![
        // TC-ALIGN: exponent sum, truncation toward zero of both signs.
        Targeted {
            rule: "TC-ALIGN exponent sum",
            pairs: vec![(-12.0, 14.0), (0.875, 0.1171875)],
            c: 0.0,
        },
        Targeted {
            rule: "TC-ALIGN toward zero",
            pairs: vec![(48.0, 96.0), (-0.046875, 0.03125)],
            c: 0.0,
        },
        Targeted {
            rule: "TC-ALIGN toward zero",
            pairs: vec![(-48.0, 96.0), (0.046875, 0.03125)],
            c: 0.0,
        },
        // A zero times the format's largest value has an exponent sum
        // above E = 0; were it counted, 2^-13 would truncate away.
        Targeted {
            rule: "TC-ALIGN zero products",
            pairs: vec![(0.0, big(fb)), (big(fa), 0.0), (1.0, 1.0), (p2(-9), p2(-4))],
            c: 0.0,
        },
        // 13 fraction bits below E = 0: 2^-13 stays, 2^-14 goes.
        Targeted {
            rule: "TC-ALIGN 13 bits kept",
            pairs: vec![(1.0, 1.0), (p2(-6), p2(-7))],
            c: 0.0,
        },
        Targeted {
            rule: "TC-ALIGN 14th bit dropped",
            pairs: vec![(1.0, 1.0), (p2(-7), p2(-7))],
            c: 0.0,
        },
        Targeted {
            rule: "TC-ALIGN accumulator",
            pairs: vec![(8.0, 12.0)],
            c: p2(20),
        },
        Targeted {
            rule: "TC-ALIGN accumulator below",
            pairs: vec![(8.0, 12.0)],
            c: 1.0 + p2(-20),
        },
        Targeted {
            rule: "TC-NORM accumulator alone",
            pairs: vec![],
            c: 1.0 + p2(-13) + p2(-20),
        },
        Targeted {
            rule: "TC-NORM f32 max",
            pairs: vec![],
            c: f32::MAX,
        },
        // A subnormal c aligns at -126 (unit 2^-139): the largest keeps
        // its 14 leading bits, the smallest truncates to +0.
        Targeted {
            rule: "TC-ALIGN subnormal c",
            pairs: vec![],
            c: f32::from_bits(0x007F_FFFF),
        },
        Targeted {
            rule: "TC-ALIGN subnormal c",
            pairs: vec![],
            c: f32::from_bits(0x807F_FFFF),
        },
        Targeted {
            rule: "TC-ZERO subnormal c",
            pairs: vec![],
            c: f32::from_bits(0x8000_0001),
        },
        // Every term -0: +0 by TC-ZERO (IEEE addition would give -0).
        Targeted {
            rule: "TC-ZERO all negative zeros",
            pairs: vec![(-0.0, 1.0); 32],
            c: -0.0,
        },
        Targeted {
            rule: "TC-NORM subnormal c",
            pairs: vec![],
            c: f32::from_bits(1),
        },
        Targeted {
            rule: "TC-NORM carries",
            pairs: vec![(224.0, 224.0); 32],
            c: 0.0,
        },
        Targeted {
            rule: "TC-NORM 15 bits",
            pairs: [vec![(32.0, 32.0); 16], vec![(1.0, 1.0)]].concat(),
            c: 0.0,
        },
        Targeted {
            rule: "TC-ZERO signs",
            pairs: vec![(-0.0, 1.0)],
            c: -0.0,
        },
        Targeted {
            rule: "TC-ZERO cancel",
            pairs: vec![(2.0, 3.0)],
            c: -6.0,
        },
        Targeted {
            rule: "TC-NAN accumulator",
            pairs: vec![(1.0, 1.0)],
            c: f32::NAN,
        },
        Targeted {
            rule: "TC-INF accumulator",
            pairs: vec![(1.0, 1.0)],
            c: f32::NEG_INFINITY,
        },
        Targeted {
            rule: "TC-PRODUCT subnormals",
            pairs: vec![(p2(-9), p2(-9)), (p2(-8), 3.0 * p2(-9))],
            c: 0.0,
        },
    ];
    // The encoder rounds a value the format cannot hold (0.1171875 in
    // e5m2, 448's neighbours): still a valid vector, still compared.
    let enc = |k: Fp8Kind, x: f32| match k {
        Fp8Kind::E4m3 => oracle::e4m3::encode_e4m3(x, oracle::conventions::Overflow::SatFinite),
        Fp8Kind::E5m2 => oracle::e5m2::encode_e5m2(x, oracle::conventions::Overflow::SatFinite),
    };
    let mut rules = Vec::new();
    let mut codes: Vec<([u8; MMA_K], [u8; MMA_K], f32)> = v
        .drain(..)
        .map(|t| {
            rules.push(t.rule);
            let (mut a, mut b) = ([0u8; MMA_K], [0u8; MMA_K]);
            for (k, &(x, y)) in t.pairs.iter().enumerate() {
                a[k] = enc(fa, x);
                b[k] = enc(fb, y);
            }
            (a, b, t.c)
        })
        .collect();
    // Special codes: a NaN operand, and for e5m2 infinities.
    let nan = |k: Fp8Kind| if k == Fp8Kind::E4m3 { 0x7F } else { 0x7E };
    let one = (enc(fa, 1.0), enc(fb, 1.0));
    let mut a = [one.0; MMA_K];
    a[3] = nan(fa);
    codes.push((a, [one.1; MMA_K], 0.0));
    rules.push("TC-NAN operand");
    if fa == Fp8Kind::E5m2 {
        let mut a = [one.0; MMA_K];
        a[0] = 0x7C;
        codes.push((a, [one.1; MMA_K], 1.0));
        rules.push("TC-INF operand");
        let mut b = [one.1; MMA_K];
        b[0] = 0;
        codes.push((a, b, 1.0));
        rules.push("TC-INF times zero");
        let mut a2 = a;
        a2[1] = 0xFC;
        codes.push((a2, [one.1; MMA_K], 1.0));
        rules.push("TC-INF both signs");
    }
    let mut t = Tiles::zeros(codes.len().div_ceil(8));
    for (r, (a, b, c)) in codes.iter().enumerate() {
        let (tile, i) = (r / 8, r % 8);
        t.a[(tile * TILE_M + i) * TILE_K..][..MMA_K].copy_from_slice(a);
        t.bt[(tile * TILE_N + i) * TILE_K..][..MMA_K].copy_from_slice(b);
        t.c[(tile * TILE_M + i) * TILE_N + i] = *c;
    }
    (t, rules)
}

/// The first output where the hardware and the model differ.
#[derive(Clone, Debug)]
pub struct Divergence {
    /// Tile, row of A, column of B.
    pub at: (usize, usize, usize),
    /// The vector's A codes.
    pub a: [u8; MMA_K],
    /// The vector's B codes.
    pub b: [u8; MMA_K],
    /// The accumulator passed (as the instruction read it).
    pub c: f32,
    /// The model's result.
    pub want: f32,
    /// The hardware's result.
    pub got: f32,
}

/// The comparison of one run: outputs compared, how many differ (bits),
/// and the first difference.
#[derive(Clone, Debug)]
pub struct Verdict {
    /// Outputs compared.
    pub outputs: usize,
    /// Outputs whose bits differ from the model's.
    pub mismatches: usize,
    /// The first of them.
    pub first: Option<Divergence>,
}

/// Every output of `d` against `model` on `tiles` (the accumulator read as
/// +0 when `scale_d` is false), bit for bit.
pub fn judge(
    model: &Model,
    fa: Fp8Kind,
    fb: Fp8Kind,
    tiles: &Tiles,
    scale_d: bool,
    d: &[f32],
) -> Verdict {
    let n = tiles.count();
    let per_tile: Vec<(usize, Option<Divergence>)> = (0..n)
        .into_par_iter()
        .map(|t| {
            let mut bad = 0;
            let mut first = None;
            for i in 0..TILE_M {
                for j in 0..TILE_N {
                    let (a, b, c) = tiles.vector(t, i, j);
                    let c = if scale_d { c } else { 0.0 };
                    let want = mma_k32(model, fa, &a, fb, &b, c);
                    let got = d[(t * TILE_M + i) * TILE_N + j];
                    if want.to_bits() != got.to_bits() {
                        bad += 1;
                        if first.is_none() {
                            first = Some(Divergence {
                                at: (t, i, j),
                                a,
                                b,
                                c,
                                want,
                                got,
                            });
                        }
                    }
                }
            }
            (bad, first)
        })
        .collect();
    Verdict {
        outputs: n * TILE_M * TILE_N,
        mismatches: per_tile.iter().map(|p| p.0).sum(),
        first: per_tile.into_iter().find_map(|p| p.1),
    }
}

impl Divergence {
    /// The difference as lines a kernel engineer can act on: the vector,
    /// both results in bits, and a `#[test]` for `core/tests/` that pins
    /// the hardware's answer.
    pub fn report(&self, fa: Fp8Kind, fb: Fp8Kind, model: &Model) -> String {
        let kind = |k: Fp8Kind| match k {
            Fp8Kind::E4m3 => "E4m3",
            Fp8Kind::E5m2 => "E5m2",
        };
        format!(
            "  first difference at tile {} row {} column {}: model {:e} ({:#010x}), hardware {:e} ({:#010x})\n  \
             a = {:#04x?}\n  b = {:#04x?}\n  c = {:e} ({:#010x})\n  \
             #[test] fn tensor_core_vector() {{\n      use oracle::tensor_core::*;\n      \
             let d = mma_k32(&Model {{ instruction: Instruction::{:?} }}, Fp8Kind::{}, &{:?}, Fp8Kind::{}, &{:?}, f32::from_bits({:#010x}));\n      \
             assert_eq!(d.to_bits(), {:#010x}); // the hardware's answer\n  }}",
            self.at.0,
            self.at.1,
            self.at.2,
            self.want,
            self.want.to_bits(),
            self.got,
            self.got.to_bits(),
            self.a,
            self.b,
            self.c,
            self.c.to_bits(),
            model.instruction,
            kind(fa),
            self.a,
            kind(fb),
            self.b,
            self.c.to_bits(),
            self.got.to_bits()
        )
    }
}

/// The process's probe engine (opened once), or why there is none.
///
/// # Errors
/// The device error's message (no driver, no NVRTC, an old device).
pub fn engine() -> Result<&'static TensorCoreEngine, String> {
    static ENGINE: OnceLock<Result<TensorCoreEngine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut e = TensorCoreEngine::new(0).map_err(|e| e.to_string())?;
            e.set_guards(true);
            Ok(e)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs `tiles` on the hardware and judges it.
///
/// # Errors
/// The device's error (a launch, a guard band, an unavailable instruction).
pub fn run(
    engine: &TensorCoreEngine,
    instruction: Instruction,
    fa: Fp8Kind,
    fb: Fp8Kind,
    tiles: &Tiles,
    scale_d: bool,
) -> Result<Verdict, DeviceError> {
    let probe = ProbeTiles {
        a: &tiles.a,
        bt: &tiles.bt,
        c: &tiles.c,
        scale_d,
    };
    let d = engine.run(instruction, fa, fb, &probe)?;
    Ok(judge(&Model { instruction }, fa, fb, tiles, scale_d, &d))
}

/// Runs one case and judges it; a divergence or a device error is a panic
/// carrying the reproduction (the fuzzer's contract: a bug is a panic).
///
/// # Panics
/// As above, and when there is no device with the instruction.
pub fn check(spec: &CaseSpec) {
    let engine = engine().unwrap_or_else(|e| panic!("tensor_core: no CUDA device: {e}"));
    if !engine.has(spec.instruction) {
        return; // wgmma off sm_90a: nothing to compare (the gate fails there)
    }
    let tiles = spec.generate();
    match run(
        engine,
        spec.instruction,
        spec.fa,
        spec.fb,
        &tiles,
        spec.scale_d,
    ) {
        Ok(v) if v.mismatches == 0 => {}
        Ok(v) => panic!(
            "tensor-core divergence: {} of {} outputs differ from the model\n{}\nrerun: {}",
            v.mismatches,
            v.outputs,
            v.first.expect("a mismatch has a first").report(
                spec.fa,
                spec.fb,
                &Model {
                    instruction: spec.instruction
                }
            ),
            spec.command()
        ),
        Err(e) => panic!("tensor-core device error: {e}\nrerun: {}", spec.command()),
    }
}

/// The command that reruns the whole gate (a targeted row's fixed vectors
/// run only there): `kernel-oracle check tensor-core` with the
/// candidate's variable, the program as [`crate::paths::rerun_prefix`]
/// prints it.
fn gate_rerun() -> String {
    format!(
        "{}{} check tensor-core",
        crate::candidate_env(device::cuda::ENV_TENSOR_CORE_CU),
        crate::paths::rerun_prefix()
    )
}

/// The gate's random arm: tiles per (pair, class, accumulator setting).
pub const GATE_TILES: usize = 256;

/// `kernel-oracle check tensor-core`: for each instruction the model
/// covers (`wgmma`, `mma.sync`; an instruction the device cannot run is a
/// failing row: the gate claims what it checked), each format pair: the targeted vectors, then
/// [`GATE_TILES`] tiles of every [`Class`] (2^20 random vectors per pair),
/// and one class run with the accumulator input disabled. Prints one row
/// per run; returns the number of failing rows (a device error is a
/// failing row with its message).
pub fn gate(engine: &TensorCoreEngine) -> usize {
    println!(
        "tensor-core gate on {} (sm_{}{}), model oracle::tensor_core",
        engine.device_name(),
        engine.arch().0,
        engine.arch().1
    );
    println!(
        "{:<9} {:<10} {:<28} {:>9} {:>9}  verdict",
        "instr", "a x b", "vectors", "outputs", "differ"
    );
    let mut failures = 0;
    let mut row = |inst: Instruction,
                   fa: Fp8Kind,
                   fb: Fp8Kind,
                   what: &str,
                   tiles: &Tiles,
                   scale_d: bool,
                   rerun: Option<String>| {
        let pair = format!("{}x{}", fa.name(), fb.name());
        match run(engine, inst, fa, fb, tiles, scale_d) {
            Ok(v) => {
                let ok = v.mismatches == 0;
                println!(
                    "{:<9} {:<10} {:<28} {:>9} {:>9}  {}",
                    instruction_name(inst),
                    pair,
                    what,
                    v.outputs,
                    v.mismatches,
                    if ok { "PASS" } else { "FAIL" }
                );
                if let Some(d) = v.first {
                    failures += 1;
                    println!("{}", d.report(fa, fb, &Model { instruction: inst }));
                    println!("  rerun: {}", rerun.unwrap_or_else(gate_rerun));
                }
            }
            Err(e) => {
                failures += 1;
                println!(
                    "{:<9} {:<10} {:<28} {:>9} {:>9}  FAIL: {e}",
                    instruction_name(inst),
                    pair,
                    what,
                    "-",
                    "-"
                );
                // Targeted rows are fixed vectors: the gate reruns them.
                println!("  rerun: {}", rerun.unwrap_or_else(gate_rerun));
            }
        }
    };
    // The models are sm_90's: another architecture (or a 9.0 device
    // without the sm_90a kernels) is a failing row, never a silent pass.
    let mut unchecked = 0;
    for inst in [Instruction::Wgmma, Instruction::MmaSync] {
        if engine.arch() != (9, 0) || !engine.has(inst) {
            unchecked += 1;
            println!(
                "{:<9} FAIL: the models are sm_90's (H100, H200), this device is sm_{}{}: not checked",
                instruction_name(inst),
                engine.arch().0,
                engine.arch().1
            );
            continue;
        }
        for (p, &(fa, fb)) in PAIRS.iter().enumerate() {
            let (t, rules) = targeted(fa, fb);
            for scale_d in [true, false] {
                row(
                    inst,
                    fa,
                    fb,
                    &format!(
                        "targeted ({} vectors){}",
                        rules.len(),
                        if scale_d { "" } else { ", no accumulator" }
                    ),
                    &t,
                    scale_d,
                    None,
                );
            }
            for (ci, class) in Class::ALL.into_iter().enumerate() {
                for scale_d in [true, false] {
                    // With the accumulator input disabled, a class whose
                    // c is not zero: a probe that ignores scale-d fails.
                    if !scale_d && class != Class::UniformC {
                        continue;
                    }
                    let spec = CaseSpec {
                        instruction: inst,
                        fa,
                        fb,
                        class,
                        scale_d,
                        seed: 0x7C00_0000
                            + (p as u64) * 16
                            + ci as u64
                            + if scale_d { 0 } else { 8 },
                        tiles: GATE_TILES,
                    };
                    let what = format!(
                        "{}{}",
                        class.name(),
                        if scale_d { "" } else { ", no accumulator" }
                    );
                    row(
                        inst,
                        fa,
                        fb,
                        &what,
                        &spec.generate(),
                        scale_d,
                        Some(spec.command()),
                    );
                }
            }
        }
    }
    failures += unchecked;
    if let Some(line) = crate::lost_context_line() {
        println!("{line}");
    }
    if failures == 0 {
        println!("ALL GREEN");
    } else {
        println!("{failures} row(s) FAILED");
    }
    failures
}
