//! Presets, one JSON file per experiment in `host/presets/`, embedded in the binary: the
//! optimizers' hyper-parameters, each entry citing the paper's line(s) it comes from in
//! `source`, and the experiment's protocol: every choice the runner makes besides the
//! hyper-parameters (model variant, augmentation, schedule, sequence length, decay masking,
//! seeds, evaluation, …), each with its source. `homeadam.tex:N` is line N of the paper's
//! LaTeX source as distributed by arXiv (arXiv:2603.02649v1, file `homeadam.tex`).
//!
//! A protocol choice's `source` is either `paper, homeadam.tex:N…` (the paper states it) or
//! `ours: REASON` (the paper leaves it open, or we depart from it). The `ours:` choices of
//! every preset are the runner's departures from the paper: [`departures_markdown`] lists them,
//! and the README's list is that text (a test checks it).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_candle::OptimConfig;
use homeadam_core::{Config, Dtype, Knob};
use homeadam_replay::HyperParams;
use serde::Deserialize;

use crate::models::VggVariant;

pub mod search;

use search::SearchSpace;

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

/// The prefix of a source the paper states.
const PAPER: &str = "paper, homeadam.tex:";
/// The prefix of a source we chose.
const OURS: &str = "ours: ";

/// One protocol choice: its value and where it comes from (`paper, homeadam.tex:N…` or
/// `ours: REASON`).
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Choice<T> {
    /// The value.
    pub value: T,
    /// Where it comes from.
    pub source: String,
}

impl<T> Choice<T> {
    /// Whether the paper states it (`false`: our choice).
    pub fn is_paper(&self) -> bool {
        self.source.starts_with(PAPER)
    }
}

/// Which parameters weight decay applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DecayMask {
    /// Every parameter, as Alg. 1–3 decay all of θ.
    All,
    /// All but biases and normalisation parameters (`homeadam_candle::is_no_decay`), the
    /// library's default.
    NoBiasNorm,
}

impl DecayMask {
    /// `OptimConfig::decay_all`.
    pub fn decay_all(self) -> bool {
        self == DecayMask::All
    }
}

/// Image augmentation of the training split.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Augmentation {
    /// None.
    None,
    /// A random crop of the image's size from the image zero-padded by 4 pixels, then a
    /// horizontal flip with probability ½.
    Pad4CropFlip,
}

impl Augmentation {
    /// The random crop's padding, if any augmentation.
    pub fn padding(self) -> Option<usize> {
        match self {
            Augmentation::None => None,
            Augmentation::Pad4CropFlip => Some(4),
        }
    }
}

/// The language models' learning-rate schedule (only a constant rate is implemented).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    /// η_t = η.
    Constant,
}

/// When MIAdam leaves its integrated phase: `switch_step` of the core's config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum MiAdamSwitch {
    /// After this many epochs: `switch_step` = epochs × minibatches per epoch (of the run).
    Epochs(u64),
    /// After this many steps.
    Steps(u64),
}

impl MiAdamSwitch {
    /// `switch_step` for epochs of `steps_per_epoch` minibatches.
    pub fn switch_step(self, steps_per_epoch: u64) -> u64 {
        match self {
            MiAdamSwitch::Epochs(e) => e.saturating_mul(steps_per_epoch),
            MiAdamSwitch::Steps(s) => s,
        }
    }
}

/// A word-level vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vocabulary {
    /// `None`: every word of the training split; `Some(n)`: its `n` most frequent words (the
    /// others read as `<unk>`).
    pub max_words: Option<usize>,
}

