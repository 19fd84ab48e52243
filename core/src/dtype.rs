//! The element types a kernel's floating-point output is rounded to:
//! binary32, bfloat16 and binary16. A value of any of them is held as the
//! `f32` of the same value (exact); its bits, widened to 32, are what a
//! check compares.
//!
//! Source: IEEE 754-2019 (binary32, binary16); bfloat16 as torch and the
//! PTX ISA define it (binary32's sign and exponent, 7 fraction bits),
//! round to nearest even ([`crate::bf16`], [`crate::f16`]).

/// An output element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// binary32.
    F32,
    /// bfloat16 ([`crate::bf16`]).
    Bf16,
    /// binary16 ([`crate::f16`]).
    F16,
}

impl Dtype {
    /// Every dtype.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::Bf16, Dtype::F16];

    /// `x` rounded to this dtype, to nearest even (overflow to infinity),
    /// as an `f32`: [`crate::bf16::encode_bf16`] or
    /// [`crate::f16::encode_f16`] then the exact decode; F32 is `x`.
    pub fn round(self, x: f32) -> f32 {
        self.decode(self.encode(x))
    }

    /// `x`'s bits in this dtype (rounded to nearest even), widened to 32
    /// (F32: its own bits).
    pub fn encode(self, x: f32) -> u32 {
        match self {
            Dtype::F32 => x.to_bits(),
            Dtype::Bf16 => u32::from(crate::bf16::encode_bf16(x)),
            Dtype::F16 => u32::from(crate::f16::encode_f16(x)),
        }
    }

    /// The value of `bits` in this dtype (the low 16 bits for Bf16 and
    /// F16); exact.
    pub fn decode(self, bits: u32) -> f32 {
        match self {
            Dtype::F32 => f32::from_bits(bits),
            Dtype::Bf16 => crate::bf16::decode_bf16(bits as u16),
            Dtype::F16 => crate::f16::decode_f16(bits as u16),
        }
    }

    /// The value `n` steps of this dtype from `x` along the number line
    /// (`n > 0` up, `n < 0` down; `x` a value of the dtype): its values in
    /// the order of their sign-magnitude bits (IEEE 754-2019 §3.4, which
    /// bfloat16 shares), `-0` and `+0` one value, so that the step below
    /// `+0` is the negative subnormal of least magnitude. Stepping past the
    /// largest finite value gives the infinity of its sign (the encoding
    /// next to it); further steps are not meaningful.
    pub fn steps(self, x: f32, n: i32) -> f32 {
        let sign = match self {
            Dtype::F32 => 1u32 << 31,
            Dtype::Bf16 | Dtype::F16 => 1 << 15,
        };
        let b = self.encode(x);
        let mag = i64::from(b & !sign);
        let key = if b & sign != 0 { -mag } else { mag } + i64::from(n);
        let bits = if key < 0 {
            sign | (-key) as u32
        } else {
            key as u32
        };
        self.decode(bits)
    }

    /// Whether `bits` (as [`Dtype::encode`] gives them) is a NaN.
    pub fn is_nan(self, bits: u32) -> bool {
        self.decode(bits).is_nan()
    }

    /// Whether two values' bits are the same output: bit for bit, any NaN
    /// equal to any NaN.
    pub fn same(self, a: u32, b: u32) -> bool {
        a == b || self.is_nan(a) && self.is_nan(b)
    }

