//! The few `f32` functions the element math needs, correctly rounded on every build.

/// IEEE correctly rounded square root.
///
/// With `std` (or in tests) this is `f32::sqrt`, which the compiler vectorizes; on hard-float
/// ARM (Cortex-M4F/M7, `eabihf`) the FPU's `vsqrt.f32`; otherwise libm's software `sqrtf`. All
/// are IEEE correctly rounded, so they give the same bits (tested on the host, and on the
/// device by the firmware's golden test).
#[inline(always)]
pub fn sqrt(x: f32) -> f32 {
    #[cfg(any(test, feature = "std"))]
    {
        x.sqrt()
    }
    #[cfg(all(not(any(test, feature = "std")), target_arch = "arm", target_abi = "eabihf"))]
    {
        // `sreg` operands need a target feature rustc does not enable by name, so s0 is saved
        // and restored around the instruction instead of being declared.
        let mut bits = x.to_bits();
        // SAFETY: FPU register moves and `vsqrt.f32` (eabihf targets have the FPU enabled by
        // their runtime); s0 is restored, the stack is balanced.
        unsafe {
            core::arch::asm!(
                "vpush {{s0}}",
                "vmov s0, {0}",
                "vsqrt.f32 s0, s0",
                "vmov {0}, s0",
                "vpop {{s0}}",
                inout(reg) bits,
                options(pure, nomem, preserves_flags),
            );
        }
        f32::from_bits(bits)
    }
    #[cfg(not(any(test, feature = "std", all(target_arch = "arm", target_abi = "eabihf"))))]
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
            state = crate::bits::mix64(state);
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
