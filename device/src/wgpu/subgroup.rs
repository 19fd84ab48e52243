//! The subgroup form of a mul-mat shader: the same source specialised,
//! picked by the shim when the adapter has `Features::SUBGROUP`, the plain
//! form kept beside it.
//!
//! A source offers a subgroup form by carrying marker lines (the production
//! shader's section "The subgroup form" says what its form changes and
//! why it gives the same bits). The rule, applied by [`specialise`]:
//!
//! - `MARK-1`: a line whose first `//` begins [`MARKER`] (`// SUBGROUP: `)
//!   is replaced by its leading whitespace followed by the text after the
//!   marker. So `return v; // SUBGROUP: return subgroupShuffle(v, lane);`
//!   becomes `return subgroupShuffle(v, lane);`, and a comment-only line
//!   `// SUBGROUP: @builtin(subgroup_size) sg_size: u32,` becomes code.
//!   A marker quoted in prose (after an earlier `//`) is not a marker.
//! - `MARK-2`: `enable subgroups;` is put before the first line (WGSL,
//!   "Enable Extensions": the `subgroups` extension enables the subgroup
//!   built-in functions and values; the shim hands naga 30 the text
//!   without the directive, see `decl`).
//! - `MARK-3`: the pipeline sets the override [`LANES_OVERRIDE`] to the
//!   adapter's subgroup size ([`lanes_for`]); the plain form leaves it at
//!   its default (0 in the production shader).
//!
//! The plain form is the source as written, so it builds on every adapter;
//! the subgroup form only on a device with `Features::SUBGROUP`.
//! A planted bug (a one-place textual change of the source) lands in both
//! forms, since the form is derived from the text that carries it.
//!
//! Which form a job runs is [`Form`]; the default is the subgroup form
//! where the engine has one, except on adapters where it was measured
//! slower ([`measured_slower`]: NVIDIA), and [`ENV_MUL_MAT_SUBGROUPS`]
//! overrides either way ([`SubgroupPolicy`]). The gate runs both forms.

/// The marker of rule `MARK-1`.
pub const MARKER: &str = "// SUBGROUP: ";

/// The override constant of rule `MARK-3`: lanes per subgroup.
pub const LANES_OVERRIDE: &str = "SG_LANES";

/// Environment variable choosing the default [`Form`]: `off` (or `0`,
/// `plain`) the plain form; `on` (or `1`) the subgroup form wherever the
/// engine has one; unset, empty or `auto` the subgroup form where the
/// engine has one and it was not measured slower on the adapter
/// ([`SubgroupPolicy::from_env`], [`measured_slower`]).
pub const ENV_MUL_MAT_SUBGROUPS: &str = "KERNEL_ORACLE_MUL_MAT_SUBGROUPS";

/// The two forms of one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Form {
    /// The source as written (no subgroup operation).
    Plain,
    /// The source specialised by [`specialise`], on a device with
    /// `Features::SUBGROUP`.
    Subgroup,
}

impl Form {
    /// Both forms, plain first.
    pub const ALL: [Form; 2] = [Form::Plain, Form::Subgroup];

    /// `"plain"` or `"subgroup"`.
    pub fn name(self) -> &'static str {
        match self {
            Form::Plain => "plain",
            Form::Subgroup => "subgroup",
        }
    }
}

/// Which form [`super::WgpuEngine::default_form`] picks. Whatever it
/// picks, the other form stays available to
/// [`super::WgpuEngine::prepare_form`] (and the gate runs both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubgroupPolicy {
    /// The subgroup form where the engine has one, unless
    /// [`measured_slower`] names the adapter; else the plain form.
    Auto,
    /// The subgroup form wherever the engine has one.
    On,
    /// Always the plain form.
    Off,
}

impl SubgroupPolicy {
    /// The policy [`ENV_MUL_MAT_SUBGROUPS`] names.
    ///
    /// # Errors
    /// The variable's value, when it is none of the documented ones.
    pub fn from_env() -> Result<SubgroupPolicy, String> {
        match std::env::var(ENV_MUL_MAT_SUBGROUPS) {
            Err(_) => Ok(SubgroupPolicy::Auto),
            Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
                "" | "auto" => Ok(SubgroupPolicy::Auto),
                "on" | "1" => Ok(SubgroupPolicy::On),
                "off" | "0" | "plain" => Ok(SubgroupPolicy::Off),
                _ => Err(v),
            },
        }
    }
}

