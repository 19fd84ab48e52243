//! The Gated DeltaNet shim without a GPU: shapes and buffer lengths are
//! refused before any launch, with the oracle's error (`oracle::gdn`), and
//! the kernels' limits with `IndexRange`.

use device::cuda::{
    check_gdn_conv, check_gdn_limits, check_gdn_prep, check_gdn_scan, check_gdn_state, gdn_shape,
    DeviceError, GDN_MAX_T,
};
use oracle::gdn::{GdnError, GdnShape};

fn gdn(e: DeviceError) -> GdnError {
    *e.gdn_error()
        .unwrap_or_else(|| panic!("not a Gdn error: {e}"))
}

fn len_err(e: DeviceError) -> (&'static str, usize, usize) {
    match gdn(e) {
        GdnError::Len { arg, want, got } => (arg, want, got),
        other => panic!("not a length error: {other}"),
    }
}

#[test]
fn shapes_the_contract_refuses_are_refused_with_its_error() {
    assert_eq!(
        gdn(gdn_shape(0, 4, 128, 4, 1).unwrap_err()),
        GdnError::Zero { dim: "num_k" }
    );
    assert_eq!(
        gdn(gdn_shape(2, 0, 128, 4, 1).unwrap_err()),
        GdnError::Zero { dim: "num_v" }
    );
    assert_eq!(
        gdn(gdn_shape(2, 4, 128, 4, 0).unwrap_err()),
        GdnError::Zero { dim: "t" }
    );
    assert_eq!(
        gdn(gdn_shape(3, 4, 128, 4, 1).unwrap_err()),
        GdnError::HeadRatio { num_k: 3, num_v: 4 }
    );
    assert_eq!(
        gdn(gdn_shape(2, 4, 64, 4, 1).unwrap_err()),
        GdnError::DState { d_state: 64 }
    );
    for d_conv in [0, 1, 5] {
        assert_eq!(
            gdn(gdn_shape(2, 4, 128, d_conv, 1).unwrap_err()),
            GdnError::DConv { d_conv }
        );
    }
    for d_conv in 2..=4 {
        let s = gdn_shape(2, 4, 128, d_conv, 8).unwrap();
        assert_eq!(s, GdnShape::new(2, 4, 128, d_conv, 8).unwrap());
    }
    gdn_shape(16, 32, 128, 4, 8).unwrap();
}

#[test]
fn kernel_limits_are_index_range_errors() {
    let ok = GdnShape::new(1, 1, 128, 4, GDN_MAX_T).unwrap();
    check_gdn_limits(&ok).unwrap();
    let many_rows = GdnShape::new(1, 1, 128, 4, GDN_MAX_T + 1).unwrap();
    match gdn_shape(1, 1, 128, 4, GDN_MAX_T + 1).unwrap_err() {
        DeviceError::IndexRange { what, value, .. } => {
            assert_eq!((what, value), ("t", GDN_MAX_T as u64 + 1))
        }
        e => panic!("{e}"),
    }
    assert!(check_gdn_limits(&many_rows).is_err());
    // conv_dim = 128 * (2 + 2^24) > 2^31 - 1.
    let wide = GdnShape::new(1, 1 << 24, 128, 4, 1).unwrap();
    match check_gdn_limits(&wide).unwrap_err() {
        DeviceError::IndexRange { what, .. } => assert_eq!(what, "t * conv_dim"),
        e => panic!("{e}"),
    }
}

#[test]
fn conv_lengths_are_checked() {
    let s = gdn_shape(2, 4, 128, 4, 3).unwrap();
    let (c, w, rl) = (s.conv_dim(), s.conv_w_len(), s.ring_len());
    assert_eq!(c, 128 * 8);
    check_gdn_conv(&s, 1, c, w, c, None).unwrap();
    check_gdn_conv(&s, 3, 3 * c, w, 3 * c, Some(2 * rl)).unwrap();
    check_gdn_conv(
        &GdnShape::new(2, 4, 128, 4, 1).unwrap(),
        1,
        c,
        w,
        c,
        Some(0),
    )
    .unwrap();
    assert_eq!(
        len_err(check_gdn_conv(&s, 1, c - 1, w, c, None).unwrap_err()),
        ("x", c, c - 1)
    );
    assert_eq!(
        len_err(check_gdn_conv(&s, 1, c, w + 1, c, None).unwrap_err()),
        ("w", w, w + 1)
    );
    assert_eq!(
        len_err(check_gdn_conv(&s, 1, c, w, 0, None).unwrap_err()),
        ("out", c, 0)
    );
    assert_eq!(
        len_err(check_gdn_conv(&s, 3, 3 * c, w, 3 * c, Some(3 * rl)).unwrap_err()),
        ("snap", 2 * rl, 3 * rl)
    );
    let e = check_gdn_conv(&s, 1, c - 1, w, c, None).unwrap_err();
    assert!(e.to_string().contains("refused before launch"), "{e}");
}

