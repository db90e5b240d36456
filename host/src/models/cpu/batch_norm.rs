//! Batch normalisation's training pass on the CPU (spatial mode: one mean and variance per
//! channel over batch, height and width), the CPU's twin of cuDNN's in
//! `models/cudnn/batch_norm.rs`, in place of the dozen passes and reductions of candle's ops:
//! with `m = N·H·W` values per channel,
//! - forward: `μ_B = Σ x / m`, `σ²_B = Σ (x − μ_B)² / m`, `x̂ = (x − μ_B)/√(σ²_B + ε)`,
//!   `y = γ x̂ + β`, optionally `max(y, 0)`; the running statistics move towards `μ_B` and the
//!   unbiased `σ²_B · m/(m − 1)` by `momentum` (PyTorch's rule);
//! - backward: `g = ∂L/∂y` (zero where the ReLU's input was < 0), `∂L/∂β = Σ g`,
//!   `∂L/∂γ = Σ g x̂`, `∂L/∂x = γ/√(σ²_B + ε) · (g − (∂L/∂β + x̂ ∂L/∂γ)/m)`.
//!
//! Every sum over a channel adds each image's plane (in eight lanes) and then the images in
//! order, one task per channel, so the bits do not depend on the thread count. The forward pass
//! keeps `μ_B`, `1/√(σ²_B + ε)` and `β` for the backward pass, which recomputes `x̂` and the
//! ReLU's input from them rather than keeping a tensor of either.

use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, Layout, Shape, Tensor, Var};
use rayon::prelude::*;

use super::elementwise::{squares_about, sum};
use super::values;
use crate::models::op::{Arg, DeviceOp, Op};
use crate::models::param_grads::unpack_normalisation;

/// What the forward pass leaves: per channel `μ_B`, `σ²_B` (for the running variance),
/// `1/√(σ²_B + ε)` and `β` (for the backward pass).
#[derive(Clone, Debug)]
struct Stats {
    mean: Vec<f32>,
    var: Vec<f32>,
    inv_std: Vec<f32>,
    beta: Vec<f32>,
}

type Stash = Arc<Mutex<Option<Stats>>>;

/// Batch normalisation over `x` (`[n, c, h, w]`, f32, on the CPU) with scale `weight` and shift
/// `bias` (`[c]`), with a backward pass to all three; `running` (mean, variance; `[c]`) move
/// towards the batch's statistics by `momentum`; with `relu`, followed by a ReLU.
pub(crate) fn train(
    x: &Tensor,
    weight: &Tensor,
    bias: &Tensor,
    running: (&Var, &Var),
    (eps, momentum): (f64, f64),
    relu: bool,
) -> anyhow::Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let m = n * h * w;
    let op = Forward {
        eps,
        relu,
        stash: Arc::new(Mutex::new(None)),
    };
    let stash = op.stash.clone();
    let y = x
        .contiguous()?
        .apply_op3(&weight.contiguous()?, &bias.contiguous()?, Op(op))?;
    let stats = lock(&stash)?.clone();
    let Some(stats) = stats else {
        anyhow::bail!("batch norm: the forward pass left no statistics");
    };
    let unbiased = m as f64 / (m - 1) as f64;
    let move_towards = |r: &Var, batch: Vec<f32>, scale: f64| -> anyhow::Result<()> {
        let batch = Tensor::from_vec(batch, c, x.device())?;
        let moved = ((r.as_detached_tensor() * (1.0 - momentum))? + (batch * (momentum * scale))?)?;
        Ok(r.set(&moved)?)
    };
    move_towards(running.0, stats.mean, 1.0)?;
    move_towards(running.1, stats.var, unbiased)?;
    Ok(y)
}

fn lock(stash: &Stash) -> candle_core::Result<std::sync::MutexGuard<'_, Option<Stats>>> {
    stash
        .lock()
        .map_err(|_| candle_core::Error::Msg("batch norm: a poisoned lock".into()))
}

