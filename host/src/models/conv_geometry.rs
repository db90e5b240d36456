//! What one pass of a 2-D convolution computes: its sizes ([`Geometry`]), which of the three
//! passes it is ([`Pass`]), and the two together ([`Conv`]), which `conv2d`'s op runs and its
//! CPU and cuDNN halves read.

use anyhow::{ensure, Result};

/// The sizes of one convolution: what cuDNN's descriptors hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Geometry {
    /// Input `[batch, channels, height, width]`.
    pub input: [usize; 4],
    /// Filter `[out channels, in channels, kernel height, kernel width]`.
    pub filter: [usize; 4],
    /// The step between windows, in both directions.
    pub stride: usize,
    /// Zeros added on every side, in both directions.
    pub padding: usize,
    /// Whether the filter is applied rotated by 180° (a true convolution, cuDNN's
    /// `CUDNN_CONVOLUTION`), as [`Geometry::input_gradient_as_forward`] needs. Such a
    /// convolution's CUDA op takes the filter `w` of the one whose input gradient it computes
    /// and transposes it on the device (into a scratch buffer of the stream's cuDNN handle).
    pub flipped: bool,
}

impl Geometry {
    /// The geometry of `x ⋆ w` for dims `x` and `w`: an error naming the mismatch for anything
    /// but rank-4 tensors with equal input channels, a stride ≥ 1 and a kernel that fits the
    /// padded input.
    pub fn new(x: &[usize], w: &[usize], stride: usize, padding: usize) -> Result<Geometry> {
        let (Ok(input), Ok(filter)) = (<[usize; 4]>::try_from(x), <[usize; 4]>::try_from(w)) else {
            anyhow::bail!("conv2d: input {x:?} and filter {w:?} must both have rank 4 (NCHW, OIHW)");
        };
        ensure!(
            input[1] == filter[1],
            "conv2d: the input has {} channels, the filter expects {}",
            input[1],
            filter[1]
        );
        ensure!(stride >= 1, "conv2d: stride 0");
        for (side, kernel) in [(input[2], filter[2]), (input[3], filter[3])] {
            ensure!(
                kernel >= 1 && side + 2 * padding >= kernel,
                "conv2d: a {kernel}-wide kernel does not fit an input of {side} padded by {padding}"
            );
        }
        Ok(Geometry {
            input,
            filter,
            stride,
            padding,
            flipped: false,
        })
    }

    /// For a stride-1 square kernel, `∂L/∂x` as a forward pass: `∂L/∂y` convolved (rotated
    /// filter) with `wᵀ` (`[in, out, k, k]`) under padding `k − 1 − p`, which maps the output's
    /// size back to the input's. cuDNN's forward algorithms are deterministic and fast where
    /// its deterministic backward-data algorithm is often slow.
    pub fn input_gradient_as_forward(&self) -> Option<Geometry> {
        let [out, inp, kh, kw] = self.filter;
        (self.stride == 1 && kh == kw && self.padding < kh && !self.flipped).then(|| Geometry {
            input: self.output(),
            filter: [inp, out, kh, kw],
            stride: 1,
            padding: kh - 1 - self.padding,
            flipped: true,
        })
    }

    /// The output's dims: `[batch, out channels, ⌊(h + 2p − kh)/s⌋ + 1, ⌊(w + 2p − kw)/s⌋ + 1]`.
    pub fn output(&self) -> [usize; 4] {
        let side = |n: usize, k: usize| (n + 2 * self.padding - k) / self.stride + 1;
        [
            self.input[0],
            self.filter[0],
            side(self.input[2], self.filter[2]),
            side(self.input[3], self.filter[3]),
        ]
    }
}

/// Which of cuDNN's three calls an op makes, and so what its two arguments are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pass {
    /// `(x, w) → y`.
    Forward,
    /// `(∂L/∂y, w) → ∂L/∂x`.
    Data,
    /// `(x, ∂L/∂y) → ∂L/∂w`.
    Filter,
}

/// One of the passes over one geometry, as a candle op.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Conv {
    pub(crate) geometry: Geometry,
    pub(crate) pass: Pass,
}

impl Conv {
    /// The op's name: in its errors and in `bench-train`'s split of the host's time.
    pub(crate) fn name(&self) -> &'static str {
        match self.pass {
            Pass::Forward if self.geometry.flipped => "homeadam-conv2d-input-gradient",
            Pass::Forward => "homeadam-conv2d",
            Pass::Data => "homeadam-conv2d-backward-data",
            Pass::Filter => "homeadam-conv2d-backward-filter",
        }
    }

    /// The dims of the pass's result.
    pub(crate) fn result_dims(&self) -> [usize; 4] {
        match self.pass {
            Pass::Forward => self.geometry.output(),
            Pass::Data => self.geometry.input,
            Pass::Filter => self.geometry.filter,
        }
    }
}
