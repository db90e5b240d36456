//! [`ExactSum::add_squares`] (the bulk sum of squares of gradient clipping) equals
//! [`ExactSum::add_square`] of each element, bit for bit, flags included, for `f32`, `bf16` and
//! `f16` slices of any values, mixed with [`ExactSum::add_product`] and [`ExactSum::merge`].
//! (The core's unit tests run it with every instruction set of the CPU; this is the public API.)

use homeadam_core::{bf16, f16, ExactSum, Storage};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        6 => (-1.0f32..1.0).prop_map(|x| x * 1e-3), // gradients
        2 => -1.0f32..1.0,
        1 => (-1.0f32..1.0).prop_map(|x| x * 1e-30),
        1 => (1u32..0x0080_0000).prop_map(f32::from_bits), // subnormals
        1 => (-1.0f32..1.0).prop_map(|x| x * 3e38),
        1 => any::<u32>().prop_map(f32::from_bits), // any pattern, NaN and ±∞ included
        2 => Just(0.0f32),
        1 => Just(-0.0f32),
    ]
}

/// One addition to the sum: a product, or the squares of a slice (a length that crosses 2^16
/// now and then).
#[derive(Clone, Debug)]
enum Op {
    Product(f32, f32),
    Squares(Vec<f32>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (value(), value()).prop_map(|(a, b)| Op::Product(a, b)),
        6 => prop::collection::vec(value(), 0..2100).prop_map(Op::Squares),
        1 => (prop::collection::vec(value(), 1..64), 65_536usize..66_000)
            .prop_map(|(pattern, n)| Op::Squares(pattern.iter().copied().cycle().take(n).collect())),
    ]
}

/// The ops applied with `add_squares` on slices of `S` (the values rounded to `S`), and with
/// `add_square` of each element, the second half of the ops in a second sum merged at the end.
fn both<S: Storage>(ops: &[Op]) -> (ExactSum, ExactSum) {
    let (mut bulk, mut reference) = (ExactSum::new(), ExactSum::new());
    let (mut bulk2, mut reference2) = (ExactSum::new(), ExactSum::new());
    for (i, op) in ops.iter().enumerate() {
        let (b, r) = if i < ops.len() / 2 {
            (&mut bulk, &mut reference)
        } else {
            (&mut bulk2, &mut reference2)
        };
        match op {
            Op::Product(x, y) => {
                b.add_product(*x, *y);
                r.add_product(*x, *y);
            }
            Op::Squares(xs) => {
                let xs: Vec<S> = xs.iter().map(|&x| S::from_f32(x)).collect();
                b.add_squares(&xs);
                for x in &xs {
                    r.add_square(x.to_f32());
                }
            }
        }
    }
    bulk.merge(&bulk2);
    reference.merge(&reference2);
    (bulk, reference)
}

fn check<S: Storage>(ops: &[Op]) -> Result<(), TestCaseError> {
    let (bulk, reference) = both::<S>(ops);
    prop_assert_eq!(bulk.to_words(), reference.to_words(), "{}", S::DTYPE.name());
    prop_assert_eq!(bulk.to_f64().to_bits(), reference.to_f64().to_bits());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bulk_squares_equal_one_by_one(ops in prop::collection::vec(op(), 1..6)) {
        check::<f32>(&ops)?;
        check::<bf16>(&ops)?;
        check::<f16>(&ops)?;
    }
}

#[test]
fn gradients_past_two_to_the_sixteen() {
    // 200,000 gradient-like values with exact zeros, one slice and in pieces.
    let mut state = 1u64;
    let xs: Vec<f32> = (0..200_000u32)
        .map(|i| {
            state = homeadam_core::backend::mix64(state.wrapping_add(0x9E37_79B9_7F4A_7C15));
            if i.is_multiple_of(97) {
                0.0
            } else {
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2e-3
            }
        })
        .collect();
    let mut reference = ExactSum::new();
    for &x in &xs {
        reference.add_square(x);
    }
    let mut whole = ExactSum::new();
    whole.add_squares(&xs);
    assert_eq!(whole.to_words(), reference.to_words());
    let mut pieces = ExactSum::new();
    for piece in xs.chunks(12_345) {
        pieces.add_squares(piece);
    }
    assert_eq!(pieces.to_words(), reference.to_words());
    assert_eq!(whole.to_f64().to_bits(), reference.to_f64().to_bits());
}
