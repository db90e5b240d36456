//! PyTorch's tensors as the core's slices: each tensor arrives as the address of its first
//! element, its length and its dtype, and is lent to one phase of a step as a typed
//! [`Tensor`].
//!
//! The Python side (`homeadam.torch`) hands over only contiguous CPU tensors of the dtypes
//! named here, with lengths it read from the tensors themselves, and keeps them alive for the
//! call. What can still be checked here is: every address is non-null and aligned for its
//! type, and no two ranges that a step writes overlap each other or a gradient (the same
//! parameter twice, or a state buffer shared by two parameters, would make two `&mut` slices
//! of one memory).

use homeadam_core::{bf16, f16, Dtype, Error, Group, Q8Block, StateStorage, Storage, Tensor, TensorAux};

/// The storage of θ and g (they share one dtype in PyTorch): a core [`Dtype`] that holds
/// elements, as a type of its own so that lending a tensor needs no arm for q8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamDtype {
    /// [`Dtype::F32`].
    F32,
    /// [`Dtype::BF16`].
    Bf16,
    /// [`Dtype::F16`].
    F16,
}

impl ParamDtype {
    /// The dtype of a core dtype name ([`Dtype::from_name`]); `None` for q8, which holds state
    /// only.
    pub fn from_name(name: &str) -> Option<Self> {
        match Dtype::from_name(name)? {
            Dtype::F32 => Some(ParamDtype::F32),
            Dtype::BF16 => Some(ParamDtype::Bf16),
            Dtype::F16 => Some(ParamDtype::F16),
            Dtype::Q8 => None,
        }
    }

    /// The core's dtype.
    pub fn core(self) -> Dtype {
        match self {
            ParamDtype::F32 => Dtype::F32,
            ParamDtype::Bf16 => Dtype::BF16,
            ParamDtype::F16 => Dtype::F16,
        }
    }
}

/// Bytes of the state of a tensor of `numel` parameters: `slots` slots of
/// [`Dtype::slot_bytes`] each.
pub fn state_bytes(dtype: Dtype, slots: usize, numel: usize) -> usize {
    slots.saturating_mul(dtype.slot_bytes(numel))
}

/// The alignment an item of `dtype` needs in memory: an element's size, or a [`Q8Block`]'s
/// alignment.
fn alignment(dtype: Dtype) -> usize {
    match dtype {
        Dtype::Q8 => core::mem::align_of::<Q8Block>(),
        _ => dtype.size(),
    }
}

/// One tensor of a step: addresses and lengths as the Python side read them.
#[derive(Clone, Copy, Debug)]
pub struct RawTensor {
    /// θ's first element.
    pub param: usize,
    /// g's first element.
    pub grad: usize,
    /// The state buffer's first byte.
    pub state: usize,
    /// Elements of θ (and of g).
    pub numel: usize,
    /// Bytes of the state buffer.
    pub state_bytes: usize,
    /// θ's and g's dtype.
    pub dtype: ParamDtype,
    /// The state's dtype.
    pub state_dtype: Dtype,
    /// The tensor's parameter group.
    pub group: Group,
}

/// What runs on one tensor at a time, lent as typed slices: a phase of the core's step.
pub trait Visit {
    /// Runs on `tensor`.
    fn visit<P: Storage, S: StateStorage>(&mut self, tensor: &mut Tensor<'_, P, P, S>) -> Result<(), Error>;
}

fn byte_range(at: usize, bytes: usize) -> Result<(usize, usize), String> {
    at.checked_add(bytes)
        .map(|end| (at, end))
        .ok_or_else(|| "a tensor's byte range overflows the address space".to_string())
}

impl RawTensor {
    /// Checks addresses, alignment and lengths against the state dtype and the rule's `slots`.
    pub fn check(&self, index: usize, slots: usize) -> Result<(), String> {
        check_elements(index, "parameter", self.param, self.numel, self.dtype)?;
        check_elements(index, "gradient", self.grad, self.numel, self.dtype)?;
        check_state(
            index,
            self.state,
            self.state_bytes,
            self.state_dtype,
            slots,
            self.numel,
        )
    }

    /// The byte ranges a step writes (θ, state) and reads (g).
    fn ranges(&self) -> Result<[(usize, usize); 3], String> {
        let elements = self.numel.saturating_mul(self.dtype.core().size());
        Ok([
            byte_range(self.param, elements)?,
            byte_range(self.grad, elements)?,
            byte_range(self.state, self.state_bytes)?,
        ])
    }

