//! The three passes of [`Conv`] on the CPU, as matrix products over unfolded images.
//!
//! With `P` the output's pixels per image and `K = C·kh·kw` a filter's weights, the images
//! unfold into columns (`im2col`: `X̂[(c, i, j), (n, p)]` is the input value under weight
//! `(c, i, j)` of the window of output pixel `p` of image `n`, zero in the padding), and
//! - forward: `Y = W X̂` (`[O, K] · [K, N·P]`),
//! - input gradient: `∂X̂ = Wᵀ ∂Y`, folded back (`col2im`: each input value sums the columns'
//!   entries it was copied to, in the order of the filter's weights),
//! - filter gradient: `∂W = ∂Y X̂ᵀ`, summed over fixed groups of images and then over the groups
//!   in order.
//!
//! Each task takes a few images whole, unfolds them into a buffer of at most [`TASK_VALUES`]
//! and multiplies it on its own thread while the buffer is still in the core's cache. The
//! tasks' images depend on the shapes only, so the bits do not depend on the thread count.

use candle_core::{CpuStorage, Layout, Shape};
use rayon::prelude::*;

use super::{matmul, matmul_in_task, sum_in_order, values, Matrix};
use crate::models::conv_geometry::{Conv, Geometry, Pass};

/// The most values of unfolded images one task holds (unless one image alone has more):
/// 512 KiB of f32, which stays in a core's second-level cache from the unfolding to the
/// product that reads it. Unfolding more at once made the `--small` networks' passes
/// memory-bound.
const TASK_VALUES: usize = 1 << 17;

/// The most images of one task, and the images of one partial sum of the filter gradient: a
/// batch of 64 makes at least eight tasks, enough for the cores of a desktop CPU, and few
/// enough partial sums that adding them up costs little.
const IMAGES_PER_TASK: usize = 8;

/// The op's pass on CPU storage: `(x, w) → y`, `(∂L/∂y, w) → ∂L/∂x` or `(x, ∂L/∂y) → ∂L/∂w`.
pub(crate) fn run(
    op: &Conv,
    (a, a_layout): (&CpuStorage, &Layout),
    (b, b_layout): (&CpuStorage, &Layout),
) -> candle_core::Result<(CpuStorage, Shape)> {
    let g = &op.geometry;
    if g.flipped {
        candle_core::bail!("the flipped convolution is CUDA's input gradient; the CPU runs the data pass");
    }
    let (a, b) = (values(a, a_layout, "conv2d")?, values(b, b_layout, "conv2d")?);
    let (a_dims, b_dims) = match op.pass {
        Pass::Forward => (g.input, g.filter),
        Pass::Data => (g.output(), g.filter),
        Pass::Filter => (g.input, g.output()),
    };
    if a_layout.dims() != a_dims || b_layout.dims() != b_dims {
        candle_core::bail!(
            "conv2d ({:?} pass): arguments {:?} and {:?} for the geometry {g:?}",
            op.pass,
            a_layout.dims(),
            b_layout.dims()
        );
    }
    let result = match op.pass {
        Pass::Forward => forward(g, a, b),
        Pass::Data => input_gradient(g, a, b),
        Pass::Filter => filter_gradient(g, a, b),
    };
    Ok((CpuStorage::F32(result), Shape::from_dims(&op.result_dims())))
}

/// The sizes the passes share.
struct Sizes {
    /// Images.
    n: usize,
    /// Input channels.
    c: usize,
    /// Input pixels per channel.
    hw: usize,
    /// Output channels.
    o: usize,
    /// Weights per output channel, `C·kh·kw`.
    k: usize,
    /// Output pixels per channel.
    p: usize,
}

impl Sizes {
    fn of(g: &Geometry) -> Sizes {
        let [n, c, h, w] = g.input;
        let [o, _, kh, kw] = g.filter;
        let [_, _, ho, wo] = g.output();
        Sizes {
            n,
            c,
            hw: h * w,
            o,
            k: c * kh * kw,
            p: ho * wo,
        }
    }

