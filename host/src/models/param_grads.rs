//! The backward pass of a training step, with the parameters' gradients handed over directly.
//!
//! candle's backward pass adds each gradient an op returns for an argument into a tensor of
//! zeros of the argument's shape: on a GPU an allocation, a fill, a second allocation and an
//! elementwise sum for every argument, each a launch the host has to make. For a parameter
//! (a `Var`) whose gradient one of the models' own ops computed, that sum reproduces its
//! gradient (the same values; only a zero keeps its sign, which the sum with +0 drops). Inside
//! [`backward`] those ops give the gradient to `param_grad` instead, which keeps it, and
//! [`backward`] puts it in the store candle returns. A parameter that several of our ops reach
//! gets the sum of their gradients in the order candle's pass computes them, plus what
//! candle's own ops gave it. Outside [`backward`] (candle's `Tensor::backward` called directly)
//! the ops return every gradient to candle as before.

use std::cell::RefCell;
use std::collections::HashMap;

use anyhow::Result;
use candle_core::backprop::GradStore;
use candle_core::{Tensor, TensorId};

thread_local! {
    /// The parameters' gradients of the backward pass running on this thread, if [`backward`]
    /// runs it.
    static KEPT: RefCell<Option<HashMap<TensorId, Tensor>>> = const { RefCell::new(None) };
}

/// `∂loss/∂x` for every tensor `x` the loss depends on, as candle's `loss.backward()` gives it;
/// the parameters' gradients from the models' own ops are not summed into zeros first.
pub fn backward(loss: &Tensor) -> Result<GradStore> {
    KEPT.with(|k| *k.borrow_mut() = Some(HashMap::new()));
    let grads = loss.backward();
    let kept = KEPT.with(|k| k.borrow_mut().take()).unwrap_or_default();
    let mut grads = grads?;
    for (id, g) in kept {
        let sum = match grads.get_id(id) {
            Some(other) => (other + g)?,
            None => g,
        };
        grads.insert_id(id, sum);
    }
    Ok(grads)
}

/// What an op's backward pass returns to candle as the gradient `grad` of its argument `arg`:
/// `None` where `arg` is a parameter and [`backward`] runs the pass (then the gradient is kept
/// for it), else `grad`. A gradient of another shape than its parameter is an error, as
/// candle's sum makes it.
pub(crate) fn param_grad(arg: &Tensor, grad: Tensor) -> candle_core::Result<Option<Tensor>> {
    if !arg.is_variable() {
        return Ok(Some(grad));
    }
    if grad.shape() != arg.shape() {
        candle_core::bail!(
            "a gradient of shape {:?} for a parameter of shape {:?}",
            grad.dims(),
            arg.dims()
        );
    }
    KEPT.with(|k| {
        let mut kept = k.borrow_mut();
        let Some(kept) = kept.as_mut() else {
            return Ok(Some(grad));
        };
        let sum = match kept.remove(&arg.id()) {
            Some(earlier) => (earlier + grad)?,
            None => grad,
        };
        kept.insert(arg.id(), sum);
        Ok(None)
    })
}

/// The three gradients of a normalisation `(x, γ, β) → y` from its backward op's one packed
/// result `[∂L/∂x | ∂L/∂γ | ∂L/∂β]` (flat): `∂L/∂x` in `x`'s shape, and the parameters'
/// through [`param_grad`].
pub(crate) fn unpack_normalisation(
    packed: &Tensor,
    x: &Tensor,
    gamma: &Tensor,
    beta: &Tensor,
) -> candle_core::Result<[Option<Tensor>; 3]> {
    let (n, c) = (x.elem_count(), gamma.elem_count());
    let dx = packed.narrow(0, 0, n)?.reshape(x.shape())?;
    Ok([
        Some(dx),
        param_grad(gamma, packed.narrow(0, n, c)?)?,
        param_grad(beta, packed.narrow(0, n + c, c)?)?,
    ])
}

#[cfg(test)]
mod tests {
    use candle_core::{CpuStorage, CustomOp1, CustomOp2, Device, Layout, Shape, Var};

    use super::*;

    /// `x · w` elementwise, whose backward pass hands `w`'s gradient to [`param_grad`].
    struct Scale;

    impl CustomOp2 for Scale {
        fn name(&self) -> &'static str {
            "test-scale"
        }