/// Every choice of an experiment's protocol. Optional keys belong to one kind of experiment:
/// images (`augmentation`, `normalisation`), language models (`sequence_length`, `vocabulary`,
/// `batching` and the architecture's `attention_mask`, `norm_position`, `activation`,
/// `embedding_scale`, `weight_tying`), VGG (`vgg`); [`Preset::load`] checks that each preset has
/// all of its kind's.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// Where the optimizers' hyper-parameters come from.
    pub hyperparameters: Choice<String>,
    /// The network.
    pub model: Choice<String>,
    /// How the network departs from the paper's, if it does.
    #[serde(default)]
    pub model_adaptation: Option<Choice<String>>,
    /// VGG16 with or without batch norm (`--vgg` overrides).
    #[serde(default)]
    pub vgg: Option<Choice<VggVariant>>,
    /// Augmentation of the training images.
    #[serde(default)]
    pub augmentation: Option<Choice<Augmentation>>,
    /// Normalisation of the images.
    #[serde(default)]
    pub normalisation: Option<Choice<String>>,
    /// Tokens per window of a language model.
    #[serde(default)]
    pub sequence_length: Option<Choice<usize>>,
    /// The language model's vocabulary.
    #[serde(default)]
    pub vocabulary: Option<Choice<Vocabulary>>,
    /// How the token stream is cut into minibatches.
    #[serde(default)]
    pub batching: Option<Choice<String>>,
    /// The language model's attention mask.
    #[serde(default)]
    pub attention_mask: Option<Choice<String>>,
    /// Where the language model's layer norms sit.
    #[serde(default)]
    pub norm_position: Option<Choice<String>>,
    /// The language model's feed-forward activation.
    #[serde(default)]
    pub activation: Option<Choice<String>>,
    /// The factor on the language model's token embeddings.
    #[serde(default)]
    pub embedding_scale: Option<Choice<String>>,
    /// Whether the language model's output layer shares the embedding's weights.
    #[serde(default)]
    pub weight_tying: Option<Choice<String>>,
    /// The learning-rate schedule.
    pub lr_schedule: Choice<LrSchedule>,
    /// Which parameters are decayed (`--decay-mask` overrides).
    pub decay_mask: Choice<DecayMask>,
    /// How HomeAdam(W)'s threshold τ was chosen (the values are in the entries).
    pub tau: Choice<String>,
    /// MIAdam's switch step.
    pub miadam_switch: Choice<MiAdamSwitch>,
    /// Which HomeAdam(W) (Alg. 2 global, Alg. 3 element-wise) the runs use.
    pub homeadam: Choice<String>,
    /// Runs per optimizer (`--seeds` overrides).
    pub seeds: Choice<u64>,
    /// What the epoch rows measure, and on what.
    pub eval: Choice<String>,
    /// Predictions (examples or tokens) of the test subset that `--eval-every` evaluates
    /// (`--eval-subset` overrides).
    pub eval_subset: Choice<usize>,
}

/// The kinds of experiment, by the protocol keys they need.
const IMAGE_KEYS: [&str; 2] = ["augmentation", "normalisation"];
const TEXT_KEYS: [&str; 8] = [
    "sequence_length",
    "vocabulary",
    "batching",
    "attention_mask",
    "norm_position",
    "activation",
    "embedding_scale",
    "weight_tying",
];

/// A choice as written, for listing: its value as JSON and its source.
#[derive(Deserialize)]
struct RawChoice {
    value: serde_json::Value,
    source: String,
}

/// Refuses a source that is neither `paper, homeadam.tex:N…` nor `ours: REASON`.
fn check_source(key: &str, source: &str) -> Result<()> {
    let paper = source
        .strip_prefix(PAPER)
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()));
    let ours = source.strip_prefix(OURS).is_some_and(|r| !r.trim().is_empty());
    if !(paper || ours) {
        bail!("protocol choice {key:?}: source {source:?} must start with \"{PAPER}N\" or \"{OURS}\" and a reason");
    }
    Ok(())
}

/// The `protocol` object of a preset file, key by key.
fn raw_protocol(text: &str) -> Result<BTreeMap<String, RawChoice>> {
    #[derive(Deserialize)]
    struct File {
        protocol: BTreeMap<String, RawChoice>,
    }
    Ok(serde_json::from_str::<File>(text)?.protocol)
}

/// One optimizer's entry: the shared hyper-parameter keys ([`HyperParams`]; absent keys keep
/// [`Config::named`]'s values, `lr` is required), where the values come from, and, for an
/// entry named otherwise (a variant of a rule, e.g. `homeadamw-active`), the core config name
/// it runs.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(try_from = "RawOptimizerPreset")]
pub struct OptimizerPreset {
    /// The core config name ([`Config::named`]); `None`: the entry's own name.
    pub rule: Option<String>,
    /// Storage of the optimizer state (`"state_dtype"`; f32 when not written).
    pub state_dtype: Dtype,
    /// The hyper-parameters.
    pub hyper: HyperParams,
    /// Where the values come from.
    pub source: String,
}

/// An entry as written: `source`, and every other key for [`HyperParams`], which refuses
/// unknown ones (serde's `flatten` cannot do both).
#[derive(Deserialize)]
struct RawOptimizerPreset {
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    state_dtype: Option<String>,
    source: String,
    #[serde(flatten)]
    hyper: serde_json::Map<String, serde_json::Value>,
}

