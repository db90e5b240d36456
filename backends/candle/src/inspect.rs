//! Reading a variable's optimizer state as candle tensors.

use candle_core::{bail, Result, Tensor, Var};
use homeadam_core::StateStorage;

use super::adapter::VarOptimizer;
use super::placement::OnStates;

impl VarOptimizer {
    /// The optimizer state of `var` as `f32` tensors of its shape on its device, one per
    /// state slot with the slot's name (`[("m", m), ("v", v)]` for the Adam-like rules; see
    /// [`homeadam_core::Config::state_names`]); q8 and half-precision state decoded to `f32`.
    /// A copy: changing it changes nothing. From a CUDA device the whole state is copied to
    /// the host first.
    pub fn state_of(&self, var: &Var) -> Result<Vec<(&'static str, Tensor)>> {
        let Some(k) = self.params.iter().position(|p| p.var.id() == var.id()) else {
            bail!("homeadam: state_of: the variable is not one this optimizer steps");
        };
        let (states, _) = self.host_state()?;
        let config = self.opt.config();
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
}

/// Variable `k`'s state slots, decoded to `f32`.
struct Slots<'a> {
    k: usize,
    numel: usize,
    config: &'a homeadam_core::Config,
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
