//! The fp8-mmq gate as a test (seed 000's battery, every arm, the codes
//! decoded bit-exactly, the NaN-weight rows, every exported MMQ variant
//! forced on every arm).

use kernel_oracle::fp8_mmq::{engine, gate, Arm};

#[test]
#[ignore = "needs a CUDA device (sm_89 or later)"]
fn fp8_mmq_gate_battery_is_all_green() {
    let engine = engine().unwrap_or_else(|e| panic!("no CUDA device: {e}"));
    let result = gate::run(engine, &gate::BATTERY);
    // Every variant the source exports (plan[12]) runs every arm on the
    // reduced battery and on its own tile-covering shape, and the NaN row
    // with both codes.
    let variants = engine.mmq_variants() as usize;
    assert!(variants >= 1);
    assert_eq!(
        result.rows,
        Arm::ALL.len() * gate::BATTERY.len()
            + gate::NAN_ROWS.len()
            + variants * (Arm::ALL.len() * (gate::VARIANT_SHAPES.len() + 1) + 1)
    );
    assert_eq!(result.not_run, 0);
    assert_eq!(result.codes_exact, gate::OBSERVABLE_CODES);
    assert_eq!(result.failures, 0, "see the table above");
}

/// The tile-covering shape gives every tile geometry a variant can plan
/// (out_f rows and tokens a CTA, 16 to 256 each way) two whole tiles and a
/// ragged third along both axes, and a k tail after two scale blocks.
#[test]
fn tile_covering_shapes_cover_two_tiles_and_a_ragged_third() {
    for rows in [16, 32, 64, 96, 128, 192, 256] {
        for cols in [16, 32, 64, 96, 128, 192, 256] {
            let (in_f, out_f, m) = gate::covering_dims(rows, cols);
            assert_eq!((in_f / 128, in_f % 128), (2, 16));
            for (n, tile) in [(out_f, rows), (m, cols)] {
                assert!(n / tile >= 2 && n % tile != 0, "{n} over tiles of {tile}");
            }
        }
    }
}

/// Every variant forced meets weight rows at each byte offset mod 4 (the
/// unaligned weight loads' four shifts; a row of in_f bytes starts at
/// o in_f) on the first shape of [`gate::VARIANT_SHAPES`], which is also
/// the kind's second sanitizer case (so compute-sanitizer sees those loads
/// too), a k tail, and in_f an exact multiple of the activations' row
/// padding (512).
#[test]
fn variant_shapes_reach_every_row_offset_a_k_tail_and_in_f_pad() {
    let (in_f, out_f, m) = gate::VARIANT_SHAPES[0];
    let mut offsets = [false; 4];
    for o in 0..out_f {
        offsets[(o * in_f) % 4] = true;
    }
    assert_eq!(offsets, [true; 4], "weight row offsets mod 4 reached");
    let case = format!("check fp8-mmq {in_f} {out_f} {m}");
    let cases = kernel_oracle::fp8_mmq::cli::KIND.sanitize_cases;
    assert!(cases.contains(&case.as_str()), "{case} not in {cases:?}");
    assert!(gate::VARIANT_SHAPES.iter().any(|s| s.0 % 128 != 0));
    assert!(gate::VARIANT_SHAPES.iter().any(|s| s.0 % 512 == 0));
}

/// The NaN-weight rows plant what they say: five distinct positions (the
/// first weight, the first row's k tail, the middle, the last row's first
/// weight, the last weight), codes 0x7F only, 0xFF only, or both; the
/// oracle counts exactly those five, and nothing else in the weights is a
/// NaN magnitude.
#[test]
fn nan_rows_plant_their_codes_and_the_oracle_counts_five() {
    use oracle::fp8_mmq::count_nan_magnitude;
    let (in_f, out_f, _) = gate::NAN_SHAPE;
    let at = gate::nan_positions(in_f, out_f);
    let mut distinct = at.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 5, "{at:?}");
    assert!(in_f % 128 != 0, "the k tail is planted");
    for row in &gate::NAN_ROWS {
        let data = gate::nan_case(row);
        assert_eq!(count_nan_magnitude(&data.w), 5, "{}", row.label);
        let planted: Vec<u8> = at.iter().map(|&i| data.w[i]).collect();
        let mut kinds = planted.clone();
        kinds.sort_unstable();
        kinds.dedup();
        assert_eq!(kinds, row.codes.to_vec(), "{}: {planted:x?}", row.label);
    }
    let labels: Vec<&str> = gate::NAN_ROWS.iter().map(|r| r.label).collect();
    assert_eq!(labels, ["0x7F", "0xFF", "0x7F+0xFF"]);
}

/// Every NaN-weight row is refused by the device with the oracle's count
/// (`fp8_nan_count` against `count_nan_magnitude`), before the quantizer
/// and the GEMM.
#[test]
#[ignore = "needs a CUDA device"]
fn nan_rows_are_refused_with_the_oracles_count() {
    let engine = engine().unwrap_or_else(|e| panic!("no CUDA device: {e}"));
    for row in &gate::NAN_ROWS {
        let data = gate::nan_case(row);
        let got = kernel_oracle::fp8_mmq::run::device_refusal(engine, &data)
            .unwrap_or_else(|e| panic!("{}: {e}", row.label));
        assert_eq!(got, 5, "{}", row.label);
    }
}