impl TryFrom<RawOptimizerPreset> for OptimizerPreset {
    type Error = anyhow::Error;

    fn try_from(raw: RawOptimizerPreset) -> Result<Self> {
        let hyper = HyperParams::from_keys(raw.hyper)?;
        if hyper.get("lr").is_none() {
            bail!("missing field `lr` (every preset states its learning rate)");
        }
        let state_dtype = match raw.state_dtype.as_deref() {
            None => Dtype::F32,
            Some(name) => Dtype::from_name(name).ok_or_else(|| {
                anyhow!("state_dtype = {name:?}: expected \"f32\", \"bf16\", \"f16\" or \"q8\"")
            })?,
        };
        Ok(OptimizerPreset {
            rule: raw.rule,
            state_dtype,
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
    /// Remarks (why a preset is not the paper's).
    #[serde(default)]
    pub note: Option<String>,
    /// Every other choice of the protocol, with its source.
    pub protocol: Protocol,
    /// Per optimizer, by the core's config name.
    pub optimizers: BTreeMap<String, OptimizerPreset>,
    /// The ranges `homeadam sweep` draws each knob from, and why.
    #[serde(default)]
    pub search: Option<SearchSpace>,
}

impl Preset {
    /// The experiments that have a preset.
    pub fn experiments() -> impl Iterator<Item = &'static str> {
        FILES.iter().map(|(name, _)| *name)
    }

    /// The JSON text of `experiment`'s preset file.
    pub fn json(experiment: &str) -> Result<&'static str> {
        Self::text(experiment)
    }

    fn text(experiment: &str) -> Result<&'static str> {
        match FILES.iter().find(|(name, _)| *name == experiment) {
            Some((_, text)) => Ok(text),
            None => {
                let known: Vec<_> = Self::experiments().collect();
                bail!(
                    "no preset for experiment {experiment:?} (known: {})",
                    known.join(", ")
                )
            }
        }
    }

    /// The preset of `experiment`, e.g. `"cifar10_vgg16"`: parsed, every source checked, every
    /// protocol key of its kind (images or language models) present, and MIAdam's switch step
    /// given once (in the protocol, not in an entry).
    pub fn load(experiment: &str) -> Result<Preset> {
        let preset = Self::from_json(Self::text(experiment)?)?;
        if preset.experiment != experiment {
            bail!("preset {experiment}.json names itself {:?}", preset.experiment);
        }
        Ok(preset)
    }

