//! `homeadam replay`: run recorded gradients through a rule and record what it produced.
//!
//! The input holds, for each tensor k, `param.<k>` (θ₀, any shape) and `grad.<k>` (shape
//! `[T, ...shape of param.<k>]`), all F32. The T steps are replayed in order, all tensors
//! together (so the global rule sees the whole model); tensor order is the order of the
//! `param.<k>` tensors in the file. The output holds `param.<k>` and each state slot as
//! `<state>.<k>` (`m`, `v`, …, and SWATS's `lambda.<k>`), F32.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::{bf16, f16, Dtype, Optimizer, StepReport, Storage, Tensor, TensorAux};
use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

use crate::replay_config::ReplayConfig;

/// One tensor of the replay input.
#[derive(Clone, Debug, PartialEq)]
pub struct InputTensor {
    /// k in `param.<k>`.
    pub name: String,
    /// The parameter's shape.
    pub shape: Vec<usize>,
    /// θ₀.
    pub param: Vec<f32>,
    /// The gradients of every step, row t at `[t·d, (t+1)·d)`.
    pub grads: Vec<f32>,
}

/// The replay input: tensors in file order, and the number of steps T.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayInput {
    /// The model's tensors.
    pub tensors: Vec<InputTensor>,
    /// T.
    pub steps: usize,
}

/// What a replay produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOutput {
    /// `(name, shape, values)` of every output tensor, in output order.
    pub tensors: Vec<(String, Vec<usize>, Vec<f32>)>,
    /// One report per step.
    pub reports: Vec<StepReport>,
}

/// A named F32 tensor: `(name, shape, values)`.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// Every tensor of a safetensors file, in file order; any dtype but F32 is an error.
pub fn read_f32_tensors(bytes: &[u8]) -> Result<Vec<NamedTensor>> {
    let st =
        SafeTensors::deserialize(bytes).map_err(|e| anyhow!("input: not a valid safetensors file: {e}"))?;
    let mut tensors = Vec::new();
    for (name, view) in st.tensors() {
        if view.dtype() != safetensors::Dtype::F32 {
            bail!("input: tensor {name} is {:?}: expected F32", view.dtype());
        }
        let offset = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        tensors.push((offset, (name, view.shape().to_vec(), values)));
    }
    tensors.sort_by_key(|t| t.0);
    Ok(tensors.into_iter().map(|t| t.1).collect())
}

impl ReplayInput {
    /// Parses and checks a safetensors file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut params = Vec::new();
        let mut grads = HashMap::new();
        for (name, shape, values) in read_f32_tensors(bytes)? {
            if let Some(k) = name.strip_prefix("param.") {
                params.push((k.to_string(), shape, values));
            } else if let Some(k) = name.strip_prefix("grad.") {
                grads.insert(k.to_string(), (shape, values));
            } else {
                bail!("input: unexpected tensor {name} (expected param.<k> and grad.<k>)");
            }
        }
        if params.is_empty() {
            bail!("input: no param.<k> tensor");
        }
        let mut steps = None;
        let mut tensors = Vec::new();
        for (k, shape, param) in params {
            let (gshape, grads) = grads
                .remove(&k)
                .ok_or_else(|| anyhow!("input: missing tensor grad.{k}"))?;
            if param.iter().any(|x| !x.is_finite()) {
                bail!("input: param.{k} holds non-finite values");
            }
            if gshape.len() != shape.len() + 1 || gshape[1..] != shape[..] {
                let dims: Vec<_> = shape.iter().map(|d| d.to_string()).collect();
                bail!(
                    "input: grad.{k} has shape {gshape:?}: expected [T, {}]",
                    dims.join(", ")
                );
            }
            let t = gshape[0];
            if *steps.get_or_insert(t) != t {
                bail!(
                    "input: grad.{k} has {t} steps, other tensors {}",
                    steps.unwrap_or(0)
                );
            }
            tensors.push(InputTensor {
                name: k,
                shape,
                param,
                grads,
            });
        }
        if let Some(k) = grads.keys().next() {
            bail!("input: grad.{k} has no param.{k}");
        }
        Ok(ReplayInput {
            tensors,
            steps: steps.unwrap_or(0),
        })
    }
}

/// Replays every step of `input` under `config`, calling `on_step` after each.
pub fn replay(
    config: &ReplayConfig,
    input: &ReplayInput,
    on_step: impl FnMut(&StepReport),
) -> Result<ReplayOutput> {
    macro_rules! storage {
        ($dtype:expr, $T:ident, $body:expr) => {
            match $dtype {
                Dtype::F32 => {
                    type $T = f32;
                    $body
                }
                Dtype::F16 => {
                    type $T = f16;
                    $body
                }
                Dtype::BF16 => {
                    type $T = bf16;
                    $body
                }
            }
        };
    }
    storage!(config.param_dtype, P, {
        storage!(config.grad_dtype, G, {
            storage!(
                config.state_dtype,
                S,
                replay_typed::<P, G, S>(config, input, on_step)
            )
        })
    })
}

