//! ReLUs, channel biases and their gradients: one pass over memory each, in parallel over
//! fixed blocks of values or over image planes.

use rayon::prelude::*;

/// The values one parallel task maps at a time.
const BLOCK: usize = 1 << 14;

/// `[f(a_i, b_i)]_i` for `a`, `b` of one length.
pub(crate) fn map2(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0.0; a.len()];
    out.par_chunks_mut(BLOCK)
        .zip(a.par_chunks(BLOCK).zip(b.par_chunks(BLOCK)))
        .for_each(|(out, (a, b))| {
            for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
                *o = f(a, b);
            }
        });
    out
}

/// `[f(a_i, b_i, c_i)]_i` for `a`, `b`, `c` of one length.
pub(crate) fn map3(a: &[f32], b: &[f32], c: &[f32], f: impl Fn(f32, f32, f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = vec![0.0; a.len()];
    out.par_chunks_mut(BLOCK)
        .zip(
            a.par_chunks(BLOCK)
                .zip(b.par_chunks(BLOCK))
                .zip(c.par_chunks(BLOCK)),
        )
        .for_each(|(out, ((a, b), c))| {
            for (((o, &a), &b), &c) in out.iter_mut().zip(a).zip(b).zip(c) {
                *o = f(a, b, c);
            }
        });
    out
}

/// `[f(x_i, bias_c, dy_i)]_i` over an NCHW `x` (and `dy` of its shape, or `x` again), with `c`
/// the channel of value `i` and `plane` the values per channel and image.
pub(crate) fn per_channel(
    x: &[f32],
    bias: &[f32],
    dy: &[f32],
    plane: usize,
    f: impl Fn(f32, f32, f32) -> f32 + Sync,
) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    out.par_chunks_mut(plane)
        .zip(x.par_chunks(plane).zip(dy.par_chunks(plane)))
        .enumerate()
        .for_each(|(index, (out, (x, dy)))| {
            let b = bias[index % bias.len()];
            for ((o, &x), &dy) in out.iter_mut().zip(x).zip(dy) {
                *o = f(x, b, dy);
            }
        });
    out
}

/// `[Σ_{n,h,w} g[n, c, h, w]]_c` for `channels` channels of `plane` values: each image's
/// plane summed in eight interleaved lanes, then the images in order.
pub(crate) fn channel_sums(g: &[f32], channels: usize, plane: usize) -> Vec<f32> {
    let plane_sums: Vec<f32> = g.par_chunks(plane).map(sum).collect();
    let mut sums = vec![0.0; channels];
    for image in plane_sums.chunks(channels) {
        sums.iter_mut().zip(image).for_each(|(s, v)| *s += v);
    }
    sums
}

/// `Σ v_i` over eight lanes (`v_i` into lane `i mod 8`), the lanes added in order, then the
/// tail: the compiler keeps the lanes in one vector register.
pub(crate) fn sum(v: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = v.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        lanes.iter_mut().zip(chunk).for_each(|(l, x)| *l += x);
    }
    lanes.iter().chain(tail).sum()
}

/// `Σ (x_i − μ)²` in eight lanes.
pub(crate) fn squares_about(x: &[f32], mu: f32) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        lanes
            .iter_mut()
            .zip(chunk)
            .for_each(|(l, x)| *l += (x - mu) * (x - mu));
    }
    lanes
        .iter()
        .copied()
        .chain(tail.iter().map(|x| (x - mu) * (x - mu)))
        .sum()
}
