//! The optional hyper-parameter keys of a JSON config, shared by `homeadam replay`'s config and
//! the host's presets, and how they overlay [`Config::named`].

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::{Config, RhoOver, TauCalibration};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Hyper-parameters as JSON keys, in the paper's symbols; an absent key keeps the value of
/// [`Config::named`]. A key the rule does not read is refused by [`Config::validate`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HyperParams {
    /// η.
    pub lr: Option<f64>,
    /// (β1, β2).
    pub betas: Option<[f64; 2]>,
    /// ε.
    pub eps: Option<f64>,
    /// λ.
    pub weight_decay: Option<f64>,
    /// τ, the HomeAdam(W) threshold on min v̂: a number, or `{"home_share": q, "every": N}`
    /// to calibrate it ([`homeadam_core::calibration`]).
    pub tau: Option<Tau>,
    /// Global / per-layer HomeAdam(W): `"all"` (the paper) or `"active"`, the elements ρ is
    /// taken over.
    pub rho_over: Option<String>,
    /// HomeAdam(W): η_h, the home branch's learning rate at the configured `lr` (default `lr`);
    /// schedules scale it with η.
    pub home_lr: Option<f64>,
    /// μ, SGD momentum.
    pub momentum: Option<f64>,
    /// SGD dampening.
    pub dampening: Option<f64>,
    /// Nesterov momentum (SGD, SWATS).
    pub nesterov: Option<bool>,
    /// AdaBelief / SWATS: decoupled λ.
    pub weight_decouple: Option<bool>,
    /// AdaBelief / SWATS: θ ← θ(1 − λ) instead of θ(1 − ηλ).
    pub fixed_decay: Option<bool>,
    /// AdaBelief: RAdam's rectification.
    pub rectify: Option<bool>,
    /// AdaBelief: AMSGrad's running max of s.
    pub amsgrad: Option<bool>,
    /// MIAdam: κ.
    pub kappa: Option<f64>,
    /// MIAdam: the last step t of the integrated update.
    pub switch_step: Option<u64>,
}

/// τ as a config gives it.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Tau {
    /// A fixed threshold.
    Fixed(f64),
    /// Calibrated to a share of home decisions.
    Calibrated(Calibration),
}

/// `{"home_share": q, "every": N}`.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// q ∈ (0, 1).
    pub home_share: f64,
    /// Steps between calibrations (≥ 1).
    pub every: u32,
}

impl HyperParams {
    /// Parses the keys of a JSON object that its owner did not take (e.g. a `#[serde(flatten)]`
    /// map); an unknown key or a value of the wrong type is an error naming the key.
    pub fn from_keys(keys: Map<String, Value>) -> Result<Self> {
        serde_json::from_value(Value::Object(keys.clone())).map_err(|e| {
            // serde names an unknown key, but not the key of a value of the wrong type.
            let parses_alone = |k: &String, v: &Value| {
                let one = Map::from_iter([(k.clone(), v.clone())]);
                serde_json::from_value::<HyperParams>(Value::Object(one)).is_ok()
            };
            match keys.iter().find(|(k, v)| !parses_alone(k, v)) {
                Some((k, _)) if !e.to_string().contains(k.as_str()) => anyhow!("{k}: {e}"),
                _ => anyhow!(e),
            }
        })
    }

    /// Writes every present key into `c`; a `rho_over` name or a `home_lr` that cannot be a
    /// ratio to η is an error.
    pub fn overlay(&self, c: &mut Config) -> Result<()> {
        let set = |dst: &mut f64, v: Option<f64>| *dst = v.unwrap_or(*dst);
        set(&mut c.lr, self.lr);
        if let Some([b1, b2]) = self.betas {
            c.beta1 = b1;
            c.beta2 = b2;
        }
        set(&mut c.eps, self.eps);
        set(&mut c.weight_decay, self.weight_decay);
        match self.tau {
            Some(Tau::Fixed(tau)) => c.tau = tau,
            Some(Tau::Calibrated(Calibration { home_share, every })) => {
                c.tau_calibration = Some(TauCalibration { home_share, every });
            }
            None => {}
        }
        if let Some(name) = &self.rho_over {
            c.rho_over = RhoOver::from_name(name)
                .ok_or_else(|| anyhow!("rho_over: {name:?} is not one of {}", RhoOver::NAMES.join(", ")))?;
        }
        if let Some(home_lr) = self.home_lr {
            if !(c.lr > 0.0 && c.lr.is_finite()) {
                bail!(
                    "home_lr needs lr > 0 (it is kept as the ratio home_lr / lr, {home_lr} / {})",
                    c.lr
                );
            }
            c.home_lr_scale = home_lr / c.lr;
        }
        set(&mut c.momentum, self.momentum);
        set(&mut c.dampening, self.dampening);
        set(&mut c.kappa, self.kappa);
        c.nesterov = self.nesterov.unwrap_or(c.nesterov);
        c.weight_decouple = self.weight_decouple.unwrap_or(c.weight_decouple);
        c.fixed_decay = self.fixed_decay.unwrap_or(c.fixed_decay);
        c.rectify = self.rectify.unwrap_or(c.rectify);
        c.amsgrad = self.amsgrad.unwrap_or(c.amsgrad);
        c.switch_step = self.switch_step.unwrap_or(c.switch_step);
        Ok(())
    }

