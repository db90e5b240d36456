//! The scaffold of the models' device ops: an op states its CPU half, its CUDA half and its
//! gradients once ([`DeviceOp`]), and [`Op`] makes it candle's op of its arity, with what every
//! op shares written here once: the timing span of `bench-train`'s split of the host's time
//! around each half, and the refusal of a device the op has no half for. The halves read their
//! arguments through `models::cpu` (`values`, `same_shape_values`, `ids`: the f32 or id slices
//! of contiguous tensors, an error naming the op otherwise) and `models::cuda` (`contiguous`,
//! `ptx`: the kernels compiled once per process).

use candle_core::{CpuStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Shape, Tensor};

/// One argument as candle hands it to an op's half: its storage and layout.
pub(crate) type Arg<'a, S> = (&'a S, &'a Layout);

/// An op over `N` tensors.
pub(crate) trait DeviceOp<const N: usize>: Send + Sync {
    /// The op's name, in its errors and in `bench-train`'s split of the host's time.
    fn name(&self) -> &'static str;

    /// The CPU half; by default a refusal (an op that runs on CUDA only).
    fn cpu(&self, args: [Arg<'_, CpuStorage>; N]) -> candle_core::Result<(CpuStorage, Shape)> {
        let _ = args;
        candle_core::bail!("{} runs on CUDA tensors only", self.name())
    }

    /// The CUDA half; by default a refusal (an op that runs on the CPU only).
    #[cfg(feature = "cuda")]
    fn cuda(
        &self,
        args: [Arg<'_, candle_core::CudaStorage>; N],
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _ = args;
        candle_core::bail!("{} runs on the CPU only", self.name())
    }

    /// The arguments' gradients from the output `out` and its gradient `grad`; by default an
    /// error (an op that is itself a backward pass, applied without one).
    fn gradients(
        &self,
        args: [&Tensor; N],
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<[Option<Tensor>; N]> {
        let _ = (args, out, grad);
        candle_core::bail!("{} has no backward pass", self.name())
    }
}

/// A [`DeviceOp`] as candle's op of its arity.
pub(crate) struct Op<T>(pub(crate) T);

impl<T: DeviceOp<1>> CustomOp1 for Op<T> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cpu([(s, l)])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s: &candle_core::CudaStorage,
        l: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cuda([(s, l)])
    }

    fn bwd(&self, a: &Tensor, out: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let [da] = self.0.gradients([a], out, grad)?;
        Ok(da)
    }
}

impl<T: DeviceOp<2>> CustomOp2 for Op<T> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cpu([(s1, l1), (s2, l2)])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cuda([(s1, l1), (s2, l2)])
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let [da, db] = self.0.gradients([a, b], out, grad)?;
        Ok((da, db))
    }
}

impl<T: DeviceOp<3>> CustomOp3 for Op<T> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cpu([(s1, l1), (s2, l2), (s3, l3)])
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        let _span = super::host_time::span(self.0.name());
        self.0.cuda([(s1, l1), (s2, l2), (s3, l3)])
    }

    fn bwd(
        &self,
        a: &Tensor,
        b: &Tensor,
        c: &Tensor,
        out: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let [da, db, dc] = self.0.gradients([a, b, c], out, grad)?;
        Ok((da, db, dc))
    }
}