#[test]
fn prep_lengths_are_checked() {
    let s = gdn_shape(16, 32, 128, 4, 2).unwrap();
    let (c, nv, vd) = (s.conv_dim(), s.num_v(), s.value_dim());
    let heads = [vd, vd, vd, nv, nv];
    check_gdn_prep(&s, 1, c, nv, nv, nv, nv, heads).unwrap();
    let heads2 = [2 * vd, 2 * vd, 2 * vd, 2 * nv, 2 * nv];
    check_gdn_prep(&s, 2, 2 * c, 2 * nv, 2 * nv, nv, nv, heads2).unwrap();
    let cases: [(&str, [usize; 5], [usize; 5]); 10] = [
        ("conv_out", [c + 1, nv, nv, nv, nv], heads),
        ("beta_raw", [c, nv - 1, nv, nv, nv], heads),
        ("alpha", [c, nv, 0, nv, nv], heads),
        ("dt_bias", [c, nv, nv, 2 * nv, nv], heads),
        ("a_log", [c, nv, nv, nv, 1], heads),
        ("q", [c, nv, nv, nv, nv], [vd + 1, vd, vd, nv, nv]),
        ("k", [c, nv, nv, nv, nv], [vd, 0, vd, nv, nv]),
        ("v", [c, nv, nv, nv, nv], [vd, vd, nv, nv, nv]),
        ("beta", [c, nv, nv, nv, nv], [vd, vd, vd, vd, nv]),
        ("g", [c, nv, nv, nv, nv], [vd, vd, vd, nv, 0]),
    ];
    for (arg, i, h) in cases {
        let e = check_gdn_prep(&s, 1, i[0], i[1], i[2], i[3], i[4], h).unwrap_err();
        assert_eq!(len_err(e).0, arg);
    }
}

#[test]
fn scan_and_state_lengths_are_checked() {
    let s = gdn_shape(2, 4, 128, 4, 4).unwrap();
    let (nv, vd, n) = (s.num_v(), s.value_dim(), s.state_len());
    assert_eq!(n, 4 * 128 * 128);
    check_gdn_scan(&s, 1, [vd, vd, vd, nv, nv], vd, None).unwrap();
    check_gdn_scan(
        &s,
        4,
        [4 * vd, 4 * vd, 4 * vd, 4 * nv, 4 * nv],
        4 * vd,
        Some(3 * n),
    )
    .unwrap();
    let e = check_gdn_scan(&s, 1, [vd, vd, vd, nv, nv], vd + 1, None).unwrap_err();
    assert_eq!(len_err(e), ("o", vd, vd + 1));
    let e = check_gdn_scan(
        &s,
        4,
        [4 * vd, 4 * vd, 4 * vd, 4 * nv, 4 * nv],
        4 * vd,
        Some(4 * n),
    )
    .unwrap_err();
    assert_eq!(len_err(e), ("snap", 3 * n, 4 * n));
    let e = check_gdn_scan(&s, 1, [vd, vd, vd, nv, 2 * nv], vd, None).unwrap_err();
    assert_eq!(len_err(e).0, "g");
    let rl = s.ring_len();
    check_gdn_state(&s, rl, n, n).unwrap();
    assert_eq!(
        len_err(check_gdn_state(&s, rl + 1, n, n).unwrap_err()).0,
        "ring"
    );
    assert_eq!(
        len_err(check_gdn_state(&s, rl, n - 1, n).unwrap_err()).0,
        "canonical"
    );
    assert_eq!(len_err(check_gdn_state(&s, rl, n, 0).unwrap_err()).0, "alt");
}

#[test]
fn batch_counts_and_pool_lengths_are_checked() {
    use device::cuda::{check_gdn_batch, check_gdn_batch_state, GDN_MAX_BATCH};
    let s = gdn_shape(2, 4, 128, 4, 3).unwrap();
    let (rl, n) = (s.ring_len(), s.state_len());
    assert_eq!(
        gdn(check_gdn_batch(&s, 0).unwrap_err()),
        GdnError::Zero { dim: "batch" }
    );
    assert!(matches!(
        check_gdn_batch(&s, GDN_MAX_BATCH + 1),
        Err(DeviceError::IndexRange { what: "batch", .. })
    ));
    check_gdn_batch(&s, GDN_MAX_BATCH).unwrap();
    check_gdn_batch_state(&s, 5, 5 * rl, 5 * n, 5 * n).unwrap();
    assert_eq!(
        len_err(check_gdn_batch_state(&s, 5, 4 * rl, 5 * n, 5 * n).unwrap_err()),
        ("ring", 5 * rl, 4 * rl)
    );
    assert_eq!(
        len_err(check_gdn_batch_state(&s, 5, 5 * rl, 5 * n, n).unwrap_err()),
        ("alt", 5 * n, n)
    );
}
