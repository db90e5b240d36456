//! The JSON config of `homeadam replay`: a rule name, hyper-parameters and storage types.

use anyhow::{bail, Context, Result};
use homeadam_core::{Config, Dtype, Rounding};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::hyper::HyperParams;

/// The config file as written: `rule`, the storage keys, and [`HyperParams`]'s keys in
/// `hyper`; every key but `rule` is optional and unknown keys are refused.
#[derive(Debug, Deserialize)]
struct RawConfig {
    rule: String,
    param_dtype: Option<String>,
    grad_dtype: Option<String>,
    state_dtype: Option<String>,
    rounding: Option<String>,
    seed: Option<u64>,
    grad_scale: Option<f64>,
    allow_f16_state: Option<bool>,
    #[serde(flatten)]
    hyper: Map<String, Value>,
}

/// A parsed and validated replay config.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    /// The core optimizer config.
    pub optimizer: Config,
    /// Storage of parameters.
    pub param_dtype: Dtype,
    /// Storage of gradients.
    pub grad_dtype: Dtype,
    /// Storage of optimizer state.
    pub state_dtype: Dtype,
    /// The loss scale the recorded gradients carry.
    pub grad_scale: f64,
}

fn dtype(value: Option<String>, key: &str) -> Result<Dtype> {
    let element = "expected \"f32\", \"f16\" or \"bf16\"";
    match value {
        None => Ok(Dtype::F32),
        Some(name) => match Dtype::from_name(&name) {
            Some(Dtype::Q8) if key != "state_dtype" => {
                bail!("{key} = \"q8\": q8 holds optimizer state only; {element}")
            }
            Some(d) => Ok(d),
            None if key == "state_dtype" => bail!("{key} = {name:?}: {element} or \"q8\""),
            None => bail!("{key} = {name:?}: {element}"),
        },
    }
}

impl ReplayConfig {
    /// Parses a config from JSON text; every error names the offending key.
    pub fn parse(text: &str) -> Result<Self> {
        let raw: RawConfig = serde_json::from_str(text).context("config")?;
        let mut c = HyperParams::from_keys(raw.hyper)
            .and_then(|h| h.config(&raw.rule))
            .context("config")?;
        c.seed = raw.seed.unwrap_or(0);
        c.allow_f16_state = raw.allow_f16_state.unwrap_or(false);
        c.rounding = match raw.rounding.as_deref() {
            None | Some("nearest") => Rounding::Nearest,
            Some("stochastic") => Rounding::Stochastic,
            Some(other) => bail!("config: rounding = {other:?}: expected \"nearest\" or \"stochastic\""),
        };
        let grad_scale = raw.grad_scale.unwrap_or(1.0);
        if !(grad_scale.is_finite() && grad_scale > 0.0) {
            bail!("config: grad_scale = {grad_scale}: expected a finite value > 0");
        }
        let config = ReplayConfig {
            optimizer: c,
            param_dtype: dtype(raw.param_dtype, "param_dtype").context("config")?,
            grad_dtype: dtype(raw.grad_dtype, "grad_dtype").context("config")?,
            state_dtype: dtype(raw.state_dtype, "state_dtype").context("config")?,
            grad_scale,
        };
        c.check_state_dtype(config.state_dtype).context("config")?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_config() {
        let c = ReplayConfig::parse(
            r#"{"rule": "homeadamw-ew", "lr": 1e-3, "betas": [0.9, 0.99], "eps": 1e-7, "weight_decay": 1e-4,
                "tau": 1e-12, "param_dtype": "bf16", "state_dtype": "bf16", "rounding": "stochastic", "seed": 7,
                "grad_scale": 1024}"#,
        )
        .unwrap();
        assert_eq!(c.optimizer.beta2, 0.99);
        assert_eq!(c.param_dtype, Dtype::BF16);
        assert_eq!(c.optimizer.rounding, Rounding::Stochastic);
        assert_eq!(c.grad_scale, 1024.0);
    }

    #[test]
    fn sgdm_is_sgd_with_momentum() {
        let c = ReplayConfig::parse(r#"{"rule": "sgdm", "lr": 0.01}"#).unwrap();
        assert_eq!((c.optimizer.name(), c.optimizer.momentum), ("sgdm", 0.9));
        let c = ReplayConfig::parse(r#"{"rule": "sgd", "momentum": 0.5, "nesterov": true}"#).unwrap();
        assert_eq!((c.optimizer.name(), c.optimizer.momentum), ("sgdm", 0.5));
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"rule": "adamw", "lr": -1}"#, "lr"),
            (r#"{"rule": "adamw", "lr": "fast"}"#, "lr"),
            (r#"{"rule": "adamw", "learning_rate": 1}"#, "learning_rate"),
            (r#"{"rule": "adamax"}"#, "adamax"),
            (r#"{"rule": "adamw", "betas": [0.9, 1.0]}"#, "beta2"),
            (r#"{"rule": "homeadam", "tau": 0}"#, "tau"),
            (r#"{"rule": "adamw", "state_dtype": "f16"}"#, "f16"),
            (r#"{"rule": "adamw", "param_dtype": "f64"}"#, "param_dtype"),
            (r#"{"rule": "adamw", "grad_scale": 0}"#, "grad_scale"),
            (r#"{"rule": "adamw", "rounding": "up"}"#, "rounding"),
            (r#"{"rule": "adam-srf", "weight_decay": 0.1}"#, "weight_decay"),
            (r#"{"rule": "adamw", "amsgrad": true}"#, "amsgrad"),
            (r#"{"lr": 0.1}"#, "rule"),
        ];
        for (text, key) in cases {
            let err = format!("{:#}", ReplayConfig::parse(text).unwrap_err());
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
