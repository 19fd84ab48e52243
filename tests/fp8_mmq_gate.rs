//! The fp8-mmq gate as a test (seed 000's battery, every arm, the codes
//! decoded bit-exactly).

use kernel_oracle::fp8_mmq::{engine, gate, Arm};

#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn fp8_mmq_gate_battery_is_all_green() {
    let engine = engine().unwrap_or_else(|e| panic!("no CUDA device: {e}"));
    let result = gate::run(engine, &gate::BATTERY);
    assert_eq!(result.rows, Arm::ALL.len() * gate::BATTERY.len());
    assert_eq!(result.codes_exact, gate::OBSERVABLE_CODES);
    assert_eq!(result.failures, 0, "see the table above");
}
