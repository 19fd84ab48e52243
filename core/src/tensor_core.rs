//! The sm_90 FP8 tensor-core MMA inner product (H100/H200), as one output
//! element of `wgmma.mma_async ... k32 .f32.e4m3/.e5m2` computes it.
//!
//! PROVISIONAL: the interface is fixed; the arithmetic below is being
//! derived from test vectors run on the H200 and is replaced by the
//! bit-accurate model.

/// An FP8 operand format of the MMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Kind {
    /// OCP E4M3FN (PTX `.e4m3`).
    E4m3,
    /// OCP E5M2 (PTX `.e5m2`).
    E5m2,
}

/// The instruction whose arithmetic a [`Model`] describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Instruction {
    /// `wgmma.mma_async.sync.aligned.m64nNk32.f32.<a>.<b>` (sm_90a).
    Wgmma,
    /// `mma.sync.aligned.m16n8k32.row.col.f32.<a>.<b>.f32` (sm_89+; on
    /// sm_90 ptxas lowers it to a sequence of other instructions).
    MmaSync,
}

/// A bit-accurate model of one FP8 MMA instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Model {
    /// The instruction modelled.
    pub instruction: Instruction,
}

/// The sm_90 `wgmma` FP8 MMA.
pub const SM90_WGMMA: Model = Model {
    instruction: Instruction::Wgmma,
};

/// Products per MMA along k (elements).
pub const MMA_K: usize = 32;

/// One output element of one k = 32 FP8 MMA: `d = c + sum_k a[k] * b[k]`.
///
/// Shapes: `a` and `b` are 32 FP8 codes each (bytes), in formats `fa` and
/// `fb`; `c` is the incoming f32 accumulator. Returns the f32 `d`.
pub fn mma_k32(
    model: &Model,
    fa: Fp8Kind,
    a: &[u8; MMA_K],
    fb: Fp8Kind,
    b: &[u8; MMA_K],
    c: f32,
) -> f32 {
    let _ = model;
    let dec = |k: Fp8Kind, x: u8| match k {
        Fp8Kind::E4m3 => crate::e4m3::decode_e4m3(x, crate::conventions::NanMagnitude::Ieee),
        Fp8Kind::E5m2 => crate::e5m2::decode_e5m2(x, crate::conventions::NanMagnitude::Ieee),
    };
    let mut acc = c;
    for k in 0..MMA_K {
        acc += dec(fa, a[k]) * dec(fb, b[k]);
    }
    acc
}
