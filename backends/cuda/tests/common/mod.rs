//! What the g++ parity test and the GPU test share.

use homeadam_core::{Optimizer, StateStorage, StepReport, Storage, Tensor, TensorAux};
use homeadam_cuda::kernels::BOUND_CHUNK;

/// One step of the core's fast path (which bounds ρ_t itself) over the tensors, in the default
/// group.
pub fn core_step<P: Storage, G: Storage, S: StateStorage>(
    core: &mut Optimizer,
    params: &mut [Vec<P>],
    grads: &[Vec<G>],
    states: &mut [Vec<S>],
    auxes: &mut [TensorAux],
    grad_scale: f64,
) -> StepReport {
    let mut model: Vec<Tensor<'_, P, G, S>> = params
        .iter_mut()
        .zip(grads)
        .zip(states.iter_mut().zip(auxes.iter_mut()))
        .map(|((p, g), (s, a))| Tensor::new(p, g, s, a))
        .collect();
    core.step(&mut model, grad_scale).expect("core step")
}

/// Gradients of tensors of `sizes` elements whose ρ_t crosses τ = 1e-7 both ways (β2 = 0.5):
/// each step one floor scale for the model (3e-2 keeps every v̂ far above τ, 1e-3 near it, 1e-4
/// below it) times ±[0.5, 1.5) per element, one step in three one chunk of the global rule's
/// bound without gradient, one in eight a NaN; `next` draws 64 random bits.
pub fn bound_grads(sizes: &[usize], next: &mut impl FnMut() -> u64) -> Vec<Vec<f32>> {
    let floor = [3e-2f32, 3e-2, 1e-3, 1e-4][(next() % 4) as usize];
    let nonempty: Vec<usize> = (0..sizes.len()).filter(|&k| sizes[k] > 0).collect();
    let dead = next().is_multiple_of(3).then(|| {
        let k = nonempty[(next() % nonempty.len() as u64) as usize];
        (k, (next() % sizes[k].div_ceil(BOUND_CHUNK) as u64) as usize)
    });
    let nan = next()
        .is_multiple_of(8)
        .then(|| nonempty[(next() % nonempty.len() as u64) as usize]);
    sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let mut g: Vec<f32> = (0..n)
                .map(|i| {
                    let scale = if dead == Some((k, i / BOUND_CHUNK)) {
                        0.0
                    } else {
                        floor
                    };
                    let r = next();
                    let u = 0.5 + (r >> 40) as f32 / (1u64 << 24) as f32;
                    if r & 1 == 0 {
                        scale * u
                    } else {
                        -scale * u
                    }
                })
                .collect();
            if nan == Some(k) {
                g[n / 2] = f32::NAN;
            }
            g
        })
        .collect()
}
