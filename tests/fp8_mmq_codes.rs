//! The CODES arm on CPU-made "kernels", on every battery shape: the oracle
//! itself and a GEMM that sums in another order pass bit for bit; one
//! whose e4m3 decode flushes subnormals (the `subnormal-flush` mutant's
//! model) fails. EXACT and FOLD never hold a subnormal code; RANDOM sees
//! the flush only statistically (seed 000's `rms_rel` on the battery) and
//! mostly misses it on small shapes. On every battery shape a right
//! kernel decodes all 253 observable codes bit-exactly (the 254 legal ones
//! less 0x80, -0, which no output tells from 0x00), the flush 14 fewer.

use kernel_oracle::fp8_mmq::gate::{BATTERY, OBSERVABLE_CODES};
use kernel_oracle::fp8_mmq::judge::{codes_decoded_exactly, CodeSet};
use kernel_oracle::fp8_mmq::mutants::subnormal_flush_f16_bits;
use kernel_oracle::fp8_mmq::{reference, Arm, CaseData, CaseSpec, KernelOut, Reference, Verdict};
use kernel_oracle::rng::Rng;
use oracle::conventions::NanMagnitude::{Ieee, ReadAsZero};
use oracle::e4m3::decode_e4m3;
use oracle::f16::decode_f16;

/// A GEMM in another order than the spec's: blocks whose activation
/// scale is zero are skipped (their term `(s * 0) * c` is a zero), and
/// each other block's products are summed in decreasing k. `decode_w` is
/// the kernel's weight decode.
fn sparse_gemm(data: &CaseData, q: &[u8], d: &[f32], decode_w: fn(u8) -> f32) -> Vec<f32> {
    let s = &data.shape;
    let (in_f, pad, out_f, scols) = (s.in_f(), s.in_f_pad(), s.out_f(), s.scale_cols());
    let mut y = vec![0f32; s.out_len()];
    for j in 0..s.m() {
        for i in 0..out_f {
            let mut sum = 0f32;
            for b in (0..scols).filter(|&b| d[j * s.act_blocks() + b] != 0.0) {
                let mut c = 0f32;
                for k in (b * 128..(b + 1) * 128).rev() {
                    let wv = if k < in_f {
                        decode_w(data.w[i * in_f + k])
                    } else {
                        0.0
                    };
                    c += wv * decode_e4m3(q[j * pad + k], Ieee);
                }
                sum += (data.scales[(i / 128) * scols + b] * d[j * s.act_blocks() + b]) * c;
            }
            y[j * out_f + i] = sum;
        }
    }
    y
}

fn exact_decode(code: u8) -> f32 {
    decode_e4m3(code, ReadAsZero)
}

/// The `subnormal-flush` mutant's decode: its f16 bits, read by core's
/// f16 codec.
fn flush_decode(code: u8) -> f32 {
    decode_f16(subnormal_flush_f16_bits(code))
}

fn is_subnormal(code: u8) -> bool {
    code & 0x78 == 0 && code & 0x07 != 0
}

fn codes_case(in_f: usize, out_f: usize, m: usize) -> (CaseData, Reference) {
    let data = CaseSpec::battery(in_f, out_f, m, Arm::Codes)
        .generate()
        .unwrap();
    let want = reference(&data, oracle::fp8_mmq::Schedule::V2);
    (data, want)
}

fn judge(data: &CaseData, arm: Arm, want: &Reference, y: Vec<f32>) -> Verdict {
    let got = KernelOut {
        nan: 0,
        q: want.q.clone(),
        d: want.d.clone(),
        y,
    };
    Verdict::judge(data, arm, &got, want)
}