    /// The images of one task: as many as fit [`TASK_VALUES`] unfolded, from one to
    /// [`IMAGES_PER_TASK`].
    fn images_per_task(&self) -> usize {
        (TASK_VALUES / (self.k * self.p).max(1)).clamp(1, IMAGES_PER_TASK)
    }
}

/// The product of a task: on the task's thread when other tasks run beside it, split among
/// the threads when it is the only one (the same bits either way).
type Product = fn(&mut [f32], Matrix, Matrix, bool);

fn product_of(tasks: usize) -> Product {
    if tasks > 1 {
        matmul_in_task
    } else {
        matmul
    }
}

/// `y = w ⋆ x`.
fn forward(g: &Geometry, x: &[f32], w: &[f32]) -> Vec<f32> {
    let s = Sizes::of(g);
    let b = s.images_per_task();
    let multiply = product_of(s.n.div_ceil(b));
    let weights = Matrix::row_major(w, s.o, s.k);
    let mut y = vec![0.0; s.n * s.o * s.p];
    x.par_chunks(b * s.c * s.hw)
        .zip(y.par_chunks_mut(b * s.o * s.p))
        .for_each(|(images, y)| {
            let b = images.len() / (s.c * s.hw);
            let mut unfolded = vec![0.0; s.k * b * s.p];
            im2col(g, images, &mut unfolded);
            let columns = Matrix::row_major(&unfolded, s.k, b * s.p);
            if b == 1 {
                multiply(y, weights, columns, false);
            } else {
                let mut product = vec![0.0; y.len()];
                multiply(&mut product, weights, columns, false);
                images_from_rows(&product, y, s.o, s.p);
            }
        });
    y
}

/// `∂L/∂x` from `∂L/∂y` (`dy`).
fn input_gradient(g: &Geometry, dy: &[f32], w: &[f32]) -> Vec<f32> {
    let s = Sizes::of(g);
    let b = s.images_per_task();
    let multiply = product_of(s.n.div_ceil(b));
    let weights = Matrix::row_major(w, s.o, s.k).t();
    let mut dx = vec![0.0; s.n * s.c * s.hw];
    dy.par_chunks(b * s.o * s.p)
        .zip(dx.par_chunks_mut(b * s.c * s.hw))
        .for_each(|(dy, dx)| {
            let b = dy.len() / (s.o * s.p);
            let mut rows = Vec::new();
            let dy = as_rows(dy, &mut rows, s.o, s.p);
            let mut unfolded = vec![0.0; s.k * b * s.p];
            multiply(&mut unfolded, weights, Matrix::row_major(dy, s.o, b * s.p), false);
            col2im(g, &unfolded, dx);
        });
    dx
}

/// `∂L/∂w` from the input `x` and `∂L/∂y` (`dy`): a partial sum per [`IMAGES_PER_TASK`]
/// images, each the tasks' products accumulated in order, then the partial sums in order.
/// The products are `(∂L/∂w)ᵀ = X̂ ∂Yᵀ`, transposed at the end: with the unfolded images as
/// `im2col` writes them, `gemm` runs this orientation several times faster than `∂Y X̂ᵀ`
/// when `∂Y` has few rows.
fn filter_gradient(g: &Geometry, x: &[f32], dy: &[f32]) -> Vec<f32> {
    let s = Sizes::of(g);
    let (group, b) = (IMAGES_PER_TASK, s.images_per_task());
    let multiply = product_of(s.n.div_ceil(group));
    let partial_sums: Vec<Vec<f32>> = x
        .par_chunks(group * s.c * s.hw)
        .zip(dy.par_chunks(group * s.o * s.p))
        .map(|(x, dy)| {
            let mut dw_t = vec![0.0; s.k * s.o];
            let (mut unfolded, mut rows) = (Vec::new(), Vec::new());
            let tasks = x.chunks(b * s.c * s.hw).zip(dy.chunks(b * s.o * s.p));
            for (index, (x, dy)) in tasks.enumerate() {
                let b = x.len() / (s.c * s.hw);
                im2col(g, x, resized(&mut unfolded, s.k * b * s.p));
                let dy = as_rows(dy, &mut rows, s.o, s.p);
                multiply(
                    &mut dw_t,
                    Matrix::row_major(&unfolded, s.k, b * s.p),
                    Matrix::row_major(dy, s.o, b * s.p).t(),
                    index > 0,
                );
            }
            dw_t
        })
        .collect();
    let dw_t = sum_in_order(partial_sums, s.k * s.o);
    // `[K, O]` to `[O, K]`: `K` images of one value per output channel, as rows.
    let mut dw = vec![0.0; s.o * s.k];
    rows_from_images(&dw_t, &mut dw, s.o, 1);
    dw
}

