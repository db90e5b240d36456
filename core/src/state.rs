//! What a tensor's state slots are stored as: one element per parameter ([`Storage`]: `f32`,
//! `f16`, `bf16`) or 8-bit blocks ([`Q8Block`], one per 256 parameters).

use crate::lines::Lines;
use crate::q8::{self, Map, Q8Block, BLOCK, BLOCK_BYTES};
use crate::reduce::{self, SecondMomentMin, CHUNK};
use crate::simd::{Convert, Portable};
use crate::storage::{Dtype, Storage};

/// A state storage type: any [`Storage`] type, one item per element, or [`Q8Block`], one item
/// per 256 elements. Sealed.
pub trait StateStorage: Copy + Default + PartialEq + Send + Sync + sealed::StateOps + 'static {
    /// The config name's [`Dtype`].
    const DTYPE: Dtype;

    /// Items holding one state slot of `numel` elements: `numel`, or ⌈numel / 256⌉ blocks.
    fn slot_len(numel: usize) -> usize;

    /// The values of one slot's first `dst.len()` elements as `f32` (q8 decodes them with
    /// `map`, [`crate::Config::q8_map`]).
    fn read_slot(slot: &[Self], map: Map, dst: &mut [f32]);
}

/// How one slot of one chunk is stored back: its code map and random bits (q8 only).
#[derive(Clone, Copy)]
pub struct Requantize {
    pub map: Map,
    /// [`Map::slot_key`] of the slot.
    pub slot_key: u64,
    /// The tensor's index of the chunk's first element.
    pub first: usize,
}

pub(crate) mod sealed {
    use super::*;

    /// The operations the drivers need; not nameable outside the crate.
    pub trait StateOps: Sized {
        /// Bytes of one item in the state format.
        const ITEM_BYTES: usize;

        /// Appends the item in the state format to `out` (`ITEM_BYTES` long).
        fn write_item(&self, out: &mut [u8]);

        /// The item from `ITEM_BYTES` bytes of the state format.
        fn read_item(bytes: &[u8]) -> Self;

        /// The chunk of `len` elements from element `start` of `slot` (`start` a multiple of
        /// [`CHUNK`]; q8 decodes with `map`) as `f32`: `slot` itself for `f32` data, else `buf`
        /// holding it.
        fn stage<'a, C: Convert>(
            conv: C,
            slot: &'a mut [Self],
            start: usize,
            len: usize,
            map: Map,
            buf: &'a mut [f32],
        ) -> &'a mut [f32];

        /// Stores back a chunk [`StateOps::stage`] staged in `buf` (nothing for `f32`, which was
        /// updated in place).
        fn unstage<C: Convert>(conv: C, slot: &mut [Self], start: usize, buf: &[f32], how: Requantize);

        /// What the scalar element loop ([`kernel`]'s `run_scalar`) reads and writes one slot's
        /// elements as: the items themselves for the element types (each converted as it is
        /// read and written), `f32` for q8 (each chunk decoded into a buffer).
        type Elem: Storage;

        /// The buffer [`StateOps::elements`] decodes into: empty for the element types, one
        /// chunk for q8 (a microcontroller's stack pays only for what its state type needs).
        type Buf: Copy;

        /// A zeroed [`StateOps::Buf`].
        const BUF: Self::Buf;

