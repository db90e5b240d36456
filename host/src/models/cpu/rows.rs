//! Row-wise ops of the Transformer on the CPU, one task per block of rows: layer norm and the
//! causal softmax, forward and backward (the formulas are in `models/layer_norm.rs` and
//! `models/softmax.rs`). The parameters' gradients of layer norm sum fixed blocks of rows and
//! then the blocks in order, so the bits do not depend on the thread count.

use rayon::prelude::*;

use super::elementwise::{squares_about, sum};
use super::exp::{exp_sum_into, max};
use super::sum_in_order;

/// Rows of one parallel task, and of one partial sum of layer norm's parameter gradients.
const ROWS_PER_TASK: usize = 32;

/// The row's mean `μ` and `1/√(σ² + ε)` (biased variance).
fn moments(x: &[f32], eps: f32) -> (f32, f32) {
    let d = x.len() as f32;
    let mu = sum(x) / d;
    let squares = squares_about(x, mu);
    (mu, 1.0 / (squares / d + eps).sqrt())
}

/// `y = (x − μ)/√(σ² + ε) · γ + β` per row of `d = γ.len()` values.
pub(crate) fn layer_norm(x: &[f32], gamma: &[f32], beta: &[f32], eps: f32) -> Vec<f32> {
    let d = gamma.len();
    let mut y = vec![0.0; x.len()];
    y.par_chunks_mut(d * ROWS_PER_TASK)
        .zip(x.par_chunks(d * ROWS_PER_TASK))
        .for_each(|(y, x)| {
            for (y, x) in y.chunks_mut(d).zip(x.chunks(d)) {
                let (mu, inv) = moments(x, eps);
                for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(gamma).zip(beta) {
                    *y = (x - mu) * inv * g + b;
                }
            }
        });
    y
}

/// `[∂L/∂x | ∂L/∂γ | ∂L/∂β]` of [`layer_norm`] from `x` and `∂L/∂y` (`dy`).
pub(crate) fn layer_norm_backward(x: &[f32], gamma: &[f32], dy: &[f32], eps: f32) -> Vec<f32> {
    let d = gamma.len();
    let mut out = vec![0.0; x.len() + 2 * d];
    let (dx, params) = out.split_at_mut(x.len());
    let partial_sums: Vec<Vec<f32>> = dx
        .par_chunks_mut(d * ROWS_PER_TASK)
        .zip(
            x.par_chunks(d * ROWS_PER_TASK)
                .zip(dy.par_chunks(d * ROWS_PER_TASK)),
        )
        .map(|(dx, (x, dy))| {
            let mut sums = vec![0.0; 2 * d];
            let (d_gamma, d_beta) = sums.split_at_mut(d);
            let mut x_hat = vec![0.0; d];
            for ((dx, x), dy) in dx.chunks_mut(d).zip(x.chunks(d)).zip(dy.chunks(d)) {
                let (mu, inv) = moments(x, eps);
                let (mut mean_g, mut mean_gx) = (0.0f32, 0.0f32);
                for (((h, &x), &dy), &g) in x_hat.iter_mut().zip(x).zip(dy).zip(gamma) {
                    *h = (x - mu) * inv;
                    mean_g += dy * g;
                    mean_gx += dy * g * *h;
                }
                let (mean_g, mean_gx) = (mean_g / d as f32, mean_gx / d as f32);
                for (k, dx) in dx.iter_mut().enumerate() {
                    *dx = (dy[k] * gamma[k] - mean_g - x_hat[k] * mean_gx) * inv;
                    d_gamma[k] += dy[k] * x_hat[k];
                    d_beta[k] += dy[k];
                }
            }
            sums
        })
        .collect();
    params.copy_from_slice(&sum_in_order(partial_sums, 2 * d));
    out
}

/// `y_j = e^{z_j − max z} / Σ_{k ≤ i} e^{z_k − max z}` for `z = s · (1/divisor)` over row `i` of
/// each `t × t` matrix, and 0 above the diagonal.
pub(crate) fn causal_softmax(s: &[f32], t: usize, divisor: f32) -> Vec<f32> {
    let a = 1.0 / divisor;
    let mut y = vec![0.0; s.len()];
    y.par_chunks_mut(t * t)
        .zip(s.par_chunks(t * t))
        .for_each(|(y, s)| {
            for (i, (y, s)) in y.chunks_mut(t).zip(s.chunks(t)).enumerate() {
                let (seen, hidden) = y.split_at_mut(i + 1);
                let z = &s[..=i];
                let total = exp_sum_into(z, a, a * max(z), seen);
                seen.iter_mut().for_each(|y| *y /= total);
                hidden.fill(0.0);
            }
        });
    y
}

