//! Dispatch: which element kernel steps a tensor ([`crate::Config::kernel`], run by the
//! kernel table's [`with_kernel`]), and how the tensor is driven (the scalar reference or the
//! fast path, the rounding of θ). The generic step calls it directly, the type-erased one
//! ([`crate::erased`], hosts) through its storage types as data.

use crate::config::Config;
use crate::kernel::{self, Apply, Kernel, Part, SlotStores, TensorResult};
use crate::rounding::{NearestStore, ParamStore, Rounding, StochasticStore};
use crate::rules::only::RuleSet;
use crate::rules::{with_kernel, ElementKernel};
use crate::scalars::StepScalars;
use crate::simd::Isa;
use crate::state::StateStorage;
use crate::storage::{Dtype, Storage};
use crate::tensor::Tensor;

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

/// What picks the element kernel of a tensor and feeds it: the config and its phase (the
/// kernel, [`crate::Config::kernel`]), the step's scalars and the HomeAdam branch; what
/// [`dispatch`] takes besides the run and the tensor.
#[derive(Clone, Copy)]
pub(crate) struct KernelChoice<'c> {
    pub config: &'c Config,
    pub scalars: &'c StepScalars,
    pub second_phase: bool,
    pub branch: u8,
}

/// [`Run::apply`] on one tensor, for whichever kernel the table picks.
struct OnTensor<'r, 't, const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage> {
    run: Run<REFERENCE>,
    tensor: &'r mut Tensor<'t, P, G, S>,
}

impl<const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage> Apply
    for OnTensor<'_, '_, REFERENCE, P, G, S>
{
    type Out = (TensorResult, bool);

    #[inline(always)]
    fn apply<K: Kernel>(self, kernel: K) -> Self::Out {
        self.run.apply(kernel, self.tensor)
    }
}

/// Runs the kernel of `config`'s rule ([`crate::Config::kernel`]) if `F` links it; `None`
/// otherwise.
pub(crate) fn dispatch<F: RuleSet, const REFERENCE: bool, P: Storage, G: Storage, S: StateStorage>(
    choice: KernelChoice<'_>,
    run: Run<REFERENCE>,
    tensor: &mut Tensor<'_, P, G, S>,
) -> Option<(TensorResult, bool)> {
    let KernelChoice {
        config,
        scalars,
        second_phase,
        branch,
    } = choice;
    // A set of one kernel runs it for every rule it admits, and the step refused the others:
    // a constant, which keeps a single-rule build from linking `Config::kernel`.
    let kernel = if F::KERNELS.is_power_of_two() {
        ElementKernel::ALL[F::KERNELS.trailing_zeros() as usize]
    } else {
        config.kernel(second_phase)
    };
    with_kernel::<F, _>(
        kernel,
        scalars,
        config.kernel_options(),
        branch,
        OnTensor { run, tensor },
    )
}