        /// The chunk of `len` elements from element `start` of `slot` (`start` a multiple of
        /// [`CHUNK`]) as [`StateOps::Elem`]s: `slot`'s own items, or `buf` holding the chunk
        /// decoded with `map` (q8).
        fn elements<'a>(
            slot: &'a mut [Self],
            start: usize,
            len: usize,
            map: Map,
            buf: &'a mut Self::Buf,
        ) -> &'a mut [Self::Elem];

        /// Stores back the chunk [`StateOps::elements`] decoded into `buf` (nothing for the
        /// element types, which were written in place).
        fn store_elements(slot: &mut [Self], start: usize, len: usize, buf: &Self::Buf, how: Requantize);

        /// The minimum of a slot as stored, from the minimum of the `f32` values it was
        /// stored from: `Self::from_f32(v_min)` read back, where each element is rounded on
        /// its own to nearest (monotonic, so the rounding of the minimum is the minimum of the
        /// roundings); `None` for q8, whose blocks share a scale and may round stochastically.
        fn stored_min(v_min: f32) -> Option<f32>;

        /// [`reduce::min_new_second_moment`] over the elements of `v`.
        fn min_new_v<C: Convert, G: Storage>(
            conv: C,
            grad: &[G],
            v: &[Self],
            inv: f32,
            v_new: impl Fn(f32, f32) -> f32,
        ) -> (SecondMomentMin, bool);

        /// [`reduce::count_new_second_moment`] over the elements of `v`.
        fn count_new_v<G: Storage>(
            grad: &[G],
            v: &[Self],
            inv: f32,
            bc2: f32,
            v_new: impl Fn(f32, f32) -> f32,
            hist: &mut crate::calibration::Histogram,
        ) -> bool;
    }
}

impl<T: Storage> StateStorage for T {
    const DTYPE: Dtype = <T as Storage>::DTYPE;

    #[inline(always)]
    fn slot_len(numel: usize) -> usize {
        numel
    }

    fn read_slot(slot: &[Self], _map: Map, dst: &mut [f32]) {
        for (d, s) in dst.iter_mut().zip(slot) {
            *d = s.to_f32();
        }
    }
}

impl<T: Storage> sealed::StateOps for T {
    const ITEM_BYTES: usize = <T as Storage>::DTYPE.size();

    fn write_item(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_bits32().to_le_bytes()[..Self::ITEM_BYTES]);
    }

    fn read_item(bytes: &[u8]) -> Self {
        let mut b = [0u8; 4];
        b[..Self::ITEM_BYTES].copy_from_slice(bytes);
        T::from_bits32(u32::from_le_bytes(b))
    }

    #[inline(always)]
    fn stage<'a, C: Convert>(
        conv: C,
        slot: &'a mut [Self],
        start: usize,
        len: usize,
        _map: Map,
        buf: &'a mut [f32],
    ) -> &'a mut [f32] {
        let dst = &mut slot[start..start + len];
        if <T as Storage>::DTYPE != Dtype::F32 {
            conv.load(dst, &mut buf[..len]);
            return &mut buf[..len];
        }
        T::as_f32_mut(dst).unwrap_or(buf)
    }

    #[inline(always)]
    fn unstage<C: Convert>(conv: C, slot: &mut [Self], start: usize, buf: &[f32], _how: Requantize) {
        if <T as Storage>::DTYPE != Dtype::F32 {
            conv.store(buf, &mut slot[start..start + buf.len()]);
        }
    }

    type Elem = T;
    type Buf = [f32; 0];
    const BUF: [f32; 0] = [];

    #[inline(always)]
    fn elements<'a>(
        slot: &'a mut [Self],
        start: usize,
        len: usize,
        _map: Map,
        _buf: &'a mut [f32; 0],
    ) -> &'a mut [T] {
        &mut slot[start..start + len]
    }

    #[inline(always)]
    fn store_elements(_slot: &mut [Self], _start: usize, _len: usize, _buf: &[f32; 0], _how: Requantize) {}

    fn stored_min(v_min: f32) -> Option<f32> {
        Some(T::from_f32(v_min).to_f32())
    }

    #[inline(always)]
    fn min_new_v<C: Convert, G: Storage>(
        conv: C,
        grad: &[G],
        v: &[Self],
        inv: f32,
        v_new: impl Fn(f32, f32) -> f32,
    ) -> (SecondMomentMin, bool) {
        reduce::min_new_second_moment(conv, grad, v, inv, v_new)
    }

    fn count_new_v<G: Storage>(
        grad: &[G],
        v: &[Self],
        inv: f32,
        bc2: f32,
        v_new: impl Fn(f32, f32) -> f32,
        hist: &mut crate::calibration::Histogram,
    ) -> bool {
        reduce::count_new_second_moment(grad, v, inv, bc2, v_new, hist)
    }
}

