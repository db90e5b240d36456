//! The few `f32` functions the element math needs, correctly rounded on every build.

/// IEEE correctly rounded square root.
///
/// With `std` (or in tests) this is `f32::sqrt`, which the compiler vectorizes; without, libm's
/// software `sqrtf`. Both are correctly rounded, so they give the same bits (tested).
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(any(test, feature = "std"))]
    {
        x.sqrt()
    }
    #[cfg(not(any(test, feature = "std")))]
    {
        libm::sqrtf(x)
    }
}

/// max(a, b) as `torch.maximum` for non-NaN inputs.
#[inline(always)]
pub(crate) fn max(a: f32, b: f32) -> f32 {
    if a < b {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn std_sqrt_equals_libm_sqrtf() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1_000_000 {
            state = crate::rounding::mix64(state);
            let x = f32::from_bits(state as u32 & 0x7fff_ffff);
            let a = super::sqrt(x);
            let b = libm::sqrtf(x);
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "x = {x:e}"
            );
        }
    }
}
