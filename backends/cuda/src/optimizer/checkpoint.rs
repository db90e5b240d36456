//! Checkpoints of a [`CudaOptimizer`]: the core's byte format, read from and written to the
//! device state, with each tensor's SWATS Λ (kept on the host). q8 state is the core's
//! [`Q8Block`] array on the device too: its bytes are copied as they are.

use homeadam_core::{bf16, f16, Dtype, Q8Block, SliceSink, StateStorage, TensorState, TensorStateMut};

use crate::{CudaOptimizer, Error};

impl CudaOptimizer {
    /// The optimizer state in the core's checkpoint format
    /// ([`homeadam_core::Optimizer::save_state`]), copied from the device.
    pub fn save_state(&self) -> Result<Vec<u8>, Error> {
        match self.dtypes.state {
            Dtype::F32 => self.save_typed::<f32>(),
            Dtype::F16 => self.save_typed::<f16>(),
            Dtype::BF16 => self.save_typed::<bf16>(),
            Dtype::Q8 => self.save_typed::<Q8Block>(),
        }
    }

    fn save_typed<S: StateStorage>(&self) -> Result<Vec<u8>, Error> {
        let host = self.state_to_host::<S>()?;
        let views: Vec<TensorState<'_, S>> = host
            .iter()
            .zip(&self.tensors)
            .zip(&self.aux)
            .map(|((state, t), aux)| TensorState {
                numel: t.numel,
                state,
                aux,
            })
            .collect();
        self.save_state_with(&views)
    }

    /// Saves state the caller reads itself (e.g. mapped host memory on Jetson), after the
    /// stream has finished. The tensors' `aux` is not read: Λ is this optimizer's own.
    pub fn save_state_with<S: StateStorage>(&self, tensors: &[TensorState<'_, S>]) -> Result<Vec<u8>, Error> {
        if tensors.len() != self.aux.len() {
            return Err(Error::TensorCount {
                expected: self.aux.len(),
                actual: tensors.len(),
            });
        }
        let tensors: Vec<TensorState<'_, S>> = tensors
            .iter()
            .zip(&self.aux)
            .map(|(t, aux)| TensorState {
                numel: t.numel,
                state: t.state,
                aux,
            })
            .collect();
        self.device.stream.synchronize()?;
        let mut bytes = vec![0u8; self.core.state_bytes(tensors.iter().map(|t| t.numel), S::DTYPE)];
        self.core.save_state(&tensors, &mut SliceSink::new(&mut bytes))?;
        Ok(bytes)
    }

    /// Loads state saved by [`CudaOptimizer::save_state`] (or any backend's
    /// [`homeadam_core::Optimizer::save_state`]) into the device state. Nothing changes on a
    /// refused checkpoint.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<(), Error> {
        match self.dtypes.state {
            Dtype::F32 => self.load_typed::<f32>(bytes),
            Dtype::F16 => self.load_typed::<f16>(bytes),
            Dtype::BF16 => self.load_typed::<bf16>(bytes),
            Dtype::Q8 => self.load_typed::<Q8Block>(bytes),
        }
    }

    fn load_typed<S: StateStorage>(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let mut host: Vec<Vec<S>> = self
            .tensors
            .iter()
            .map(|t| vec![S::default(); self.core.state_len_of::<S>(t.numel)])
            .collect();
        let mut aux = self.aux.clone();
        let mut views: Vec<TensorStateMut<'_, S>> = host
            .iter_mut()
            .zip(aux.iter_mut())
            .zip(&self.tensors)
            .map(|((state, aux), t)| TensorStateMut {
                numel: t.numel,
                state,
                aux,
            })
            .collect();
        let mut core = self.core.clone();
        core.load_state(bytes, &mut views)?;
        self.device.stream.synchronize()?;
        for (t, state) in self.tensors.iter().zip(&host).filter(|(_, s)| !s.is_empty()) {
            // SAFETY: `t.state` holds the tensor's state slots as S (the contract of `new`): as many
            // items as `host`, plain data (S is f32, f16, bf16 or the repr(C) Q8Block).
            unsafe { cudarc::driver::result::memcpy_htod_sync(t.state, state) }?;
        }
        self.core = core;
        self.aux = aux;
        self.bound = None;
        Ok(())
    }

    /// Loads state into memory the caller writes itself (e.g. mapped host memory on Jetson),
    /// after the stream has finished; the step counter and each tensor's Λ are restored from
    /// `bytes` too.
    pub fn load_state_with<S: StateStorage>(
        &mut self,
        bytes: &[u8],
        tensors: &mut [TensorStateMut<'_, S>],
    ) -> Result<(), Error> {
        if tensors.len() != self.aux.len() {
            return Err(Error::TensorCount {
                expected: self.aux.len(),
                actual: tensors.len(),
            });
        }
        self.device.stream.synchronize()?;
        self.core.load_state(bytes, tensors)?;
        self.bound = None;
        for (aux, t) in self.aux.iter_mut().zip(tensors.iter()) {
            aux.swats_lambda = t.aux.swats_lambda;
        }
        Ok(())
    }

    fn state_to_host<S: StateStorage>(&self) -> Result<Vec<Vec<S>>, Error> {
        self.device.stream.synchronize()?;
        self.tensors
            .iter()
            .map(|t| {
                let mut host = vec![S::default(); self.core.state_len_of::<S>(t.numel)];
                if !host.is_empty() {
                    // SAFETY: `t.state` holds the tensor's state slots as S (the contract of
                    // `new`), as many items as `host`; any bytes are a valid S.
                    unsafe { cudarc::driver::result::memcpy_dtoh_sync(&mut host, t.state) }?;
                }
                Ok(host)
            })
            .collect()
    }
}
