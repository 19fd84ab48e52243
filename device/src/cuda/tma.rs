//! Tensor maps for the FP8 MMQ's TMA variants (`plan[16] = 1` in
//! `cu/fp8_mmq.cu`'s ABI): the 128-byte `CUtensorMap` a kernel takes by
//! value (`const __grid_constant__`) and reads with
//! `cp.async.bulk.tensor` (PTX ISA, "Data movement: cp.async.bulk.tensor";
//! CUDA driver API, "Tensor Map Object Management": `cuTensorMapEncodeTiled`).

use super::error::{DeviceError, Result};
use cudarc::driver::sys::{
    cuTensorMapEncodeTiled, CUtensorMap, CUtensorMapDataType, CUtensorMapFloatOOBfill,
    CUtensorMapInterleave, CUtensorMapL2promotion, CUtensorMapSwizzle,
};
use cudarc::driver::DeviceRepr;

/// One encoded tensor map, passed to a kernel by value.
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub(crate) struct TensorMap(CUtensorMap);

// SAFETY: `CUtensorMap` is `repr(C)` plain data, 16 u64 (128 bytes, 128-byte
// aligned here), the size of the kernel parameter (the ABI's `TmaDesc`,
// 64-byte aligned: what cuTensorMapEncodeTiled requires of a map).
unsafe impl DeviceRepr for TensorMap {}

impl TensorMap {
    /// The all-zero map: what the ABI passes where a map does not apply
    /// (the kernel then does not read it).
    pub(crate) fn zeroed() -> TensorMap {
        TensorMap(CUtensorMap { opaque: [0; 16] })
    }

    /// A 2-D map over bytes at device address `addr`: `rows` rows of
    /// `row_bytes` bytes, row stride `stride` bytes, boxes of `box_rows`
    /// rows x `box_bytes` bytes, 128-byte swizzled in shared memory (the
    /// layout the MMQ's wgmma descriptors read), out-of-bound bytes read as
    /// zero.
    ///
    /// # Errors
    /// [`DeviceError::Driver`] when the driver refuses the map (TMA needs
    /// `addr` 16-byte aligned, `stride` a multiple of 16 below 2^40, each
    /// dimension in 1 ..= 2^32, a box of at most 256 rows and, swizzled,
    /// at most 128 bytes per row).
    pub(crate) fn tiled_u8(
        addr: u64,
        row_bytes: u64,
        rows: u64,
        stride: u64,
        box_bytes: u32,
        box_rows: u32,
    ) -> Result<TensorMap> {
        let mut map = TensorMap::zeroed();
        let dims = [row_bytes, rows];
        let strides = [stride];
        let boxes = [box_bytes, box_rows];
        let elem = [1u32, 1];
        // SAFETY: every pointer is to a live local of the length the rank
        // (2) asks for; the driver only writes `map`.
        let r = unsafe {
            cuTensorMapEncodeTiled(
                &mut map.0,
                CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                2,
                addr as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem.as_ptr(),
                CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        r.result().map_err(|e| {
            DeviceError::driver(
                format!(
                    "cuTensorMapEncodeTiled (u8 {rows} x {row_bytes}, stride {stride}, box {box_rows} x {box_bytes})"
                ),
                e,
            )
        })?;
        Ok(map)
    }
}
