//! [`JetsonOptimizer`]: [`CudaOptimizer`] with its state in mapped host memory.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use homeadam_core::{
    bf16, f16, Config, Dtype, Group, Q8Block, StateStorage, StepReport, TensorAux, TensorState,
    TensorStateMut,
};
use homeadam_cuda::{CudaOptimizer, DeviceTensor, Dtypes, Error};

use crate::mapped::MappedBuffer;

/// The Jetson architectures: Xavier (sm_72) and Orin (sm_87).
pub const ARCHS: [&str; 2] = ["sm_72", "sm_87"];

/// The low-precision storage types for compute capability `(major, minor)`: f16 parameters
/// and gradients with f32 state before sm_80 (Xavier has no native bf16), bf16 from sm_80
/// (Orin). f32 state: f16 cannot hold small second moments (DESIGN §3).
pub fn preferred_dtypes(compute_capability: (i32, i32)) -> Dtypes {
    let low = if compute_capability.0 >= 8 {
        Dtype::BF16
    } else {
        Dtype::F16
    };
    Dtypes {
        param: low,
        grad: low,
        state: Dtype::F32,
    }
}

/// One tensor: θ and g on the device (or mapped), its parameter group; the state is allocated
/// by the optimizer.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JetsonTensor {
    /// θ: `numel` elements of the parameter type.
    pub param: u64,
    /// g: `numel` elements of the gradient type.
    pub grad: u64,
    /// Number of parameters.
    pub numel: usize,
    /// The tensor's parameter group, as [`homeadam_core::Tensor::group`].
    pub group: Group,
}

impl JetsonTensor {
    /// A tensor of the default group.
    pub fn new(param: u64, grad: u64, numel: usize) -> Self {
        JetsonTensor {
            param,
            grad,
            numel,
            group: Group::DEFAULT,
        }
    }

    /// The same tensor in `group`.
    pub fn in_group(self, group: Group) -> Self {
        JetsonTensor { group, ..self }
    }
}

/// The optimizer of one model, its state in page-locked mapped memory.
pub struct JetsonOptimizer {
    cuda: CudaOptimizer,
    states: Vec<MappedBuffer>,
}

impl JetsonOptimizer {
    /// Allocates the zeroed state of every tensor in mapped memory and builds the optimizer.
    ///
    /// # Safety
    ///
    /// As [`CudaOptimizer::new`]: `param` and `grad` of every tensor are live allocations of
    /// the stream's context with the stated sizes, for as long as this optimizer steps them.
    pub unsafe fn new(
        config: Config,
        dtypes: Dtypes,
        tensors: &[JetsonTensor],
        stream: Arc<CudaStream>,
    ) -> Result<Self, Error> {
        let slots = config.state_slots();
        let states = tensors
            .iter()
            .map(|t| MappedBuffer::zeroed(stream.context(), slots * dtypes.state.slot_bytes(t.numel)))
            .collect::<Result<Vec<_>, _>>()?;
        let device: Vec<DeviceTensor> = tensors
            .iter()
            .zip(&states)
            .map(|(t, s)| DeviceTensor::new(t.param, t.grad, s.device_ptr(), t.numel).in_group(t.group))
            .collect();
        // SAFETY: the caller's contract for θ and g; the state buffers live as long as `self`.
        let cuda = unsafe { CudaOptimizer::new(config, dtypes, &device, stream) }?;
        Ok(JetsonOptimizer { cuda, states })
    }

    /// The underlying CUDA optimizer (step counter, telemetry, dtypes).
    pub fn cuda(&self) -> &CudaOptimizer {
        &self.cuda
    }

    /// One step, as [`CudaOptimizer::step`].
    pub fn step(&mut self, grad_scale: f64) -> Result<StepReport, Error> {
        self.cuda.step(grad_scale)
    }

    /// The state in the core's checkpoint format, read by the CPU straight from the mapped
    /// memory (no device copy).
    pub fn save_state(&self) -> Result<Vec<u8>, Error> {
        match self.cuda.dtypes().state {
            Dtype::F32 => self.save_typed::<f32>(),
            Dtype::F16 => self.save_typed::<f16>(),
            Dtype::BF16 => self.save_typed::<bf16>(),
            Dtype::Q8 => self.save_typed::<Q8Block>(),
        }
    }

    fn save_typed<S: StateStorage>(&self) -> Result<Vec<u8>, Error> {
        self.cuda.stream().synchronize()?;
        let aux = TensorAux::default();
        let views: Vec<TensorState<'_, S>> = self
            .states
            .iter()
            .zip(self.cuda.tensors())
            .map(|(buf, t)| TensorState {
                numel: t.numel,
                // SAFETY: only this optimizer's kernels touch the state, from `step` (`&mut
                // self`), and the stream has finished them.
                state: unsafe { buf.as_slice::<S>() },
                aux: &aux,
            })
            .collect();
        self.cuda.save_state_with(&views)
    }

    /// Loads a checkpoint, written by the CPU straight into the mapped memory. Nothing changes
    /// on a refused checkpoint.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        match self.cuda.dtypes().state {
            Dtype::F32 => self.load_typed::<f32>(bytes),
            Dtype::F16 => self.load_typed::<f16>(bytes),
            Dtype::BF16 => self.load_typed::<bf16>(bytes),
            Dtype::Q8 => self.load_typed::<Q8Block>(bytes),
        }
    }

    fn load_typed<S: StateStorage>(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.cuda.stream().synchronize()?;
        let mut aux = vec![TensorAux::default(); self.states.len()];
        let mut views: Vec<TensorStateMut<'_, S>> = self
            .states
            .iter_mut()
            .zip(aux.iter_mut())
            .zip(self.cuda.tensors())
            .map(|((buf, aux), t)| TensorStateMut {
                numel: t.numel,
                // SAFETY: only this optimizer's kernels touch the state, from `step`, and the
                // stream has finished them.
                state: unsafe { buf.as_mut_slice::<S>() },
                aux,
            })
            .collect();
        self.cuda.load_state_with(bytes, &mut views)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xavier_prefers_f16_and_orin_bf16() {
        assert_eq!(preferred_dtypes((7, 2)).param, Dtype::F16);
        assert_eq!(preferred_dtypes((8, 7)).param, Dtype::BF16);
        assert_eq!(preferred_dtypes((7, 2)).state, Dtype::F32);
    }
}