        fn cpu_fwd(
            &self,
            x: &CpuStorage,
            xl: &Layout,
            w: &CpuStorage,
            wl: &Layout,
        ) -> candle_core::Result<(CpuStorage, Shape)> {
            let (x, w) = (x.as_slice::<f32>()?, w.as_slice::<f32>()?);
            let (x, w) = (&x[xl.start_offset()..], &w[wl.start_offset()..]);
            let n = xl.shape().elem_count();
            let y = (0..n).map(|i| x[i] * w[i]).collect();
            Ok((CpuStorage::F32(y), xl.shape().clone()))
        }

        fn bwd(
            &self,
            x: &Tensor,
            w: &Tensor,
            _: &Tensor,
            grad: &Tensor,
        ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
            Ok((
                Some(grad.mul(&w.detach())?),
                param_grad(w, grad.mul(&x.detach())?)?,
            ))
        }
    }

    /// The identity, whose backward pass fails.
    struct Failing;

    impl CustomOp1 for Failing {
        fn name(&self) -> &'static str {
            "test-failing"
        }

        fn cpu_fwd(&self, x: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
            Ok((x.clone(), l.shape().clone()))
        }

        fn bwd(&self, _: &Tensor, _: &Tensor, _: &Tensor) -> candle_core::Result<Option<Tensor>> {
            candle_core::bail!("no backward pass")
        }
    }

    fn values(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    /// `w` reached through the op twice and once through candle's own product, and an input
    /// `x` that is a parameter too.
    fn loss(x: &Var, w: &Var) -> Tensor {
        let h = x.as_tensor().apply_op2(w.as_tensor(), Scale).unwrap();
        let h = h.apply_op2(w.as_tensor(), Scale).unwrap();
        (h.sqr().unwrap() + w.as_tensor().mul(x.as_tensor()).unwrap())
            .unwrap()
            .sum_all()
            .unwrap()
    }

    #[test]
    fn the_gradients_equal_candles() {
        let x = Var::new(&[1.5f32, -2.0, 0.25], &Device::Cpu).unwrap();
        let w = Var::new(&[0.5f32, 3.0, -1.0], &Device::Cpu).unwrap();
        let expected = loss(&x, &w).backward().unwrap();
        let ours = backward(&loss(&x, &w)).unwrap();
        for v in [&x, &w] {
            assert_eq!(values(ours.get(v).unwrap()), values(expected.get(v).unwrap()));
        }
        // d/dw of Σ (x w²)² + w x = 4 x² w³ + x.
        let dw: Vec<f32> = [(1.5f32, 0.5f32), (-2.0, 3.0), (0.25, -1.0)]
            .iter()
            .map(|&(x, w)| 4.0 * x * x * w * w * w + x)
            .collect();
        assert_eq!(values(ours.get(&w).unwrap()), dw);
    }

    #[test]
    fn outside_backward_the_ops_return_every_gradient_to_candle() {
        let x = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
        let w = Var::new(&[3.0f32, 4.0], &Device::Cpu).unwrap();
        let y = x.as_tensor().apply_op2(w.as_tensor(), Scale).unwrap();
        let grads = y.sum_all().unwrap().backward().unwrap();
        assert_eq!(values(grads.get(&w).unwrap()), [1.0, 2.0]);
        assert!(KEPT.with(|k| k.borrow().is_none()));
    }

    #[test]
    fn a_gradient_of_another_shape_is_an_error() {
        let w = Var::new(&[3.0f32, 4.0], &Device::Cpu).unwrap();
        let g = Tensor::new(&[1.0f32, 2.0, 3.0], &Device::Cpu).unwrap();
        let err = param_grad(w.as_tensor(), g).unwrap_err().to_string();
        assert!(err.contains("shape [3] for a parameter of shape [2]"), "{err}");
    }

    #[test]
    fn a_failed_pass_keeps_nothing_for_the_next() {
        let x = Var::new(&[1.0f32, 2.0], &Device::Cpu).unwrap();
        let w = Var::new(&[3.0f32, 4.0], &Device::Cpu).unwrap();
        // Scale's backward pass keeps w's gradient, then Failing's fails.
        let h = x.as_tensor().apply_op1(Failing).unwrap();
        let y = h.apply_op2(w.as_tensor(), Scale).unwrap();
        let err = backward(&y.sum_all().unwrap()).unwrap_err();
        assert!(err.to_string().contains("no backward pass"), "{err}");
        assert!(KEPT.with(|k| k.borrow().is_none()));
    }
}