    /// [`Config::named`]`(name)` with these keys overlaid, validated.
    pub fn config(&self, name: &str) -> Result<Config> {
        let mut c = Config::named(name).ok_or_else(|| {
            let names = Config::NAMES.join(", ");
            anyhow!("unknown rule {name:?} (expected one of {names})")
        })?;
        self.overlay(&mut c)?;
        c.validate().with_context(|| format!("rule {name}"))?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn present_keys_overlay_the_named_config() {
        let h = HyperParams::from_keys(keys(r#"{"lr": 0.01, "betas": [0.8, 0.99], "tau": 1e-9}"#)).unwrap();
        let c = h.config("homeadamw-ew").unwrap();
        assert_eq!((c.lr, c.beta1, c.beta2, c.tau), (0.01, 0.8, 0.99, 1e-9));
        assert_eq!(
            c.weight_decay,
            Config::named("homeadamw-ew").unwrap().weight_decay
        );
        let sgdm = HyperParams::default().config("sgdm").unwrap();
        assert_eq!(sgdm, Config::named("sgdm").unwrap());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"learning_rate": 1}"#, "learning_rate"),
            (r#"{"lr": 0.1, "momentum": "high"}"#, "momentum"),
            (r#"{"switch_step": -1}"#, "switch_step"),
        ];
        for (text, key) in cases {
            let err = HyperParams::from_keys(keys(text)).unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        let err = format!("{:#}", HyperParams::default().config("nadam").unwrap_err());
        assert!(
            err.contains("unknown rule \"nadam\"") && err.contains("sgdm"),
            "{err}"
        );
        let amsgrad = HyperParams {
            amsgrad: Some(true),
            ..HyperParams::default()
        };
        let err = format!("{:#}", amsgrad.config("adamw").unwrap_err());
        assert!(err.contains("amsgrad"), "{err}");
    }

    #[test]
    fn the_options_beyond_the_paper() {
        let text =
            r#"{"lr": 0.01, "rho_over": "active", "home_lr": 0.5, "tau": {"home_share": 0.1, "every": 20}}"#;
        let c = HyperParams::from_keys(keys(text))
            .unwrap()
            .config("homeadamw")
            .unwrap();
        assert_eq!(c.rho_over, RhoOver::Active);
        assert_eq!(c.home_lr_scale, 50.0);
        assert_eq!(
            c.tau_calibration,
            Some(TauCalibration {
                home_share: 0.1,
                every: 20
            })
        );
        for (rule, text, needle) in [
            ("homeadamw", r#"{"rho_over": "some"}"#, "all, active"),
            ("homeadamw-ew", r#"{"rho_over": "active"}"#, "rho_over"),
            ("adamw", r#"{"home_lr": 0.1}"#, "home_lr"),
            ("homeadamw", r#"{"lr": 0, "home_lr": 0.1}"#, "lr > 0"),
            (
                "homeadamw",
                r#"{"tau": {"home_share": 1.5, "every": 2}}"#,
                "home_share",
            ),
            (
                "homeadamw",
                r#"{"tau": {"home_share": 0.1, "every": 0}}"#,
                "every",
            ),
        ] {
            let err = HyperParams::from_keys(keys(text)).and_then(|h| h.config(rule));
            let err = format!("{:#}", err.unwrap_err());
            assert!(err.contains(needle), "{rule} {text}: {err}");
        }
    }
}
