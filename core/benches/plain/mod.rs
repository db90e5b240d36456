//! The plain AdamW loop that the core's step is measured against (`examples/roofline.rs`,
//! `benches/matrix.rs`): AdamW as `rules/adam.rs` computes it, without the core's telemetry,
//! in chunks of 256 like the fast path, compiled for AVX2 and for AVX-512 on x86-64.

use homeadam_core::Simd;

/// AdamW over one tensor: m, v ← moments of g; θ ← θ(1 − ηλ) − η/bc1 · m / (√v / √bc2 + ε).
#[inline(always)]
fn plain_adamw(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    let (lr, beta1, beta2, eps, wd) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32, 1e-2f32);
    let (lr_over_bc1, sqrt_bc2, decay) = (lr / 0.1, 0.03f32, 1.0 - lr * wd);
    let chunks = p.chunks_mut(256).zip(g.chunks(256));
    for ((p, g), (m, v)) in chunks.zip(m.chunks_mut(256).zip(v.chunks_mut(256))) {
        for i in 0..p.len() {
            let mi = beta1 * m[i] + (1.0 - beta1) * g[i];
            let vi = beta2 * v[i] + (1.0 - beta2) * (g[i] * g[i]);
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay - lr_over_bc1 * (mi / (vi.sqrt() / sqrt_bc2 + eps));
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn plain_avx2(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    plain_adamw(p, g, m, v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
fn plain_avx512(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    plain_adamw(p, g, m, v)
}

/// The plain loop compiled for `simd`, which this CPU must have ([`Simd::is_available`]); the
/// portable build elsewhere.
pub fn plain(simd: Simd, p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32]) {
    assert!(
        simd.is_available(),
        "{} is not available on this CPU",
        simd.name()
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the CPU has the instruction set (asserted); AVX2 CPUs have FMA, and AVX-512 F
    // implies AVX2 and FMA.
    match simd {
        Simd::Avx512 => return unsafe { plain_avx512(p, g, m, v) },
        Simd::Avx2 => return unsafe { plain_avx2(p, g, m, v) },
        _ => {}
    }
    plain_adamw(p, g, m, v)
}
