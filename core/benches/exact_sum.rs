//! The exact sum of squares of global-norm clipping, [`ExactSum::add_squares`], against plain
//! `f32` sums of squares over the same slice, on one thread, at 1 M and 16 M elements of
//! gradient-like values (normal × 1e-3 from a seeded generator, 1 % exact zeros).
//!
//! Rows, each the best of several repetitions, the rows interleaved within each repetition:
//! - `plain`: 16 independent `f32` accumulators, which the compiler vectorizes for the build's
//!   baseline (SSE2 on x86-64); `plain_avx2` and `plain_avx512`: the same loop compiled with
//!   those instruction sets (where the CPU has them);
//! - `naive`: `xs.iter().map(|x| x * x).sum()` (one sequential accumulator);
//! - `per_element`: [`ExactSum::add_square`] of each element, what clipping did before;
//! - `add_squares`: the bulk method (f32, then bf16 and f16 input for the record).
//!
//! The ratios printed are against the fastest plain row. Run with
//! `cargo bench -p homeadam-core --bench exact_sum`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use homeadam_core::{bf16, f16, ExactSum, Storage};

/// Gradient-like values: normal × 1e-3 (Box–Muller over splitmix64), 1 % exact zeros.
fn gradients(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        homeadam_core::backend::mix64(state)
    };
    (0..n)
        .map(|_| {
            let (a, b) = (next(), next());
            if a.is_multiple_of(100) {
                return 0.0;
            }
            let u1 = ((a >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
            let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            (z * 1e-3) as f32
        })
        .collect()
}

/// Σ x² with 16 independent accumulators (the compiler vectorizes the lanes).
#[inline(always)]
fn plain_body(xs: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = xs.chunks_exact(16);
    let rest = chunks.remainder();
    for c in chunks {
        for j in 0..16 {
            acc[j] += c[j] * c[j];
        }
    }
    for (j, &x) in rest.iter().enumerate() {
        acc[j] += x * x;
    }
    acc.iter().sum()
}

#[inline(never)]
fn plain(xs: &[f32]) -> f32 {
    plain_body(xs)
}

/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn plain_avx2(xs: &[f32]) -> f32 {
    plain_body(xs)
}

/// # Safety
/// The CPU has AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn plain_avx512(xs: &[f32]) -> f32 {
    plain_body(xs)
}

#[inline(never)]
fn naive(xs: &[f32]) -> f32 {
    xs.iter().map(|x| x * x).sum()
}

#[inline(never)]
fn per_element(xs: &[f32]) -> ExactSum {
    let mut sum = ExactSum::new();
    for &x in xs {
        sum.add_square(x);
    }
    sum
}

#[inline(never)]
fn bulk<S: Storage>(xs: &[S]) -> ExactSum {
    let mut sum = ExactSum::new();
    sum.add_squares(xs);
    sum
}

/// A named row: the function timed once per repetition.
type Row<'a> = (&'static str, Box<dyn Fn() + 'a>);

fn run(n: usize, reps: usize) {
    let xs = gradients(n, 0x5eed + n as u64);
    let xs_bf16: Vec<bf16> = xs.iter().map(|&x| bf16::from_f32(x)).collect();
    let xs_f16: Vec<f16> = xs.iter().map(|&x| f16::from_f32(x)).collect();
    // The bulk sum is the per-element sum, bit for bit (the tests check it thoroughly).
    assert_eq!(bulk(&xs).to_words(), per_element(&xs).to_words());
    let exact = bulk(&xs).to_f64();
    println!(
        "{n} elements: Σ x² exact {exact:.9e}, plain f32 {:.9e}, naive f32 {:.9e}",
        plain(&xs),
        naive(&xs)
    );

    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut rows: Vec<Row> = vec![
        (
            "plain",
            Box::new(|| {
                black_box(plain(black_box(&xs)));
            }),
        ),
        (
            "naive",
            Box::new(|| {
                black_box(naive(black_box(&xs)));
            }),
        ),
        (
            "per_element",
            Box::new(|| {
                black_box(per_element(black_box(&xs)));
            }),
        ),
        (
            "add_squares",
            Box::new(|| {
                black_box(bulk(black_box(&xs)));
            }),
        ),
        (
            "add_squares_bf16",
            Box::new(|| {
                black_box(bulk(black_box(&xs_bf16)));
            }),
        ),
        (
            "add_squares_f16",
            Box::new(|| {
                black_box(bulk(black_box(&xs_f16)));
            }),
        ),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 detected.
            rows.push((
                "plain_avx2",
                Box::new(|| {
                    black_box(unsafe { plain_avx2(black_box(&xs)) });
                }),
            ));
        }
        if std::is_x86_feature_detected!("avx512f") {
            // SAFETY: AVX-512 F detected.
            rows.push((
                "plain_avx512",
                Box::new(|| {
                    black_box(unsafe { plain_avx512(black_box(&xs)) });
                }),
            ));
        }
    }
    let mut best = vec![Duration::MAX; rows.len()];
    for _ in 0..reps {
        for (b, (_, f)) in best.iter_mut().zip(&rows) {
            let start = Instant::now();
            f();
            *b = (*b).min(start.elapsed());
        }
    }
    let fastest_plain = rows
        .iter()
        .zip(&best)
        .filter(|((name, _), _)| name.starts_with("plain"))
        .map(|(_, &t)| t)
        .min()
        .expect("a plain row");
    println!("| row | ms (best of {reps}) | / fastest plain |");
    println!("| --- | ---: | ---: |");
    for ((name, _), t) in rows.iter().zip(&best) {
        println!(
            "| `{name}` | {:.3} | {:.2} |",
            t.as_secs_f64() * 1e3,
            t.as_secs_f64() / fastest_plain.as_secs_f64()
        );
    }
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) a short smoke run.
    if std::env::args().any(|a| a == "--bench") {
        run(1 << 20, 200);
        run(16 << 20, 20);
    } else {
        run(1 << 16, 2);
    }
}
