//! The adapter's bottom layer: what it knows of a variable, and where and how its optimizer
//! state is stored.

use candle_core::Var;
use homeadam_core::{bf16, f16, Dtype, Group, Q8Block, StateStorage};

/// A variable and what the adapter knows of it.
#[derive(Clone, Debug)]
pub(crate) struct Param {
    pub(crate) name: String,
    pub(crate) var: Var,
    pub(crate) group: Group,
}

/// Where the optimizer state lives: with the variables.
pub(crate) enum Placement {
    /// CPU variables: the state in host memory, stepped by the core.
    Host(States),
    /// CUDA variables: the state on their device, stepped by homeadam-cuda.
    #[cfg(feature = "cuda")]
    Device(Box<crate::cuda::DeviceState>),
}

/// Per-variable optimizer state in the chosen storage type.
#[derive(Clone, Debug)]
pub(crate) enum States {
    F32(Vec<Vec<f32>>),
    BF16(Vec<Vec<bf16>>),
    F16(Vec<Vec<f16>>),
    Q8(Vec<Vec<Q8Block>>),
}

/// Work on the state of every variable, whatever its storage type: the one place that
/// matches on [`States`] for reading.
pub(crate) trait OnStates {
    /// The result.
    type Out;
    /// Does the work on states of type `S`.
    fn on<S: StateStorage>(self, states: &[Vec<S>]) -> Self::Out;
}

/// [`OnStates`] with the states lent mutably.
pub(crate) trait OnStatesMut {
    /// The result.
    type Out;
    /// Does the work on states of type `S`.
    fn on<S: StateStorage>(self, states: &mut Vec<Vec<S>>) -> Self::Out;
}

impl States {
    /// Zeroed state of `slots` slots for variables of `numels` elements.
    pub(crate) fn fresh(dtype: Dtype, slots: usize, numels: impl Iterator<Item = usize>) -> States {
        let mut states = match dtype {
            Dtype::F32 => States::F32(Vec::new()),
            Dtype::BF16 => States::BF16(Vec::new()),
            Dtype::F16 => States::F16(Vec::new()),
            Dtype::Q8 => States::Q8(Vec::new()),
        };
        states.push_fresh(slots, numels);
        states
    }

    /// Appends zeroed state of `slots` slots for variables of `numels` elements.
    pub(crate) fn push_fresh(&mut self, slots: usize, numels: impl Iterator<Item = usize>) {
        struct Push<I>(usize, I);
        impl<I: Iterator<Item = usize>> OnStatesMut for Push<I> {
            type Out = ();
            fn on<S: StateStorage>(self, states: &mut Vec<Vec<S>>) {
                let Push(slots, numels) = self;
                states.extend(numels.map(|n| vec![S::default(); slots * S::slot_len(n)]));
            }
        }
        self.visit_mut(Push(slots, numels));
    }

    /// Runs `work` on the states.
    pub(crate) fn visit<W: OnStates>(&self, work: W) -> W::Out {
        match self {
            States::F32(s) => work.on(s),
            States::BF16(s) => work.on(s),
            States::F16(s) => work.on(s),
            States::Q8(s) => work.on(s),
        }
    }

    /// Runs `work` on the states, lent mutably.
    pub(crate) fn visit_mut<W: OnStatesMut>(&mut self, work: W) -> W::Out {
        match self {
            States::F32(s) => work.on(s),
            States::BF16(s) => work.on(s),
            States::F16(s) => work.on(s),
            States::Q8(s) => work.on(s),
        }
    }
}
