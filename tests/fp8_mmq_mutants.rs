//! Planted bugs must stay plantable (CPU) and must be caught (GPU).

use device::cuda::{compile, Engine, KernelSource, BUILTIN_FP8_MMQ_CU};
use kernel_oracle::fp8_mmq::gate::BATTERY;
use kernel_oracle::fp8_mmq::mutants::{apply, by_name, subnormal_flush_f16_bits, MUTANTS};
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

/// An unsigned C expression over `u32` (the subset `subnormal-flush`'s CUDA
/// uses: literals with an optional `u` suffix, names, parentheses, `?:`,
/// `|`, `&`, `<<`, `>>`, `+`, `*`, with C's precedence), evaluated with the
/// names bound in `env`.
fn eval_c(expr: &str, env: &[(&str, u32)]) -> u32 {
    let mut toks = Vec::new();
    let mut rest = expr.trim();
    while !rest.is_empty() {
        let n = match rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            Some(0) if rest.starts_with("<<") || rest.starts_with(">>") => 2,
            Some(0) => 1,
            Some(n) => n,
            None => rest.len(),
        };
        toks.push(&rest[..n]);
        rest = rest[n..].trim_start();
    }
    struct P<'a> {
        toks: Vec<&'a str>,
        pos: usize,
        env: &'a [(&'a str, u32)],
    }
    impl P<'_> {
        fn eat(&mut self, t: &str) -> bool {
            let hit = self.toks.get(self.pos) == Some(&t);
            self.pos += usize::from(hit);
            hit
        }
        fn ternary(&mut self) -> u32 {
            let c = self.binary(0);
            if !self.eat("?") {
                return c;
            }
            let a = self.ternary();
            assert!(self.eat(":"), "expected ':' in {:?}", self.toks);
            let b = self.ternary();
            if c != 0 {
                a
            } else {
                b
            }
        }
        /// C's binary levels, loosest first.
        fn binary(&mut self, level: usize) -> u32 {
            const LEVELS: [&[&str]; 5] = [&["|"], &["&"], &["<<", ">>"], &["+"], &["*"]];
            if level == LEVELS.len() {
                return self.primary();
            }
            let mut v = self.binary(level + 1);
            while let Some(&op) = LEVELS[level].iter().find(|&&op| self.eat(op)) {
                let r = self.binary(level + 1);
                v = match op {
                    "|" => v | r,
                    "&" => v & r,
                    "<<" => v << r,
                    ">>" => v >> r,
                    "+" => v.wrapping_add(r),
                    _ => v.wrapping_mul(r),
                };
            }
            v
        }
        fn primary(&mut self) -> u32 {
            if self.eat("(") {
                let v = self.ternary();
                assert!(self.eat(")"), "expected ')' in {:?}", self.toks);
                return v;
            }
            let t = self.toks[self.pos];
            self.pos += 1;
            if let Some(&(_, v)) = self.env.iter().find(|(name, _)| *name == t) {
                return v;
            }
            let t = t.trim_end_matches(['u', 'U']);
            match t.strip_prefix("0x") {
                Some(hex) => u32::from_str_radix(hex, 16),
                None => t.parse(),
            }
            .unwrap_or_else(|_| panic!("unknown token {t:?}"))
        }
    }
    let mut p = P { toks, pos: 0, env };
    let v = p.ternary();
    assert_eq!(p.pos, p.toks.len(), "trailing tokens in {expr:?}");
    v
}

/// The right-hand side of the statement in `text` that starts with `lhs`
/// (up to its `;`), with `h[i]` read as the name `hi`.
fn rhs(text: &str, lhs: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with(lhs))
        .unwrap_or_else(|| panic!("no statement {lhs:?} in {text}"));
    let e = line[lhs.len()..].trim_start().strip_prefix('=').unwrap();
    let e = e.split(';').next().unwrap();
    (0..4).fold(e.to_string(), |e, i| {
        e.replace(&format!("h[{i}]"), &format!("h{i}"))
    })
}

/// The model [`subnormal_flush_f16_bits`] is what `subnormal-flush`'s CUDA
/// computes: its statements, parsed from the mutant's text and evaluated,
/// give the model's f16 bits per byte, byte i into half i of `lo` then
/// `hi`, every code in every byte position.
#[test]
fn subnormal_flush_model_is_the_mutant_cuda() {
    let text = by_name("subnormal-flush").unwrap().replace;
    let (b, sign, h) = (
        rhs(text, "const u32 b"),
        rhs(text, "const u32 sign"),
        rhs(text, "h[i]"),
    );
    let (lo, hi) = (rhs(text, "lo"), rhs(text, "hi"));
    for c in 0..=255u8 {
        let x = u32::from_le_bytes([0, 1, 2, 3].map(|i| c.wrapping_add(i * 85)));
        let mut env: Vec<(&str, u32)> = vec![("x", x)];
        let names = ["h0", "h1", "h2", "h3"];
        for (i, name) in names.into_iter().enumerate() {
            let b = eval_c(&b, &[("x", x), ("i", i as u32)]);
            assert_eq!(b, x.to_le_bytes()[i].into());
            let sign = eval_c(&sign, &[("b", b)]);
            let h = eval_c(&h, &[("b", b), ("sign", sign)]);
            assert_eq!(
                h,
                u32::from(subnormal_flush_f16_bits(b as u8)),
                "code 0x{b:02X}"
            );
            env.push((name, h));
        }
        let model = |i: usize| u32::from(subnormal_flush_f16_bits(x.to_le_bytes()[i]));
        assert_eq!(eval_c(&lo, &env), model(0) | model(1) << 16);
        assert_eq!(eval_c(&hi, &env), model(2) | model(3) << 16);
    }
}

/// The model [`subnormal_flush_f16_bits`], read through core's f16 codec,
/// equals core's e4m3 decode on every normal code and differs on every
/// nonzero subnormal, so the EXACT and FOLD arms (integer codes, all
/// normal) cannot see `subnormal-flush`, and the CODES arm sees it bit for
/// bit.
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
    // with unaligned weight rows, where the byte-wise k-tail path runs),
    // less its one large-m shape to keep the test quick.
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
            let failed = shapes.iter().any(|&(in_f, out_f, mm)| {
                let data = CaseSpec::battery(in_f, out_f, mm, arm).generate().unwrap();
                match run::run_case(&engine, &data, arm) {
                    Outcome::Judged(v) => !v.pass(),
                    Outcome::Refused { .. } => false,
                }
            });
            assert!(
                failed,
                "mutant {} ({}) passed every {} shape",
                m.name,
                m.what,
                arm.name()
            );
        }
    }
}