/// `(x, γ, β) → y`.
struct Forward {
    eps: f64,
    relu: bool,
    stash: Stash,
}

/// `(x, ∂L/∂y, γ) → [∂L/∂x | ∂L/∂γ | ∂L/∂β]` (flat), from the forward's stash.
struct Backward {
    relu: bool,
    stash: Stash,
}

/// The sizes of an NCHW layout: images, channels, values per plane.
fn sizes(layout: &Layout) -> candle_core::Result<(usize, usize, usize)> {
    let (n, c, h, w) = layout.shape().dims4()?;
    Ok((n, c, h * w))
}

/// `[Σ_n f(c, start of plane (n, c))]_c` for a function `f` summing one plane: the images in
/// order, one task per channel.
fn per_channel_sums<T: std::iter::Sum + Send>(
    (n, c, plane): (usize, usize, usize),
    f: impl Fn(usize, usize) -> T + Sync,
) -> Vec<T> {
    (0..c)
        .into_par_iter()
        .map(|channel| {
            (0..n)
                .map(|image| f(channel, (image * c + channel) * plane))
                .sum()
        })
        .collect()
}

impl DeviceOp<3> for Forward {
    fn name(&self) -> &'static str {
        if self.relu {
            "homeadam-batch-norm-relu"
        } else {
            "homeadam-batch-norm"
        }
    }

    fn cpu(
        &self,
        [(x, x_layout), (w, w_layout), (b, b_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, plane) = sizes(x_layout)?;
        let (x, gamma, beta) = (
            values(x, x_layout, "batch norm")?,
            values(w, w_layout, "batch norm")?,
            values(b, b_layout, "batch norm")?,
        );
        if gamma.len() != c || beta.len() != c {
            candle_core::bail!(
                "batch norm: {} and {} parameters for {c} channels",
                gamma.len(),
                beta.len()
            );
        }
        let m = (n * plane) as f32;
        let mean: Vec<f32> = per_channel_sums((n, c, plane), |_, at| sum(&x[at..at + plane]))
            .into_iter()
            .map(|s: f32| s / m)
            .collect();
        let var: Vec<f32> = per_channel_sums((n, c, plane), |channel, at| {
            squares_about(&x[at..at + plane], mean[channel])
        })
        .into_iter()
        .map(|s: f32| s / m)
        .collect();
        let inv_std: Vec<f32> = var.iter().map(|v| 1.0 / (v + self.eps as f32).sqrt()).collect();
        let mut y = vec![0.0; x.len()];
        y.par_chunks_mut(plane)
            .zip(x.par_chunks(plane))
            .enumerate()
            .for_each(|(index, (y, x))| {
                let channel = index % c;
                let (mu, s, g, b) = (mean[channel], inv_std[channel], gamma[channel], beta[channel]);
                for (y, &x) in y.iter_mut().zip(x) {
                    let v = g * ((x - mu) * s) + b;
                    *y = if self.relu { v.max(0.0) } else { v };
                }
            });
        *lock(&self.stash)? = Some(Stats {
            mean,
            var,
            inv_std,
            beta: beta.to_vec(),
        });
        Ok((CpuStorage::F32(y), x_layout.shape().clone()))
    }

    fn gradients(
        &self,
        [x, w, b]: [&Tensor; 3],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 3]> {
        let backward = Backward {
            relu: self.relu,
            stash: self.stash.clone(),
        };
        let packed = x.apply_op3_no_bwd(&grad.contiguous()?, w, &Op(backward))?;
        unpack_normalisation(&packed, x, w, b)
    }
}

/// One channel's statistics and parameters, as the backward pass reads them.
#[derive(Clone, Copy)]
struct Channel {
    mean: f32,
    inv_std: f32,
    gamma: f32,
    beta: f32,
    relu: bool,
}