/// `buffer` with exactly `len` values (its old ones or zeros).
fn resized(buffer: &mut Vec<f32>, len: usize) -> &mut [f32] {
    buffer.resize(len, 0.0);
    buffer
}

/// The output pixels `lo..hi` along one axis (of `out` pixels) whose input coordinate
/// `pixel·stride + offset − padding` lies inside `0..side`.
fn inside(out: usize, side: usize, offset: usize, g: &Geometry) -> (usize, usize) {
    let lo = g.padding.saturating_sub(offset).div_ceil(g.stride).min(out);
    let hi = (side + g.padding)
        .saturating_sub(offset)
        .div_ceil(g.stride)
        .clamp(lo, out);
    (lo, hi)
}

/// Unfolds the images `x` (`[b, C, H, W]`) into `columns` (`[K, b·P]`, row `(c, i, j)`).
///
/// With a stride `s` above one, each image plane is first split into its `s²` phases (phase
/// `(r, q)` holds the inputs at rows `r, r + s, …` and columns `q, q + s, …`), so that the
/// inputs of a row of `columns` lie side by side in one phase, as in the plane itself at
/// stride one. Where the output is as wide as a phase (a "same" convolution, or the stem's
/// 7×7/2), an image's part of a row is then one copy, less the columns in the padding.
fn im2col(g: &Geometry, x: &[f32], columns: &mut [f32]) {
    let [_, c, h, w] = g.input;
    let [_, _, kh, kw] = g.filter;
    let [_, _, ho, wo] = g.output();
    let s = g.stride;
    let (hp, wp) = (h.div_ceil(s), w.div_ceil(s));
    let phased;
    let planes = if s == 1 {
        x
    } else {
        phased = phases(x, (h, w), s);
        &phased[..]
    };
    let (plane, p) = (s * s * hp * wp, ho * wo);
    let images = x.len() / (c * h * w);
    for (row, out) in columns.chunks_mut(images * p).enumerate() {
        let (channel, i, j) = (row / (kh * kw), row / kw % kh, row % kw);
        let (rows, cols) = (inside(ho, h, i, g), inside(wo, w, j, g));
        if rows.0 == rows.1 || cols.0 == cols.1 {
            out.fill(0.0);
            continue;
        }
        // The first input read, at output pixel (rows.0, cols.0), in its phase.
        let (ih, iw) = (rows.0 * s + i - g.padding, cols.0 * s + j - g.padding);
        let first = (ih % s * s + iw % s) * hp * wp + ih / s * wp + iw / s;
        let width = cols.1 - cols.0;
        for (image, out) in out.chunks_mut(p).enumerate() {
            let src = &planes[(image * c + channel) * plane..][..plane];
            out[..rows.0 * wo].fill(0.0);
            out[rows.1 * wo..].fill(0.0);
            if wo == wp {
                let start = rows.0 * wo + cols.0;
                let len = (rows.1 - rows.0 - 1) * wo + width;
                copy(&mut out[start..start + len], &src[first..first + len]);
                // The copy wrote the neighbouring phase columns where the padding belongs.
                if width < wo {
                    for line in out[rows.0 * wo..rows.1 * wo].chunks_mut(wo) {
                        line[..cols.0].fill(0.0);
                        line[cols.1..].fill(0.0);
                    }
                }
            } else {
                for (oh, line) in out.chunks_mut(wo).enumerate().take(rows.1).skip(rows.0) {
                    line[..cols.0].fill(0.0);
                    line[cols.1..].fill(0.0);
                    let from = first + (oh - rows.0) * wp;
                    copy(&mut line[cols.0..cols.1], &src[from..from + width]);
                }
            }
        }
    }
}

