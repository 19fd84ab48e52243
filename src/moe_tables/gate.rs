//! The moe-tables gate (seed 002's `dev_built_vrows_tables_match_the_host_arithmetic`):
//! the seed's four cases, then ours: the stale macro-plane cache, offsets
//! past 2^40 bytes, special weights, 65,536 pairs across many CTAs and on
//! 3 CTAs (the kernel's grid-stride loop), a refusal past that grid's first
//! pass, and the three refusals (the device must refuse exactly where the oracle does).

use super::generate::CaseData;
use super::judge::{reference, Verdict};
use super::report;
use super::run::device_tables;
use device::cuda::MoeEngine;
use oracle::moe_tables::Slab;

/// The seed's slab bases (bytes).
pub const BASES: [u64; 3] = [
    0x0000_7f00_0000_0000,
    0x0000_7f40_0000_0000,
    0x0000_7f80_0000_0000,
];
/// The seed's fixture strides (bytes): everything fits in 32 bits.
pub const SMALL_STRIDES: [u64; 3] = [860_160, 860_160, 1_114_112];
/// The seed's serving strides: 24/24/48 MiB per expert, so expert 255 sits
/// 6 GiB into the gate slab and 12 GiB into the down slab.
pub const SERVING_STRIDES: [u64; 3] = [24 << 20, 24 << 20, 48 << 20];
/// Strides putting expert 1023 past 2^40 bytes (5, 6 and 11 GiB plus odd
/// bytes, so no power-of-two shortcut hides a wrong product).
pub const TERA_STRIDES: [u64; 3] = [(5 << 30) + 4099, (6 << 30) + 12_289, (11 << 30) + 3];

/// One gate case.
#[derive(Clone, Debug)]
pub struct GateCase {
    /// The label printed in the table.
    pub label: &'static str,
    /// Run first (and judged) on the same engine; the stale-cache case
    /// loads other planes under the same layer id this way.
    pub prime: Option<CaseData>,
    /// The case.
    pub data: CaseData,
    /// The most CTAs the launch uses ([`MoeEngine::vrows_tables`]), when
    /// lower than the shim's one thread a pair: the kernel's grid-stride
    /// loop then runs past its first pass.
    pub max_ctas: Option<u32>,
}

/// The CTAs of the gate's grid-stride rows: 768 threads for 65,536 pairs,
/// 85 or 86 passes of the kernel's loop each.
pub const GRID_STRIDE_CTAS: u32 = 3;

/// The bad pairs of the gate's grid-stride refusal, lowest first (see
/// there).
pub const REFUSED_PAIRS: [usize; 2] = [40_636, 49_930];

fn slabs(bases: [u64; 3], strides: [u64; 3]) -> [Slab; 3] {
    [0, 1, 2].map(|i| Slab {
        base: bases[i],
        stride: strides[i],
    })
}

/// Macro planes distinct per plane and expert (the seed's), shifted by
/// `shift` so a second set differs in every entry.
pub fn planes(n_expert: usize, shift: f32) -> [Vec<f32>; 3] {
    [1.0f32, 2.0, 3.0].map(|o| (0..n_expert).map(|i| o + shift + i as f32 * 1e-3).collect())
}

fn case(
    n_expert: usize,
    strides: [u64; 3],
    experts: Vec<i32>,
    weights: Vec<f32>,
    macros: Option<[Vec<f32>; 3]>,
    layer: u32,
) -> CaseData {
    CaseData {
        n_expert,
        slabs: slabs(BASES, strides),
        experts,
        weights,
        macros,
        layer,
    }
}

/// The seed's selection: experts spread to the top of a 256-expert bank.
pub fn seed_selection() -> (Vec<i32>, Vec<f32>) {
    (
        vec![0, 1, 17, 63, 128, 200, 254, 255],
        vec![0.5, 0.25, 0.125, 1.0, 0.0625, 0.75, 0.375, 0.875],
    )
}

