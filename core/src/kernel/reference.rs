//! The scalar reference ([`run_reference`]): a rule's element function one element at a time,
//! with the storage types' own scalar conversions; what every other path is tested against.

use crate::bits::is_nonfinite;
use crate::reduce::CHUNK;
use crate::rounding::ParamStore;
use crate::simd::Portable;
use crate::state::StateStorage;
use crate::storage::Storage;
use crate::tensor::Tensor;

use super::{stage_slots, unstage_slots, Kernel, Part, SlotStores, TensorResult};

/// The scalar reference: one element at a time, in index order, θ and g converted and θ
/// stored element by element with the storage types' own scalar conversions, the state staged
/// a chunk at a time (a q8 block is stored as a whole; the element types store the same bits
/// either way). The storage loop ([`reference_chunks`]) is not generic over the rule and the
/// rule's loop ([`ReferenceElements`]) not over the storage types, so each is compiled once.
pub(crate) fn run_reference<K: Kernel, P: Storage, G: Storage, S: StateStorage, R: ParamStore>(
    kernel: K,
    tensor: &mut Tensor<'_, P, G, S>,
    inv_grad_scale: f32,
    store: R,
    slots: SlotStores,
) -> TensorResult {
    let part = Part::whole(&mut *tensor.param, tensor.grad, &mut *tensor.state, K::SLOTS);
    let elements = ReferenceElements {
        kernel,
        inv_grad_scale,
    };
    reference_chunks(part, &elements, (1 << K::SLOTS) - 1, store, slots)
}

/// [`run_reference`]'s storage loop: each chunk's θ and g converted element by element into
/// `f32` arrays and the state slots in the mask `used` staged, updated by `elements`, and θ
/// stored element by element (each element's result depends on that element alone, so storing
/// after the chunk's loop gives the bits of storing in it).
#[inline(never)]
fn reference_chunks<P: Storage, G: Storage, S: StateStorage, R: ParamStore>(
    mut part: Part<'_, P, G, S>,
    elements: &dyn ReferenceLoop,
    used: u8,
    store: R,
    how: SlotStores,
) -> TensorResult {
    let n = part.param.len();
    let mut result = TensorResult::new();
    let mut bufs = [[0.0f32; CHUNK]; 3];
    let (mut p, mut g) = ([0.0f32; CHUNK], [0.0f32; CHUNK]);
    let mut start = 0;
    while start < n {
        let len = CHUNK.min(n - start);
        let chunk = start..start + len;
        for ((p, g), (&param, &grad)) in p
            .iter_mut()
            .zip(&mut g)
            .zip(part.param[chunk.clone()].iter().zip(&part.grad[chunk.clone()]))
        {
            *p = param.to_f32();
            *g = grad.to_f32();
        }
        let staged = stage_slots(Portable, used, &mut part.slots, &mut bufs, start, len, how);
        elements.update(&mut p[..len], &g[..len], staged, start, &mut result);
        for (i, (param, &p)) in part.param[chunk.clone()].iter_mut().zip(&p).enumerate() {
            *param = store.store(p, start + i);
        }
        unstage_slots(Portable, used, &mut part.slots, &bufs, chunk, how, 0);
        start += len;
    }
    result
}

/// A rule's reference loop over one chunk, as an object, so that [`reference_chunks`] is not
/// generic over the rule.
trait ReferenceLoop {
    /// Updates θ `p` in place from the unscaled gradients `g` and the state slots, one element
    /// at a time in index order, folding the chunk at `start` into `result`.
    fn update(
        &self,
        p: &mut [f32],
        g: &[f32],
        slots: [&mut [f32]; 3],
        start: usize,
        result: &mut TensorResult,
    );
}

/// The rule `K` and the gradients' scale: [`ReferenceLoop`] of `K`.
struct ReferenceElements<K> {
    kernel: K,
    inv_grad_scale: f32,
}

impl<K: Kernel> ReferenceLoop for ReferenceElements<K> {
    fn update(
        &self,
        p: &mut [f32],
        g: &[f32],
        mut slots: [&mut [f32]; 3],
        start: usize,
        result: &mut TensorResult,
    ) {
        for (i, (p, &g)) in p.iter_mut().zip(g).enumerate() {
            let g = g * self.inv_grad_scale;
            result.nonfinite |= is_nonfinite(g);
            let mut s = [0.0f32; 3];
            for (slot, values) in s.iter_mut().zip(&slots).take(K::SLOTS) {
                *slot = values[i];
            }
            let e = self.kernel.element(*p, g, &mut s);
            *p = e.p;
            for (slot, values) in s.iter().zip(&mut slots).take(K::SLOTS) {
                values[i] = *slot;
            }
            if let Some(r) = K::RHO_SLOT {
                if s[r] < result.v_min {
                    result.v_min = s[r];
                    result.v_min_at = start;
                }
                if K::DECIDES && s[r] > 0.0 && s[r] < result.v_min_active {
                    result.v_min_active = s[r];
                }
            }
            result.home += e.home as u32;
            if K::DOTS {
                result.step_sq.add_square(e.step);
                result.step_grad.add_product(e.step, e.grad);
            }
        }
    }
}
