//! Inverted dropout whose mask is computed where the tensor lives: each element is kept with
//! probability `1 − p` and scaled by `1/(1 − p)`, decided by the model's [`Rng`].
//!
//! The mask of element `j` is a pure function of the generator's state `s` before the call
//! and of `j`: draw `⌊j/2⌋` of the stream ([`Rng::draw`]), its high 32 bits for even `j`, its
//! low 32 bits for odd `j`, kept when `≥ ⌊p · 2³²⌋` (so `p` is resolved to 2⁻³²). The call then
//! advances the generator past `⌈n/2⌉` draws. The CPU computes this element by element and a
//! CUDA kernel does the same on the device, so both draw the same masks with nothing
//! uploaded, and a checkpoint's generator state resumes either. The backward pass applies the
//! same mask to the gradient, recomputed from `s` (dropout is linear in its input): nothing is
//! stored.

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, Shape, Tensor};
use rayon::prelude::*;

use super::cpu::values;
use super::op::{Arg, DeviceOp, Op};
use crate::rng::Rng;

/// The mask's parameters: the generator's state before the call, the keep threshold on 32
/// bits, and the kept elements' scale.
#[derive(Clone, Copy, Debug)]
struct Mask {
    state: u64,
    threshold: u64,
    scale: f32,
}

/// Values one parallel task masks: even, so that each task starts on a draw's first half.
const BLOCK: usize = 1 << 14;

impl Mask {
    /// The factors of elements `2i` and `2i + 1`: `scale` if kept, else 0.
    fn factors(&self, i: usize) -> [f32; 2] {
        let bits = Rng::draw(self.state, i as u64);
        [bits >> 32, bits & 0xffff_ffff].map(|half| if half >= self.threshold { self.scale } else { 0.0 })
    }

    /// `y = x ⊙ mask` for the values from element `first` (even) on.
    fn apply(&self, x: &[f32], first: usize, y: &mut [f32]) {
        for (k, (x, y)) in x.chunks(2).zip(y.chunks_mut(2)).enumerate() {
            let factors = self.factors(first / 2 + k);
            for ((y, x), f) in y.iter_mut().zip(x).zip(factors) {
                *y = x * f;
            }
        }
    }
}

/// Inverted dropout of `x` (f32) with probability `p`, its mask from `rng` (see the module).
pub fn dropout(x: &Tensor, p: f32, rng: &mut Rng) -> Result<Tensor> {
    ensure!((0.0..1.0).contains(&p), "dropout probability {p} not in [0, 1)");
    if p == 0.0 {
        return Ok(x.clone());
    }
    let mask = Mask {
        state: rng.state,
        threshold: (f64::from(p) * 4_294_967_296.0) as u64,
        scale: 1.0 / (1.0 - p),
    };
    rng.skip(x.elem_count().div_ceil(2) as u64);
    Ok(x.contiguous()?.apply_op1(Op(Apply(mask)))?)
}

/// `x ⊙ mask` as a candle op.
#[derive(Clone)]
struct Apply(Mask);

