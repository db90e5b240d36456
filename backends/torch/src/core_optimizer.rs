//! [`Core`]: one [`Optimizer`] of the core over the tensors `homeadam.torch` lends it, and the
//! functions that describe the core's configs to Python.

use homeadam_core::backend::{Histogram, BUCKETS};
use homeadam_core::{
    bf16, f16, Config, Dtype, Error, ExactSum, FiniteCheck, Group, Optimizer, Q8Block, ShardCheck, SliceSink,
    StateStorage, Step, StepReport, Storage, Tensor, TensorAux, TensorState, TensorStateMut, Updates,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::raw::{
    check_disjoint, check_elements, check_state, slice, slice_mut, state_bytes, ParamDtype, RawTensor, Visit,
};

fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// The config of a config name, or a `ValueError` listing the names.
fn named(rule: &str) -> PyResult<Config> {
    Config::named(rule).ok_or_else(|| {
        value_error(format!(
            "unknown rule {rule:?}: expected one of {:?}",
            Config::NAMES
        ))
    })
}

/// The knobs `rule` reads, with their defaults as text (`Config::knobs`), in the core's order.
#[pyfunction]
pub fn defaults(rule: &str) -> PyResult<Vec<(&'static str, String)>> {
    Ok(named(rule)?
        .knobs()
        .map(|(name, value)| (name, value.to_string()))
        .collect())
}

/// Every config name the core takes.
#[pyfunction]
pub fn config_names() -> Vec<&'static str> {
    Config::NAMES.to_vec()
}

/// One tensor as `homeadam.torch` passes it: θ's, g's and the state's addresses, θ's length,
/// the state's bytes, θ's dtype ([`Dtype::from_name`]), the index of its group and its SWATS Λ.
type TensorArgs = (usize, usize, usize, usize, usize, String, usize, f32);

/// One parameter group: η's scale, whether λ applies, and λ, ε, β1, β2 where they differ from
/// the config's.
type GroupArgs = (f64, bool, Option<f64>, Option<f64>, Option<f64>, Option<f64>);

/// The core's [`Optimizer`] with the state dtype of every tensor it steps.
#[pyclass(module = "homeadam._native")]
pub struct Core {
    opt: Optimizer,
    state_dtype: Dtype,
    /// θ's and the state's address and θ's length of each tensor of the last step: the global
    /// rule's bound is only valid for the same model.
    last_model: Vec<(usize, usize, usize)>,
    /// Step through the core's scalar reference (`Optimizer::step_reference`), for tests.
    #[pyo3(get, set)]
    reference: bool,
    /// The CUDA model of the last CUDA step, which then holds the model-wide state (`opt`'s
    /// is stale until [`Core::park`]).
    #[cfg(feature = "cuda")]
    cuda: Option<crate::cuda::Model>,
}

#[pymethods]
impl Core {
    /// A validated config: the rule's config name, `(knob, value as text)` pairs
    /// (`Config::set_knob`), the finite check (`skip_step` or `trust`), the state dtype
    /// ([`Dtype::from_name`]) and whether f16 may hold a second moment.
    #[new]
    fn new(
        rule: &str,
        knobs: Vec<(String, String)>,
        finite_check: &str,
        state_dtype: &str,
        allow_f16_state: bool,
    ) -> PyResult<Self> {
        let mut config = named(rule)?;
        for (name, text) in &knobs {
            config.set_knob(name, text).ok_or_else(|| {
                let known: Vec<_> = Config::named(rule)
                    .into_iter()
                    .flat_map(|c| c.knobs().map(|k| k.0).collect::<Vec<_>>())
                    .collect();
                value_error(format!(
                    "{name} = {text}: not a setting of {rule} (it has {known:?}), or not a value of its kind"
                ))
            })?;
        }
        config.finite_check = match finite_check {
            "skip_step" => FiniteCheck::SkipStep,
            "trust" => FiniteCheck::Trust,
            other => {
                return Err(value_error(format!(
                    "finite_check = {other:?}: expected \"skip_step\" or \"trust\""
                )))
            }
        };
        config.allow_f16_state = allow_f16_state;
        let state_dtype = Dtype::from_name(state_dtype).ok_or_else(|| {
            value_error(format!(
                "state_dtype = {state_dtype:?}: expected f32, bf16, f16 or q8"
            ))
        })?;
        config.check_state_dtype(state_dtype).map_err(value_error)?;
        let opt = Optimizer::new(config).map_err(value_error)?;
        Ok(Core {
            opt,
            state_dtype,
            last_model: Vec::new(),
            reference: false,
            #[cfg(feature = "cuda")]
            cuda: None,
        })
    }

