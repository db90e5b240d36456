//! The embedding lookup `y_i = E[id_i]` of a `[vocab, d]` table `E`: one op whose backward pass
//! scales with the tokens.
//!
//! Candle's own backward pass (of `index_select`) copies a zero-filled `[vocab, d]` table and
//! adds the rows with `d` threads, each looping over every token. Here the backward pass
//! zero-fills the table's gradient and sums each occurring id's gradient rows in ascending
//! position, so that a seed repeats its bits: on the CPU a task per block of the table's rows
//! (`models::cpu::rows::scatter_sum`), on CUDA one block per first occurrence
//! (`host/kernels/embedding.cu`).

use anyhow::{ensure, Result};
use candle_core::{CpuStorage, DType, Shape, Tensor};

use super::cpu::{self, rows, values};
use super::op::{Arg, DeviceOp, Op};
use super::param_grads::param_grad;

/// The rows of `table` (`[vocab, d]`, f32) at `ids` (`[n]`, u32): `[n, d]`.
pub fn embedding(table: &Tensor, ids: &Tensor) -> Result<Tensor> {
    let (vocab, _) = table.dims2()?;
    ensure!(
        ids.rank() == 1 && ids.dtype() == DType::U32,
        "embedding: ids must be a vector of u32, not {:?} {:?}",
        ids.dtype(),
        ids.dims()
    );
    if table.dtype() == DType::F32 {
        return Ok(table
            .contiguous()?
            .apply_op2(&ids.contiguous()?, Op(Lookup { vocab }))?);
    }
    Ok(table.index_select(ids, 0)?)
}

/// `(E, ids) → E[ids]`.
struct Lookup {
    vocab: usize,
}

/// `(ids, ∂L/∂y) → ∂L/∂E`.
struct Backward {
    vocab: usize,
}

impl DeviceOp<2> for Lookup {
    fn name(&self) -> &'static str {
        "homeadam-embedding"
    }

    fn cpu(
        &self,
        [(table, table_layout), (ids, ids_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (_, d) = table_layout.shape().dims2()?;
        let table = values(table, table_layout, self.name())?;
        let ids = cpu::ids(ids, ids_layout, self.vocab, "embedding: token id")?;
        Ok((
            CpuStorage::F32(rows::gather(table, ids, d)),
            Shape::from((ids.len(), d)),
        ))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(table, table_layout), (ids, ids_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::lookup((table, table_layout), (ids, ids_layout))
    }

    fn gradients(
        &self,
        [table, ids]: [&Tensor; 2],
        _: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; 2]> {
        let backward = Backward { vocab: self.vocab };
        let d_table = ids.apply_op2_no_bwd(&grad.contiguous()?, &Op(backward))?;
        Ok([param_grad(table, d_table)?, None])
    }
}

impl DeviceOp<2> for Backward {
    fn name(&self) -> &'static str {
        "homeadam-embedding-backward"
    }

    fn cpu(
        &self,
        [(ids, ids_layout), (grad, grad_layout)]: [Arg<'_, CpuStorage>; 2],
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, d) = grad_layout.shape().dims2()?;
        let ids = cpu::ids(ids, ids_layout, self.vocab, "embedding: token id")?;
        if ids.len() != n {
            candle_core::bail!("embedding: {} ids for {n} gradient rows", ids.len());
        }
        let grad = values(grad, grad_layout, self.name())?;
        let table = rows::scatter_sum(ids, grad, self.vocab, d);
        Ok((CpuStorage::F32(table), Shape::from((self.vocab, d))))
    }

    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        [(ids, ids_layout), (grad, grad_layout)]: [Arg<'_, candle_core::CudaStorage>; 2],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        cuda::backward(self.vocab, (ids, ids_layout), (grad, grad_layout))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::OnceLock;

    use candle_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaStorage, Layout, Shape};

    use crate::models::cuda::{contiguous, kernel_u32, per_element, ptx};

    const SOURCE: &str = include_str!("../../kernels/embedding.cu");

    fn kernels() -> candle_core::Result<&'static str> {
        static PTX: OnceLock<Result<String, String>> = OnceLock::new();
        ptx(&PTX, "embedding", SOURCE)
    }

    pub(super) fn lookup(
        (table, table_layout): (&CudaStorage, &Layout),
        (ids, ids_layout): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (vocab, d) = table_layout.shape().dims2()?;
        let n = ids_layout.shape().elem_count();
        let dev = table.device.clone();
        let table = contiguous::<f32>(table, table_layout, "embedding")?;
        let ids = contiguous::<u32>(ids, ids_layout, "embedding")?;
        let func = dev.get_or_load_custom_func("homeadam_embedding_f32", "homeadam_embedding", kernels()?)?;
        // SAFETY: the kernel writes every element.
        let mut out = unsafe { dev.alloc::<f32>(n * d)? };
        kernel_u32(n * d, "embedding")?;
        let (n_arg, vocab_arg, d_arg) = (
            kernel_u32(n, "embedding")?,
            kernel_u32(vocab, "embedding")?,
            kernel_u32(d, "embedding")?,
        );
        let mut builder = func.builder();
        builder
            .arg(&table)
            .arg(&ids)
            .arg(&mut out)
            .arg(&n_arg)
            .arg(&vocab_arg)
            .arg(&d_arg);
        // SAFETY: table holds vocab × d values, ids n and out n × d.
        unsafe { builder.launch(per_element(n * d)) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((n, d))))
    }

    pub(super) fn backward(
        vocab: usize,
        (ids, ids_layout): (&CudaStorage, &Layout),
        (grad, grad_layout): (&CudaStorage, &Layout),
    ) -> candle_core::Result<(CudaStorage, Shape)> {
        let (n, d) = grad_layout.shape().dims2()?;
        let dev = ids.device.clone();
        let ids = contiguous::<u32>(ids, ids_layout, "embedding")?;
        let grad = contiguous::<f32>(grad, grad_layout, "embedding")?;
        let func = dev.get_or_load_custom_func(
            "homeadam_embedding_backward_f32",
            "homeadam_embedding",
            kernels()?,
        )?;
        let mut out = dev.alloc_zeros::<f32>(vocab * d)?;
        let (n_arg, vocab_arg, d_arg) = (
            kernel_u32(n, "embedding")?,
            kernel_u32(vocab, "embedding")?,
            kernel_u32(d, "embedding")?,
        );
        let config = LaunchConfig {
            grid_dim: (n_arg.max(1), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut builder = func.builder();
        builder
            .arg(&ids)
            .arg(&grad)
            .arg(&mut out)
            .arg(&n_arg)
            .arg(&vocab_arg)
            .arg(&d_arg);
        // SAFETY: ids holds n ids, grad n × d values and out vocab × d.
        unsafe { builder.launch(config) }.w()?;
        Ok((CudaStorage::wrap_cuda_slice(out, dev), Shape::from((vocab, d))))
    }
}