    /// The preset in the file at `path` (e.g. the `best.json` of `homeadam sweep`), read as
    /// [`Preset::from_json`] reads text, so that every command taking `--preset` accepts the
    /// same files.
    pub fn read(path: &Path) -> Result<Preset> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Preset::from_json(&text).with_context(|| format!("--preset {}", path.display()))
    }

    /// A preset from its JSON text (e.g. the `best.json` of `homeadam sweep`), with the checks
    /// of [`Preset::load`] and the search ranges checked.
    pub fn from_json(text: &str) -> Result<Preset> {
        let preset: Preset = serde_json::from_str(text).context("preset")?;
        let experiment = preset.experiment.as_str();
        let context = || format!("preset {experiment}.json");
        if let Some(space) = &preset.search {
            space.check().with_context(context)?;
        }
        let raw = raw_protocol(text).with_context(context)?;
        for (key, choice) in &raw {
            check_source(key, &choice.source).with_context(context)?;
        }
        let has = |keys: &[&str]| keys.iter().map(|k| raw.contains_key(*k)).collect::<Vec<_>>();
        let (image, text_keys) = (has(&IMAGE_KEYS), has(&TEXT_KEYS));
        let all_or_none = |v: &[bool]| v.iter().all(|&b| b) || v.iter().all(|&b| !b);
        let image_kind = image.iter().all(|&b| b);
        let text_kind = text_keys.iter().all(|&b| b);
        if !(all_or_none(&image) && all_or_none(&text_keys) && image_kind != text_kind) {
            bail!(
                "preset {experiment}.json: the protocol must have every key of images ({}) or every \
                 key of language models ({}), not a mix",
                IMAGE_KEYS.join(", "),
                TEXT_KEYS.join(", ")
            );
        }
        if let Some(e) = preset
            .optimizers
            .get("miadam")
            .filter(|e| e.hyper.get("switch_step").is_some())
        {
            bail!(
                "preset {experiment}.json: miadam's switch_step belongs in the protocol's \
                 miadam_switch, not in the entry ({})",
                e.source
            );
        }
        Ok(preset)
    }

    /// The validated core config of optimizer `name` (an entry: a core config name, e.g.
    /// `"homeadamw-ew"` or `"sgdm"`, or a variant with its `rule`, e.g. `"homeadamw-active"`):
    /// [`Config::named`] with the entry's keys overlaid, and MIAdam's switch step from the
    /// protocol for epochs of `steps_per_epoch` minibatches.
    pub fn config(&self, name: &str, steps_per_epoch: u64) -> Result<Config> {
        let Some(p) = self.optimizers.get(name) else {
            let known: Vec<_> = self.optimizers.keys().map(String::as_str).collect();
            bail!(
                "preset {}: unknown optimizer {name:?} (known: {})",
                self.experiment,
                known.join(", ")
            );
        };
        let mut hyper = p.hyper.clone();
        if name == "miadam" {
            let switch = self.protocol.miadam_switch.value;
            hyper.set("switch_step", Knob::Count(switch.switch_step(steps_per_epoch)))?;
        }
        hyper
            .config(p.rule.as_deref().unwrap_or(name))
            .map_err(|e| anyhow!("preset {}, optimizer {name}: {e:#}", self.experiment))
    }

    /// The state storage of optimizer `name`, checked against its rule (f16 is refused for a
    /// second moment).
    pub fn state_dtype(&self, name: &str, steps_per_epoch: u64) -> Result<Dtype> {
        let config = self.config(name, steps_per_epoch)?;
        let dtype = self.optimizers[name].state_dtype;
        config
            .check_state_dtype(dtype)
            .map_err(|e| anyhow!("preset {}, optimizer {name}: {e}", self.experiment))?;
        Ok(dtype)
    }

    /// The candle optimizer's settings for optimizer `name`: [`Preset::config`],
    /// [`Preset::state_dtype`], and weight decay on the parameters `decay` selects.
    pub fn optim_config(&self, name: &str, steps_per_epoch: u64, decay: DecayMask) -> Result<OptimConfig> {
        Ok(OptimConfig {
            decay_all: decay.decay_all(),
            state_dtype: self.state_dtype(name, steps_per_epoch)?,
            ..OptimConfig::new(self.config(name, steps_per_epoch)?)
        })
    }

    /// Every protocol choice as written, by key.
    pub fn protocol_choices(&self) -> Result<Vec<WrittenChoice>> {
        Ok(raw_protocol(Self::text(&self.experiment)?)?
            .into_iter()
            .map(|(key, c)| WrittenChoice {
                key,
                value: match c.value {
                    serde_json::Value::String(s) => s,
                    v => v.to_string(),
                },
                source: c.source,
            })
            .collect())
    }
}

/// A protocol choice as its file writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrittenChoice {
    /// The choice's key, e.g. `decay_mask`.
    pub key: String,
    /// Its value: a string's text, else its JSON.
    pub value: String,
    /// Its source.
    pub source: String,
}

/// The runner's departures from the paper: every `ours:` protocol choice of every preset, as a
/// Markdown list, one item per (choice, value, reason) with the presets that make it, by choice
/// name. The README's list "Where the runner departs from the paper" is this text.
pub fn departures_markdown() -> Result<String> {
    // Each choice with its reason in place of its source, and the presets that make it.
    let mut items: Vec<(WrittenChoice, Vec<&str>)> = Vec::new();
    let mut all = Vec::new();
    for experiment in Preset::experiments() {
        for c in Preset::load(experiment)?.protocol_choices()? {
            if let Some(reason) = c.source.strip_prefix(OURS) {
                let source = reason.to_string();
                all.push((WrittenChoice { source, ..c }, experiment));
            }
        }
    }
    // A stable sort by key keeps the presets' order within a choice.
    all.sort_by(|a, b| a.0.key.cmp(&b.0.key));
    for (choice, experiment) in all {
        match items.iter_mut().find(|(c, _)| *c == choice) {
            Some((_, presets)) => presets.push(experiment),
            None => items.push((choice, vec![experiment])),
        }
    }
    Ok(items
        .iter()
        .map(|(c, presets)| {
            format!(
                "- **{}** `{}` ({}): {}\n",
                c.key,
                c.value,
                presets.join(", "),
                c.source
            )
        })
        .collect())
}