impl DeviceOp<1> for Apply {
    fn name(&self) -> &'static str {
        "homeadam-dropout"
    }

    fn cpu(&self, [(storage, layout)]: [Arg<'_, CpuStorage>; 1]) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = values(storage, layout, self.name())?;
        let mut y = vec![0.0; x.len()];
        y.par_chunks_mut(BLOCK)
            .zip(x.par_chunks(BLOCK))
            .enumerate()
            .for_each(|(block, (y, x))| self.0.apply(x, block * BLOCK, y));
        Ok((CpuStorage::F32(y), layout.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(storage, layout)]: [Arg<'_, candle_core::CudaStorage>; 1],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::forward(&self.0, storage, layout)
    }

    /// The same mask on the incoming gradient (dropout is linear in its input).
    fn gradients(
        &self,
        [_]: [&Tensor; 1],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 1]> {
        Ok([Some(grad.contiguous()?.apply_op1_no_bwd(&Op(self.clone()))?)])
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    //! The mask on the device (`host/kernels/dropout.cu`).

    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::PushKernelArg;
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use super::Mask;
    use crate::models::cuda::{contiguous, per_element};

    const SOURCE: &str = include_str!("../../kernels/dropout.cu");

    /// The kernel's PTX, compiled by NVRTC once per process.
    fn ptx() -> candle_core::Result<&'static str> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        crate::models::cuda::ptx(&PTX, "dropout", SOURCE)
    }

    pub(super) fn forward(
        mask: &Mask,
        storage: &CudaStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let dev = &storage.device;
        let x = contiguous::<f32>(storage, layout, "dropout")?;
        let n = layout.shape().elem_count();
        let func = dev.get_or_load_custom_func("homeadam_dropout_f32", "homeadam_dropout", ptx()?)?;
        // SAFETY: every element is written by the kernel below.
        let y = unsafe { dev.alloc::<f32>(n)? };
        let config = per_element(n);
        let n = n as u64;
        let mut builder = func.builder();
        builder
            .arg(&x)
            .arg(&y)
            .arg(&n)
            .arg(&mask.state)
            .arg(&mask.threshold)
            .arg(&mask.scale);
        // SAFETY: the arguments match the kernel's signature; x and y hold n f32 each.
        unsafe { builder.launch(config) }.w()?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            layout.shape().clone(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn the_device_kernel_draws_with_the_hosts_gamma() {
        let source = include_str!("../../kernels/dropout.cu");
        let define = format!("#define HOMEADAM_GAMMA {:#x}ull", crate::rng::GAMMA);
        assert!(source.contains(&define), "dropout.cu lacks `{define}`");
    }

    /// The masks as the runner drew them before they moved to the device: `⌈n/2⌉` draws, two
    /// elements each, uploaded and multiplied.
    fn host_drawn(x: &Tensor, p: f32, rng: &mut Rng) -> Tensor {
        let n = x.elem_count();
        let threshold = (f64::from(p) * 4_294_967_296.0) as u64;
        let scale = 1.0 / (1.0 - p);
        let mut mask = Vec::with_capacity(n + 1);
        while mask.len() < n {
            let bits = rng.next_u64();
            for half in [bits >> 32, bits & 0xffff_ffff] {
                mask.push(if half >= threshold { scale } else { 0.0 });
            }
        }
        mask.truncate(n);
        x.mul(&Tensor::from_vec(mask, x.shape(), x.device()).unwrap())
            .unwrap()
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn masks_values_and_the_generator_state_equal_host_drawn_masks() {
        for (n, p) in [(1, 0.5), (2, 0.1), (7, 0.1), (1000, 0.5), (1001, 0.15), (64, 0.9)] {
            let values: Vec<f32> = (0..n).map(|i| (i as f32 - 3.5) * 0.25).collect();
            let x = Tensor::from_vec(values, n, &Device::Cpu).unwrap();
            let (mut a, mut b) = (Rng::new(n as u64), Rng::new(n as u64));
            let ours = dropout(&x, p, &mut a).unwrap();
            assert_eq!(bits(&ours), bits(&host_drawn(&x, p, &mut b)), "n {n}, p {p}");
            assert_eq!(a, b, "n {n}, p {p}: the generator's state");
        }
    }

    #[test]
    fn the_gradient_is_the_mask_and_strided_inputs_work() {
        let v = Var::from_vec(
            (0..12).map(|i| i as f32 - 5.0).collect::<Vec<_>>(),
            (3, 4),
            &Device::Cpu,
        )
        .unwrap();
        let x = v.as_tensor().t().unwrap();
        let weights = Tensor::from_vec(
            (0..12).map(|i| 0.5 + i as f32).collect::<Vec<_>>(),
            (4, 3),
            &Device::Cpu,
        )
        .unwrap();
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        let ours = dropout(&x, 0.5, &mut a).unwrap();
        let theirs = host_drawn(&x.contiguous().unwrap(), 0.5, &mut b);
        assert_eq!(bits(&ours), bits(&theirs));
        let g_ours = ours.mul(&weights).unwrap().sum_all().unwrap().backward().unwrap();
        let g_theirs = theirs
            .mul(&weights)
            .unwrap()
            .sum_all()
            .unwrap()
            .backward()
            .unwrap();
        assert_eq!(bits(g_ours.get(&v).unwrap()), bits(g_theirs.get(&v).unwrap()));
        assert!(bits(g_ours.get(&v).unwrap()).contains(&0));
    }

    #[test]
    fn zero_probability_is_the_identity_and_bad_probabilities_are_errors() {
        let x = Tensor::ones(5, candle_core::DType::F32, &Device::Cpu).unwrap();
        let mut r = Rng::new(1);
        assert_eq!(bits(&dropout(&x, 0.0, &mut r).unwrap()), bits(&x));
        assert_eq!(r, Rng::new(1));
        for p in [1.0, -0.1, f32::NAN] {
            assert!(dropout(&x, p, &mut r).is_err(), "{p}");
        }
    }
}
