//! The fast GDN scan against the spec in core: outputs, both state buffers,
//! snapshots and the final-state slot. The same property runs without
//! bound as the `gdn_scan_fast` fuzz target.

use kernel_oracle::gdn_fast::{scan_fast_matches_spec, scan_rows_fast, ScanCase, Spread};
use oracle::gdn::prep::Heads;
use oracle::gdn::scan::{scan_rows, StatePair};
use oracle::gdn::{GdnShape, D_STATE};
use std::sync::Mutex;

/// Generated cases, counted: every one reaches the property, and the
/// draws cover every spread, T = 1 (no snapshot) and T > 2.
#[test]
fn fast_scan_matches_spec_on_generated_cases() {
    let seen = Mutex::new(Vec::new());
    bolero::check!()
        .with_arbitrary::<ScanCase>()
        .with_iterations(60)
        .for_each(|case| {
            scan_fast_matches_spec(case);
            seen.lock().unwrap().push(*case);
        });
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 60, "cases that reached the property");
    for s in [Spread::Unit, Spread::NearOverflow, Spread::Edges] {
        assert!(seen.iter().any(|c| c.spread == s), "{s:?} never drawn");
    }
    assert!(seen.iter().any(|c| c.shape().t() == 1), "no T = 1 drawn");
    assert!(seen.iter().any(|c| c.shape().t() > 2), "no T > 2 drawn");
}

/// The serving head count (num_v = 32) at T = 8, every spread.
#[test]
fn fast_scan_matches_spec_at_serving_heads() {
    for spread in [Spread::Unit, Spread::NearOverflow, Spread::Edges] {
        scan_fast_matches_spec(&ScanCase {
            spread,
            num_v: 31,
            t: 7,
            seed: 0x6D17,
        });
    }
}

/// Bad lengths give the spec's own errors.
#[test]
fn fast_scan_errors_are_the_specs() {
    let s = GdnShape::new(1, 2, D_STATE, 4, 2).unwrap();
    let (vd, nv, n) = (2 * s.value_dim(), 2 * s.num_v(), s.state_len());
    let ok = vec![0f32; vd];
    let short = vec![0f32; vd - 1];
    let b = vec![0f32; nv];
    for (q, snap_len) in [(&short, n), (&ok, n + 1)] {
        let x = Heads {
            q,
            k: &ok,
            v: &ok,
            beta: &b,
            g: &b,
        };
        let run = |fast: bool| {
            let (mut c, mut a) = (vec![0f32; n], vec![0f32; n]);
            let (mut o, mut snap) = (vec![0f32; vd], vec![0f32; snap_len]);
            let st = StatePair {
                canonical: &mut c,
                alt: &mut a,
            };
            if fast {
                scan_rows_fast(&s, &x, 1.0, st, &mut o, &mut snap)
            } else {
                scan_rows(&s, &x, 1.0, st, &mut o, &mut snap)
            }
        };
        let want = run(false);
        assert!(want.is_err());
        assert_eq!(run(true), want);
    }
}
