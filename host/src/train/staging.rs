//! A prepared minibatch staged in page-locked host memory by the thread that prepared it, so
//! that its copy to a CUDA device is asynchronous and costs the training thread only the time
//! to queue it (PyTorch's `pin_memory` with `non_blocking` copies). A copy from pageable memory
//! goes through the driver's staging buffers on the training thread instead.
//!
//! The page-locked buffers are recycled: each keeps an event recorded on the device's stream
//! after the copy last queued from it, and the thread that fills it next (or frees it) waits for
//! that event first. cudarc's own event in a page-locked slice cannot serve: cudarc records it
//! only for contexts that run several streams, and a run has one.
//!
//! Without the `cuda` feature there is nothing to stage: [`Stager::for_device`] is `None`.

#[cfg(feature = "cuda")]
pub(super) use pinned::{StagedBatch, Stager};
#[cfg(not(feature = "cuda"))]
pub(super) use unstaged::{StagedBatch, Stager};

#[cfg(not(feature = "cuda"))]
mod unstaged {
    use std::sync::Arc;

    use anyhow::Result;
    use candle_core::Device;

    use crate::train::data::{HostBatch, Minibatch};

    /// No stager exists in a build without CUDA.
    pub(in crate::train) enum Stager {}

    /// Nor a staged minibatch.
    pub(in crate::train) enum StagedBatch {}

    impl Stager {
        pub(in crate::train) fn for_device(_: &Device) -> Option<Arc<Stager>> {
            None
        }

        pub(in crate::train) fn stage(self: &Arc<Self>, _: HostBatch) -> Result<StagedBatch> {
            match **self {}
        }
    }

    impl StagedBatch {
        pub(in crate::train) fn upload(self) -> Result<Minibatch> {
            match self {}
        }
    }
}

#[cfg(feature = "cuda")]
mod pinned {
    use std::sync::{Arc, Mutex};

    use anyhow::{anyhow, Result};
    use candle_core::cuda_backend::cudarc::driver::{
        sys::CUevent_flags, CudaEvent, DeviceRepr, PinnedHostSlice, ValidAsZeroBits,
    };
    use candle_core::cuda_backend::CudaDType;
    use candle_core::op::BackpropOp;
    use candle_core::{CudaDevice, CudaStorage, Device, Storage, Tensor};

    use crate::train::data::{HostBatch, HostValues, Minibatch};

    /// Page-locked buffers of one type kept for reuse at most: two minibatches are in flight (one
    /// being filled, one being copied), the rest covers a last, shorter minibatch.
    const SPARE: usize = 4;

    /// One tensor's page-locked buffer.
    enum Pinned {
        F32(Buffer<f32>),
        U32(Buffer<u32>),
    }

    /// Page-locked memory and the event recorded after the last copy queued from it.
    struct Buffer<T> {
        host: PinnedHostSlice<T>,
        /// Never recorded before the first copy (then it counts as complete).
        copied: CudaEvent,
    }

    impl<T> Buffer<T> {
        /// Blocks until the device has read the memory (the thread sleeps, it does not spin).
        fn settled(&self) -> Result<()> {
            self.copied
                .synchronize()
                .map_err(|e| anyhow!("minibatch staging: waiting for an earlier copy: {e}"))
        }
    }

    impl<T> Drop for Buffer<T> {
        /// Page-locked memory freed under a pending copy would be read after its release.
        fn drop(&mut self) {
            let context = self.copied.context();
            context.record_err(self.copied.synchronize());
        }
    }

    /// A minibatch in page-locked memory, ready to be copied.
    pub(in crate::train) struct StagedBatch {
        /// Where its buffers go back to.
        stager: Arc<Stager>,
        input: Pinned,
        input_dims: Vec<usize>,
        target: Pinned,
        target_dims: Vec<usize>,
        predictions: usize,
    }

    /// The page-locked buffers of one CUDA device's minibatches, and the spare ones by type.
    pub(in crate::train) struct Stager {
        cuda: CudaDevice,
        spare_f32: Mutex<Vec<Buffer<f32>>>,
        spare_u32: Mutex<Vec<Buffer<u32>>>,
    }

    impl Stager {
        /// A stager for `device`'s minibatches: `None` on the CPU.
        pub(in crate::train) fn for_device(device: &Device) -> Option<Arc<Stager>> {
            let Device::Cuda(cuda) = device else {
                return None;
            };
            Some(Arc::new(Stager {
                cuda: cuda.clone(),
                spare_f32: Mutex::new(Vec::new()),
                spare_u32: Mutex::new(Vec::new()),
            }))
        }