/// `∂L/∂s_j = y_j (∂L/∂y_j − Σ_k y_k ∂L/∂y_k) / divisor` from the output `y` and `∂L/∂y`
/// (`dy`), per row of `t` values.
pub(crate) fn causal_softmax_backward(y: &[f32], dy: &[f32], t: usize, divisor: f32) -> Vec<f32> {
    let mut ds = vec![0.0; y.len()];
    ds.par_chunks_mut(t * ROWS_PER_TASK)
        .zip(
            y.par_chunks(t * ROWS_PER_TASK)
                .zip(dy.par_chunks(t * ROWS_PER_TASK)),
        )
        .for_each(|(ds, (y, dy))| {
            for ((ds, y), dy) in ds.chunks_mut(t).zip(y.chunks(t)).zip(dy.chunks(t)) {
                let dot: f32 = y.iter().zip(dy).map(|(y, dy)| y * dy).sum();
                for ((ds, &y), &dy) in ds.iter_mut().zip(y).zip(dy) {
                    *ds = y * (dy - dot) / divisor;
                }
            }
        });
    ds
}

/// `[Σ_r g[r, c]]_c` for `g` of `cols` columns: fixed blocks of rows summed in parallel, then
/// the blocks in order.
pub(crate) fn column_sums(g: &[f32], cols: usize) -> Vec<f32> {
    let partial_sums: Vec<Vec<f32>> = g
        .par_chunks(cols * ROWS_PER_TASK)
        .map(|block| {
            let mut sums = vec![0.0; cols];
            for row in block.chunks(cols) {
                sums.iter_mut().zip(row).for_each(|(s, v)| *s += v);
            }
            sums
        })
        .collect();
    sum_in_order(partial_sums, cols)
}

/// `y = x Wᵀ + b` for `x` of rows of `w`'s width, `w` `[out, in]` row by row: `b` written
/// into every row, then one matrix product adding `x Wᵀ`.
pub(crate) fn affine(x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    let out = b.len();
    let inp = w.len() / out.max(1);
    let rows = x.len() / inp.max(1);
    let mut y = vec![0.0; rows * out];
    y.par_chunks_mut(out * ROWS_PER_TASK).for_each(|block| {
        block.chunks_mut(out).for_each(|row| row.copy_from_slice(b));
    });
    super::matmul(
        &mut y,
        super::Matrix::row_major(x, rows, inp),
        super::Matrix::row_major(w, out, inp).t(),
        true,
    );
    y
}

/// `[log Σ_j e^{x_rj} − x_{r,t_r}]_r` for logits `x` of `classes` columns and class ids `t`
/// (each below `classes`: the caller checks).
pub(crate) fn cross_entropy(x: &[f32], t: &[u32], classes: usize) -> Vec<f32> {
    x.par_chunks(classes)
        .zip(t.par_iter())
        .map_init(
            || vec![0.0; classes],
            |terms, (row, &t)| {
                let top = max(row);
                exp_sum_into(row, 1.0, top, terms).ln() + top - row[t as usize]
            },
        )
        .collect()
}

/// `∂(Σ_r g_r L_r)/∂x_rj = g_r (e^{x_rj − max}/Σ − [j = t_r])` for the losses of
/// [`cross_entropy`].
pub(crate) fn cross_entropy_backward(x: &[f32], t: &[u32], g: &[f32], classes: usize) -> Vec<f32> {
    let mut dx = vec![0.0; x.len()];
    dx.par_chunks_mut(classes)
        .zip(x.par_chunks(classes).zip(t.par_iter().zip(g)))
        .for_each(|(dx, (row, (&t, &g)))| {
            let total = exp_sum_into(row, 1.0, max(row), dx);
            let scale = g / total;
            dx.iter_mut().for_each(|d| *d *= scale);
            dx[t as usize] -= g;
        });
    dx
}

/// Rows of `table` (`d` wide) at `ids` (each below the table's rows: the caller checks).
pub(crate) fn gather(table: &[f32], ids: &[u32], d: usize) -> Vec<f32> {
    if d == 0 {
        return Vec::new();
    }
    let mut y = vec![0.0; ids.len() * d];
    y.par_chunks_mut(d * ROWS_PER_TASK)
        .zip(ids.par_chunks(ROWS_PER_TASK))
        .for_each(|(y, ids)| {
            for (y, &id) in y.chunks_mut(d).zip(ids) {
                let at = id as usize * d;
                y.copy_from_slice(&table[at..at + d]);
            }
        });
    y
}

/// `∂L/∂E` of [`gather`]: row `v` of `vocab` is the sum of the rows of `g` (`d` wide) whose id
/// is `v`, in ascending position. A task owns a block of the table's rows and scans the ids, so
/// the work grows with the tokens and the bits do not depend on the thread count.
pub(crate) fn scatter_sum(ids: &[u32], g: &[f32], vocab: usize, d: usize) -> Vec<f32> {
    if d == 0 {
        return Vec::new();
    }
    let mut table = vec![0.0; vocab * d];
    table
        .par_chunks_mut(d * ROWS_PER_TASK)
        .enumerate()
        .for_each(|(block, rows)| {
            let first = block * ROWS_PER_TASK;
            for (&id, g) in ids.iter().zip(g.chunks(d)) {
                let Some(r) = (id as usize).checked_sub(first) else {
                    continue;
                };
                if let Some(row) = rows.get_mut(r * d..(r + 1) * d) {
                    row.iter_mut().zip(g).for_each(|(t, g)| *t += g);
                }
            }
        });
    table
}