    /// Sets η, validated as the config.
    fn set_lr(&mut self, lr: f64) -> PyResult<()> {
        self.opt.set_lr(lr).map_err(value_error)?;
        #[cfg(feature = "cuda")]
        if let Some(model) = &mut self.cuda {
            model.optimizer().set_lr(lr).map_err(value_error)?;
        }
        Ok(())
    }

    /// Refuses a group the config cannot step (`Config::check_group`).
    fn check_group(&self, group: GroupArgs) -> PyResult<()> {
        self.opt
            .config()
            .check_group(to_group(group))
            .map_err(value_error)
    }

    /// Bytes of state a tensor of `numel` parameters needs.
    fn state_bytes(&self, numel: usize) -> usize {
        state_bytes(self.state_dtype, self.opt.config().state_slots(), numel)
    }

    /// The names of the state slots (`m`, `v`, …), in the buffer's order.
    fn state_names(&self) -> Vec<&'static str> {
        self.opt.config().state_names().to_vec()
    }

    /// Steps taken (skipped steps do not count).
    #[getter]
    fn step_count(&mut self) -> u64 {
        self.core().step_count()
    }

    /// The core's config, as `Debug` prints it.
    fn __repr__(&self) -> String {
        format!("{:?}", self.opt.config())
    }

    /// One step over every tensor: the finite check and HomeAdam's decision over all of them,
    /// then each update, with the GIL released (through the scalar reference with
    /// `reference` set). With `reduce`, the model is sharded across
    /// processes and `reduce` combines their checks ([`reduce_check`]) before the decision.
    /// Returns the report and each tensor's SWATS Λ.
    fn step<'py>(
        &mut self,
        py: Python<'py>,
        tensors: Vec<TensorArgs>,
        groups: Vec<GroupArgs>,
        grad_scale: f64,
        threads: usize,
        reduce: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyDict>, Vec<f32>)> {
        self.park()?;
        let (raw, mut auxes) = self.raw_tensors(tensors, &groups)?;
        let model: Vec<_> = raw.iter().map(|t| (t.param, t.state, t.numel)).collect();
        if model != self.last_model {
            self.opt.forget_bound();
            self.last_model = model;
        }
        // SAFETY (each phase): `homeadam.torch` passes live contiguous CPU tensors of these
        // dtypes and lengths and holds them for the call; `check` and `check_disjoint` passed.
        let mut step = self
            .opt
            .begin(grad_scale)
            .map_err(value_error)?
            .with_threads(threads);
        let reference = self.reference;
        if reference || reduce.is_some() {
            step = step.exact_decision();
        }
        py.detach(|| unsafe { lend_all(&raw, &mut auxes, &mut Check(&mut step)) })
            .map_err(value_error)?;
        let mut first_index = None;
        if let Some(reduce) = reduce {
            let (model, first) = reduce_check(&reduce, step.shard_check().map_err(value_error)?, raw.len())?;
            step.merge_shards(&model).map_err(value_error)?;
            first_index = Some(first);
        }
        let mut updates = step.decide().map_err(value_error)?;
        let report = py
            .detach(|| {
                let mut update = Update {
                    updates: &mut updates,
                    reference,
                    model_index: first_index,
                };
                unsafe { lend_all(&raw, &mut auxes, &mut update) }?;
                updates.finish()
            })
            .map_err(value_error)?;
        let lambdas = auxes.iter().map(|a| a.swats_lambda).collect();
        Ok((report_dict(py, &report)?, lambdas))
    }

    /// Builds or keeps the CUDA model of these tensors (device memory of `device`, stepped on
    /// the stream `stream`, its kernels compiled by the NVRTC library `nvrtc`) and installs
    /// their gradients and Λ, for [`Core::cuda_grad_norm`] and [`Core::cuda_step`].
    #[cfg(feature = "cuda")]
    fn cuda_bind(
        &mut self,
        tensors: Vec<TensorArgs>,
        groups: Vec<GroupArgs>,
        device: usize,
        stream: usize,
        nvrtc: &str,
    ) -> PyResult<()> {
        let (raw, auxes) = self.raw_tensors(tensors, &groups)?;
        let key = crate::cuda::Key::new(device, stream, self.state_dtype, &raw).map_err(value_error)?;
        if !self.cuda.as_ref().is_some_and(|m| m.is_for(&key)) {
            self.park()?;
            let header = self.save_header_bytes()?;
            // SAFETY: `homeadam.torch` passes live contiguous tensors of this device, dtypes and
            // lengths, and holds them for the calls of this step; `raw_tensors` checked them and
            // their disjointness. The model touches them only in the steps of the same key,
            // whose tensors are passed (alive) again.
            let mut model = unsafe { crate::cuda::Model::new(*self.opt.config(), key, &raw, nvrtc) }?;
            // SAFETY: no tensors.
            unsafe { load::<f32>(model.optimizer().core_mut(), &header, &[], &mut []) }
                .map_err(value_error)?;
            self.cuda = Some(model);
        }
        let model = self.cuda.as_mut().expect("bound above");
        // SAFETY: as above, for the gradients.
        unsafe { model.bind(&raw, &auxes) }
    }

    /// ‖g‖₂ over the gradients of [`Core::cuda_bind`], as stored: the exact sum on the device,
    /// rounded once, then √ (one launch, one read back).
    #[cfg(feature = "cuda")]
    fn cuda_grad_norm(&mut self) -> PyResult<f64> {
        self.bound_model()?
            .optimizer()
            .grad_norm()
            .map_err(crate::cuda::error)
    }

    /// One step of the model of [`Core::cuda_bind`] at `grad_scale` on its stream; returns the
    /// report and each tensor's SWATS Λ. The step's one read back of the device's status (two
    /// where τ is calibrated) waits for the stream, with the GIL released.
    #[cfg(feature = "cuda")]
    fn cuda_step<'py>(
        &mut self,
        py: Python<'py>,
        grad_scale: f64,
    ) -> PyResult<(Bound<'py, PyDict>, Vec<f32>)> {
        let model = self.bound_model()?;
        let (report, lambdas) = py.detach(|| model.step(grad_scale))?;
        Ok((report_dict(py, &report)?, lambdas))
    }

    /// The core's checkpoint (docs/DESIGN.md's format) of the step counter, the model-wide
    /// state and these tensors' state: `(θ's length, the state's address and bytes, Λ)`.
    fn export_state<'py>(
        &mut self,
        py: Python<'py>,
        tensors: Vec<(usize, usize, usize, f32)>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        self.park()?;
        let parts = self.lent_state(&tensors)?;
        let auxes: Vec<_> = tensors.iter().map(|t| aux_of(t.3)).collect();
        // SAFETY: the state buffers of live tensors, checked by `lent_state`, read only.
        let bytes = unsafe {
            match self.state_dtype {
                Dtype::F32 => save::<f32>(&self.opt, &parts, &auxes),
                Dtype::BF16 => save::<bf16>(&self.opt, &parts, &auxes),
                Dtype::F16 => save::<f16>(&self.opt, &parts, &auxes),
                Dtype::Q8 => save::<Q8Block>(&self.opt, &parts, &auxes),
            }
        }
        .map_err(value_error)?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// Reads a checkpoint written by `export_state` (or any backend of the core) into these
    /// tensors' state and the model-wide state; returns each tensor's Λ. Nothing changes on
    /// an error.
    fn import_state(&mut self, bytes: &[u8], tensors: Vec<(usize, usize, usize, f32)>) -> PyResult<Vec<f32>> {
        self.park()?;
        let parts = self.lent_state(&tensors)?;
        let mut auxes = vec![TensorAux::default(); tensors.len()];
        let opt = &mut self.opt;
        // SAFETY: the state buffers of live tensors, checked by `lent_state`, written here only.
        unsafe {
            match self.state_dtype {
                Dtype::F32 => load::<f32>(opt, bytes, &parts, &mut auxes),
                Dtype::BF16 => load::<bf16>(opt, bytes, &parts, &mut auxes),
                Dtype::F16 => load::<f16>(opt, bytes, &parts, &mut auxes),
                Dtype::Q8 => load::<Q8Block>(opt, bytes, &parts, &mut auxes),
            }
        }
        .map_err(value_error)?;
        self.last_model.clear();
        Ok(auxes.iter().map(|a| a.swats_lambda).collect())
    }

    /// The model-wide state alone (a checkpoint of no tensors), for `state_dict()`.
    fn save_header<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        Ok(PyBytes::new(py, &self.save_header_bytes()?))
    }

    /// Restores what `save_header` wrote.
    fn load_header(&mut self, bytes: &[u8]) -> PyResult<()> {
        self.park()?;
        // SAFETY: no tensors.
        unsafe { load::<f32>(&mut self.opt, bytes, &[], &mut []) }.map_err(value_error)?;
        self.last_model.clear();
        Ok(())
    }
}

