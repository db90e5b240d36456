//! Hyper-parameter presets, one JSON file per experiment in `host/presets/`, embedded in the
//! binary. Each optimizer entry cites the paper's line(s) it comes from in `source`.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::{Config, Rule};
use serde::Deserialize;

/// The experiments with a preset, and their files.
const FILES: [(&str, &str); 6] = [
    (
        "wikitext2_quick",
        include_str!("../../presets/wikitext2_quick.json"),
    ),
    ("cifar10_vgg16", include_str!("../../presets/cifar10_vgg16.json")),
    (
        "tinyimagenet_resnet34",
        include_str!("../../presets/tinyimagenet_resnet34.json"),
    ),
    (
        "wikitext2_transformer",
        include_str!("../../presets/wikitext2_transformer.json"),
    ),
    (
        "wikitext103_transformer",
        include_str!("../../presets/wikitext103_transformer.json"),
    ),
    ("digits_quick", include_str!("../../presets/digits_quick.json")),
];

/// One optimizer's hyper-parameters; absent keys keep [`Config::new`]'s defaults.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OptimizerPreset {
    /// η.
    pub lr: f64,
    /// (β1, β2).
    pub betas: Option<[f64; 2]>,
    /// ε.
    pub eps: Option<f64>,
    /// λ.
    pub weight_decay: Option<f64>,
    /// τ (HomeAdam rules).
    pub tau: Option<f64>,
    /// μ (SGD rules).
    pub momentum: Option<f64>,
    /// κ (MIAdam).
    pub kappa: Option<f64>,
    /// MIAdam's last integrated step.
    pub switch_step: Option<u64>,
    /// Where the values come from.
    pub source: String,
}

/// The presets of one experiment.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Preset {
    /// The experiment's name (the file name without `.json`).
    pub experiment: String,
    /// What is trained on what.
    pub description: String,
    /// Mini-batch size.
    pub batch_size: usize,
    /// Where the experiment's settings come from.
    pub source: String,
    /// How τ was chosen.
    pub tau_choice: String,
    /// Remarks (why a preset is not the paper's).
    #[serde(default)]
    pub note: Option<String>,
    /// Per optimizer, by the core's rule name.
    pub optimizers: BTreeMap<String, OptimizerPreset>,
}

impl Preset {
    /// The experiments that have a preset.
    pub fn experiments() -> impl Iterator<Item = &'static str> {
        FILES.iter().map(|(name, _)| *name)
    }

    /// The preset of `experiment`, e.g. `"cifar10_vgg16"`.
    pub fn load(experiment: &str) -> Result<Preset> {
        let Some((_, text)) = FILES.iter().find(|(name, _)| *name == experiment) else {
            let known: Vec<_> = Self::experiments().collect();
            bail!(
                "no preset for experiment {experiment:?} (known: {})",
                known.join(", ")
            );
        };
        let preset: Preset =
            serde_json::from_str(text).with_context(|| format!("preset {experiment}.json"))?;
        if preset.experiment != experiment {
            bail!("preset {experiment}.json names itself {:?}", preset.experiment);
        }
        Ok(preset)
    }

    /// The validated core config of optimizer `name` (a core rule name, e.g. `"homeadamw-ew"`).
    pub fn config(&self, name: &str) -> Result<Config> {
        let Some(p) = self.optimizers.get(name) else {
            let known: Vec<_> = self.optimizers.keys().map(String::as_str).collect();
            bail!(
                "preset {}: unknown optimizer {name:?} (known: {})",
                self.experiment,
                known.join(", ")
            );
        };
        let rule = Rule::from_name(name)
            .ok_or_else(|| anyhow!("preset {}: {name:?} is not a rule of the core", self.experiment))?;
        let mut c = Config::new(rule);
        c.lr = p.lr;
        if let Some([b1, b2]) = p.betas {
            c.beta1 = b1;
            c.beta2 = b2;
        }
        let set = |dst: &mut f64, v: Option<f64>| {
            if let Some(v) = v {
                *dst = v;
            }
        };
        set(&mut c.eps, p.eps);
        set(&mut c.weight_decay, p.weight_decay);
        set(&mut c.tau, p.tau);
        set(&mut c.momentum, p.momentum);
        set(&mut c.kappa, p.kappa);
        c.switch_step = p.switch_step.unwrap_or(c.switch_step);
        c.validate()
            .map_err(|e| anyhow!("preset {}, optimizer {name}: {e}", self.experiment))?;
        Ok(c)
    }
}

/// Every optimizer of the paper, plus the element-wise HomeAdam(W), by the core's names: the
/// entries of every preset file.
pub const ALL_OPTIMIZERS: [&str; 13] = [
    "sgd",
    "sgdm",
    "adam",
    "adamw",
    "adabelief",
    "swats",
    "miadam",
    "adam-srf",
    "adamw-srf",
    "homeadam",
    "homeadamw",
    "homeadam-ew",
    "homeadamw-ew",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_every_optimizer_validates() {
        for experiment in Preset::experiments() {
            let preset = Preset::load(experiment).unwrap();
            assert_eq!(preset.optimizers.len(), ALL_OPTIMIZERS.len(), "{experiment}");
            for name in ALL_OPTIMIZERS {
                let c = preset.config(name).unwrap_or_else(|e| panic!("{e:#}"));
                assert_eq!(c.rule.name(), name);
                assert!(!preset.optimizers[name].source.is_empty());
            }
        }
    }

    #[test]
    fn paper_values_arrive_in_the_config() {
        let c = Preset::load("cifar10_vgg16")
            .unwrap()
            .config("homeadamw")
            .unwrap();
        assert_eq!(
            (c.lr, c.eps, c.beta2, c.weight_decay, c.tau),
            (1e-6, 1e-7, 0.99, 1e-5, 1e-13)
        );
        let c = Preset::load("wikitext2_transformer")
            .unwrap()
            .config("miadam")
            .unwrap();
        assert_eq!((c.lr, c.beta2, c.kappa), (1e-6, 0.99, 0.999));
        let c = Preset::load("tinyimagenet_resnet34")
            .unwrap()
            .config("sgdm")
            .unwrap();
        assert_eq!((c.lr, c.momentum), (4e-4, 0.9));
    }

    #[test]
    fn unknown_names_are_clear_errors() {
        let err = Preset::load("mnist").unwrap_err().to_string();
        assert!(err.contains("cifar10_vgg16"), "{err}");
        let preset = Preset::load("digits_quick").unwrap();
        let err = preset.config("adamax").unwrap_err().to_string();
        assert!(
            err.contains("unknown optimizer \"adamax\"") && err.contains("homeadamw-ew"),
            "{err}"
        );
    }
}
