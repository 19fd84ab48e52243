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
    static ENGINE: OnceLock<Result<MoeEngine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let mut e = MoeEngine::new(0).map_err(|e| e.to_string())?;
            e.set_guards(true);
            Ok(e)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Uploads the selections, builds the tables on the device and downloads
/// them; the shim's refusal (before or by the launch) is the `Err`.
///
/// # Errors
/// Every [`DeviceError`]; the judge decides which are agreements.
pub fn device_tables(engine: &MoeEngine, data: &CaseData) -> Result<Tables, DeviceError> {
    let sel = engine.upload(&data.experts)?;
    let selw = engine.upload(&data.weights)?;
    let (p, s) = engine.vrows_tables(&sel, &selw, data.layer, &data.bank())?;
    Ok(Tables {
        ptrs: engine.download(&p)?,
        scales: engine.download(&s)?,
    })
}