impl Core {
    /// The optimizer holding the model-wide state: the CUDA model's after a CUDA step.
    fn core(&mut self) -> &Optimizer {
        #[cfg(feature = "cuda")]
        if let Some(model) = &mut self.cuda {
            return model.optimizer().core();
        }
        &self.opt
    }

    /// The model-wide state as a checkpoint of no tensors.
    fn save_header_bytes(&mut self) -> PyResult<Vec<u8>> {
        // SAFETY: no tensors.
        unsafe { save::<f32>(self.core(), &[], &[]) }.map_err(value_error)
    }

    /// Takes the model-wide state back from the CUDA model, if any, and drops it: before a CPU
    /// step, a checkpoint's import or another CUDA model.
    fn park(&mut self) -> PyResult<()> {
        #[cfg(feature = "cuda")]
        if self.cuda.is_some() {
            let header = self.save_header_bytes()?;
            // SAFETY: no tensors.
            unsafe { load::<f32>(&mut self.opt, &header, &[], &mut []) }.map_err(value_error)?;
            if let Some(model) = self.cuda.take() {
                crate::cuda::release(model);
            }
        }
        Ok(())
    }

    /// The CUDA model of the last [`Core::cuda_bind`].
    #[cfg(feature = "cuda")]
    fn bound_model(&mut self) -> PyResult<&mut crate::cuda::Model> {
        self.cuda
            .as_mut()
            .ok_or_else(|| value_error("no CUDA tensors bound: cuda_bind comes first"))
    }