/// Every case, in order.
pub fn cases() -> Vec<GateCase> {
    let (sel, selw) = seed_selection();
    let a = || Some(planes(256, 0.0));
    let g = |label, data| GateCase {
        label,
        prime: None,
        data,
        max_ctas: None,
    };
    let strided = |label, data| GateCase {
        label,
        prime: None,
        data,
        max_ctas: Some(GRID_STRIDE_CTAS),
    };
    let spread: Vec<i32> = (0..8).map(|j| j * 32 + 31).collect();
    let spread_w: Vec<f32> = (0..8).map(|j| 1.0 / (j as f32 + 3.0)).collect();
    let special_w: Vec<f32> = [
        0x7FC0_0000u32, // quiet NaN
        0xFFC0_1234,    // negative NaN with a payload
        0x7F80_0001,    // signalling NaN
        0x8000_0000,    // -0.0
        0x0000_0001,    // the smallest subnormal
        0x807F_FFFF,    // the largest negative subnormal
        0xBF40_0000,    // -0.75
        0x7F80_0000,    // +inf
    ]
    .map(f32::from_bits)
    .to_vec();
    let mut special_planes = planes(256, 0.0);
    special_planes[0][255] = f32::from_bits(0x7FA0_0001); // sNaN payload, copied as bits
    special_planes[1][254] = f32::from_bits(0x0000_0003); // subnormal
    special_planes[2][200] = f32::from_bits(0x8000_0000); // -0.0 times +0.75
    special_planes[2][255] = 0.0; // pair 7: +inf * 0 = NaN, written canonical
    let mut r = crate::rng::Rng(0x5EED_0002);
    let many: Vec<i32> = (0..65_536).map(|_| r.below(256) as i32).collect();
    let many_w: Vec<f32> = (0..65_536).map(|_| r.f01()).collect();
    // Two bad pairs past the first pass of a 3-CTA grid (768 threads): the
    // lower, 40,636, in pass 52 of CTA 2's thread 188 (40,636 = 52 * 768 +
    // 700); the higher, 49,930, in a later pass (65) of a lower CTA and
    // thread (CTA 0, thread 10). The status must name the lowest pair,
    // not the first CTA's, the lowest thread's or the last pass's.
    let mut many_bad = many.clone();
    many_bad[REFUSED_PAIRS[1]] = 256;
    many_bad[REFUSED_PAIRS[0]] = -7;
    let mut bad = sel.clone();
    bad[3] = 256;
    bad[5] = -1;
    let tera_sel = vec![1023, 0, 512, 1000, 1023, 7];
    let tera_w = vec![0.5, 0.25, 1.5, -0.125, 3.0, 0.0];
    vec![
        g(
            "small-strides",
            case(256, SMALL_STRIDES, sel.clone(), selw.clone(), a(), 7),
        ),
        g(
            "serving-strides-past-4GiB",
            case(256, SERVING_STRIDES, sel.clone(), selw.clone(), a(), 7),
        ),
        g(
            "no-macros",
            case(256, SERVING_STRIDES, sel.clone(), selw.clone(), None, 9),
        ),
        g(
            "spread-selection",
            case(256, SERVING_STRIDES, spread, spread_w, a(), 7),
        ),
        GateCase {
            max_ctas: None,
            label: "stale-cache-same-layer",
            prime: Some(case(
                256,
                SERVING_STRIDES,
                sel.clone(),
                selw.clone(),
                a(),
                11,
            )),
            data: case(
                256,
                SERVING_STRIDES,
                sel.clone(),
                selw.clone(),
                Some(planes(256, 0.5)),
                11,
            ),
        },
        g(
            "past-2^40-bytes",
            case(
                1024,
                TERA_STRIDES,
                tera_sel,
                tera_w,
                Some(planes(1024, 0.0)),
                3,
            ),
        ),
        g(
            "nan-subnormal-negative",
            case(
                256,
                SERVING_STRIDES,
                sel.clone(),
                special_w,
                Some(special_planes),
                5,
            ),
        ),
        g(
            "65536-pairs",
            case(256, SERVING_STRIDES, many.clone(), many_w.clone(), a(), 7),
        ),
        strided(
            "65536-pairs-grid-stride-3-ctas",
            case(256, SERVING_STRIDES, many.clone(), many_w.clone(), a(), 7),
        ),
        strided(
            "refuse-past-first-pass-3-ctas",
            case(256, SERVING_STRIDES, many_bad, many_w.clone(), a(), 7),
        ),
        g(
            "refuse-expert-range",
            case(256, SERVING_STRIDES, bad, selw.clone(), a(), 7),
        ),
        g(
            "refuse-64-bit-overflow",
            CaseData {
                slabs: slabs(
                    [BASES[0], BASES[1], u64::MAX - (100 << 20)],
                    SERVING_STRIDES,
                ),
                ..case(
                    256,
                    SERVING_STRIDES,
                    vec![0, 1, 5, 255],
                    vec![1.0; 4],
                    a(),
                    7,
                )
            },
        ),
        g(
            "refuse-lengths",
            case(256, SERVING_STRIDES, sel, selw[..7].to_vec(), a(), 7),
        ),
    ]
}

/// The gate's result.
#[derive(Debug, Default)]
pub struct GateResult {
    /// Failed rows.
    pub failures: usize,
    /// Rows run.
    pub rows: usize,
    /// Labels of the failed rows.
    pub failed: Vec<&'static str>,
}

/// Runs one case and prints its row (and mismatch lines on failure).
pub fn run_one(
    engine: &MoeEngine,
    label: &'static str,
    data: &CaseData,
    max_ctas: Option<u32>,
) -> Verdict {
    let want = reference(data);
    let got = device_tables(engine, data, max_ctas);
    let v = Verdict::judge(data, &got, &want);
    println!("{}", report::table_row(label, data, &v));
    if !v.pass() {
        print!("{}", report::mismatch_lines(label, &v));
    }
    v
}

/// Runs `cases`, printing the table and the verdict line.
pub fn run(engine: &MoeEngine, cases: &[GateCase]) -> GateResult {
    let mut g = GateResult::default();
    println!("kernel source: {}", engine.kernel_source());
    println!("device: {}", engine.device_name());
    println!("{}", report::table_header());
    for c in cases {
        let mut ok = true;
        if let Some(p) = &c.prime {
            ok &= run_one(engine, "  (prime: first planes)", p, None).pass();
        }
        ok &= run_one(engine, c.label, &c.data, c.max_ctas).pass();
        g.rows += 1;
        if !ok {
            g.failures += 1;
            g.failed.push(c.label);
            // Gate rows are fixed data, not generated cases: the gate
            // (about a second) reruns them.
            let cmd = format!(
                "{}{} check moe-tables",
                crate::candidate_env(device::cuda::ENV_MOE_TABLES_CU),
                crate::paths::rerun_prefix()
            );
            println!(
                "{}",
                crate::rerun_row(Some(&format!("row {}", c.label)), &cmd)
            );
        }
    }
    if let Some(line) = crate::lost_context_line() {
        println!("\n{line}");
    }
    println!();
    if g.failures == 0 {
        println!(
            "=== moe-tables-check ALL GREEN ({} cases: pointers equal, scales bit-identical, refusals identical) ===",
            g.rows
        );
    } else {
        println!(
            "=== moe-tables-check {} FAILURES: {} ===",
            g.failures,
            g.failed.join(", ")
        );
    }
    g
}
