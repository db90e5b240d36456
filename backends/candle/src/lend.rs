//! One variable's parameters and gradient as plain slices, lent by candle without copying.
//!
//! candle lends a CPU storage only inside [`InplaceOp2::cpu_fwd`], while it holds the
//! variable's write lock and the gradient's read lock. The core's two-phase
//! [`homeadam_core::Step`] takes the model a tensor at a time, so each variable is borrowed on
//! its own, one lock pair at a time; variables of different storage types share one step.

use std::cell::RefCell;
use std::collections::HashSet;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp2, Layout, Result, Storage as Device, Tensor, Var};

use crate::error::bail;
use homeadam_core::{bf16, f16, Storage};

use homeadam_core::ExactSum;

/// Work done on one variable's slices while candle lends them.
pub(crate) trait Visit {
    /// `param` and `grad` are the variable's and its gradient's elements, equally long.
    fn visit<P: Storage>(&mut self, param: &mut [P], grad: &[P]) -> Result<()>;
}

/// The in-place op whose `cpu_fwd` lends a variable's and its gradient's slices to a visitor.
/// `cpu_fwd` takes `&self`: the visitor sits in a `RefCell`.
struct LendOp<'v, V>(RefCell<&'v mut V>);

impl<V: Visit> InplaceOp2 for LendOp<'_, V> {
    fn name(&self) -> &'static str {
        "homeadam-step"
    }

    fn cpu_fwd(&self, s1: &mut CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<()> {
        let mut visitor = self.0.borrow_mut();
        match (s1, s2) {
            (CpuStorage::F32(p), CpuStorage::F32(g)) => lend(&mut **visitor, p, l1, g, l2),
            (CpuStorage::BF16(p), CpuStorage::BF16(g)) => lend(&mut **visitor, p, l1, g, l2),
            (CpuStorage::F16(p), CpuStorage::F16(g)) => lend(&mut **visitor, p, l1, g, l2),
            (p, g) => bail!(
                "homeadam: a variable of dtype {:?} with a gradient of dtype {:?}: expected both \
                 f32, bf16 or f16",
                p.dtype(),
                g.dtype()
            ),
        }
    }
}

fn window<'s, T>(data: &'s [T], layout: &Layout, what: &str) -> Result<&'s [T]> {
    match layout.contiguous_offsets() {
        Some((a, b)) if b <= data.len() => Ok(&data[a..b]),
        _ => bail!("homeadam: {what} is not a contiguous CPU tensor"),
    }
}

fn lend<V: Visit, P: Storage>(
    visitor: &mut V,
    param: &mut [P],
    param_layout: &Layout,
    grad: &[P],
    grad_layout: &Layout,
) -> Result<()> {
    let grad = window(grad, grad_layout, "a gradient")?;
    let param = match param_layout.contiguous_offsets() {
        Some((a, b)) if b <= param.len() && b - a == grad.len() => &mut param[a..b],
        _ => bail!("homeadam: a variable is not contiguous or differs from its gradient in size"),
    };
    visitor.visit(param, grad)
}

/// Runs `visitor` on the slices of `var` and `grad` (a CPU tensor of the same dtype and size).
pub(crate) fn with_slices<V: Visit>(var: &Var, grad: &Tensor, visitor: &mut V) -> Result<()> {
    var.inplace_op2(grad, &LendOp(RefCell::new(visitor)))
}

/// The whole buffer of a CPU tensor of a storage type the core steps, read in place.
enum Buffer<'a> {
    F32(&'a [f32]),
    BF16(&'a [bf16]),
    F16(&'a [f16]),
}

fn read<R>(t: &Tensor, what: &str, f: impl FnOnce(Buffer<'_>, &Layout) -> Result<R>) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Device::Cpu(CpuStorage::F32(s)) => f(Buffer::F32(s), layout),
        Device::Cpu(CpuStorage::BF16(s)) => f(Buffer::BF16(s), layout),
        Device::Cpu(CpuStorage::F16(s)) => f(Buffer::F16(s), layout),
        Device::Cpu(_) => bail!(
            "homeadam: {what} has dtype {:?}, expected f32, bf16 or f16",
            t.dtype()
        ),
        _ => bail!(
            "homeadam: {what} is on {:?}; this adapter steps CPU tensors",
            t.device()
        ),
    }
}

/// Adds Σ g² of one gradient to `sum`, exactly (the core's bulk [`ExactSum::add_squares`]: the
/// same sum as `add_square` of each element), read in place.
pub(crate) fn add_grad_squares(grad: &Tensor, what: &str, sum: &mut ExactSum) -> Result<()> {
    read(grad, what, |g, l| {
        match g {
            Buffer::F32(g) => sum.add_squares(window(g, l, what)?),
            Buffer::BF16(g) => sum.add_squares(window(g, l, what)?),
            Buffer::F16(g) => sum.add_squares(window(g, l, what)?),
        }
        Ok(())
    })
}

/// Where a tensor's storage starts: equal addresses are one storage (empty ones excepted).
fn address(t: &Tensor, what: &str) -> Result<usize> {
    #[cfg(feature = "cuda")]
    if t.device().is_cuda() {
        return Ok(crate::device::device_address(t, what)? as usize);
    }
    read(t, what, |b, _| {
        Ok(match b {
            Buffer::F32(s) => s.as_ptr() as usize,
            Buffer::BF16(s) => s.as_ptr() as usize,
            Buffer::F16(s) => s.as_ptr() as usize,
        })
    })
}

/// Refuses a storage shared between two variables, or between a variable and a gradient: the
/// step would update the same elements twice, or read a gradient that an earlier variable's
/// update already changed (one core step reads every gradient before it writes). Variables with
/// no elements must have been left out. Gradients may share storage with each other.
pub(crate) fn check_distinct<'a>(
    pairs: impl Iterator<Item = (&'a str, &'a Var, &'a Tensor)> + Clone,
) -> Result<()> {
    let mut vars = HashSet::new();
    for (name, var, _) in pairs.clone() {
        if !vars.insert(address(var, name)?) {
            bail!("homeadam: variable {name} shares its storage with another variable");
        }
    }
    for (name, _, grad) in pairs {
        let what = format!("the gradient of {name}");
        if vars.contains(&address(grad, &what)?) {
            bail!("homeadam: {what} shares its storage with a variable");
        }
    }
    Ok(())
}
