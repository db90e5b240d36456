//! Hyper-parameter presets, one JSON file per experiment in `host/presets/`, embedded in the
//! binary. Each optimizer entry cites the paper's line(s) it comes from in `source`:
//! `homeadam.tex:N` is line N of the paper's LaTeX source as distributed by arXiv
//! (arXiv:2603.02649v1, file `homeadam.tex`).

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::Config;
use homeadam_replay::HyperParams;
use serde::Deserialize;

/// The experiments with a preset, and their files.
const FILES: [(&str, &str); 6] = [
    ("wikitext2_quick", include_str!("../presets/wikitext2_quick.json")),
    ("cifar10_vgg16", include_str!("../presets/cifar10_vgg16.json")),
    (
        "tinyimagenet_resnet34",
        include_str!("../presets/tinyimagenet_resnet34.json"),
    ),
    (
        "wikitext2_transformer",
        include_str!("../presets/wikitext2_transformer.json"),
    ),
    (
        "wikitext103_transformer",
        include_str!("../presets/wikitext103_transformer.json"),
    ),
    ("digits_quick", include_str!("../presets/digits_quick.json")),
];

/// One optimizer's entry: the shared hyper-parameter keys ([`HyperParams`]; absent keys keep
/// [`Config::named`]'s values, `lr` is required) and where the values come from.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(try_from = "RawOptimizerPreset")]
pub struct OptimizerPreset {
    /// The hyper-parameters.
    pub hyper: HyperParams,
    /// Where the values come from.
    pub source: String,
}

/// An entry as written: `source`, and every other key for [`HyperParams`], which refuses
/// unknown ones (serde's `flatten` cannot do both).
#[derive(Deserialize)]
struct RawOptimizerPreset {
    source: String,
    #[serde(flatten)]
    hyper: serde_json::Map<String, serde_json::Value>,
}

impl TryFrom<RawOptimizerPreset> for OptimizerPreset {
    type Error = anyhow::Error;

    fn try_from(raw: RawOptimizerPreset) -> Result<Self> {
        let hyper = HyperParams::from_keys(raw.hyper)?;
        if hyper.lr.is_none() {
            bail!("missing field `lr` (every preset states its learning rate)");
        }
        Ok(OptimizerPreset {
            hyper,
            source: raw.source,
        })
    }
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
    /// Per optimizer, by the core's config name.
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

    /// The validated core config of optimizer `name` (a core config name, e.g. `"homeadamw-ew"`
    /// or `"sgdm"`): [`Config::named`] with the entry's keys overlaid.
    pub fn config(&self, name: &str) -> Result<Config> {
        let Some(p) = self.optimizers.get(name) else {
            let known: Vec<_> = self.optimizers.keys().map(String::as_str).collect();
            bail!(
                "preset {}: unknown optimizer {name:?} (known: {})",
                self.experiment,
                known.join(", ")
            );
        };
        p.hyper
            .config(name)
            .map_err(|e| anyhow!("preset {}, optimizer {name}: {e:#}", self.experiment))
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
                assert_eq!(c.name(), name);
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
    fn entries_refuse_unknown_and_missing_keys() {
        let entry = |text: &str| serde_json::from_str::<OptimizerPreset>(text).map_err(|e| e.to_string());
        let ok = entry(r#"{"lr": 0.1, "momentum": 0.9, "source": "ours"}"#).unwrap();
        assert_eq!(
            (ok.hyper.lr, ok.hyper.momentum, ok.source.as_str()),
            (Some(0.1), Some(0.9), "ours")
        );
        for (text, needle) in [
            (r#"{"lr": 0.1, "momentun": 0.9, "source": "ours"}"#, "momentun"),
            (r#"{"lr": 0.1}"#, "source"),
            (r#"{"eps": 0.1, "source": "ours"}"#, "lr"),
            (r#"{"lr": "big", "source": "ours"}"#, "lr"),
        ] {
            let err = entry(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
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