/// Every CODES row quantizes to one code ±448 (0x7E/0xFE) with `d` a
/// power of two and every other block all zero with `d = 0`; row 0 sits on
/// the last column (the k tail when in_f % 128 != 0); every output is the
/// one exact product `(s * d) * (w * ±448)`.
#[test]
fn codes_rows_are_one_hot_and_every_output_is_one_exact_product() {
    for &(in_f, out_f, m) in &BATTERY {
        let (data, want) = codes_case(in_f, out_f, m);
        let s = &data.shape;
        let (pad, blocks, scols) = (s.in_f_pad(), s.act_blocks(), s.scale_cols());
        for j in 0..m {
            let nonzero: Vec<usize> = (0..pad).filter(|&k| want.q[j * pad + k] != 0).collect();
            assert_eq!(nonzero.len(), 1, "({in_f},{out_f},{m}) row {j}");
            let k = nonzero[0];
            assert!(k < in_f);
            if j == 0 {
                assert_eq!(k, in_f - 1);
            }
            assert_eq!(want.q[j * pad + k] & 0x7F, 0x7E);
            let dj = want.d[j * blocks + k / 128];
            assert_eq!(dj.to_bits() & 0x007F_FFFF, 0, "d = {dj} is a power of two");
            for b in (0..blocks).filter(|&b| b != k / 128) {
                assert_eq!(want.d[j * blocks + b].to_bits(), 0);
            }
            let a = f64::from(decode_e4m3(want.q[j * pad + k], Ieee));
            for o in 0..out_f {
                let sc = f64::from(data.scales[(o / 128) * scols + k / 128]);
                let exact = sc * f64::from(dj) * f64::from(exact_decode(data.w[o * in_f + k])) * a;
                assert_eq!(
                    f64::from(want.y[j * out_f + o]),
                    exact,
                    "({in_f},{out_f},{m}) y[{j}, {o}]"
                );
            }
        }
    }
}

/// The oracle's own answer, and a GEMM that skips the zero blocks and
/// sums each block backwards, pass the CODES arm bit for bit on every
/// battery shape; the subnormal-flushing decode fails it on every shape.
#[test]
fn codes_arm_passes_the_oracle_and_fails_a_subnormal_flush() {
    for &(in_f, out_f, m) in &BATTERY {
        let (data, want) = codes_case(in_f, out_f, m);
        let v = judge(&data, Arm::Codes, &want, want.y.clone());
        assert!(v.pass() && v.y.bit_identical(), "({in_f},{out_f},{m})");

        let y = sparse_gemm(&data, &want.q, &want.d, exact_decode);
        let v = judge(&data, Arm::Codes, &want, y);
        assert!(v.pass(), "({in_f},{out_f},{m}): reordered: {:?}", v.y);

        let y = sparse_gemm(&data, &want.q, &want.d, flush_decode);
        let v = judge(&data, Arm::Codes, &want, y);
        assert!(!v.pass(), "({in_f},{out_f},{m}): a subnormal flush passed");
        let mut subnormal_outputs = 0;
        for j in 0..m {
            let k = (0..in_f).find(|&k| data.x[j * in_f + k] != 0.0).unwrap();
            subnormal_outputs += (0..out_f)
                .filter(|&o| is_subnormal(data.w[o * in_f + k]))
                .count();
        }
        assert_eq!(
            v.y.bit_mismatches, subnormal_outputs,
            "({in_f},{out_f},{m})"
        );
    }
}

/// The gate's coverage figure, from the kernel's outputs: on each battery
/// shape on its own, a right kernel (the oracle itself, and the reordered
/// GEMM) decodes exactly the 253 observable codes bit-exactly in its CODES
/// row, and the subnormal-flushing kernel the same less the 14 nonzero
/// subnormals, though the case data are the same; every other arm's rows
/// contribute none.
#[test]
fn battery_decodes_every_observable_code_bit_exactly() {
    let subnormals = (0..=255u8).filter(|&c| is_subnormal(c)).count();
    assert_eq!(subnormals, 14);
    let (mut all, mut all_flush) = (CodeSet::default(), CodeSet::default());
    for &(in_f, out_f, m) in &BATTERY {
        let (data, want) = codes_case(in_f, out_f, m);
        let set = judge(&data, Arm::Codes, &want, want.y.clone()).codes;
        eprintln!("({in_f},{out_f},{m}): {} codes", set.count());
        assert_eq!(set.count(), OBSERVABLE_CODES, "({in_f},{out_f},{m})");
        let y = sparse_gemm(&data, &want.q, &want.d, exact_decode);
        assert_eq!(judge(&data, Arm::Codes, &want, y).codes, set);

        let y = sparse_gemm(&data, &want.q, &want.d, flush_decode);
        let flush = judge(&data, Arm::Codes, &want, y).codes;
        for c in 0..=255u8 {
            assert_eq!(
                flush.contains(c),
                set.contains(c) && !is_subnormal(c),
                "({in_f},{out_f},{m}) code 0x{c:02X}"
            );
        }
        assert_eq!(flush.count(), OBSERVABLE_CODES - subnormals);
        all.union(&set);
        all_flush.union(&flush);
        if in_f * out_f * m <= 1 << 24 {
            for arm in [Arm::Exact, Arm::Fold, Arm::Random] {
                let data = CaseSpec::battery(in_f, out_f, m, arm).generate().unwrap();
                let want = reference(&data, oracle::fp8_mmq::Schedule::V2);
                assert_eq!(codes_decoded_exactly(arm, &data, &want, &want.y).count(), 0);
            }
        }
    }
    assert_eq!(all.count(), OBSERVABLE_CODES);
    assert_eq!(all_flush.count(), OBSERVABLE_CODES - subnormals);
}