    /// The tensors of a step as `homeadam.torch` passes them, each checked, and their Λ.
    fn raw_tensors(
        &self,
        tensors: Vec<TensorArgs>,
        groups: &[GroupArgs],
    ) -> PyResult<(Vec<RawTensor>, Vec<TensorAux>)> {
        let slots = self.opt.config().state_slots();
        let mut raw = Vec::with_capacity(tensors.len());
        let mut auxes = Vec::with_capacity(tensors.len());
        for (k, (param, grad, state, numel, state_bytes, dtype, group, swats_lambda)) in
            tensors.into_iter().enumerate()
        {
            let dtype = ParamDtype::from_name(&dtype)
                .ok_or_else(|| value_error(format!("tensor {k}: dtype {dtype:?} is not f32, bf16 or f16")))?;
            let group = *groups
                .get(group)
                .ok_or_else(|| value_error(format!("tensor {k}: group {group} of {}", groups.len())))?;
            let t = RawTensor {
                param,
                grad,
                state,
                numel,
                state_bytes,
                dtype,
                state_dtype: self.state_dtype,
                group: to_group(group),
            };
            t.check(k, slots).map_err(value_error)?;
            raw.push(t);
            auxes.push(aux_of(swats_lambda));
        }
        check_disjoint(&raw).map_err(value_error)?;
        Ok((raw, auxes))
    }

