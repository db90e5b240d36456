//! Reading a variable's optimizer state as candle tensors.

use candle_core::{Result, Tensor, Var};
use homeadam_core::{Config, StateStorage};

use super::params::{OnStates, States};

/// The state slots of `var`, variable `k` of `states`, as `f32` tensors of its shape on its
/// device, each with its name in `config`.
pub(crate) fn slot_tensors(
    states: &States,
    k: usize,
    var: &Var,
    config: &Config,
) -> Result<Vec<(&'static str, Tensor)>> {
    let slots = states.visit(Slots {
        k,
        numel: var.elem_count(),
        config,
    });
    let names = config.state_names();
    names
        .iter()
        .zip(slots)
        .map(|(&name, values)| Ok((name, Tensor::from_vec(values, var.shape(), var.device())?)))
        .collect()
}

/// Variable `k`'s state slots, decoded to `f32`.
struct Slots<'a> {
    k: usize,
    numel: usize,
    config: &'a Config,
}

impl OnStates for Slots<'_> {
    type Out = Vec<Vec<f32>>;
    fn on<S: StateStorage>(self, states: &[Vec<S>]) -> Vec<Vec<f32>> {
        let per_slot = S::slot_len(self.numel);
        (0..self.config.state_slots())
            .map(|slot| {
                let mut values = vec![0.0; self.numel];
                let stored = &states[self.k][slot * per_slot..(slot + 1) * per_slot];
                S::read_slot(stored, self.config.q8_map(slot), &mut values);
                values
            })
            .collect()
    }
}