    /// Runs `visitor` on this tensor's slices.
    ///
    /// # Safety
    /// The addresses are those of live, contiguous tensors of the recorded dtypes and lengths,
    /// which nothing else reads or writes during the call, and [`check_disjoint`] passed for
    /// the tensors of the step.
    pub unsafe fn lend<V: Visit>(&self, aux: &mut TensorAux, visitor: &mut V) -> Result<(), Error> {
        match self.dtype {
            ParamDtype::F32 => self.lend_state::<f32, V>(aux, visitor),
            ParamDtype::Bf16 => self.lend_state::<bf16, V>(aux, visitor),
            ParamDtype::F16 => self.lend_state::<f16, V>(aux, visitor),
        }
    }

    unsafe fn lend_state<P: Storage, V: Visit>(
        &self,
        aux: &mut TensorAux,
        visitor: &mut V,
    ) -> Result<(), Error> {
        match self.state_dtype {
            Dtype::F32 => self.lend_typed::<P, f32, V>(aux, visitor),
            Dtype::BF16 => self.lend_typed::<P, bf16, V>(aux, visitor),
            Dtype::F16 => self.lend_typed::<P, f16, V>(aux, visitor),
            Dtype::Q8 => self.lend_typed::<P, Q8Block, V>(aux, visitor),
        }
    }

    unsafe fn lend_typed<P: Storage, S: StateStorage, V: Visit>(
        &self,
        aux: &mut TensorAux,
        visitor: &mut V,
    ) -> Result<(), Error> {
        let param = slice_mut::<P>(self.param, self.numel);
        let grad = slice::<P>(self.grad, self.numel);
        let state = slice_mut::<S>(self.state, self.state_bytes / core::mem::size_of::<S>());
        visitor.visit(&mut Tensor::new(param, grad, state, aux).in_group(self.group))
    }
}

/// Refuses a null or misaligned address of a non-empty range.
fn check_address(index: usize, what: &str, at: usize, alignment: usize, items: usize) -> Result<(), String> {
    if items > 0 && (at == 0 || !at.is_multiple_of(alignment)) {
        return Err(format!(
            "tensor {index}: its {what}'s address {at:#x} is null or not aligned to {alignment} bytes"
        ));
    }
    Ok(())
}

/// Refuses the address of a tensor's parameter or gradient (`what`) that is null or misaligned
/// for `dtype`.
pub fn check_elements(
    index: usize,
    what: &str,
    at: usize,
    numel: usize,
    dtype: ParamDtype,
) -> Result<(), String> {
    check_address(index, what, at, dtype.core().size(), numel)
}

/// Refuses a state buffer that is misaligned or not the size the rule's `slots` need for
/// `numel` parameters ([`state_bytes`]).
pub fn check_state(
    index: usize,
    at: usize,
    bytes: usize,
    dtype: Dtype,
    slots: usize,
    numel: usize,
) -> Result<(), String> {
    check_address(index, "state", at, alignment(dtype), bytes)?;
    let expected = state_bytes(dtype, slots, numel);
    if bytes != expected {
        return Err(format!(
            "tensor {index}: its state holds {bytes} bytes, the rule needs {expected} for {numel} parameters"
        ));
    }
    Ok(())
}

/// # Safety
/// As [`RawTensor::lend`].
pub(crate) unsafe fn slice_mut<'a, T>(at: usize, len: usize) -> &'a mut [T] {
    if len == 0 {
        return &mut [];
    }
    core::slice::from_raw_parts_mut(at as *mut T, len)
}

/// # Safety
/// As [`RawTensor::lend`].
pub(crate) unsafe fn slice<'a, T>(at: usize, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    core::slice::from_raw_parts(at as *const T, len)
}

