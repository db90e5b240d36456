//! The CPU halves of the models' ops: plain loops and the `gemm` crate's matrix products over
//! the tensors' f32 slices.
//!
//! Every kernel here gives the same bits for any number of threads: work is split only where
//! each output value is computed whole by one task (a row, an image, a block of a matrix
//! product), and every sum over more values than one task sees is taken over chunks whose
//! bounds depend on the shapes alone, then over the chunks in order. The matrix products split
//! their output among the threads and never their inner dimension, so their bits depend on the
//! shapes and the machine's vector unit, not on the thread count.

pub(crate) mod batch_norm;
pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod exp;
pub(crate) mod rows;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, Layout};

/// The f32 values of a contiguous CPU tensor: an error for another dtype or layout.
pub(crate) fn values<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    let CpuStorage::F32(all) = storage else {
        candle_core::bail!("{what}: expected f32 values, got {:?}", storage.dtype());
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: expected a contiguous tensor");
    };
    Ok(&all[start..end])
}

/// The u32 ids of a contiguous CPU tensor, each below `below`: an error naming them (`what`,
/// "cross-entropy: class id") and the first id out of range.
pub(crate) fn ids<'a>(
    storage: &'a CpuStorage,
    layout: &Layout,
    below: usize,
    what: &str,
) -> candle_core::Result<&'a [u32]> {
    let (CpuStorage::U32(all), Some((start, end))) = (storage, layout.contiguous_offsets()) else {
        candle_core::bail!("{what}s: expected contiguous u32 values");
    };
    let ids = &all[start..end];
    if let Some(bad) = ids.iter().find(|&&id| id as usize >= below) {
        candle_core::bail!("{what} {bad} outside [0, {below})");
    }
    Ok(ids)
}

/// The f32 values of contiguous CPU tensors of one shape: an error naming the op (`what`) for
/// two shapes.
pub(crate) fn same_shape_values<'a, const N: usize>(
    what: &str,
    tensors: [(&'a CpuStorage, &Layout); N],
) -> candle_core::Result<[&'a [f32]; N]> {
    let shape = tensors[0].1.shape();
    if let Some((_, l)) = tensors.iter().find(|(_, l)| l.shape() != shape) {
        candle_core::bail!("{what}: shapes {:?} and {:?} differ", shape.dims(), l.dims());
    }
    let mut out = [&[][..]; N];
    for (o, (s, l)) in out.iter_mut().zip(tensors) {
        *o = values(s, l, what)?;
    }
    Ok(out)
}

/// The element-wise sum of `partials` (each `len` long, none for an empty input), the first
/// plus the others in order: the fixed order that keeps a parallel sum's bits independent of
/// the thread count.
pub(crate) fn sum_in_order(partials: Vec<Vec<f32>>, len: usize) -> Vec<f32> {
    let mut partials = partials.into_iter();
    let mut total = partials.next().unwrap_or_else(|| vec![0.0; len]);
    for partial in partials {
        total.iter_mut().zip(&partial).for_each(|(t, p)| *t += p);
    }
    total
}

/// A matrix read from a slice: element `(i, j)` at `data[i·row_stride + j·col_stride]`.
#[derive(Clone, Copy)]
pub(crate) struct Matrix<'a> {
    pub(crate) data: &'a [f32],
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) row_stride: usize,
    pub(crate) col_stride: usize,
}

impl<'a> Matrix<'a> {
    /// `rows × cols` stored row by row.
    pub(crate) fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Matrix<'a> {
        Matrix {
            data,
            rows,
            cols,
            row_stride: cols,
            col_stride: 1,
        }
    }

    /// The transpose, the same values read the other way.
    pub(crate) fn t(self) -> Matrix<'a> {
        Matrix {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Whether every element's index lies inside `data`.
    fn fits(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride < self.data.len()
    }
}

/// `C ← A B` (or `C ← C + A B` with `accumulate`) for `C` stored row by row in `c`, on the
/// calling thread's rayon pool. Panics if a matrix does not fit its slice or the sizes do not
/// chain, both bugs of the caller.
pub(crate) fn matmul(c: &mut [f32], a: Matrix, b: Matrix, accumulate: bool) {
    product(c, a, b, accumulate, gemm::Parallelism::Rayon(0));
}

/// [`matmul`] on the calling thread alone: for the products of a task that already runs
/// beside others, where splitting a small product again costs more than it gains. The same
/// bits as [`matmul`]: neither splits the inner dimension.
pub(crate) fn matmul_in_task(c: &mut [f32], a: Matrix, b: Matrix, accumulate: bool) {
    product(c, a, b, accumulate, gemm::Parallelism::None);
}

fn product(c: &mut [f32], a: Matrix, b: Matrix, accumulate: bool, parallelism: gemm::Parallelism) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert!(
        a.fits() && b.fits() && b.rows == k && c.len() == m * n,
        "matmul: bad sizes"
    );
    if m == 0 || n == 0 {
        return;
    }
    let stride = |s: usize| isize::try_from(s).expect("a slice's stride fits isize");
    // SAFETY: the asserts keep every index gemm reads (`a`, `b`) or writes (`c`, m × n row by
    // row) inside its slice, and `c` is borrowed mutably, so it overlaps neither input.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            stride(n),
            accumulate,
            a.data.as_ptr(),
            stride(a.col_stride),
            stride(a.row_stride),
            b.data.as_ptr(),
            stride(b.col_stride),
            stride(b.row_stride),
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests;
