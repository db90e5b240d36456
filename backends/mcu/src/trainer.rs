//! A single-tensor model with its optimizer state in fixed-capacity arrays.

use homeadam_core::{
    ByteSink, Config, Error, Optimizer, StepReport, Storage, Tensor, TensorAux, TensorState,
};

/// [`Optimizer::step`] or [`Optimizer::step_reference`] on an `f32` model with state `S`.
type StepFn<S> = for<'a, 'b> fn(
    &'a mut Optimizer,
    &'a mut [Tensor<'b, f32, f32, S>],
    f64,
) -> Result<StepReport, homeadam_core::Error>;
/// Why a [`Trainer`] was refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TrainerError {
    /// The core refused the config, the gradients or a checkpoint.
    Core(Error),
    /// The rule needs more state elements than the capacity `CAP`.
    Capacity {
        /// State elements the rule needs for `N` parameters.
        needed: usize,
        /// The capacity.
        capacity: usize,
    },
}

impl From<Error> for TrainerError {
    fn from(e: Error) -> Self {
        TrainerError::Core(e)
    }
}

/// `N` f32 parameters (the model, flattened into one tensor) and their optimizer state, stored
/// as `S` (`f32` or `bf16`) in an array of capacity `CAP` ≥ slots × `N` (2 × `N` covers AdamW,
/// the srf and HomeAdam rules; `N` covers SGDM).
///
/// One tensor means HomeAdamW's global and per-layer decisions coincide; split a model into
/// several trainers only with per-element or per-layer rules.
#[derive(Clone)]
pub struct Trainer<S: Storage, const N: usize, const CAP: usize> {
    opt: Optimizer,
    params: [f32; N],
    state: [S; CAP],
    aux: TensorAux,
}

impl<S: Storage, const N: usize, const CAP: usize> Trainer<S, N, CAP> {
    /// Validates `config`, checks the capacity, and starts at step 0 with zeroed state.
    pub fn new(config: Config, params: [f32; N]) -> Result<Self, TrainerError> {
        let opt = Optimizer::new(config)?;
        let needed = opt.state_len(N);
        if needed > CAP {
            return Err(TrainerError::Capacity {
                needed,
                capacity: CAP,
            });
        }
        Ok(Trainer {
            opt,
            params,
            state: [S::default(); CAP],
            aux: TensorAux::default(),
        })
    }

    /// The parameters θ.
    pub fn params(&self) -> &[f32; N] {
        &self.params
    }

    /// The optimizer state in use (slots × `N` elements, as [`Tensor::state`]).
    pub fn state(&self) -> &[S] {
        &self.state[..self.opt.state_len(N)]
    }

    /// The optimizer (config, step counter).
    pub fn optimizer(&self) -> &Optimizer {
        &self.opt
    }

    /// The per-tensor scalars and last step's telemetry.
    pub fn aux(&self) -> &TensorAux {
        &self.aux
    }

    /// One optimizer step with gradients `grad` (multiplied by `grad_scale`), through the
    /// core's fast path.
    pub fn step(&mut self, grad: &[f32; N], grad_scale: f64) -> Result<StepReport, TrainerError> {
        self.step_with(grad, grad_scale, Optimizer::step)
    }

    /// The same step through the core's scalar reference (slow; for checks such as
    /// [`crate::golden`]).
    pub fn step_reference(&mut self, grad: &[f32; N], grad_scale: f64) -> Result<StepReport, TrainerError> {
        self.step_with(grad, grad_scale, Optimizer::step_reference)
    }

    fn step_with(
        &mut self,
        grad: &[f32; N],
        grad_scale: f64,
        step: StepFn<S>,
    ) -> Result<StepReport, TrainerError> {
        let len = self.opt.state_len(N);
        let mut model = [Tensor::new(
            &mut self.params,
            grad,
            &mut self.state[..len],
            &mut self.aux,
        )];
        Ok(step(&mut self.opt, &mut model, grad_scale)?)
    }

    /// Bytes [`Trainer::save`] writes: the weights, then the core's state format.
    pub fn saved_len(&self) -> usize {
        4 * N + self.opt.state_bytes([N], S::DTYPE)
    }

    /// Writes the weights (f32 little-endian) then the core's [`Optimizer::save_state`] bytes.
    pub fn save<W: ByteSink>(&mut self, sink: &mut W) -> Result<(), TrainerError> {
        for p in &self.params {
            sink.write(&p.to_le_bytes()).map_err(Error::from)?;
        }
        let len = self.opt.state_len(N);
        let view = [TensorState {
            numel: N,
            state: &mut self.state[..len],
            aux: &mut self.aux,
        }];
        Ok(self.opt.save_state(&view, sink)?)
    }

    /// Reads bytes written by [`Trainer::save`]; on any error nothing changes.
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), TrainerError> {
        let (weights, state) = bytes
            .split_at_checked(4 * N)
            .ok_or(Error::Checkpoint(homeadam_core::CheckpointError::Truncated))?;
        let len = self.opt.state_len(N);
        let mut view = [TensorState {
            numel: N,
            state: &mut self.state[..len],
            aux: &mut self.aux,
        }];
        self.opt.load_state(state, &mut view)?;
        for (p, b) in self.params.iter_mut().zip(weights.chunks_exact(4)) {
            *p = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }
}