/// The flushing kernel on the RANDOM arm's data (the oracle on flushed
/// weight and activation codes), judged as RANDOM.
fn random_verdict_of_flush(spec: &CaseSpec) -> Verdict {
    let data = spec.generate().unwrap();
    let want = reference(&data, oracle::fp8_mmq::Schedule::V2);
    let flush = |c: u8| if is_subnormal(c) { c & 0x80 } else { c };
    let mut flushed = data.clone();
    flushed.w.iter_mut().for_each(|c| *c = flush(*c));
    flushed.qd = Some((want.q.iter().map(|&c| flush(c)).collect(), want.d.clone()));
    let y = reference(&flushed, oracle::fp8_mmq::Schedule::V2).y;
    judge(&data, Arm::Random, &want, y)
}

/// The flushing kernel on the CODES arm's data, judged as CODES, and
/// whether the case's outputs reach a subnormal code at all.
fn codes_verdict_of_flush(spec: &CaseSpec) -> (Verdict, bool) {
    let data = spec.generate().unwrap();
    let want = reference(&data, oracle::fp8_mmq::Schedule::V2);
    let reached = codes_decoded_exactly(Arm::Codes, &data, &want, &want.y);
    let y = sparse_gemm(&data, &want.q, &want.d, flush_decode);
    let subnormal = (0..=255u8).any(|c| is_subnormal(c) && reached.contains(c));
    (judge(&data, Arm::Codes, &want, y), subnormal)
}

/// On the battery (its largest shape left out for time) EXACT and FOLD
/// hold no subnormal code, so they cannot see the flush; RANDOM does, by
/// seed 000's statistic: the flush moves the largest output error to
/// about 1e-4 of `rms(want)`, ten times its bound (the `subnormal-flush`
/// mutant's `caught_by` lists RANDOM for this).
#[test]
fn on_the_battery_a_subnormal_flush_escapes_exact_and_fold_not_random() {
    for &(in_f, out_f, m) in BATTERY.iter().filter(|&&(i, o, m)| i * o * m <= 1 << 26) {
        for arm in [Arm::Exact, Arm::Fold] {
            let data = CaseSpec::battery(in_f, out_f, m, arm).generate().unwrap();
            let want = reference(&data, oracle::fp8_mmq::Schedule::V2);
            let q = data.qd.as_ref().map_or(&want.q, |(q, _)| q);
            assert!(!data.w.iter().chain(q).any(|&c| is_subnormal(c)));
        }
        let v = random_verdict_of_flush(&CaseSpec::battery(in_f, out_f, m, Arm::Random));
        eprintln!(
            "({in_f},{out_f},{m}) RANDOM with a subnormal flush: rms_rel {:.2e}, {} outputs over the per-output bound",
            v.y.rms_rel, v.over_bound.0
        );
        assert!(!v.pass(), "({in_f},{out_f},{m})");
    }
}

/// Where RANDOM is blind: on shapes under its 512-output `rms_rel` floor
/// (most fuzz cases), the per-output bound lets the flush through in most
/// cases, while CODES fails exactly the cases whose outputs reach a
/// subnormal code.
#[test]
fn on_small_shapes_random_misses_a_subnormal_flush_codes_does_not() {
    let mut rng = Rng(0x5AB);
    let (n, mut random_passes, mut codes_fails) = (300, 0, 0);
    for _ in 0..n {
        let (in_f, out_f, m) = (1 + rng.below(700), 1 + rng.below(40), 1 + rng.below(5));
        let seed = rng.next_u64();
        let spec = |arm| CaseSpec {
            seed,
            ..CaseSpec::battery(in_f, out_f, m, arm)
        };
        random_passes += usize::from(random_verdict_of_flush(&spec(Arm::Random)).pass());
        let (v, subnormal) = codes_verdict_of_flush(&spec(Arm::Codes));
        assert_eq!(!v.pass(), subnormal, "({in_f},{out_f},{m}) seed {seed:#x}");
        codes_fails += usize::from(!v.pass());
    }
    eprintln!("{n} small shapes: RANDOM passes the flush in {random_passes}, CODES fails it in {codes_fails}");
    assert!(
        random_passes * 4 > n * 3,
        "RANDOM passed {random_passes}/{n}"
    );
    assert!(codes_fails * 4 > n, "CODES failed {codes_fails}/{n}");
}
