//! The schedule code a kernel source declares in `plan[15]` of
//! `fp8_mmq_plan`: which arithmetic ([`Schedule`]) the picked or forced
//! MMQ variant computes.
//!
//! The code is two fields, written in the ABI comment at the top of
//! `cu/fp8_mmq.cu`:
//! - bit 0, the fold: 0 [`Fold::Separate`] (`sum + (s * d) * c`, three
//!   roundings), 1 [`Fold::Fused`] (`fma(s * d, c, sum)`);
//! - bits 1..31, the in-block accumulation: 0 [`Accumulation::F32`] (one
//!   chained f32 accumulator, order hardware-internal, judged by the bound
//!   in the RANDOM arm), 1 [`Accumulation::TensorCore`] with
//!   [`SM90_WGMMA`] (the sm_90 `wgmma` FP8 MMA's own accumulator,
//!   bit-exact), 2 with [`SM90_MMA_SYNC`] (`mma.sync` .e4m3 as ptxas lowers
//!   it on sm_90, bit-exact).
//!
//! So 0 is seed 000's v2 ([`Schedule::V2`]: a candidate written before
//! schedules existed, which wrote 0 there, keeps its meaning), 1 is v2
//! with a fused fold, 2 the sm_90 MMA with a separate fold, 3 the sm_90
//! MMA with a fused fold, 4 and 5 the lowered `mma.sync` with a separate
//! and a fused fold. Any other code is
//! [`DeviceError::UnknownSchedule`](super::DeviceError::UnknownSchedule).

use oracle::fp8_mmq::{Accumulation, Fold, Schedule};
use oracle::tensor_core::{SM90_MMA_SYNC, SM90_WGMMA};

/// Every defined code and its schedule, code order.
pub const SCHEDULE_CODES: [(u32, Schedule); 6] = [
    (0, Schedule::V2),
    (1, Schedule::V2_FUSED),
    (2, Schedule::SM90_WGMMA_SEPARATE),
    (3, Schedule::SM90_WGMMA_FUSED),
    (4, Schedule::SM90_MMA_SYNC_SEPARATE),
    (5, Schedule::SM90_MMA_SYNC_FUSED),
];

/// The schedule a `plan[15]` code declares, or `None` for a code this
/// ABI does not define (see the module doc for the encoding).
pub fn schedule_from_code(code: u32) -> Option<Schedule> {
    let fold = if code & 1 == 0 {
        Fold::Separate
    } else {
        Fold::Fused
    };
    let accumulation = match code >> 1 {
        0 => Accumulation::F32,
        1 => Accumulation::TensorCore(SM90_WGMMA),
        2 => Accumulation::TensorCore(SM90_MMA_SYNC),
        _ => return None,
    };
    Some(Schedule { fold, accumulation })
}

/// The `plan[15]` code of `schedule`: `None` for a schedule the ABI has no
/// code for (the partial-first folds, which no kernel of `cu/` computes,
/// and a model added to core without a code); declaring one for our own
/// kernels is refused with that message.
pub fn schedule_code(schedule: &Schedule) -> Option<u32> {
    SCHEDULE_CODES
        .iter()
        .find(|(_, s)| s == schedule)
        .map(|&(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_zero_is_v2() {
        assert_eq!(schedule_from_code(0), Some(Schedule::V2));
        for (code, s) in SCHEDULE_CODES {
            assert_eq!(schedule_from_code(code), Some(s));
            assert_eq!(schedule_code(&s), Some(code));
        }
        for code in [6, 7, 0x8000_0000, u32::MAX] {
            assert_eq!(schedule_from_code(code), None);
        }
    }
}