impl StateStorage for Q8Block {
    const DTYPE: Dtype = Dtype::Q8;

    #[inline(always)]
    fn slot_len(numel: usize) -> usize {
        numel.div_ceil(BLOCK)
    }

    fn read_slot(slot: &[Self], map: Map, dst: &mut [f32]) {
        for (d, block) in dst.chunks_mut(BLOCK).zip(slot) {
            q8::dequantize(block, map, d);
        }
    }
}

/// The block of each chunk: chunks and blocks are the same 256 elements.
const _: () = assert!(CHUNK == BLOCK);

impl sealed::StateOps for Q8Block {
    const ITEM_BYTES: usize = BLOCK_BYTES;

    fn write_item(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_bytes());
    }

    fn read_item(bytes: &[u8]) -> Self {
        Q8Block::from_bytes(bytes)
    }

    #[inline(always)]
    fn stage<'a, C: Convert>(
        conv: C,
        slot: &'a mut [Self],
        start: usize,
        len: usize,
        map: Map,
        buf: &'a mut [f32],
    ) -> &'a mut [f32] {
        conv.load_q8(&slot[start / BLOCK], map, &mut buf[..len]);
        &mut buf[..len]
    }

    #[inline(always)]
    fn unstage<C: Convert>(conv: C, slot: &mut [Self], start: usize, buf: &[f32], how: Requantize) {
        conv.store_q8(buf, how.map, how.slot_key, how.first, &mut slot[start / BLOCK]);
    }

    type Elem = f32;
    type Buf = [f32; BLOCK];
    const BUF: [f32; BLOCK] = [0.0; BLOCK];

    #[inline(always)]
    fn elements<'a>(
        slot: &'a mut [Self],
        start: usize,
        len: usize,
        map: Map,
        buf: &'a mut [f32; BLOCK],
    ) -> &'a mut [f32] {
        Self::stage(Portable, slot, start, len, map, buf)
    }

    #[inline(always)]
    fn store_elements(slot: &mut [Self], start: usize, len: usize, buf: &[f32; BLOCK], how: Requantize) {
        Self::unstage(Portable, slot, start, &buf[..len], how);
    }

    fn stored_min(_v_min: f32) -> Option<f32> {
        None
    }

    #[inline(always)]
    fn min_new_v<C: Convert, G: Storage>(
        conv: C,
        grad: &[G],
        v: &[Self],
        inv: f32,
        v_new: impl Fn(f32, f32) -> f32,
    ) -> (SecondMomentMin, bool) {
        let mut min = SecondMomentMin::EMPTY;
        let mut finite = true;
        let mut buf = Lines::<BLOCK>::new();
        for (g, block) in grad.chunks(BLOCK).zip(v) {
            let b = &mut buf.0[..g.len()];
            conv.load_q8(block, Map::Unsigned, b);
            let (m, f) = reduce::min_new_second_moment(conv, g, &*b, inv, &v_new);
            min = min.merge(m);
            finite &= f;
        }
        (min, finite)
    }

    fn count_new_v<G: Storage>(
        grad: &[G],
        v: &[Self],
        inv: f32,
        bc2: f32,
        v_new: impl Fn(f32, f32) -> f32,
        hist: &mut crate::calibration::Histogram,
    ) -> bool {
        let mut finite = true;
        let mut buf = [0.0f32; BLOCK];
        for (g, block) in grad.chunks(BLOCK).zip(v) {
            let b = &mut buf[..g.len()];
            q8::dequantize(block, Map::Unsigned, b);
            finite &= reduce::count_new_second_moment(g, &*b, inv, bc2, &v_new, hist);
        }
        finite
    }
}
