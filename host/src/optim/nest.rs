//! Every parameter and gradient of a step as plain slices at once, without copying.
//!
//! The core steps the whole model in one call (the global HomeAdam switch takes
//! ρ_t = min v̂_t over every tensor; stochastic rounding is keyed by the tensor's index), so it
//! needs `&mut` access to every parameter buffer at the same time. candle only lends a
//! storage inside [`candle_core::InplaceOp2::cpu_fwd`], while it holds that storage's write
//! lock. The op of variable k therefore asks for variable k + 1 from inside its own
//! `cpu_fwd`: the innermost call holds every lock and every borrow is still alive, so the body
//! gets all slices with no `unsafe` and no allocation of tensor data. The recursion is as deep
//! as the model has variables (a few hundred bytes of stack each).
//!
//! candle's locks are not re-entrant: a variable that shares its storage with another
//! variable, or with a gradient, would deadlock the nesting. [`check_distinct`] refuses that
//! before any write lock is taken.

use std::cell::RefCell;
use std::collections::HashSet;

use candle_core::{bail, CpuStorage, InplaceOp2, Layout, Result, Storage, Tensor, Var};
use homeadam_core::{bf16, f16};

/// A parameter element type that both candle's CPU storage and the core know.
pub(crate) trait Elem: homeadam_core::Storage {
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]>;
}

macro_rules! elem {
    ($t:ty, $variant:ident) => {
        impl Elem for $t {
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
elem!(f32, F32);
elem!(bf16, BF16);
elem!(f16, F16);

/// The parameter and gradient slices of one variable.
pub(crate) type Pair<'a, P> = (&'a mut [P], &'a [P]);

fn window<'s, T>(data: &'s [T], layout: &Layout, what: &str) -> Result<&'s [T]> {
    match layout.contiguous_offsets() {
        Some((a, b)) if b <= data.len() => Ok(&data[a..b]),
        _ => bail!("homeadam: {what} is not a contiguous CPU tensor"),
    }
}

/// The base address of a tensor's CPU buffer, after checking its device and element type.
fn buffer_address<P: Elem>(t: &Tensor, what: &str) -> Result<usize> {
    let (storage, _) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => match P::slice(cpu) {
            Some(s) => Ok(s.as_ptr() as usize),
            None => bail!(
                "homeadam: {what} has dtype {:?}, expected {}",
                t.dtype(),
                P::DTYPE.name()
            ),
        },
        _ => bail!(
            "homeadam: {what} is on {:?}; this adapter steps CPU tensors",
            t.device()
        ),
    }
}

/// Refuses storages shared between variables, or between a variable and any gradient, which
/// would deadlock [`with_slices`]. Gradients may share storage with each other (read locks).
/// Variables with no elements must have been left out (their empty buffers share an address).
pub(crate) fn check_distinct<P: Elem>(pairs: &[(Var, Tensor)], names: &[&str]) -> Result<()> {
    let mut vars = HashSet::with_capacity(pairs.len());
    for ((var, _), name) in pairs.iter().zip(names) {
        if !vars.insert(buffer_address::<P>(var, name)?) {
            bail!("homeadam: variable {name} shares its storage with another variable");
        }
    }
    for ((_, grad), name) in pairs.iter().zip(names) {
        let what = format!("the gradient of {name}");
        if vars.contains(&buffer_address::<P>(grad, &what)?) {
            bail!("homeadam: {what} shares its storage with a variable");
        }
    }
    Ok(())
}

struct Level<'p, 'b, P, F, R> {
    rest: &'p [(Var, Tensor)],
    carried: RefCell<Option<(Vec<Pair<'b, P>>, F)>>,
    out: &'p RefCell<Option<R>>,
}

impl<P: Elem, F: FnOnce(&mut [Pair<'_, P>]) -> R, R> InplaceOp2 for Level<'_, '_, P, F, R> {
    fn name(&self) -> &'static str {
        "homeadam-step"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let Some((acc, body)) = self.carried.borrow_mut().take() else {
            bail!("homeadam: the step op was entered twice");
        };
        let (Some(param), Some(grad)) = (P::slice_mut(s1), P::slice(s2)) else {
            bail!("homeadam: parameter or gradient is not {}", P::DTYPE.name());
        };
        let grad = window(grad, l2, "a gradient")?;
        let param = match l1.contiguous_offsets() {
            Some((a, b)) if b <= param.len() && b - a == grad.len() => &mut param[a..b],
            _ => bail!("homeadam: a parameter is not contiguous or differs from its gradient in size"),
        };
        // Shortens the borrows already collected to this call's (Vec is covariant).
        let mut acc: Vec<Pair<'_, P>> = acc;
        acc.push((param, grad));
        descend(self.rest, acc, body, self.out)
    }
}

fn descend<P: Elem, F: FnOnce(&mut [Pair<'_, P>]) -> R, R>(
    rest: &[(Var, Tensor)],
    mut acc: Vec<Pair<'_, P>>,
    body: F,
    out: &RefCell<Option<R>>,
) -> Result<()> {
    match rest.split_first() {
        None => {
            *out.borrow_mut() = Some(body(&mut acc));
            Ok(())
        }
        Some(((var, grad), rest)) => {
            let level = Level {
                rest,
                carried: RefCell::new(Some((acc, body))),
                out,
            };
            var.inplace_op2(grad, &level)
        }
    }
}

/// Runs `body` on the slices of every `(variable, gradient)` pair, in order, while holding the
/// write lock of every variable. Call [`check_distinct`] first.
pub(crate) fn with_slices<P: Elem, R>(
    pairs: &[(Var, Tensor)],
    body: impl FnOnce(&mut [Pair<'_, P>]) -> R,
) -> Result<R> {
    let out = RefCell::new(None);
    descend(pairs, Vec::with_capacity(pairs.len()), body, &out)?;
    match out.into_inner() {
        Some(r) => Ok(r),
        None => bail!("homeadam: the step op did not run (not a CPU tensor?)"),
    }
}