/// Why [`SubgroupPolicy::Auto`] keeps the plain form as the default on
/// the adapter of PCI `vendor`, or `None` where the subgroup form may be
/// the default. The one entry is a measurement, not a guess: on the NVIDIA
/// H200 (`device/NOTES.md`, run W1, `ex_wgpu_gemm_bench`, 32 lanes) the
/// subgroup form's f32 GEMM took 1.25x-1.28x the plain form's time on
/// every LFM2.5 shape (its shuffles, four 32-bit `SHFL` a vector, cost
/// more than the broadcast workgroup-memory reads they replace). On
/// lavapipe (8 lanes, 2 shared cores, `ITERS=2`) it took 1.00x-1.23x, a
/// CPU timing too noisy to rank the forms by, so lavapipe, where CI runs,
/// keeps the subgroup default; no adapter has yet measured it faster.
pub fn measured_slower(vendor: u32) -> Option<&'static str> {
    match vendor {
        0x10DE => Some(
            "NVIDIA: the subgroup form measured 1.25x-1.28x the plain form's time on the H200 (device/NOTES.md, run W1)",
        ),
        _ => None,
    }
}

/// The marker text of `line` under rule `MARK-1`: the text after
/// [`MARKER`] when the line's first `//` begins it, else `None`.
fn marker_of(line: &str) -> Option<&str> {
    let at = line.find("//")?;
    line[at..].strip_prefix(MARKER)
}

/// Whether `text` has at least one marker line (rule `MARK-1`).
pub fn has_markers(text: &str) -> bool {
    text.lines().any(|l| marker_of(l).is_some())
}

/// The subgroup form of `text`: rules `MARK-1` and `MARK-2` (the override
/// of `MARK-3` is the pipeline's). The directive takes a line of its own
/// before the source's, so naga's line numbers for the subgroup form are
/// the source's plus one.
///
/// # Errors
/// A reason, when `text` has no marker line (so no subgroup form) or
/// already enables `subgroups` itself (it is then run as written).
pub fn specialise(text: &str) -> Result<String, String> {
    if super::decl::strip_comments(text)
        .lines()
        .any(|l| l.trim_start().starts_with("enable") && l.contains("subgroups"))
    {
        return Err("the source enables subgroups itself; it is run as written".into());
    }
    if !has_markers(text) {
        return Err(format!(
            "the source has no `{}` lines, so no subgroup form",
            MARKER.trim_end()
        ));
    }
    let mut out = String::with_capacity(text.len() + 32);
    out.push_str("enable subgroups;\n");
    for line in text.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let end = &line[body.len()..];
        match marker_of(body) {
            Some(code) => {
                let indent = &body[..body.len() - body.trim_start().len()];
                out.push_str(indent);
                out.push_str(code);
                out.push_str(end);
            }
            None => out.push_str(line),
        }
    }
    Ok(out)
}

/// The lanes per subgroup to build the subgroup form for, from the
/// adapter's range (`wgpu::AdapterInfo::subgroup_min_size` ..
/// `subgroup_max_size`, powers of two from 4 to 128 under Vulkan): the size
/// when the range is one size (NVIDIA 32, lavapipe its SIMD width).
///
/// # Errors
/// A reason when the range is empty, or spans sizes: wgpu builds compute
/// pipelines with Vulkan's varying subgroup size allowed, so a pipeline
/// cannot be told which it gets (the shader checks the size per subgroup
/// anyway; the shim does not guess).
pub fn lanes_for(min: u32, max: u32) -> Result<u32, String> {
    if min == 0 || min > max {
        return Err(format!(
            "the adapter reports subgroups of {min} to {max} lanes"
        ));
    }
    if min != max {
        return Err(format!(
            "the adapter's subgroups are {min} to {max} lanes: the pipeline cannot be built for the size it will get"
        ));
    }
    Ok(min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_lines_are_replaced_and_prose_is_kept() {
        let t = "// quoted `// SUBGROUP: x` in prose\n    return v; // SUBGROUP: return w;\n    // SUBGROUP: @builtin(subgroup_size) s: u32,\nlet a = 1;\n";
        let out = specialise(t).unwrap();
        assert_eq!(
            out,
            "enable subgroups;\n// quoted `// SUBGROUP: x` in prose\n    return w;\n    @builtin(subgroup_size) s: u32,\nlet a = 1;\n"
        );
    }

    #[test]
    fn no_markers_or_own_enable_gives_no_form() {
        assert!(specialise("let a = 1;\n").is_err());
        assert!(specialise("enable subgroups;\nreturn v; // SUBGROUP: return w;\n").is_err());
    }

    #[test]
    fn nvidia_keeps_the_plain_default_and_others_do_not() {
        assert!(measured_slower(0x10DE).is_some());
        assert!(measured_slower(0x10005).is_none()); // Mesa (lavapipe)
        assert!(measured_slower(0x8086).is_none());
    }

    #[test]
    fn lanes_need_one_size() {
        assert_eq!(lanes_for(32, 32), Ok(32));
        assert_eq!(lanes_for(8, 8), Ok(8));
        assert!(lanes_for(4, 16).is_err());
        assert!(lanes_for(0, 0).is_err());
    }
}
