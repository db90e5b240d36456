//! Dispatch: which rule's kernel steps a tensor, and how the tensor is driven (the scalar
//! reference or the fast path, the rounding of θ). One match over the rules; the generic step
//! calls it directly, the type-erased one ([`crate::erased`], hosts) through its storage
//! types as data.

use crate::config::Config;
use crate::kernel::{self, Kernel, Part, SlotStores, TensorResult};
use crate::rounding::{NearestStore, ParamStore, Rounding, StochasticStore};
use crate::rules::adabelief::AdaBelief;
use crate::rules::adam::Adam;
use crate::rules::homeadam::{branch, Home};
use crate::rules::lion::Lion;
use crate::rules::miadam::MiAdam;
use crate::rules::only::RuleSet;
use crate::rules::sgd::Sgd;
use crate::rules::srf;
use crate::rules::swats::{SwatsAdam, SwatsSgd};
use crate::rules::{Rule, Switch};
use crate::scalars::StepScalars;
use crate::simd::Isa;
use crate::state::StateStorage;
use crate::storage::{Dtype, Storage};
use crate::tensor::Tensor;

/// Whether `F` holds a HomeAdam(W) rule of `switch` (`None`: of any switch).
#[inline(always)]
pub(crate) fn links_switch<F: RuleSet>(switch: Option<Switch>) -> bool {
    let admits = |s: Switch| {
        (switch.is_none() || switch == Some(s))
            && (F::admits(Rule::HomeAdam(s)) || F::admits(Rule::HomeAdamW(s)))
    };
    admits(Switch::Global) || admits(Switch::Layer) || admits(Switch::Element)
}

/// How one tensor is driven: which driver (`REFERENCE` or the fast path with `isa`), which
/// rounding.
#[derive(Clone, Copy)]
pub(crate) struct Run<const REFERENCE: bool> {
    pub(crate) rounding: Rounding,
    pub(crate) key: u64,
    pub(crate) slots: SlotStores,
    pub(crate) inv: f32,
    pub(crate) isa: Isa,
    #[cfg(feature = "std")]
    pub(crate) threads: usize,
}

impl<const REFERENCE: bool> Run<REFERENCE> {
    /// The same run; `D` names its driver as a constant (`D == REFERENCE` where it is called).
    #[cfg(feature = "std")]
    #[inline(always)]
    pub(crate) fn with_driver<const D: bool>(self) -> Run<D> {
        Run {
            rounding: self.rounding,
            key: self.key,
            slots: self.slots,
            inv: self.inv,
            isa: self.isa,
            threads: self.threads,
        }
    }

    pub(crate) fn apply<K: Kernel, P: Storage, G: Storage, S: StateStorage>(
        self,
        kernel: K,
        tensor: &mut Tensor<'_, P, G, S>,
    ) -> (TensorResult, bool) {
        // f32 θ is stored as computed under either rounding, so its nearest copy serves both;
        // the condition is a constant, so its stochastic copies are never compiled.
        let result = if const { matches!(P::DTYPE, Dtype::F32) } {
            self.drive(kernel, tensor, NearestStore)
        } else {
            match self.rounding {
                Rounding::Nearest => self.drive(kernel, tensor, NearestStore),
                Rounding::Stochastic => self.drive(kernel, tensor, StochasticStore { key: self.key }),
            }
        };
        (result, K::RHO_SLOT.is_some())
    }

    /// The driver `REFERENCE` names, storing θ with `store`: the scalar reference, or the fast
    /// path with the tensor's elements spread over the step's threads.
    fn drive<K: Kernel, P: Storage, G: Storage, S: StateStorage, R: ParamStore>(
        self,
        kernel: K,
        tensor: &mut Tensor<'_, P, G, S>,
        store: R,
    ) -> TensorResult {
        if REFERENCE {
            return kernel::run_reference(kernel, tensor, self.inv, store, self.slots);
        }
        let part = Part::whole(&mut *tensor.param, tensor.grad, &mut *tensor.state, K::SLOTS);
        #[cfg(feature = "std")]
        let threads = self.threads;
        #[cfg(not(feature = "std"))]
        let threads = 1;
        kernel::run_fast(kernel, part, self.inv, store, self.slots, self.isa, threads)
    }
}

/// What [`dispatch`] takes besides the run and the tensor.
#[derive(Clone, Copy)]
pub(crate) struct Rules<'c> {
    pub config: &'c Config,
    pub scalars: &'c StepScalars,
    pub swats_in_sgd_phase: bool,
    pub branch: u8,
}

/// Runs the kernel of `config`'s rule, if `F` links it (each arm's guard is a constant, so the
/// arms of the rules outside `F` are not compiled); `None` otherwise.
pub(crate) fn dispatch<F: RuleSet, const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage>(
    rules: Rules<'_>,
    run: Run<REFERENCE>,
    tensor: &mut Tensor<'_, P, G, S>,
) -> Option<(TensorResult, bool)> {
    let Rules {
        config,
        scalars: s,
        swats_in_sgd_phase,
        branch,
    } = rules;
    let admits = F::admits;
    Some(match config.rule {
        Rule::Sgd if admits(Rule::Sgd) && config.momentum == 0.0 => {
            run.apply(Sgd::<false>::new(s, config.nesterov), tensor)
        }
        Rule::Sgd if admits(Rule::Sgd) => run.apply(Sgd::<true>::new(s, config.nesterov), tensor),
        Rule::Adam if admits(Rule::Adam) => run.apply(Adam::<false>::new(s), tensor),
        Rule::AdamW if admits(Rule::AdamW) => run.apply(Adam::<true>::new(s), tensor),
        Rule::AdamSrf | Rule::AdamWSrf if admits(Rule::AdamSrf) || admits(Rule::AdamWSrf) => {
            run.apply(srf::kernel(s), tensor)
        }
        // `branch` is PER_ELEMENT exactly for the element-wise switch.
        Rule::HomeAdam(_) | Rule::HomeAdamW(_) if branch == branch::PER_ELEMENT => {
            if !links_switch::<F>(Some(Switch::Element)) {
                return None;
            }
            run.apply(Home::<{ branch::PER_ELEMENT }>::new(s), tensor)
        }
        Rule::HomeAdam(_) | Rule::HomeAdamW(_)
            if links_switch::<F>(Some(Switch::Global)) || links_switch::<F>(Some(Switch::Layer)) =>
        {
            if branch == branch::ALL_HOME {
                run.apply(Home::<{ branch::ALL_HOME }>::new(s), tensor)
            } else {
                run.apply(Home::<{ branch::ALL_SRF }>::new(s), tensor)
            }
        }
        Rule::AdaBelief if admits(Rule::AdaBelief) && config.amsgrad => {
            run.apply(AdaBelief::<true>::new(s, config.weight_decouple), tensor)
        }
        Rule::AdaBelief if admits(Rule::AdaBelief) => {
            run.apply(AdaBelief::<false>::new(s, config.weight_decouple), tensor)
        }
        Rule::Swats if admits(Rule::Swats) && swats_in_sgd_phase => {
            run.apply(SwatsSgd::new(s, config.weight_decouple, config.nesterov), tensor)
        }
        Rule::Swats if admits(Rule::Swats) => run.apply(SwatsAdam::new(s, config.weight_decouple), tensor),
        Rule::MiAdam if admits(Rule::MiAdam) => run.apply(MiAdam::new(s), tensor),
        Rule::Lion if admits(Rule::Lion) => run.apply(Lion::new(s), tensor),
        _ => return None,
    })
}