/// Refuses tensors whose written ranges (θ, state) overlap any other range of the step: the
/// same parameter listed twice, a parameter that is its own gradient, or shared state.
pub fn check_disjoint(tensors: &[RawTensor]) -> Result<(), String> {
    // (start, end, tensor, what, written)
    let mut ranges = Vec::with_capacity(3 * tensors.len());
    for (k, t) in tensors.iter().enumerate() {
        let [p, g, s] = t.ranges()?;
        for (what, (a, b), written) in [("parameter", p, true), ("gradient", g, false), ("state", s, true)] {
            if b > a {
                ranges.push((a, b, k, what, written));
            }
        }
    }
    ranges.sort_unstable_by_key(|r| r.0);
    // Sorted by start, a range overlaps an earlier one exactly when it starts before the
    // furthest end so far: of any range for a written one, of the written ranges for a read one.
    type Reach<'a> = Option<(usize, usize, &'a str)>;
    let (mut any, mut written_only): (Reach, Reach) = (None, None);
    for &(a, b, k, what, written) in &ranges {
        let earlier = if written { any } else { written_only };
        if let Some((_, k0, what0)) = earlier.filter(|&(end, ..)| a < end) {
            return Err(format!(
                "tensor {k}'s {what} overlaps tensor {k0}'s {what0}: a step writes to one of them \
                 (the same parameter twice, or memory shared between tensors)"
            ));
        }
        let farther = |reach: Reach| reach.is_none_or(|(end, ..)| b > end);
        if farther(any) {
            any = Some((b, k, what));
        }
        if written && farther(written_only) {
            written_only = Some((b, k, what));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(param: usize, grad: usize, state: usize, numel: usize) -> RawTensor {
        RawTensor {
            param,
            grad,
            state,
            numel,
            state_bytes: 2 * 4 * numel,
            dtype: ParamDtype::F32,
            state_dtype: Dtype::F32,
            group: Group::DEFAULT,
        }
    }

    #[test]
    fn disjoint_tensors_pass() {
        let a = tensor(0x1000, 0x2000, 0x3000, 16);
        let b = tensor(0x4000, 0x5000, 0x6000, 16);
        assert_eq!(check_disjoint(&[a, b]), Ok(()));
    }

    #[test]
    fn gradients_may_share_memory() {
        let a = tensor(0x1000, 0x8000, 0x3000, 16);
        let b = tensor(0x4000, 0x8000, 0x6000, 16);
        assert_eq!(check_disjoint(&[a, b]), Ok(()));
    }

    #[test]
    fn written_ranges_may_not_overlap_anything() {
        let a = tensor(0x1000, 0x2000, 0x3000, 16);
        for b in [
            tensor(0x1000 + 60, 0x5000, 0x6000, 16), // θ over θ
            tensor(0x4000, 0x5000, 0x3000 + 4, 16),  // state over state
            tensor(0x2000 + 8, 0x5000, 0x6000, 16),  // θ over a gradient
        ] {
            assert!(check_disjoint(&[a, b]).unwrap_err().contains("overlaps"));
        }
        // A gradient under a long read-only range still meets the θ it overlaps.
        let long = tensor(0x9000, 0x0, 0xa000, 0);
        let c = RawTensor {
            grad: 0x1000 + 8,
            ..tensor(0x7000, 0, 0x7800, 16)
        };
        let wide = RawTensor {
            grad: 0x0800,
            numel: 0x400,
            state_bytes: 0x2000,
            ..tensor(0x10000, 0, 0x20000, 0)
        };
        assert!(check_disjoint(&[a, c, long, wide])
            .unwrap_err()
            .contains("overlaps"));
    }

    #[test]
    fn addresses_and_lengths_are_checked() {
        let ok = tensor(0x1000, 0x2000, 0x3000, 16);
        assert_eq!(ok.check(0, 2), Ok(()));
        assert!(RawTensor { param: 0x1001, ..ok }
            .check(0, 2)
            .unwrap_err()
            .contains("aligned"));
        assert!(RawTensor { grad: 0, ..ok }
            .check(0, 2)
            .unwrap_err()
            .contains("null"));
        assert!(ok.check(0, 3).unwrap_err().contains("needs 192"));
        let empty = tensor(0, 0, 0, 0);
        assert_eq!(empty.check(0, 2), Ok(()));
    }

    #[test]
    fn q8_state_is_counted_in_blocks_and_holds_no_parameters() {
        assert_eq!(state_bytes(Dtype::Q8, 2, 600), 2 * 3 * 260);
        assert_eq!(alignment(Dtype::Q8), 4);
        assert_eq!(ParamDtype::from_name("q8"), None);
        assert_eq!(ParamDtype::from_name("bf16"), Some(ParamDtype::Bf16));
    }
}
