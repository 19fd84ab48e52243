//! The runner: one case through the wgpu shim.

use super::generate::CaseData;
use device::wgpu::{Form, Geometry, QuantPath, ShaderSource, WgpuEngine, WgpuError};
use std::sync::OnceLock;

/// The process's wgpu engine: the adapter of `WGPU_BACKEND` (else Vulkan)
/// and the shader named by `KERNEL_ORACLE_MUL_MAT_WGSL` (else the builtin
/// `shaders/mul_mat_reg_tile.wgsl`).
///
/// # Errors
/// Why no engine could be made (no adapter, unreadable candidate), as a
/// message; the same message on every call.
pub fn engine() -> Result<&'static WgpuEngine, String> {
    engine_or_fault().map_err(|(msg, _)| msg.clone())
}

/// [`engine`], with whether the failure is the candidate's own: `true`
/// for declarations the shim cannot read or a shader that does not
/// compile (`WgpuError::Declaration`, `WgpuError::Compile`: a broken
/// kernel, exit 1), `false` for no adapter or an unreadable file (exit 2).
///
/// # Errors
/// The message and that flag; the same on every call.
pub fn engine_or_fault() -> Result<&'static WgpuEngine, &'static (String, bool)> {
    static ENGINE: OnceLock<Result<WgpuEngine, (String, bool)>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let src = ShaderSource::from_env().map_err(|e| (e.to_string(), false))?;
            WgpuEngine::new(src).map_err(|e| {
                let own = matches!(e, WgpuError::Declaration { .. } | WgpuError::Compile { .. });
                (e.to_string(), own)
            })
        })
        .as_ref()
}

/// Runs `data` through the kernel with `geom`, in the engine's default
/// form (`WgpuEngine::default_form`), on the case's path
/// ([`super::path_for`]; fused when the shader has no `dequant` entry);
/// returns `dst` (N x M, stride M).
///
/// # Errors
/// Whatever the shim reports: a compile error of a candidate, a clobbered
/// guard band, a device error. For a generated case every one is a bug.
pub fn run_case(
    engine: &WgpuEngine,
    data: &CaseData,
    geom: Geometry,
) -> Result<Vec<f32>, WgpuError> {
    run_case_form(engine, data, geom, engine.default_form())
}

/// [`run_case`] in the shader form `form` (the plain source, or its
/// subgroup form: `device::wgpu::Form`).
///
/// # Errors
/// As [`run_case`]; `WgpuError::NoSubgroupForm` for the subgroup form on
/// an engine without one.
pub fn run_case_form(
    engine: &WgpuEngine,
    data: &CaseData,
    geom: Geometry,
    form: Form,
) -> Result<Vec<f32>, WgpuError> {
    let s = &data.spec;
    let path = if engine.decl().dequant {
        super::path_for(s)
    } else {
        QuantPath::Fused
    };
    engine.mul_mat_form(
        s.dtype, geom, path, form, s.m, s.n, s.k, &data.src0, &data.src1,
    )
}