    /// The dtype's torch name (`"float32"`, `"bfloat16"`, `"float16"`).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "float32",
            Dtype::Bf16 => "bfloat16",
            Dtype::F16 => "float16",
        }
    }

    /// The dtype named `s`: torch's names, and `"bf16"`, `"f16"`, `"half"`,
    /// `"f32"`, `"float"` (any case).
    pub fn from_name(s: &str) -> Option<Dtype> {
        let is = |names: &[&str]| names.iter().any(|n| n.eq_ignore_ascii_case(s));
        if is(&["float32", "f32", "float"]) {
            Some(Dtype::F32)
        } else if is(&["bfloat16", "bf16"]) {
            Some(Dtype::Bf16)
        } else if is(&["float16", "f16", "half"]) {
            Some(Dtype::F16)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    #[test]
    fn names_round_and_nans() {
        for d in Dtype::ALL {
            assert_eq!(Dtype::from_name(d.name()), Some(d));
        }
        assert_eq!(Dtype::from_name("BF16"), Some(Dtype::Bf16));
        assert_eq!(Dtype::from_name("float64"), None);
        assert_eq!(Dtype::Bf16.round(1.0 + f32::EPSILON), 1.0);
        assert_eq!(Dtype::F16.round(65520.0), f32::INFINITY);
        assert!(Dtype::Bf16.same(0x7FC1, 0xFFC0));
        assert!(!Dtype::F16.same(0x7C00, 0xFC00));
        assert!(Dtype::F32.same(f32::NAN.to_bits(), 0xFFFF_FFFF));
    }

    #[test]
    fn steps_walk_the_number_line() {
        assert_eq!(Dtype::F32.steps(1.0, 1), 1.0 + f32::EPSILON);
        assert_eq!(Dtype::F32.steps(1.0, -1), 1.0 - f32::EPSILON / 2.0);
        assert_eq!(Dtype::F32.steps(-1.0, 1), -1.0 + f32::EPSILON / 2.0);
        assert_eq!(Dtype::F32.steps(0.0, -1), -f32::from_bits(1));
        assert_eq!(Dtype::F32.steps(-0.0, 2), f32::from_bits(2));
        assert_eq!(Dtype::Bf16.steps(1.0, 1), 1.0 + 1.0 / 128.0);
        assert_eq!(Dtype::Bf16.steps(-2.0, -3), -2.0 - 3.0 / 64.0);
        assert_eq!(Dtype::F16.steps(1.0, -1), 1.0 - 1.0 / 2048.0);
        assert_eq!(Dtype::F16.steps(65504.0, 1), f32::INFINITY);
        // Every step of a sweep across zero is one value up, in order.
        for d in Dtype::ALL {
            let mut x = d.steps(0.0, -300);
            for _ in 0..600 {
                let y = d.steps(x, 1);
                assert!(y > x || (x == 0.0 && y > 0.0), "{d:?} {x:e} -> {y:e}");
                assert_eq!(
                    d.steps(y, -1).to_bits() & 0x7FFF_FFFF,
                    x.to_bits() & 0x7FFF_FFFF
                );
                x = y;
            }
        }
    }

    #[test]
    fn steps_at_every_16_bit_value_and_the_binary32_edges() {
        // Every finite value of the 16-bit dtypes, ascending, -0 and +0 one
        // value: a step up is the next, a step down the one before, and n
        // steps add (across zero and the subnormals); past the largest
        // magnitude, the infinity of its sign.
        for d in [Dtype::Bf16, Dtype::F16] {
            let inf = d.encode(f32::INFINITY);
            let mut v: Vec<f32> = (0..=0xFFFFu32)
                .filter(|&b| b != 0x8000 && b & 0x7FFF < inf)
                .map(|b| d.decode(b))
                .collect();
            v.sort_by(f32::total_cmp);
            for (i, &x) in v.iter().enumerate() {
                let up = v.get(i + 1).copied().unwrap_or(f32::INFINITY);
                let down = if i == 0 { f32::NEG_INFINITY } else { v[i - 1] };
                assert_eq!(d.steps(x, 1), up, "{d:?} {x:e}");
                assert_eq!(d.steps(x, -1), down, "{d:?} {x:e}");
                for n in [-700i32, -3, 0, 2, 700] {
                    if let Some(&y) = usize::try_from(i as i64 + i64::from(n))
                        .ok()
                        .and_then(|j| v.get(j))
                    {
                        assert_eq!(d.steps(x, n), y, "{d:?} {x:e} {n}");
                    }
                }
            }
            assert_eq!(d.steps(-0.0, -1), v[v.len() / 2 - 1]);
        }
        let f = Dtype::F32;
        let tiny = f32::from_bits(1);
        assert_eq!(f.steps(f32::MIN_POSITIVE, -1), f32::from_bits(0x007F_FFFF));
        assert_eq!(f.steps(f32::from_bits(0x007F_FFFF), 1), f32::MIN_POSITIVE);
        assert_eq!(f.steps(-f32::MIN_POSITIVE, 1), -f32::from_bits(0x007F_FFFF));
        assert_eq!(f.steps(tiny, -1), 0.0);
        assert_eq!(f.steps(-tiny, 1), 0.0);
        assert_eq!(f.steps(-tiny, 2), tiny);
        assert_eq!(f.steps(tiny, -3), -f32::from_bits(2));
        assert_eq!(f.steps(f32::MAX, 1), f32::INFINITY);
        assert_eq!(f.steps(f32::MIN, -1), f32::NEG_INFINITY);
        assert_eq!(f.steps(f32::INFINITY, -1), f32::MAX);
        assert_eq!(f.steps(-1.0, -1), -1.0 - f32::EPSILON);
        assert_eq!(f.steps(1.5, 1 << 23), 3.0);
        assert_eq!(f.steps(-3.0, 1 << 23), -1.5);
    }
}
