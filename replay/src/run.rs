//! The replay loop: the T recorded steps of every tensor, all tensors together (so the global
//! rule sees the whole model), through the core's optimizer in the config's storage types.

use anyhow::{bail, Context, Result};
use homeadam_core::{
    bf16, f16, Dtype, Optimizer, Q8Block, Rule, StateStorage, StepReport, Storage, Tensor, TensorAux,
};

use crate::config::ReplayConfig;
use crate::io::{NamedTensor, ReplayInput, ReplayOutput};

/// Replays every step of `input` under `config`, calling `on_step` after each. An input whose
/// `grads` do not hold `steps` rows (one built by hand) is an error.
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
                Dtype::Q8 => bail!("param_dtype and grad_dtype: q8 holds optimizer state only"),
            }
        };
    }
    storage!(config.param_dtype, P, {
        storage!(config.grad_dtype, G, {
            match config.state_dtype {
                Dtype::Q8 => replay_typed::<P, G, Q8Block>(config, input, on_step),
                _ => storage!(
                    config.state_dtype,
                    S,
                    replay_typed::<P, G, S>(config, input, on_step)
                ),
            }
        })
    })
}

fn replay_typed<P: Storage, G: Storage, S: StateStorage>(
    config: &ReplayConfig,
    input: &ReplayInput,
    mut on_step: impl FnMut(&StepReport),
) -> Result<ReplayOutput> {
    for t in &input.tensors {
        if input.steps.checked_mul(t.param.len()) != Some(t.grads.len()) {
            bail!(
                "input: grad.{} holds {} values: expected {} steps × {} parameters",
                t.name,
                t.grads.len(),
                input.steps,
                t.param.len()
            );
        }
    }
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
        .map(|t| vec![S::default(); opt.state_len_of::<S>(t.param.len())])
        .collect();
    let mut aux = vec![TensorAux::default(); input.tensors.len()];
    let mut reports = Vec::with_capacity(input.steps);
    for row in 0..input.steps {
        for (dst, t) in grads.iter_mut().zip(&input.tensors) {
            for (g, &x) in dst.iter_mut().zip(t.grad_row(row)) {
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
            .with_context(|| format!("gradient row {}", row + 1))?;
        on_step(&report);
        reports.push(report);
    }
    let mut tensors: Vec<NamedTensor> = input
        .tensors
        .iter()
        .zip(&params)
        .map(|(t, p)| (format!("param.{}", t.name), t.shape.clone(), to_f32_slice(p)))
        .collect();
    for (slot, state) in config.optimizer.state_names().iter().enumerate() {
        for (t, s) in input.tensors.iter().zip(&states) {
            let items = S::slot_len(t.param.len());
            let mut values = vec![0.0; t.param.len()];
            let map = config.optimizer.q8_map(slot);
            S::read_slot(&s[slot * items..(slot + 1) * items], map, &mut values);
            tensors.push((format!("{state}.{}", t.name), t.shape.clone(), values));
        }
    }
    if config.optimizer.rule == Rule::Swats {
        for (t, a) in input.tensors.iter().zip(&aux) {
            tensors.push((format!("lambda.{}", t.name), vec![1], vec![a.swats_lambda]));
        }
    }
    Ok(ReplayOutput { tensors, reports })
}

fn to_f32_slice<T: Storage>(xs: &[T]) -> Vec<f32> {
    xs.iter().map(|x| x.to_f32()).collect()
}

/// One JSON line of telemetry: `{"step":…,"rho":…,"home_elements":…,"skipped":…}`, where
/// `step` is the step counter after the row (unchanged by a skipped row), with `rho_active`
/// and `tau` after `rho` for the rules that report them.
pub fn telemetry_line(report: &StepReport) -> String {
    let number = |x: Option<f32>| serde_json::Value::from(x.filter(|r| r.is_finite()).map(f64::from));
    let rho = number(report.rho);
    let mut extra = String::new();
    if report.rho_active.is_some() {
        extra += &format!(r#","rho_active":{}"#, number(report.rho_active));
    }
    if report.tau.is_some() {
        extra += &format!(r#","tau":{}"#, number(report.tau));
    }
    format!(
        r#"{{"step":{},"rho":{rho}{extra},"home_elements":{},"skipped":{}}}"#,
        report.step, report.home_elements, report.skipped
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::InputTensor;

    fn input(grads: Vec<f32>, steps: usize) -> ReplayInput {
        ReplayInput {
            tensors: vec![InputTensor {
                name: "w".into(),
                shape: vec![2],
                param: vec![1.0, -1.0],
                grads,
            }],
            steps,
        }
    }

    #[test]
    fn a_skipped_row_keeps_the_counter_and_telemetry_says_so() {
        let config = ReplayConfig::parse(r#"{"rule": "adamw"}"#).unwrap();
        let grads = vec![0.1, 0.2, f32::NAN, 0.2, 0.3, -0.1];
        let output = replay(&config, &input(grads, 3), |_| {}).unwrap();
        let steps: Vec<_> = output.reports.iter().map(|r| (r.step, r.skipped)).collect();
        assert_eq!(steps, [(1, false), (1, true), (2, false)]);
        assert_eq!(
            telemetry_line(&output.reports[1]),
            r#"{"step":1,"rho":null,"home_elements":0,"skipped":true}"#
        );
        let names: Vec<_> = output.tensors.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(names, ["param.w", "m.w", "v.w"]);
    }

    #[test]
    fn inconsistent_hand_built_inputs_are_errors() {
        let config = ReplayConfig::parse(r#"{"rule": "sgd"}"#).unwrap();
        let err = replay(&config, &input(vec![0.5; 3], 2), |_| {}).unwrap_err();
        assert!(err.to_string().contains("grad.w holds 3 values"), "{err}");
        let err = replay(&config, &input(Vec::new(), usize::MAX), |_| {}).unwrap_err();
        assert!(err.to_string().contains("grad.w"), "{err}");
    }
}
