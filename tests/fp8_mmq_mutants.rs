//! Planted bugs must stay plantable (CPU) and must be caught (GPU).

use device::cuda::{compile, Engine, KernelSource, BUILTIN_FP8_MMQ_CU};
use kernel_oracle::fp8_mmq::gate::BATTERY;
use kernel_oracle::fp8_mmq::mutants::{
    apply, native_only, reaches_native, subnormal_flush_f16_bits, tma_only, MUTANTS,
};
use kernel_oracle::fp8_mmq::{run, CaseSpec, Outcome};
use oracle::conventions::NanMagnitude::Ieee;
use oracle::e4m3::decode_e4m3;
use oracle::f16::decode_f16;

fn write_mutant(name: &str, text: &str) -> std::path::PathBuf {
    kernel_oracle::mutate::write_candidate("fp8", name, text).unwrap()
}

/// Every anchor occurs in the builtin kernel, and every mutant still
/// compiles (NVRTC, no GPU) for sm_90a, what the shim compiles for on an
/// H100/H200: the plain sm_90 build's code plus the wgmma variants. So a
/// mutant reaches the gate as a wrong kernel rather than as a compile
/// error. A mutant that replaces the e4m3 -> f16 conversion leaves none of
/// it in the PTX: the bug sits on every path that converts.
#[test]
fn every_mutant_applies_and_compiles() {
    const CVT: &str = "cvt.rn.f16x2.e4m3x2";
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_FP8_MMQ_CU).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(text, BUILTIN_FP8_MMQ_CU);
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let c = compile(&src, "sm_90a")
            .unwrap_or_else(|e| panic!("mutant {} does not compile: {e}", m.name));
        if m.find.contains(CVT) {
            assert!(!c.ptx.contains(CVT), "{}: {CVT} left in the PTX", m.name);
        }
    }
}

/// The section of the builtin source holding the native e4m3 wgmma
/// variants (k15 ..).
fn native_section(text: &str) -> &str {
    let start = text
        .find("4c. MMQ on the native FP8 wgmma")
        .expect("section 4c in cu/fp8_mmq.cu");
    let end = text[start..]
        .find("#endif /* HAVE_WGMMA */")
        .expect("section 4c ends");
    &text[start..start + end]
}

/// Each mutant changes the native variants' code exactly when
/// [`reaches_native`] says so, and a native-only mutant changes nothing
/// else.
#[test]
fn mutants_reach_the_native_variants_as_declared() {
    let before = native_section(BUILTIN_FP8_MMQ_CU);
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_FP8_MMQ_CU).unwrap();
        let after = native_section(&text);
        assert_eq!(
            before != after,
            reaches_native(m),
            "mutant {}: native section changed = {}",
            m.name,
            before != after
        );
        if native_only(m) {
            let outside = |t: &str| t.replace(native_section(t), "");
            assert_eq!(outside(&text), outside(BUILTIN_FP8_MMQ_CU), "{}", m.name);
        }
    }
}

/// The model [`subnormal_flush_f16_bits`], read through core's f16 codec,
/// equals core's e4m3 decode on every normal code and differs on every
/// nonzero subnormal, so the EXACT and FOLD arms (integer codes, all
/// normal) cannot see `subnormal-flush`, and the CODES arm sees it bit for
/// bit. (That the CUDA text computes what the model says is shown on a GPU:
/// `every_mutant_is_caught_by_the_gate` below, and the gate's CODES rows
/// differing in exactly the outputs whose weight code is subnormal.)
#[test]
fn subnormal_flush_is_right_for_normals_and_flushes_subnormals() {
    let (mut normals, mut subnormals) = (0, 0);
    for code in 0..=255u8 {
        let (field, mant) = ((code >> 3) & 0x0F, code & 0x07);
        let want = decode_e4m3(code, Ieee);
        let got = decode_f16(subnormal_flush_f16_bits(code));
        if code & 0x7F == 0x7F {
            // The NaN magnitudes: never decoded (rule NAN-W; see the model).
            assert!(want.is_nan(), "0x{code:02X}");
        } else if field != 0 {
            assert_eq!(got.to_bits(), want.to_bits(), "normal 0x{code:02X}");
            normals += 1;
        } else if mant != 0 {
            assert_ne!(got, want, "subnormal 0x{code:02X}");
            assert_eq!(got, 0.0, "subnormal 0x{code:02X} is flushed");
            assert_eq!(got.is_sign_negative(), code & 0x80 != 0);
            subnormals += 1;
        } else {
            assert_eq!(got.to_bits(), want.to_bits(), "zero 0x{code:02X}");
        }
    }
    assert_eq!((normals, subnormals), (2 * 15 * 8 - 2, 2 * 7));
}