fn replay_typed<P: Storage, G: Storage, S: Storage>(
    config: &ReplayConfig,
    input: &ReplayInput,
    mut on_step: impl FnMut(&StepReport),
) -> Result<ReplayOutput> {
    let mut opt = Optimizer::new(config.optimizer)?;
    let mut params: Vec<Vec<P>> = input
        .tensors
        .iter()
        .map(|t| t.param.iter().map(|&x| P::from_f32(x)).collect())
        .collect();
    let mut grads: Vec<Vec<G>> = input
        .tensors
        .iter()
        .map(|t| vec![G::default(); t.param.len()])
        .collect();
    let mut states: Vec<Vec<S>> = input
        .tensors
        .iter()
        .map(|t| vec![S::default(); opt.state_len(t.param.len())])
        .collect();
    let mut aux = vec![TensorAux::default(); input.tensors.len()];
    let mut reports = Vec::with_capacity(input.steps);
    for step in 0..input.steps {
        for (dst, t) in grads.iter_mut().zip(&input.tensors) {
            let d = t.param.len();
            for (g, &x) in dst.iter_mut().zip(&t.grads[step * d..(step + 1) * d]) {
                *g = G::from_f32(x);
            }
        }
        let mut model: Vec<Tensor<'_, P, G, S>> = params
            .iter_mut()
            .zip(&grads)
            .zip(states.iter_mut())
            .zip(aux.iter_mut())
            .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
            .collect();
        let report = opt
            .step(&mut model, config.grad_scale)
            .with_context(|| format!("step {}", step + 1))?;
        on_step(&report);
        reports.push(report);
    }
    let mut tensors = Vec::new();
    for (k, t) in input.tensors.iter().enumerate() {
        tensors.push((
            format!("param.{}", t.name),
            t.shape.clone(),
            params[k].iter().map(|x| x.to_f32()).collect(),
        ));
    }
    let names = config.optimizer.state_names();
    for (slot, state) in names.iter().enumerate() {
        for (k, t) in input.tensors.iter().enumerate() {
            let d = t.param.len();
            let values = states[k][slot * d..(slot + 1) * d]
                .iter()
                .map(|x| x.to_f32())
                .collect();
            tensors.push((format!("{state}.{}", t.name), t.shape.clone(), values));
        }
    }
    if config.optimizer.rule == homeadam_core::Rule::Swats {
        for (k, t) in input.tensors.iter().enumerate() {
            tensors.push((format!("lambda.{}", t.name), vec![1], vec![aux[k].swats_lambda]));
        }
    }
    Ok(ReplayOutput { tensors, reports })
}

/// One JSON line of telemetry: `{"step":…,"rho":…,"home_elements":…,"skipped":…}`.
pub fn telemetry_line(report: &StepReport) -> String {
    let rho = serde_json::Value::from(report.rho.filter(|r| r.is_finite()).map(|r| r as f64));
    format!(
        r#"{{"step":{},"rho":{rho},"home_elements":{},"skipped":{}}}"#,
        report.step, report.home_elements, report.skipped
    )
}

/// Serializes the output tensors as safetensors bytes.
pub fn output_bytes(output: &ReplayOutput) -> Result<Vec<u8>> {
    let raw: Vec<(String, Vec<usize>, Vec<u8>)> = output
        .tensors
        .iter()
        .map(|(n, s, v)| {
            (
                n.clone(),
                s.clone(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = raw
        .iter()
        .map(|(n, s, b)| {
            Ok((
                n.as_str(),
                TensorView::new(safetensors::Dtype::F32, s.clone(), b)?,
            ))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    Ok(safetensors::serialize(views, &None)?)
}

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("output: {} is not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("output: cannot write {}", path.display()))
}

/// The whole command: read, replay (printing telemetry lines to `out`), write.
pub fn run(config: &Path, input: &Path, output: &Path, out: &mut impl Write) -> Result<()> {
    let text = std::fs::read_to_string(config)
        .with_context(|| format!("config: cannot read {}", config.display()))?;
    let config = ReplayConfig::parse(&text)?;
    let bytes = std::fs::read(input).with_context(|| format!("input: cannot read {}", input.display()))?;
    let input = ReplayInput::parse(&bytes)?;
    let mut io_error = None;
    let result = replay(&config, &input, |r| {
        if io_error.is_none() {
            io_error = writeln!(out, "{}", telemetry_line(r)).err();
        }
    })?;
    if let Some(e) = io_error {
        return Err(e).context("writing telemetry");
    }
    write_atomically(output, &output_bytes(&result)?)
}
