//! The optional hyper-parameter keys of a JSON config, shared by `homeadam replay`'s config and
//! the host's presets, and how they overlay [`Config::named`].

use std::collections::BTreeMap;
use std::mem;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::{Config, Knob, Rule, TauCalibration};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Hyper-parameters as JSON keys, in the paper's symbols; an absent key keeps the value of
/// [`Config::named`]. A key the rule does not read is refused by [`Config::validate`].
///
/// The keys are those of the core's knob table ([`Config::JSON_KEYS`], each setting one knob,
/// in [`HyperParams::knobs`]) and three that set knobs in another form: `betas`, `tau` and
/// `home_lr`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HyperParams {
    /// (β1, β2).
    pub betas: Option<[f64; 2]>,
    /// τ, the HomeAdam(W) threshold on min v̂: a number, or `{"home_share": q, "every": N}`
    /// to calibrate it ([`homeadam_core::calibration`]).
    pub tau: Option<Tau>,
    /// HomeAdam(W): η_h, the home branch's learning rate at the configured `lr` (default `lr`);
    /// schedules scale it with η.
    pub home_lr: Option<f64>,
    /// The keys of [`Config::JSON_KEYS`] present, with their values (`lr`, `eps`, `momentum`,
    /// ...).
    pub knobs: BTreeMap<&'static str, Knob>,
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

/// The keys that set knobs in a form of their own.
const OWN_FORMS: [&str; 3] = ["betas", "tau", "home_lr"];

impl HyperParams {
    /// Parses the keys of a JSON object that its owner did not take (e.g. a `#[serde(flatten)]`
    /// map); an unknown key or a value of the wrong type is an error naming the key.
    pub fn from_keys(keys: Map<String, Value>) -> Result<Self> {
        let mut h = HyperParams::default();
        // A null is an absent key, as serde reads an `Option`.
        for (key, value) in keys.into_iter().filter(|(_, v)| !v.is_null()) {
            let typed = |e: serde_json::Error| anyhow!("{key}: {e}");
            match key.as_str() {
                "betas" => h.betas = Some(serde_json::from_value(value).map_err(typed)?),
                "tau" => h.tau = Some(serde_json::from_value(value).map_err(typed)?),
                "home_lr" => h.home_lr = Some(serde_json::from_value(value).map_err(typed)?),
                _ => {
                    let (key, name) = Config::JSON_KEYS
                        .iter()
                        .find(|(k, _)| *k == key)
                        .ok_or_else(|| unknown(&key))?;
                    h.knobs.insert(key, knob(key, name, &value)?);
                }
            }
        }
        Ok(h)
    }

    /// The value of the key `key` ([`Config::JSON_KEYS`]), if present.
    pub fn get(&self, key: &str) -> Option<Knob> {
        self.knobs.get(key).copied()
    }

    /// Sets the key `key` ([`Config::JSON_KEYS`]) to `value`; an error for another key or a
    /// value of another kind than its knob's.
    pub fn set(&mut self, key: &str, value: Knob) -> Result<()> {
        let (key, name) = Config::JSON_KEYS
            .iter()
            .find(|(k, _)| *k == key)
            .ok_or_else(|| unknown(key))?;
        match Config::new(Rule::Sgd).knob(name) {
            Some(like) if mem::discriminant(&like) == mem::discriminant(&value) => {
                self.knobs.insert(key, value);
                Ok(())
            }
            _ => bail!("{key}: {value} is not a value of this key"),
        }
    }

    /// Writes every present key into `c`; a `home_lr` that cannot be a ratio to η is an error.
    pub fn overlay(&self, c: &mut Config) -> Result<()> {
        for (key, value) in &self.knobs {
            let (_, name) = Config::JSON_KEYS
                .iter()
                .find(|(k, _)| k == key)
                .expect("a JSON key");
            c.set_knob(name, &value.to_string())
                .ok_or_else(|| anyhow!("{key}: {value} is not a value of this key"))?;
        }
        if let Some([b1, b2]) = self.betas {
            c.beta1 = b1;
            c.beta2 = b2;
        }
        match self.tau {
            Some(Tau::Fixed(tau)) => c.tau = tau,
            Some(Tau::Calibrated(Calibration { home_share, every })) => {
                c.tau_calibration = Some(TauCalibration { home_share, every });
            }
            None => {}
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

/// The error of an unknown key, listing the known ones.
fn unknown(key: &str) -> anyhow::Error {
    let known: Vec<&str> = Config::JSON_KEYS
        .iter()
        .map(|(k, _)| *k)
        .chain(OWN_FORMS)
        .collect();
    anyhow!("unknown key `{key}` (known: {})", known.join(", "))
}

/// The JSON `value` of `key` as a value of the core's knob `name`: of the knob's kind, and for
/// a knob of named values one of its names.
fn knob(key: &str, name: &str, value: &Value) -> Result<Knob> {
    let like = Config::new(Rule::Sgd).knob(name).expect("a knob of the table");
    let wrong = |kind: &str| anyhow!("{key}: invalid type: {value}, expected {kind}");
    Ok(match like {
        Knob::Real(_) => Knob::Real(value.as_f64().ok_or_else(|| wrong("a number"))?),
        Knob::Flag(_) => Knob::Flag(value.as_bool().ok_or_else(|| wrong("a boolean"))?),
        Knob::Count(_) => Knob::Count(value.as_u64().ok_or_else(|| wrong("a whole number >= 0"))?),
        Knob::Choice(_) => {
            let text = value.as_str().ok_or_else(|| wrong("a string"))?;
            let mut choices = Config::choices(name);
            match choices.find(|&c| c == text) {
                Some(choice) => Knob::Choice(choice),
                None => {
                    let names: Vec<&str> = Config::choices(name).collect();
                    bail!("{key}: {text:?} is not one of {}", names.join(", "))
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use homeadam_core::RhoOver;

    use super::*;

    fn keys(text: &str) -> Map<String, Value> {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn every_key_of_the_core_table_sets_its_knob() {
        for &(key, name) in Config::JSON_KEYS {
            let mut c = Config::new(Rule::Sgd);
            let value = match c.knob(name).unwrap() {
                Knob::Real(_) => Value::from(0.25),
                Knob::Flag(b) => Value::from(!b),
                Knob::Count(_) => Value::from(7),
                Knob::Choice(_) => Value::from(Config::choices(name).last().unwrap()),
            };
            let h = HyperParams::from_keys(Map::from_iter([(key.to_string(), value.clone())])).unwrap();
            h.overlay(&mut c).unwrap();
            let text = value.as_str().map_or(value.to_string(), str::to_string);
            assert_eq!(c.knob(name).unwrap().to_string(), text, "{key}");
        }
        let own: Vec<&str> = Config::JSON_KEYS
            .iter()
            .map(|(k, _)| *k)
            .filter(|k| OWN_FORMS.contains(k))
            .collect();
        assert!(own.is_empty(), "{own:?}");
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
        let mut amsgrad = HyperParams::default();
        amsgrad.set("amsgrad", Knob::Flag(true)).unwrap();
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
