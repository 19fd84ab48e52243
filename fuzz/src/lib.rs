//! Glue shared by the fuzz targets.

/// Exports `__asan_default_options` so that an ASan build (`cargo +nightly
/// fuzz run ...`) creates a CUDA context: CUDA maps memory in the range ASan
/// protects as its shadow gap, and `cuCtxCreate` then fails with
/// CUDA_ERROR_OUT_OF_MEMORY unless the gap is left unprotected. ASan reads
/// this weak symbol before `main`; defining it in the target itself keeps
/// `cargo fuzz run fp8_mmq` working with no environment to set.
///
/// `detect_leaks=0`: the CUDA driver keeps a 72 KiB allocation from its own
/// initialisation to process exit, which LeakSanitizer reports as a leak
/// (seen on the H200, driver 580) and libFuzzer then counts as a crash.
/// Nothing here is leak-checked usefully through the driver anyway.
#[macro_export]
macro_rules! asan_options {
    () => {
        #[no_mangle]
        pub extern "C" fn __asan_default_options() -> *const ::std::os::raw::c_char {
            c"protect_shadow_gap=0:detect_leaks=0".as_ptr()
        }
    };
}