/// Every optimizer of the paper, plus the element-wise HomeAdam(W) and Lion, by the core's names, two
/// variants of the global HomeAdamW beyond the paper (ρ over the active elements; that and a
/// calibrated τ with its own home learning rate), and AdamW and HomeAdamW-ew with 8-bit (q8)
/// state: the entries of every preset file (the offline presets add named controls, run by name
/// only).
pub const ALL_OPTIMIZERS: [&str; 18] = [
    "sgd",
    "sgdm",
    "adam",
    "adamw",
    "adamw-q8",
    "adabelief",
    "swats",
    "miadam",
    "lion",
    "adam-srf",
    "adamw-srf",
    "homeadam",
    "homeadamw",
    "homeadam-ew",
    "homeadamw-ew",
    "homeadamw-ew-q8",
    "homeadamw-active",
    "homeadamw-calibrated",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_every_optimizer_validates() {
        for experiment in Preset::experiments() {
            let preset = Preset::load(experiment).unwrap();
            // Entries beyond these are named controls: variants of a rule, run by name only.
            let controls = preset
                .optimizers
                .keys()
                .filter(|n| !ALL_OPTIMIZERS.contains(&n.as_str()));
            for name in controls {
                assert!(preset.optimizers[name].rule.is_some(), "{experiment}/{name}");
                preset.config(name, 100).unwrap_or_else(|e| panic!("{e:#}"));
            }
            for name in ALL_OPTIMIZERS {
                let c = preset.config(name, 100).unwrap_or_else(|e| panic!("{e:#}"));
                let state = preset.state_dtype(name, 100).unwrap();
                assert_eq!(state == Dtype::Q8, name.ends_with("-q8"), "{name}");
                let rule = preset.optimizers[name].rule.as_deref();
                assert_eq!(c.name(), rule.unwrap_or(name));
                assert!(!preset.optimizers[name].source.is_empty());
            }
        }
    }

    #[test]
    fn paper_values_arrive_in_the_config() {
        let c = Preset::load("cifar10_vgg16")
            .unwrap()
            .config("homeadamw", 782)
            .unwrap();
        assert_eq!(
            (c.lr, c.eps, c.beta2, c.weight_decay, c.tau),
            (1e-6, 1e-7, 0.99, 1e-5, 1e-13)
        );
        let c = Preset::load("wikitext2_transformer")
            .unwrap()
            .config("miadam", 1865)
            .unwrap();
        assert_eq!((c.lr, c.beta2, c.kappa), (1e-6, 0.99, 0.999));
        // The 5-epoch rule: 5 × 1,865 windows of 32 × 35 tokens per WikiText-2 epoch.
        assert_eq!(c.switch_step, 9325);
        let c = Preset::load("tinyimagenet_resnet34")
            .unwrap()
            .config("sgdm", 1563)
            .unwrap();
        assert_eq!((c.lr, c.momentum), (4e-4, 0.9));
    }

    #[test]
    fn the_quick_controls_match_the_step_sizes_they_claim() {
        for (experiment, paper) in [
            ("digits_quick", "cifar10_vgg16"),
            ("wikitext2_quick", "wikitext2_transformer"),
        ] {
            let preset = Preset::load(experiment).unwrap();
            let c = |name: &str| preset.config(name, 45).unwrap();
            let srf_cap = |c: Config| c.lr / (2.0 * c.eps.sqrt());
            // The capped srf steps are at most lr, as adamw's are.
            assert_eq!(srf_cap(c("adamw-srf-capped")), c("adamw").lr);
            assert_eq!(srf_cap(c("homeadamw-ew-capped")), c("adamw").lr);
            // Home at sgdm's rate / (1 - beta1): home_lr * m-hat steps as far as sgdm's lr * buf.
            let sgdm = c("sgdm");
            for name in [
                "homeadamw-ew-capped",
                "homeadamw-home-sgdm",
                "homeadamw-calibrated-home-sgdm",
            ] {
                let h = c(name);
                let home_lr = h.lr * h.home_lr_scale;
                assert!(
                    (home_lr * (1.0 - h.beta1) - sgdm.lr).abs() < 1e-12,
                    "{experiment}/{name}: {home_lr}"
                );
            }
            let paper = Preset::load(paper).unwrap().config("homeadamw", 782).unwrap();
            assert_eq!(c("homeadamw-paper"), paper, "{experiment}");
        }
    }

    #[test]
    fn entries_refuse_unknown_and_missing_keys() {
        let entry = |text: &str| serde_json::from_str::<OptimizerPreset>(text).map_err(|e| e.to_string());
        let ok = entry(r#"{"lr": 0.1, "momentum": 0.9, "source": "ours"}"#).unwrap();
        assert_eq!(
            (ok.hyper.get("lr"), ok.hyper.get("momentum"), ok.source.as_str()),
            (Some(Knob::Real(0.1)), Some(Knob::Real(0.9)), "ours")
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
        let err = preset.config("adamax", 45).unwrap_err().to_string();
        assert!(
            err.contains("unknown optimizer \"adamax\"") && err.contains("homeadamw-ew"),
            "{err}"
        );
    }

    #[test]
    fn every_protocol_choice_has_a_source_and_the_paper_presets_decay_everything() {
        for experiment in Preset::experiments() {
            let preset = Preset::load(experiment).unwrap();
            let p = &preset.protocol;
            let quick = experiment.ends_with("_quick");
            // Alg. 1–3 decay all of θ; the offline runs keep the library default.
            let expected = if quick {
                DecayMask::NoBiasNorm
            } else {
                DecayMask::All
            };
            assert_eq!(p.decay_mask.value, expected, "{experiment}");
            assert_eq!(p.decay_mask.is_paper(), !quick, "{experiment}");
            assert_eq!(p.seeds.value, 1, "{experiment}");
            assert!(p.eval_subset.value > 0, "{experiment}");
            let choices = preset.protocol_choices().unwrap();
            assert!(choices.len() >= 12, "{experiment}: {choices:?}");
            for c in &choices {
                check_source(&c.key, &c.source).unwrap();
            }
            // The paper presets take MIAdam's switch from the data (5 epochs), the offline ones
            // keep their step counts (so `homeadam quick` is unchanged).
            let switch = |steps| preset.config("miadam", steps).unwrap().switch_step;
            match (experiment, p.miadam_switch.value) {
                ("digits_quick", MiAdamSwitch::Steps(57)) => assert_eq!(switch(45), 57),
                ("wikitext2_quick", MiAdamSwitch::Steps(100)) => assert_eq!(switch(80), 100),
                (_, MiAdamSwitch::Epochs(5)) if !quick => assert_eq!(switch(782), 3910),
                (e, s) => panic!("{e}: {s:?}"),
            }
        }
        let vgg = Preset::load("cifar10_vgg16").unwrap().protocol.vgg.unwrap();
        assert_eq!(vgg.value, VggVariant::Plain);
        // The Transformer implements only these (transformer.rs): the presets must say so.
        for experiment in [
            "wikitext2_transformer",
            "wikitext103_transformer",
            "wikitext2_quick",
        ] {
            let p = Preset::load(experiment).unwrap().protocol;
            let text = |c: Option<Choice<String>>| c.unwrap().value;
            assert_eq!(text(p.attention_mask), "causal");
            assert_eq!(text(p.norm_position), "post-norm");
            assert_eq!(text(p.activation), "relu");
            assert_eq!(text(p.embedding_scale), "sqrt(d_model)");
            assert_eq!(text(p.weight_tying), "none");
            assert_eq!(p.lr_schedule.value, LrSchedule::Constant);
        }
    }

    #[test]
    fn bad_sources_and_mixed_kinds_are_refused() {
        for ok in [
            "paper, homeadam.tex:655",
            "paper, homeadam.tex:1643-1652",
            "ours: because",
        ] {
            check_source("k", ok).unwrap();
        }
        for bad in [
            "homeadam.tex:655",
            "paper, line 3",
            "ours:",
            "ours: ",
            "Ours: x",
            "",
        ] {
            let err = check_source("k", bad).unwrap_err().to_string();
            assert!(err.contains("\"k\"") && err.contains("ours: "), "{bad}: {err}");
        }
    }

    #[test]
    fn departures_list_every_ours_choice_once_with_its_presets() {
        let md = departures_markdown().unwrap();
        assert!(md.lines().all(|l| l.starts_with("- **")), "{md}");
        for experiment in Preset::experiments() {
            for WrittenChoice { key, value, source } in
                Preset::load(experiment).unwrap().protocol_choices().unwrap()
            {
                let line = md.lines().find(|l| {
                    l.starts_with(&format!("- **{key}** `{value}` (")) && l.ends_with(&source[OURS.len()..])
                });
                match source.strip_prefix(OURS) {
                    Some(_) => assert!(
                        line.is_some_and(|l| l.contains(experiment)),
                        "{experiment}/{key} missing from the departures"
                    ),
                    None => assert!(line.is_none(), "{experiment}/{key} is the paper's"),
                }
            }
        }
        assert!(
            md.contains("- **decay_mask** `no-bias-norm` (wikitext2_quick, digits_quick)"),
            "{md}"
        );
    }
}