    /// `(θ's length, state address, state bytes, Λ)` checked as a step's state buffers are:
    /// `(θ's length, address, bytes)` of each.
    fn lent_state(&self, tensors: &[(usize, usize, usize, f32)]) -> PyResult<Vec<(usize, usize, usize)>> {
        let slots = self.opt.config().state_slots();
        let mut raw = Vec::with_capacity(tensors.len());
        for (k, &(numel, state, bytes, _)) in tensors.iter().enumerate() {
            check_state(k, state, bytes, self.state_dtype, slots, numel).map_err(value_error)?;
            raw.push(RawTensor {
                param: 0,
                grad: 0,
                state,
                numel: 0,
                state_bytes: bytes,
                dtype: ParamDtype::F32,
                state_dtype: self.state_dtype,
                group: Group::DEFAULT,
            });
        }
        check_disjoint(&raw).map_err(value_error)?;
        Ok(tensors
            .iter()
            .map(|&(numel, state, bytes, _)| (numel, state, bytes))
            .collect())
    }
}

#[cfg(feature = "cuda")]
impl Drop for Core {
    fn drop(&mut self) {
        if let Some(model) = self.cuda.take() {
            crate::cuda::release(model);
        }
    }
}

fn to_group((lr_scale, decay, weight_decay, eps, beta1, beta2): GroupArgs) -> Group {
    Group {
        lr_scale,
        decay,
        weight_decay,
        eps,
        beta1,
        beta2,
    }
}

fn report_dict<'py>(py: Python<'py>, r: &StepReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("step", r.step)?;
    d.set_item("skipped", r.skipped)?;
    d.set_item("rho", r.rho)?;
    d.set_item("rho_active", r.rho_active)?;
    d.set_item("tau", r.tau)?;
    d.set_item("home_elements", r.home_elements)?;
    d.set_item("nonfinite_applied", r.nonfinite_applied)?;
    d.set_item("swats_switched", r.swats_switched)?;
    Ok(d)
}

/// The check phase of a step, on one tensor at a time.
struct Check<'s, 'o>(&'s mut Step<'o>);

impl Visit for Check<'_, '_> {
    fn visit<P: Storage, S: StateStorage>(&mut self, tensor: &mut Tensor<'_, P, P, S>) -> Result<(), Error> {
        self.0.check(core::slice::from_mut(tensor))
    }
}

/// The update phase of a step, on one tensor at a time: the fast path, or the scalar
/// reference; for a sharded model, keyed by each tensor's index in the model.
struct Update<'s, 'o> {
    updates: &'s mut Updates<'o>,
    reference: bool,
    /// The next tensor's index in the whole model, where the model is sharded.
    model_index: Option<u64>,
}

impl Visit for Update<'_, '_> {
    fn visit<P: Storage, S: StateStorage>(&mut self, tensor: &mut Tensor<'_, P, P, S>) -> Result<(), Error> {
        let tensors = core::slice::from_mut(tensor);
        match self.model_index.as_mut() {
            Some(index) => {
                *index += 1;
                self.updates.update_as(tensors, *index - 1)
            }
            None if self.reference => self.updates.update_reference(tensors),
            None => self.updates.update(tensors),
        }
    }
}

/// Runs `visitor` on every tensor in order.
///
/// # Safety
/// As [`RawTensor::lend`], for every tensor.
unsafe fn lend_all<V: Visit>(
    tensors: &[RawTensor],
    auxes: &mut [TensorAux],
    visitor: &mut V,
) -> Result<(), Error> {
    for (t, aux) in tensors.iter().zip(auxes.iter_mut()) {
        t.lend(aux, visitor)?;
    }
    Ok(())
}

/// The whole model's check and the model-wide index of this process's first tensor:
/// `reduce(finite, rho, rho_active, counts, tensors)` combines this process's check with every
/// other's (an all-reduce: and, min, min, sum) and returns the same four and the number of
/// tensors on the processes before this one.
fn reduce_check(reduce: &Bound<'_, PyAny>, local: ShardCheck, tensors: usize) -> PyResult<(ShardCheck, u64)> {
    let counts: Vec<u64> = local.decisions.counts().iter().map(|&c| u64::from(c)).collect();
    let (finite, rho, rho_active, counts, first): (bool, f32, f32, Vec<u64>, u64) = reduce
        .call1((local.finite, local.rho, local.rho_active, counts, tensors))?
        .extract()?;
    let mut buckets = [0u32; BUCKETS];
    if counts.len() != BUCKETS {
        return Err(value_error(format!(
            "the reduced counts hold {} buckets, not {BUCKETS}",
            counts.len()
        )));
    }
    for (b, c) in buckets.iter_mut().zip(counts) {
        *b = u32::try_from(c).unwrap_or(u32::MAX);
    }
    let model = ShardCheck {
        finite,
        rho,
        rho_active,
        decisions: Histogram::from_counts(buckets),
    };
    Ok((model, first))
}