/// `to ← from`, as a loop: the stretches are often a few values long, where a call to
/// `memcpy` costs more than the copy.
fn copy(to: &mut [f32], from: &[f32]) {
    to.iter_mut().zip(from).for_each(|(t, f)| *t = *f);
}

/// Each `h × w` plane of `x` as its `s²` phases, each `⌈h/s⌉ × ⌈w/s⌉` (zero where the plane
/// ends): phase `(r, q)` holds the plane's rows `r, r + s, …` and columns `q, q + s, …`.
fn phases(x: &[f32], (h, w): (usize, usize), s: usize) -> Vec<f32> {
    let (hp, wp) = (h.div_ceil(s), w.div_ceil(s));
    let mut out = vec![0.0; x.len() / (h * w) * s * s * hp * wp];
    for (plane, out) in x.chunks(h * w).zip(out.chunks_mut(s * s * hp * wp)) {
        for (phase, out) in out.chunks_mut(hp * wp).enumerate() {
            let (r, q) = (phase / s, phase % s);
            for (line, out) in plane.chunks(w).skip(r).step_by(s).zip(out.chunks_mut(wp)) {
                out.iter_mut()
                    .zip(line.iter().skip(q).step_by(s))
                    .for_each(|(v, x)| *v = *x);
            }
        }
    }
    out
}

/// Folds `columns` (`[K, b·P]`) back into images `dx` (`[b, C, H, W]`): each value the sum of
/// the entries it was unfolded to, over the filter's weights in order.
fn col2im(g: &Geometry, columns: &[f32], dx: &mut [f32]) {
    let [_, c, h, w] = g.input;
    let [_, _, kh, kw] = g.filter;
    let [_, _, ho, wo] = g.output();
    let (plane, p) = (h * w, ho * wo);
    let images = dx.len() / (c * plane);
    for (index, out) in dx.chunks_mut(plane).enumerate() {
        let (image, channel) = (index / c, index % c);
        out.fill(0.0);
        for i in 0..kh {
            let rows = inside(ho, h, i, g);
            for j in 0..kw {
                let cols = inside(wo, w, j, g);
                let row = (channel * kh + i) * kw + j;
                let src = &columns[(row * images + image) * p..][..p];
                for oh in rows.0..rows.1 {
                    let line = &mut out[(oh * g.stride + i - g.padding) * w..][..w];
                    let values = &src[oh * wo + cols.0..oh * wo + cols.1];
                    let first = cols.0 * g.stride + j - g.padding;
                    if g.stride == 1 {
                        let line = &mut line[first..first + values.len()];
                        line.iter_mut().zip(values).for_each(|(x, v)| *x += v);
                    } else {
                        let line = line[first..].iter_mut().step_by(g.stride);
                        line.zip(values).for_each(|(x, v)| *x += v);
                    }
                }
            }
        }
    }
}

/// `[b, R, P]` (image by image) into `[R, b·P]` (a row per channel, the images side by side).
fn rows_from_images(images: &[f32], rows: &mut [f32], r: usize, p: usize) {
    let b = images.len() / (r * p);
    for (row, out) in rows.chunks_mut(b * p).enumerate() {
        for (image, out) in out.chunks_mut(p).enumerate() {
            out.copy_from_slice(&images[(image * r + row) * p..][..p]);
        }
    }
}

/// `images` (`[b, R, P]`) as `[R, b·P]`: the slice itself for one image, else reordered into
/// `buffer`.
fn as_rows<'a>(images: &'a [f32], buffer: &'a mut Vec<f32>, r: usize, p: usize) -> &'a [f32] {
    if images.len() == r * p {
        return images;
    }
    rows_from_images(images, resized(buffer, images.len()), r, p);
    buffer
}

/// `[R, b·P]` back into `[b, R, P]`.
fn images_from_rows(rows: &[f32], images: &mut [f32], r: usize, p: usize) {
    let b = images.len() / (r * p);
    for (image, out) in images.chunks_mut(r * p).enumerate() {
        for (row, out) in out.chunks_mut(p).enumerate() {
            out.copy_from_slice(&rows[(row * b + image) * p..][..p]);
        }
    }
}
