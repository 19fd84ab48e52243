//! The runner: one case through `moe_vrows_tables_from_sel`.

use super::generate::CaseData;
use super::judge::Tables;
use device::cuda::{DeviceError, MoeEngine};
use std::sync::OnceLock;

/// The process's MoE tables engine on device 0, with guard bands on both
/// outputs. The kernel source is the candidate named by
/// `KERNEL_ORACLE_MOE_TABLES_CU`, else the builtin `cu/moe_tables.cu`.
///
/// # Errors
/// Why no engine could be made (no driver, no NVRTC, no device, the source
/// does not compile), as a message; the same message on every call.
pub fn engine() -> Result<&'static MoeEngine, String> {
    engine_cell().as_ref().map_err(|(msg, _)| msg.clone())
}

/// Whether [`engine`] failed because of the kernel source (it does not
/// compile or lacks a kernel: `DeviceError::is_source_fault`) rather
/// than the machine: the gate reports that as a failing row.
pub fn engine_source_fault() -> bool {
    matches!(engine_cell(), Err((_, true)))
}

fn engine_cell() -> &'static Result<MoeEngine, (String, bool)> {
    static ENGINE: OnceLock<Result<MoeEngine, (String, bool)>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut e = MoeEngine::new(0).map_err(|e| (e.to_string(), e.is_source_fault()))?;
        e.set_guards(true);
        Ok(e)
    })
}

/// Uploads the selections, builds the tables on the device and downloads
/// them; the shim's refusal (before or by the launch) is the `Err`. With
/// `max_ctas`, the launch uses at most that many CTAs
/// ([`MoeEngine::vrows_tables`]).
///
/// # Errors
/// Every [`DeviceError`]; the judge decides which are agreements.
pub fn device_tables(
    engine: &MoeEngine,
    data: &CaseData,
    max_ctas: Option<u32>,
) -> Result<Tables, DeviceError> {
    let sel = engine.upload(&data.experts)?;
    let selw = engine.upload(&data.weights)?;
    let cap = max_ctas.unwrap_or(device::cuda::MOE_MAX_CTAS);
    let (p, s) = engine.vrows_tables(&sel, &selw, data.layer, &data.bank(), cap)?;
    Ok(Tables {
        ptrs: engine.download(&p)?,
        scales: engine.download(&s)?,
    })
}
