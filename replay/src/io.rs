//! The safetensors files of a replay: the input (θ₀ and the gradients of every step) and the
//! output (θ and the state after the last step), all F32, and what a replay produced
//! ([`ReplayOutput`]: the output's tensors and the steps' reports).

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use homeadam_core::StepReport;
use safetensors::tensor::TensorView;
use safetensors::SafeTensors;

/// A named F32 tensor: `(name, shape, values)`.
pub type NamedTensor = (String, Vec<usize>, Vec<f32>);

/// The most gradient rows an input may hold: a tensor with no elements has rows of no bytes,
/// so the file's size does not bound them.
pub const MAX_STEPS: usize = 1 << 20;

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

impl InputTensor {
    /// The gradient of step row `row` (0-based) of an input whose `grads` hold every row
    /// (checked by [`crate::replay`] before it reads one).
    pub(crate) fn grad_row(&self, row: usize) -> &[f32] {
        let d = self.param.len();
        &self.grads[row * d..(row + 1) * d]
    }
}

/// The replay input: for each tensor k, `param.<k>` (θ₀, any shape) and `grad.<k>` (shape
/// `[T, ...shape of param.<k>]`). Tensors keep the order of the `param.<k>` tensors in the
/// file: the model's order (stochastic rounding and SWATS number tensors by it).
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayInput {
    /// The model's tensors.
    pub tensors: Vec<InputTensor>,
    /// T.
    pub steps: usize,
}

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
            if t > MAX_STEPS {
                bail!("input: grad.{k} has {t} steps: at most {MAX_STEPS} are replayed");
            }
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

/// What a replay produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayOutput {
    /// Every output tensor, in output order: `param.<k>` (θ after the last step), then each
    /// state slot as `<state>.<k>` (`m`, `v`, …), then SWATS's `lambda.<k>` (shape `[1]`).
    pub tensors: Vec<NamedTensor>,
    /// One report per step.
    pub reports: Vec<StepReport>,
}

/// Serializes the output tensors as safetensors bytes.
pub fn output_bytes(output: &ReplayOutput) -> Result<Vec<u8>> {
    let raw: Vec<(&str, &[usize], Vec<u8>)> = output
        .tensors
        .iter()
        .map(|(n, s, v)| {
            (
                n.as_str(),
                s.as_slice(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            )
        })
        .collect();
    let views = raw
        .iter()
        .map(|(n, s, b)| Ok((*n, TensorView::new(safetensors::Dtype::F32, s.to_vec(), b)?)))
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    Ok(safetensors::serialize(views, &None)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `(name, shape, values)` of a test file's tensor.
    type Spec<'a> = (&'a str, Vec<usize>, Vec<f32>);

    fn file(tensors: &[Spec]) -> Vec<u8> {
        let output = ReplayOutput {
            tensors: tensors
                .iter()
                .map(|(n, s, v)| (n.to_string(), s.clone(), v.clone()))
                .collect(),
            reports: Vec::new(),
        };
        output_bytes(&output).unwrap()
    }

    #[test]
    fn input_round_trips_in_file_order() {
        let bytes = file(&[
            ("param.b", vec![2], vec![1.0, 2.0]),
            ("grad.b", vec![3, 2], vec![0.5; 6]),
            ("param.a", vec![1, 1], vec![3.0]),
            ("grad.a", vec![3, 1, 1], vec![1.0, 2.0, 3.0]),
        ]);
        let input = ReplayInput::parse(&bytes).unwrap();
        assert_eq!(input.steps, 3);
        let names: Vec<_> = input.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"], "safetensors stores tensors sorted by name");
        assert_eq!(input.tensors[0].grad_row(2), [3.0]);
    }

    #[test]
    fn malformed_inputs_are_named_errors() {
        let cases: [(&[Spec], &str); 4] = [
            (&[("param.w", vec![2], vec![1.0, 2.0])], "grad.w"),
            (
                &[
                    ("param.w", vec![1], vec![f32::NAN]),
                    ("grad.w", vec![1, 1], vec![0.0]),
                ],
                "non-finite",
            ),
            (&[("grad.w", vec![1, 1], vec![0.0])], "no param"),
            (
                &[
                    ("param.w", vec![1], vec![1.0]),
                    ("grad.w", vec![1, 1], vec![0.0]),
                    ("grad.v", vec![1, 1], vec![0.0]),
                ],
                "grad.v has no param.v",
            ),
        ];
        for (tensors, needle) in cases {
            let err = ReplayInput::parse(&file(tensors)).unwrap_err().to_string();
            assert!(err.contains(needle), "{needle}: {err}");
        }
        let err = ReplayInput::parse(b"short").unwrap_err().to_string();
        assert!(err.contains("not a valid safetensors file"), "{err}");
    }
}