        /// `batch`'s values copied into page-locked buffers (on the calling thread).
        pub(in crate::train) fn stage(self: &Arc<Self>, batch: HostBatch) -> Result<StagedBatch> {
            let input = match &batch.input {
                HostValues::F32(v) => Pinned::F32(self.filled(&self.spare_f32, v)?),
                HostValues::U32(v) => Pinned::U32(self.filled(&self.spare_u32, v)?),
            };
            Ok(StagedBatch {
                stager: self.clone(),
                input,
                input_dims: batch.input_dims,
                target: Pinned::U32(self.filled(&self.spare_u32, &batch.target)?),
                target_dims: batch.target_dims,
                predictions: batch.predictions,
            })
        }

        /// A spare buffer of `values`' length, or a new one, holding `values`; waits for the copy
        /// last queued from a spare one.
        fn filled<T: DeviceRepr + ValidAsZeroBits + Copy>(
            &self,
            spare: &Mutex<Vec<Buffer<T>>>,
            values: &[T],
        ) -> Result<Buffer<T>> {
            let reused = {
                let mut spare = lock(spare)?;
                let found = spare.iter().position(|b| b.host.len() == values.len());
                found.map(|k| spare.swap_remove(k))
            };
            let mut buffer = match reused {
                Some(b) => b,
                None => self.allocated(values.len())?,
            };
            buffer.settled()?;
            buffer
                .host
                .as_mut_slice()
                .map_err(|e| anyhow!("minibatch staging: page-locked memory unreadable: {e}"))?
                .copy_from_slice(values);
            Ok(buffer)
        }

        /// A new buffer of `len` elements.
        fn allocated<T: DeviceRepr>(&self, len: usize) -> Result<Buffer<T>> {
            let failed = |e| anyhow!("minibatch staging: cannot allocate page-locked memory: {e}");
            let stream = self.cuda.cuda_stream();
            let context = stream.context();
            let copied = context
                .new_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC))
                .map_err(failed)?;
            // SAFETY: every element is written before the buffer is read (`filled`).
            let host = unsafe { context.alloc_pinned::<T>(len) }.map_err(failed)?;
            Ok(Buffer { host, copied })
        }
    }

    impl StagedBatch {
        /// The minibatch copied to its stager's device (queued on its stream); its buffers go
        /// back to the spares.
        pub(in crate::train) fn upload(self) -> Result<Minibatch> {
            let cuda = &self.stager.cuda;
            let input = copied(&self.input, &self.input_dims, cuda)?;
            let target = copied(&self.target, &self.target_dims, cuda)?;
            for pinned in [self.input, self.target] {
                match pinned {
                    Pinned::F32(p) => keep(&self.stager.spare_f32, p)?,
                    Pinned::U32(p) => keep(&self.stager.spare_u32, p)?,
                }
            }
            Ok(Minibatch {
                input,
                target,
                predictions: self.predictions,
            })
        }
    }

    fn lock<T>(spare: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
        spare
            .lock()
            .map_err(|_| anyhow!("minibatch staging: a poisoned lock"))
    }

    /// Keeps `buffer` for reuse unless [`SPARE`] are kept; else it is freed once its copy is
    /// done (the calling thread waits for it, after releasing the lock).
    fn keep<T>(spare: &Mutex<Vec<Buffer<T>>>, buffer: Buffer<T>) -> Result<()> {
        let mut spare = lock(spare)?;
        if spare.len() < SPARE {
            spare.push(buffer);
        }
        Ok(())
    }

    /// `pinned` copied into a new tensor of `dims` on `cuda`, queued on its stream; the
    /// buffer's event is recorded after the copy.
    fn copied(pinned: &Pinned, dims: &[usize], cuda: &CudaDevice) -> Result<Tensor> {
        fn on_device<T: CudaDType + DeviceRepr>(b: &Buffer<T>, cuda: &CudaDevice) -> Result<CudaStorage> {
            let stream = cuda.cuda_stream();
            // SAFETY: the copy queued next on the same stream writes every element.
            let mut values = unsafe { stream.alloc::<T>(b.host.len()) }?;
            stream.memcpy_htod(&b.host, &mut values)?;
            b.copied.record(&stream)?;
            Ok(CudaStorage::wrap_cuda_slice(values, cuda.clone()))
        }
        let storage = match pinned {
            Pinned::F32(p) => on_device(p, cuda)?,
            Pinned::U32(p) => on_device(p, cuda)?,
        };
        Ok(Tensor::from_storage(
            Storage::Cuda(storage),
            dims,
            BackpropOp::none(),
            false,
        ))
    }
}
