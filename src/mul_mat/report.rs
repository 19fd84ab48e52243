//! Table rows and reproductions for `mul_mat`.

use super::generate::{Arm, CaseSpec};
use super::judge::Verdict;
use device::wgpu::{Form, Geometry, ENV_MUL_MAT_SUBGROUPS};

/// The gate table's header.
pub fn table_header() -> String {
    format!(
        "{:<6} {:<10} {:>5} {:>5} {:>5} {:<7} {:<11} {:<8} {:>10} {:>10} {:>10} {:>8}  verdict",
        "dtype",
        "shape",
        "m",
        "n",
        "k",
        "arm",
        "geometry",
        "form",
        "max_abs",
        "nmse",
        "bound",
        "bit_diff"
    )
}

/// `WG_MxWG_N/TILE_K`.
pub fn geometry(g: &Geometry) -> String {
    format!("{}x{}/{}", g.wg_m, g.wg_n, g.tile_k)
}

/// One table row; the geometry column ends in `+dq` for a case on the
/// dequantize-then-GEMM path ([`super::path_for`]); the form column is
/// the shader form the row ran (`WgpuEngine::form_label`: `plain`, `sg8`).
pub fn table_row(label: &str, spec: &CaseSpec, geom: &Geometry, form: &str, v: &Verdict) -> String {
    let bound = match v.arm {
        Arm::Exact | Arm::Order => "0 bits".to_string(),
        Arm::Random | Arm::Balanced => format!("{:.2e}", v.nmse_bound),
    };
    format!(
        "{:<6} {:<10} {:>5} {:>5} {:>5} {:<7} {:<11} {:<8} {:>10.3e} {:>10.2e} {:>10} {:>8}  {}",
        spec.dtype.name(),
        label,
        spec.m,
        spec.n,
        spec.k,
        spec.arm.name(),
        format!(
            "{}{}",
            geometry(geom),
            if super::path_for(spec) == device::wgpu::QuantPath::Dequant {
                "+dq"
            } else {
                ""
            }
        ),
        form,
        v.cmp.max_abs,
        v.cmp.nmse,
        bound,
        v.cmp.bit_mismatches,
        v.status()
    )
}

/// `spec` as a Rust literal, for a regression test.
pub fn spec_literal(spec: &CaseSpec) -> String {
    format!(
        "kernel_oracle::mul_mat::CaseSpec {{ dtype: device::wgpu::Dtype::{:?}, m: {}, n: {}, k: {}, arm: kernel_oracle::mul_mat::Arm::{:?}, seed: {:#x} }}",
        spec.dtype, spec.m, spec.n, spec.k, spec.arm, spec.seed
    )
}

/// The variable setting that makes the default form `form`
/// (`KERNEL_ORACLE_MUL_MAT_SUBGROUPS=off ` or `=on `), for a rerun line.
pub fn form_env(form: Form) -> String {
    let v = match form {
        Form::Plain => "off",
        Form::Subgroup => "on",
    };
    format!("{ENV_MUL_MAT_SUBGROUPS}={v} ")
}

/// The lines that rerun one case in `form`: the fuzz artifact's (when
/// there is one, [`crate::fuzz_rerun_lines`]), then the `case` command (`kernel-oracle case mul-mat
/// ...`, the program as [`crate::paths::rerun_prefix`] prints it), each
/// `  rerun: ...\n`.
pub fn rerun_lines(spec: &CaseSpec, geom: &Geometry, form: Form, artifact: Option<&str>) -> String {
    let env = crate::candidate_env(device::wgpu::ENV_MUL_MAT_WGSL) + &form_env(form);
    let mut s = String::new();
    if let Some(a) = artifact {
        s += &crate::fuzz_rerun_lines("  ", &env, "mul_mat", a);
    }
    s += &format!(
        "  rerun: {env}{} case mul-mat --dtype {} --m {} --n {} --k {} --arm {} --seed {:#x} --wg {},{},{}\n",
        crate::paths::rerun_prefix(),
        spec.dtype.name(),
        spec.m,
        spec.n,
        spec.k,
        spec.arm.name().to_lowercase(),
        spec.seed,
        geom.wg_m,
        geom.wg_n,
        geom.tile_k
    );
    s
}

/// A failure of the shim on a valid case (a write past `dst` into the
/// guard band, a device error, a candidate that does not compile): the
/// case, the error, and the lines that rerun it.
pub fn shim_failure(
    spec: &CaseSpec,
    geom: &Geometry,
    form: Form,
    source: &str,
    error: &str,
    artifact: Option<&str>,
) -> String {
    format!(
        "MUL_MAT FAILURE ({source}, {} form): {} {} m={} n={} k={} geometry {}\n  the shim failed on a valid case: {error}\n{}  {}\n",
        form.name(),
        spec.dtype.name(),
        spec.arm.name(),
        spec.m,
        spec.n,
        spec.k,
        geometry(geom),
        rerun_lines(spec, geom, form, artifact),
        spec_literal(spec)
    )
}

/// A divergence: the arm and bound, the first mismatch as bits and
/// decimals with its (n, m), a command that reruns the case and a `#[test]`
/// to paste into `tests/`.
pub fn divergence(
    spec: &CaseSpec,
    geom: &Geometry,
    form: Form,
    v: &Verdict,
    source: &str,
    artifact: Option<&str>,
) -> String {
    let mut s = format!(
        "MUL_MAT DIVERGENCE ({source}, {} form): {} {} m={} n={} k={} geometry {}\n",
        form.name(),
        spec.dtype.name(),
        spec.arm.name(),
        spec.m,
        spec.n,
        spec.k,
        geometry(geom)
    );
    match v.arm {
        Arm::Exact => s += "  bound: bit-identical (EXACT arm)\n",
        Arm::Order => {
            s += "  bound: bit-identical (ORDER arm: exact products, rounded sums; k in order, rule MM-ORDER)\n"
        }
        Arm::Random | Arm::Balanced => {
            s += &format!(
                "  bound: |got - want| <= 2 gamma_K sum|w x| per output ({} over), NMSE {:.3e} <= {:.3e}\n",
                v.over_bound, v.cmp.nmse, v.nmse_bound
            )
        }
    }
    let first = v.cmp.first_non_finite.or(v.cmp.first_mismatch);
    if let Some(mm) = first {
        s += &format!(
            "  first at dst[n={}, m={}]: got {:#010x} ({:e}), want {:#010x} ({:e}); {} bit mismatches, {} non-finite\n",
            mm.row,
            mm.col,
            mm.got.to_bits(),
            mm.got,
            mm.want.to_bits(),
            mm.want,
            v.cmp.bit_mismatches,
            v.cmp.non_finite
        );
    }
    s += &rerun_lines(spec, geom, form, artifact);
    s += &format!(
        "  #[test]\n  fn mul_mat_regression_{:x}() {{\n      kernel_oracle::mul_mat::check_geometry_form(&{}, &device::wgpu::Geometry {{ wg_m: {}, wg_n: {}, tile_k: {} }}, device::wgpu::Form::{:?});\n  }}\n",
        spec.seed,
        spec_literal(spec),
        geom.wg_m,
        geom.wg_n,
        geom.tile_k,
        form
    );
    s
}
