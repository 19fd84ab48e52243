//! Argument validation happens before any device call, so it is tested
//! here without a GPU: the same functions run first in every `Engine`
//! method.

use device::cuda::{
    check_grid, check_index_range, check_mmq, check_quantize, DeviceError, I32_LIMIT,
};
use oracle::fp8_mmq::{Shape, ShapeError};

fn shape(m: usize, in_f: usize, out_f: usize) -> Shape {
    Shape::new(m, in_f, out_f).unwrap()
}

/// The lengths `shape` needs, in check_mmq's order.
fn lens(s: &Shape) -> (usize, usize, usize, usize, usize) {
    (
        s.weight_len(),
        s.scale_len(),
        s.q_len(),
        s.d_len(),
        s.out_len(),
    )
}

#[test]
fn correct_lengths_pass() {
    for (m, in_f, out_f) in [(1, 1, 1), (1, 144, 200), (40, 272, 136), (512, 5120, 1536)] {
        let s = shape(m, in_f, out_f);
        let (w, sc, q, d, y) = lens(&s);
        check_mmq(&s, w, sc, q, d, Some(y)).unwrap();
        check_quantize(&s, s.act_len(), Some(q), Some(d)).unwrap();
    }
}

#[test]
fn wrong_scale_grid_is_arg_len_w_scales() {
    let s = shape(3, 144, 200); // grid ceil(200/128) x ceil(144/128) = 2 x 2
    let (w, _, q, d, y) = lens(&s);
    match check_mmq(&s, w, 3, q, d, Some(y)) {
        Err(DeviceError::ArgLen {
            arg: "w_scales",
            want: 4,
            got: 3,
        }) => {}
        other => panic!("expected ArgLen w_scales, got {other:?}"),
    }
    let msg = check_mmq(&s, w, 3, q, d, None).unwrap_err().to_string();
    assert_eq!(msg, "w_scales has 3 elements, the shape needs 4");
}

#[test]
fn each_argument_is_named() {
    let s = shape(2, 300, 130);
    let (w, sc, q, d, y) = lens(&s);
    let cases: [(&str, DeviceError); 5] = [
        ("w", check_mmq(&s, w - 1, sc, q, d, Some(y)).unwrap_err()),
        (
            "w_scales",
            check_mmq(&s, w, sc + 1, q, d, Some(y)).unwrap_err(),
        ),
        // q is [m x in_f_pad], not [m x in_f]
        ("q", check_mmq(&s, w, sc, 2 * 300, d, Some(y)).unwrap_err()),
        ("d", check_mmq(&s, w, sc, q, d + 1, Some(y)).unwrap_err()),
        ("y", check_mmq(&s, w, sc, q, d, Some(0)).unwrap_err()),
    ];
    for (name, e) in cases {
        match e {
            DeviceError::ArgLen { arg, .. } => assert_eq!(arg, name),
            other => panic!("{name}: expected ArgLen, got {other:?}"),
        }
    }
    match check_quantize(&s, 599, None, None) {
        Err(DeviceError::ArgLen {
            arg: "x",
            want: 600,
            got: 599,
        }) => {}
        other => panic!("expected ArgLen x, got {other:?}"),
    }
}

#[test]
fn shapes_beyond_i32_indexing_are_refused_first() {
    // 2^31 weights: a valid Shape, but beyond the kernels' int indexing.
    let s = shape(1, 1 << 16, 1 << 15);
    match check_index_range(&s) {
        Err(DeviceError::IndexRange {
            what: "weight_len",
            value,
            limit,
        }) => {
            assert_eq!(value, 1 << 31);
            assert_eq!(limit, I32_LIMIT);
        }
        other => panic!("expected IndexRange weight_len, got {other:?}"),
    }
    // The range check comes before the length checks.
    match check_mmq(&s, 0, 0, 0, 0, None) {
        Err(DeviceError::IndexRange { .. }) => {}
        other => panic!("expected IndexRange, got {other:?}"),
    }
    let s = shape(1 << 20, 4096, 1);
    assert!(matches!(
        check_index_range(&s),
        Err(DeviceError::IndexRange {
            what: "act_len",
            ..
        })
    ));
}

#[test]
fn zero_and_overflowing_shapes_wrap_shape_error() {
    let e: DeviceError = Shape::new(0, 128, 128).unwrap_err().into();
    assert!(
        matches!(e, DeviceError::Shape(ShapeError::Zero { dim: "m" })),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "bad shape: m is 0; every dimension must be at least 1"
    );
    let e: DeviceError = Shape::new(usize::MAX, usize::MAX, 2).unwrap_err().into();
    assert!(
        matches!(e, DeviceError::Shape(ShapeError::Overflow { .. })),
        "{e:?}"
    );
}

#[test]
fn grids_beyond_cuda_limits_are_refused() {
    check_grid((132, 65_535, 1), 128, 65_536, 232_448).unwrap();
    assert!(matches!(
        check_grid((1, 65_536, 1), 128, 0, 232_448),
        Err(DeviceError::IndexRange { what: "grid.y", .. })
    ));
    assert!(matches!(
        check_grid((1, 1, 1), 2048, 0, 232_448),
        Err(DeviceError::IndexRange {
            what: "threads per CTA",
            ..
        })
    ));
    assert!(matches!(
        check_grid((1, 1, 1), 128, 300_000, 232_448),
        Err(DeviceError::IndexRange {
            what: "dynamic shared memory (bytes)",
            ..
        })
    ));
}
