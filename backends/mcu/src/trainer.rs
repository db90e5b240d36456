//! A single-tensor model with its optimizer state in fixed-capacity arrays.

use core::marker::PhantomData;

use homeadam_core::rules::only::{All, RuleSet};
use homeadam_core::{
    ByteSink, CheckpointError, Config, Error, Optimizer, StateStorage, StepReport, Tensor, TensorAux,
    TensorState, TensorStateMut,
};

/// Why a [`Trainer`] was refused.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TrainerError {
    /// The core refused the config, the gradients or a checkpoint.
    Core(Error),
    /// The rule needs more state items than the capacity `CAP`.
    Capacity {
        /// State items (elements, or q8 blocks) the rule needs for `N` parameters.
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
/// as `S` in an array of `CAP` items, at least slots × `S::slot_len(N)`
/// ([`Optimizer::state_len_of`]): one item per parameter and slot for `f32`, `f16` or `bf16`
/// (`CAP` = 2 × `N` covers AdamW, the srf and HomeAdam rules, `N` covers SGDM), one
/// [`Q8Block`](homeadam_core::Q8Block) per 256 parameters and slot for q8 (2 × ⌈`N` / 256⌉).
/// The state's RAM is `CAP` × `size_of::<S>()`: 4, 2 or 260 / 256 bytes per parameter and slot.
///
/// One tensor means HomeAdamW's global and per-layer decisions coincide; split a model into
/// several trainers only with per-element or per-layer rules.
///
/// `F` is the set of rules the trainer links ([`homeadam_core::rules::only`]; default: all). A
/// firmware that trains one rule names it, e.g. `Trainer<f32, N, CAP, only::HomeAdamWElement>`,
/// and links only that rule's kernel ([`Optimizer::step_only`]); [`Trainer::new`] refuses a
/// config of another rule with [`Error::RuleNotLinked`].
pub struct Trainer<S: StateStorage, const N: usize, const CAP: usize, F: RuleSet = All> {
    opt: Optimizer,
    params: [f32; N],
    state: [S; CAP],
    aux: TensorAux,
    rules: PhantomData<F>,
}

impl<S: StateStorage, const N: usize, const CAP: usize, F: RuleSet> Clone for Trainer<S, N, CAP, F> {
    fn clone(&self) -> Self {
        Trainer {
            opt: self.opt.clone(),
            params: self.params,
            state: self.state,
            aux: self.aux,
            rules: PhantomData,
        }
    }
}

impl<S: StateStorage, const N: usize, const CAP: usize, F: RuleSet> Trainer<S, N, CAP, F> {
    /// Validates `config` (its rule must be in `F`), checks the capacity, and starts at step 0
    /// with zeroed state.
    pub fn new(config: Config, params: [f32; N]) -> Result<Self, TrainerError> {
        let opt = Optimizer::new(config)?;
        if !F::admits(config.rule) {
            return Err(Error::RuleNotLinked { rule: config.name() }.into());
        }
        let needed = opt.state_len_of::<S>(N);
        if needed > CAP {
            return Err(TrainerError::Capacity {
                needed,
                capacity: CAP,
            });
        }
        Ok(Trainer {
            opt,
            params,
            // Not `[S::default(); CAP]`: with 260-byte q8 blocks, that made LLVM stage a
            // model-sized temporary on the caller's stack (thumbv6m, opt-level "s": 8,268 B
            // instead of 3,620 B for the firmware's `new_model`), too much for a 16 KiB part.
            state: core::array::from_fn(|_| S::default()),
            aux: TensorAux::default(),
            rules: PhantomData,
        })
    }

    /// The parameters θ.
    pub fn params(&self) -> &[f32; N] {
        &self.params
    }

    /// The optimizer state in use ([`Optimizer::state_len_of`] items, as [`Tensor::state`]).
    pub fn state(&self) -> &[S] {
        &self.state[..self.opt.state_len_of::<S>(N)]
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
    /// core's fast path with the kernels of `F` ([`Optimizer::step_only`]).
    pub fn step(&mut self, grad: &[f32; N], grad_scale: f64) -> Result<StepReport, TrainerError> {
        let (opt, params, state, aux) = self.parts();
        Ok(opt.step_only::<F, _, _, _>(&mut [Tensor::new(params, grad, state, aux)], grad_scale)?)
    }

    /// The same step through the core's scalar reference (slow; for checks such as
    /// [`crate::golden`]).
    pub fn step_reference(&mut self, grad: &[f32; N], grad_scale: f64) -> Result<StepReport, TrainerError> {
        let (opt, params, state, aux) = self.parts();
        Ok(opt.step_reference(&mut [Tensor::new(params, grad, state, aux)], grad_scale)?)
    }

    /// The optimizer and the parts of the tensor it steps or loads: θ, the state in use, aux.
    fn parts(&mut self) -> (&mut Optimizer, &mut [f32; N], &mut [S], &mut TensorAux) {
        let len = self.opt.state_len_of::<S>(N);
        (
            &mut self.opt,
            &mut self.params,
            &mut self.state[..len],
            &mut self.aux,
        )
    }

    /// Bytes [`Trainer::save`] writes: the weights, then the core's state format.
    pub fn saved_len(&self) -> usize {
        4 * N + self.opt.state_bytes([N], S::DTYPE)
    }

    /// Writes the weights (f32 little-endian) then the core's [`Optimizer::save_state`] bytes.
    pub fn save<W: ByteSink>(&self, sink: &mut W) -> Result<(), TrainerError> {
        for p in &self.params {
            sink.write(&p.to_le_bytes()).map_err(Error::from)?;
        }
        let view = [TensorState {
            numel: N,
            state: self.state(),
            aux: &self.aux,
        }];
        Ok(self.opt.save_state(&view, sink)?)
    }

    /// Reads bytes written by [`Trainer::save`]; on any error nothing changes.
    pub fn load(&mut self, bytes: &[u8]) -> Result<(), TrainerError> {
        let (weights, saved) = bytes
            .split_at_checked(4 * N)
            .ok_or(Error::Checkpoint(CheckpointError::Truncated))?;
        let (opt, params, state, aux) = self.parts();
        opt.load_state(saved, &mut [TensorStateMut { numel: N, state, aux }])?;
        for (p, b) in params.iter_mut().zip(weights.chunks_exact(4)) {
            *p = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        Ok(())
    }
}