impl Channel {
    /// `(∂L/∂y before the ReLU, x̂)` of a value `x` with gradient `dy`: the gradient passes
    /// where the ReLU's input `γ x̂ + β` is ≥ 0.
    #[inline]
    fn at(&self, x: f32, dy: f32) -> (f32, f32) {
        let x_hat = (x - self.mean) * self.inv_std;
        let passes = !self.relu || self.gamma * x_hat + self.beta >= 0.0;
        (if passes { dy } else { 0.0 }, x_hat)
    }
}

/// The sums `(Σ g, Σ g x̂)` of the backward pass, added pairwise.
#[derive(Clone, Copy)]
struct Pair(f32, f32);

impl std::iter::Sum for Pair {
    fn sum<I: Iterator<Item = Pair>>(iter: I) -> Pair {
        iter.fold(Pair(0.0, 0.0), |a, b| Pair(a.0 + b.0, a.1 + b.1))
    }
}

impl DeviceOp<3> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-batch-norm-backward"
    }

    fn cpu(
        &self,
        [(x, x_layout), (dy, dy_layout), (w, w_layout)]: [Arg<'_, CpuStorage>; 3],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, c, plane) = sizes(x_layout)?;
        if dy_layout.shape() != x_layout.shape() {
            candle_core::bail!(
                "batch norm: a gradient {:?} for {:?}",
                dy_layout.dims(),
                x_layout.dims()
            );
        }
        let (x, dy, gamma) = (
            values(x, x_layout, "batch norm")?,
            values(dy, dy_layout, "batch norm")?,
            values(w, w_layout, "batch norm")?,
        );
        let Some(stats) = lock(&self.stash)?.clone() else {
            candle_core::bail!("batch norm: a backward pass without its forward pass");
        };
        let Stats {
            mean, inv_std, beta, ..
        } = stats;
        // Per channel: `x̂` and `∂L/∂y` before the ReLU, from a value and its gradient.
        let channel_of = |channel: usize| Channel {
            mean: mean[channel],
            inv_std: inv_std[channel],
            gamma: gamma[channel],
            beta: beta[channel],
            relu: self.relu,
        };
        let sums: Vec<Pair> = per_channel_sums((n, c, plane), |channel, start| {
            let k = channel_of(channel);
            let (x, dy) = (&x[start..start + plane], &dy[start..start + plane]);
            let mut lanes = [Pair(0.0, 0.0); 8];
            let (xs, dys) = (x.chunks_exact(8), dy.chunks_exact(8));
            let tail = xs.remainder().iter().zip(dys.remainder());
            for (x, dy) in xs.zip(dys) {
                for ((lane, &x), &dy) in lanes.iter_mut().zip(x).zip(dy) {
                    let (g, x_hat) = k.at(x, dy);
                    *lane = Pair(lane.0 + g, lane.1 + g * x_hat);
                }
            }
            lanes
                .into_iter()
                .chain(tail.map(|(&x, &dy)| {
                    let (g, x_hat) = k.at(x, dy);
                    Pair(g, g * x_hat)
                }))
                .sum()
        });
        let (d_beta, d_gamma): (Vec<f32>, Vec<f32>) = sums.into_iter().map(|Pair(b, g)| (b, g)).unzip();
        let m = (n * plane) as f32;
        let mut out = vec![0.0; x.len() + 2 * c];
        let (dx, params) = out.split_at_mut(x.len());
        dx.par_chunks_mut(plane)
            .zip(x.par_chunks(plane).zip(dy.par_chunks(plane)))
            .enumerate()
            .for_each(|(index, (dx, (x, dy)))| {
                let channel = index % c;
                let k = channel_of(channel);
                let scale = k.gamma * k.inv_std;
                let (d_beta, d_gamma) = (d_beta[channel], d_gamma[channel]);
                for ((d, &x), &dy) in dx.iter_mut().zip(x).zip(dy) {
                    let (g, x_hat) = k.at(x, dy);
                    *d = scale * (g - (d_beta + x_hat * d_gamma) / m);
                }
            });
        params[..c].copy_from_slice(&d_gamma);
        params[c..].copy_from_slice(&d_beta);
        Ok((CpuStorage::F32(out), Shape::from(x.len() + 2 * c)))
    }
}