/// Each mutant fails at least one battery shape in each arm it claims.
#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn every_mutant_is_caught_by_the_gate() {
    // The gate's own battery (it includes (1000, 130, 7), the only shape
    // with weight rows off 16-byte boundaries, where the byte-wise k-tail
    // path runs), less its one large-m shape to keep the test quick.
    let shapes: Vec<_> = BATTERY
        .iter()
        .copied()
        .filter(|&(_, _, m)| m <= 128)
        .collect();
    for m in &MUTANTS {
        let text = apply(m, BUILTIN_FP8_MMQ_CU).unwrap();
        let src = KernelSource::from_file(&write_mutant(m.name, &text)).unwrap();
        let mut engine = Engine::with_source(0, src).unwrap();
        engine.set_guards(true);
        // The native e4m3 wgmma variants (sm_90a: k15 ..), each forced:
        // every mutant that reaches them must be caught there too.
        // (Only those with tensor-map copies, k18 .., for a mutant of that
        // path.)
        let first = if tma_only(m) { TMA_FIRST } else { NATIVE_FIRST };
        let natives: Vec<u32> = (first..engine.mmq_variants()).collect();
        if reaches_native(m) {
            for &v in &natives {
                engine.set_mmq_variant(Some(v)).unwrap();
                for &arm in m.caught_by {
                    assert!(
                        caught(&engine, &shapes, arm),
                        "mutant {} ({}) passed every {} shape with native variant k{v} forced",
                        m.name,
                        m.what,
                        arm.name()
                    );
                }
            }
            engine.set_mmq_variant(None).unwrap();
        }
        if native_only(m) {
            // Checked above with the native variants forced; the plan's own
            // choice may be another family, which the mutant leaves alone.
            continue;
        }
        if m.name == "subnormal-flush" && engine.arch() < (9, 0) {
            // Only sm_90's f16 variants (CV = 1) convert e4m3 -> f16
            // (e4m3x4_to_f16, the mutant's anchor); below sm_90 only the
            // native e4m3 mma.sync variants run, which never reach it.
            let (major, minor) = engine.arch();
            println!(
                "skipping mutant {} on sm_{major}{minor}: it plants its bug in the e4m3 -> f16 conversion, which only sm_90's CV=1 variants run",
                m.name
            );
            continue;
        }
        for &arm in m.caught_by {
            assert!(
                caught(&engine, &shapes, arm),
                "mutant {} ({}) passed every {} shape",
                m.name,
                m.what,
                arm.name()
            );
        }
    }
}

/// The first native e4m3 wgmma variant of the builtin source (sm_90a).
const NATIVE_FIRST: u32 = 15;
/// The first native variant whose tiles come by tensor-map copies.
const TMA_FIRST: u32 = 18;

/// Whether some shape of `shapes` fails in `arm` on `engine`.
fn caught(
    engine: &Engine,
    shapes: &[(usize, usize, usize)],
    arm: kernel_oracle::fp8_mmq::Arm,
) -> bool {
    shapes.iter().any(|&(in_f, out_f, mm)| {
        let data = CaseSpec::battery(in_f, out_f, mm, arm).generate().unwrap();
        match run::run_case(engine, &data, arm) {
            Outcome::Judged(v) => !v.pass(),
            // A device failure is a failing gate row: caught.
            Outcome::Failed { .. } => true,
            Outcome::Refused { .. } | Outcome::PeerRefused { .. } => false,
        }
    })
}
