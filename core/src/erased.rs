//! Every rule's update for every combination of storage types, compiled once in this crate
//! (hosts, `std`).
//!
//! [`crate::Updates::update`] is generic over the storage types, so without this each crate that
//! calls it compiles its own copy of every rule's kernels for each instruction set: minutes of
//! build per test binary or downstream crate. Here a tensor's slices become [`AnyTensor`] (the
//! types as data) and two functions that are not generic, compiled in this crate, run the
//! typed update. A `no_std` build keeps the generic path, which links only the combinations
//! and rules it uses (flash).

use half::{bf16, f16};

use crate::dispatch::{dispatch, KernelChoice, Run};
use crate::kernel::TensorResult;
use crate::q8::Q8Block;
use crate::rules::only::All;
use crate::state::StateStorage;
use crate::storage::{Dtype, Storage};
use crate::tensor::{Group, Tensor, TensorAux};

/// θ of one of the storage types.
enum Param<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [bf16]),
    F16(&'a mut [f16]),
}

/// g of one of the storage types.
enum Grad<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

/// The state of one of the state types.
enum State<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [bf16]),
    F16(&'a mut [f16]),
    Q8(&'a mut [Q8Block]),
}

/// A [`Tensor`] whose storage types are data.
pub(crate) struct AnyTensor<'a> {
    param: Param<'a>,
    grad: Grad<'a>,
    state: State<'a>,
    aux: &'a mut TensorAux,
    group: Group,
}

/// `slice` as a slice of `U`.
///
/// # Safety
/// `T` and `U` are the same type.
unsafe fn same_mut<T, U>(slice: &mut [T]) -> &mut [U] {
    core::slice::from_raw_parts_mut(slice.as_mut_ptr().cast::<U>(), slice.len())
}

/// [`same_mut`] for a shared slice.
///
/// # Safety
/// `T` and `U` are the same type.
unsafe fn same<T, U>(slice: &[T]) -> &[U] {
    core::slice::from_raw_parts(slice.as_ptr().cast::<U>(), slice.len())
}

impl<'a> AnyTensor<'a> {
    /// The slices of `t`, typed by their `DTYPE`.
    #[inline(always)]
    pub fn of<P: Storage, G: Storage, S: StateStorage>(t: &'a mut Tensor<'_, P, G, S>) -> Self {
        // SAFETY (every cast): `Storage` and `StateStorage` are sealed, and each of their types
        // has its own `DTYPE`: f32, bf16, f16 and (state only) Q8Block. The matches name every
        // `Dtype`, so that a new one does not compile until it has its own arm.
        const {
            assert!(
                !matches!(P::DTYPE, Dtype::Q8) && !matches!(G::DTYPE, Dtype::Q8),
                "q8 is a state type only"
            )
        };
        let param = match P::DTYPE {
            Dtype::F32 => Param::F32(unsafe { same_mut(t.param) }),
            Dtype::BF16 => Param::Bf16(unsafe { same_mut(t.param) }),
            Dtype::F16 => Param::F16(unsafe { same_mut(t.param) }),
            Dtype::Q8 => unreachable!("refused at compile time above"),
        };
        let grad = match G::DTYPE {
            Dtype::F32 => Grad::F32(unsafe { same(t.grad) }),
            Dtype::BF16 => Grad::Bf16(unsafe { same(t.grad) }),
            Dtype::F16 => Grad::F16(unsafe { same(t.grad) }),
            Dtype::Q8 => unreachable!("refused at compile time above"),
        };
        let state = match S::DTYPE {
            Dtype::F32 => State::F32(unsafe { same_mut(t.state) }),
            Dtype::BF16 => State::Bf16(unsafe { same_mut(t.state) }),
            Dtype::F16 => State::F16(unsafe { same_mut(t.state) }),
            Dtype::Q8 => State::Q8(unsafe { same_mut(t.state) }),
        };
        AnyTensor {
            param,
            grad,
            state,
            aux: &mut *t.aux,
            group: t.group,
        }
    }
}

/// [`dispatch`] with every rule, through the copy compiled in this crate.
#[inline(always)]
pub(crate) fn update<const REFERENCE: bool>(
    choice: KernelChoice<'_>,
    run: Run<REFERENCE>,
    tensor: AnyTensor<'_>,
) -> Option<(TensorResult, bool)> {
    if REFERENCE {
        reference(choice, run.with_driver(), tensor)
    } else {
        fast(choice, run.with_driver(), tensor)
    }
}

/// The fast path of every rule and combination (never inlined: then it is compiled here only).
#[inline(never)]
fn fast(choice: KernelChoice<'_>, run: Run<false>, tensor: AnyTensor<'_>) -> Option<(TensorResult, bool)> {
    by_param(choice, run, tensor)
}

/// The scalar reference of every rule and combination.
#[inline(never)]
fn reference(
    choice: KernelChoice<'_>,
    run: Run<true>,
    tensor: AnyTensor<'_>,
) -> Option<(TensorResult, bool)> {
    by_param(choice, run, tensor)
}

fn by_param<const R: bool>(
    choice: KernelChoice<'_>,
    run: Run<R>,
    t: AnyTensor<'_>,
) -> Option<(TensorResult, bool)> {
    let AnyTensor {
        param,
        grad,
        state,
        aux,
        group,
    } = t;
    let rest = (grad, state, aux, group);
    match param {
        Param::F32(p) => by_grad(choice, run, p, rest),
        Param::Bf16(p) => by_grad(choice, run, p, rest),
        Param::F16(p) => by_grad(choice, run, p, rest),
    }
}

fn by_grad<const R: bool, P: Storage>(
    choice: KernelChoice<'_>,
    run: Run<R>,
    p: &mut [P],
    (grad, state, aux, group): (Grad<'_>, State<'_>, &mut TensorAux, Group),
) -> Option<(TensorResult, bool)> {
    match grad {
        Grad::F32(g) => by_state(choice, run, p, g, (state, aux, group)),
        Grad::Bf16(g) => by_state(choice, run, p, g, (state, aux, group)),
        Grad::F16(g) => by_state(choice, run, p, g, (state, aux, group)),
    }
}

fn by_state<const R: bool, P: Storage, G: Storage>(
    choice: KernelChoice<'_>,
    run: Run<R>,
    param: &mut [P],
    grad: &[G],
    (state, aux, group): (State<'_>, &mut TensorAux, Group),
) -> Option<(TensorResult, bool)> {
    macro_rules! typed {
        ($state:expr) => {
            dispatch::<All, R, P, G, _>(
                choice,
                run,
                &mut Tensor {
                    param,
                    grad,
                    state: $state,
                    aux,
                    group,
                },
            )
        };
    }
    match state {
        State::F32(s) => typed!(s),
        State::Bf16(s) => typed!(s),
        State::F16(s) => typed!(s),
        State::Q8(s) => typed!(s),
    }
}
