//! Without a CUDA driver (CI, this crate's build machine), every entry
//! point returns a typed error and nothing panics.

use device::cuda::{driver_available, DeviceError, Engine, KernelSource};

/// Where libcuda is absent the answer is `NoDriver`; where it is present
/// (a GPU host) device 0 must open. Either way the test checks something.
#[test]
fn engine_new_without_libcuda_is_no_driver_and_with_it_opens() {
    if driver_available().is_ok() {
        let e = Engine::new(0)
            .unwrap_or_else(|e| panic!("libcuda is present but device 0 does not open: {e}"));
        assert!(!e.device_name().is_empty());
        return;
    }
    match Engine::new(0) {
        Err(DeviceError::NoDriver { searched }) => {
            assert!(searched.contains("libcuda.so"), "{searched}");
            let msg = Engine::new(0).unwrap_err().to_string();
            assert!(msg.starts_with("no CUDA driver"), "{msg}");
        }
        other => panic!("expected DeviceError::NoDriver, got {other:?}"),
    }
    match Engine::with_source(0, KernelSource::builtin()) {
        Err(DeviceError::NoDriver { .. }) => {}
        other => panic!("expected DeviceError::NoDriver, got {other:?}"),
    }
}

#[test]
fn engine_on_a_missing_ordinal_is_a_typed_error() {
    // Whatever this machine has, device 1_000_000 does not exist: the
    // answer is an error (NoDriver, NoNvrtc or a driver error), not a panic.
    match Engine::new(1_000_000) {
        Ok(e) => panic!("opened a device that cannot exist: {e:?}"),
        Err(
            DeviceError::NoDriver { .. } | DeviceError::NoNvrtc { .. } | DeviceError::Driver { .. },
        ) => {}
        Err(other) => panic!("unexpected error kind: {other}"),
    }
}