/// Σ g² over these gradients (`(address, length, dtype)`), exactly, as the words of the
/// core's [`ExactSum`] (as `i64`, for a tensor): summed across processes limb by limb or
/// gathered, they give the model's sum in any order.
#[pyfunction]
pub fn grad_squares(grads: Vec<(usize, usize, String)>) -> PyResult<Vec<i64>> {
    let mut sum = ExactSum::new();
    for (k, (at, numel, dtype)) in grads.into_iter().enumerate() {
        let dtype = ParamDtype::from_name(&dtype)
            .ok_or_else(|| value_error(format!("gradient {k}: dtype {dtype:?} is not f32, bf16 or f16")))?;
        check_elements(k, "gradient", at, numel, dtype).map_err(value_error)?;
        // SAFETY: a live contiguous CPU tensor of this dtype and length, held by the caller and
        // only read here; address and alignment checked.
        unsafe {
            match dtype {
                ParamDtype::F32 => sum.add_squares(slice::<f32>(at, numel)),
                ParamDtype::Bf16 => sum.add_squares(slice::<bf16>(at, numel)),
                ParamDtype::F16 => sum.add_squares(slice::<f16>(at, numel)),
            }
        }
    }
    Ok(sum.to_words().iter().map(|&w| w as i64).collect())
}

/// ‖g‖₂ = √(Σ g²) of the sums [`grad_squares`] returned (one per process), merged exactly and
/// rounded once.
#[pyfunction]
pub fn norm_of(parts: Vec<Vec<i64>>) -> PyResult<f64> {
    let mut sum = ExactSum::new();
    for part in parts {
        let words: [u64; ExactSum::WORDS] = part
            .iter()
            .map(|&w| w as u64)
            .collect::<Vec<_>>()
            .try_into()
            .map_err(|_| value_error(format!("a sum of {} words, not {}", part.len(), ExactSum::WORDS)))?;
        sum.merge(&ExactSum::from_words(&words));
    }
    Ok(sum.to_f64().sqrt())
}

fn aux_of(swats_lambda: f32) -> TensorAux {
    TensorAux {
        swats_lambda,
        ..TensorAux::default()
    }
}

/// The checkpoint of `parts` (θ's length, the state's address and bytes) and their `auxes`.
///
/// # Safety
/// Each part is the state buffer of a live tensor of type `S`, disjoint from the others.
unsafe fn save<S: StateStorage>(
    opt: &Optimizer,
    parts: &[(usize, usize, usize)],
    auxes: &[TensorAux],
) -> Result<Vec<u8>, Error> {
    let states: Vec<TensorState<'_, S>> = parts
        .iter()
        .zip(auxes)
        .map(|(&(numel, at, bytes), aux)| TensorState {
            numel,
            state: slice::<S>(at, bytes / core::mem::size_of::<S>()),
            aux,
        })
        .collect();
    let mut bytes = vec![0u8; opt.state_bytes(parts.iter().map(|p| p.0), S::DTYPE)];
    opt.save_state(&states, &mut SliceSink::new(&mut bytes))?;
    Ok(bytes)
}

/// Loads `bytes` into `parts` and `auxes`, as [`Optimizer::load_state`].
///
/// # Safety
/// As [`save`], and nothing else reads the buffers during the call.
unsafe fn load<S: StateStorage>(
    opt: &mut Optimizer,
    bytes: &[u8],
    parts: &[(usize, usize, usize)],
    auxes: &mut [TensorAux],
) -> Result<(), Error> {
    let mut states: Vec<TensorStateMut<'_, S>> = parts
        .iter()
        .zip(auxes.iter_mut())
        .map(|(&(numel, at, bytes), aux)| TensorStateMut {
            numel,
            state: slice_mut::<S>(at, bytes / core::mem::size_of::<S>()),
            aux,
        })
        .collect();
    opt.load_state(bytes, &mut states)
}
