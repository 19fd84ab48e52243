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

/// Defines the fuzz target's entry points (libfuzzer-sys's
/// `LLVMFuzzerInitialize`, with its panic hook, and
/// `rust_fuzzer_test_input`) for a body that takes the decoded input by
/// reference and the path libFuzzer writes it to:
/// `typed_fuzz_target!(|spec: &CaseSpec, artifact: &str| { .. })`, run
/// through [`run_typed`]. libfuzzer-sys's own `&[u8]` form answers cargo
/// fuzz fmt's `RUST_LIBFUZZER_DEBUG_PATH` with the raw bytes before its
/// body runs; this one writes the decoded value, as its typed form does.
#[macro_export]
macro_rules! typed_fuzz_target {
    (|$spec:ident: &$ty:ty, $artifact:ident: &str| $body:block) => {
        const _: () = {
            #[no_mangle]
            pub extern "C" fn LLVMFuzzerInitialize(
                argc: *const isize,
                argv: *const *const *const u8,
            ) -> isize {
                ::libfuzzer_sys::initialize(argc, argv);
                0
            }

            #[no_mangle]
            #[allow(improper_ctypes_definitions)]
            pub extern "C" fn rust_fuzzer_test_input(bytes: &[u8]) -> i32 {
                __kernel_oracle_fuzz_run(bytes).to_libfuzzer_code()
            }

            /// The target's own frame in a crash's stack (libfuzzer-sys
            /// keeps one for crash deduplication too).
            #[inline(never)]
            fn __kernel_oracle_fuzz_run(bytes: &[u8]) -> ::libfuzzer_sys::Corpus {
                $crate::run_typed(bytes, |$spec: &$ty, $artifact: &str| $body)
            }
        };
    };
}

/// Runs `check` on the input `data` decoded as libfuzzer-sys's typed
/// `fuzz_target!(|spec: T| ..)` decodes it (`T::arbitrary_take_rest`; too
/// short for `T::size_hint` or undecodable: rejected; under cargo-fuzz's
/// `RUST_LIBFUZZER_DEBUG_PATH`, `cargo fuzz fmt`, the value's `{:#?}`
/// written there instead), with the path libFuzzer writes `data` to when
/// `check` panics ([`kernel_oracle::libfuzzer_crash_artifact`]), so that
/// the report's rerun line names the file. The raw bytes are what the
/// path's SHA-1 needs, and the typed macro does not pass them on.
pub fn run_typed<T>(data: &[u8], check: impl FnOnce(&T, &str)) -> libfuzzer_sys::Corpus
where
    T: for<'a> arbitrary::Arbitrary<'a> + std::fmt::Debug,
{
    use arbitrary::{Arbitrary, Unstructured};
    use libfuzzer_sys::Corpus;
    if data.len() < <T as Arbitrary>::size_hint(0).0 {
        return Corpus::Reject;
    }
    let value = T::arbitrary_take_rest(Unstructured::new(data));
    if let Some(path) = libfuzzer_sys::rust_libfuzzer_debug_path() {
        let text = match &value {
            Ok(v) => format!("{v:#?}\n"),
            Err(e) => format!("Arbitrary Error: {e}\n"),
        };
        std::fs::write(path, text).expect("failed to write to `RUST_LIBFUZZER_DEBUG_PATH` file");
        return Corpus::Reject;
    }
    match value {
        Ok(v) => {
            check(&v, &kernel_oracle::libfuzzer_crash_artifact(data));
            Corpus::Keep
        }
        Err(_) => Corpus::Reject,
    }
}
