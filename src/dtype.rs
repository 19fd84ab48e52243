//! The output element types of the checks (`oracle::dtype::Dtype`) by
//! name, and a vector's bits in one.

use oracle::dtype::Dtype;

/// The dtype named `s` (torch's names, or `bf16`, `f16`, `half`, `f32`,
/// `float`).
///
/// # Errors
/// A sentence naming the dtypes.
pub fn parse_dtype(s: &str) -> Result<Dtype, String> {
    Dtype::from_name(s)
        .ok_or_else(|| format!("dtype {s:?}: expected \"float32\", \"bfloat16\" or \"float16\""))
}

/// `v`'s bits in `dtype` (each rounded to nearest even), widened to 32.
pub fn bits(dtype: Dtype, v: &[f32]) -> Vec<u32> {
    v.iter().map(|&x| dtype.encode(x)).collect()
}
