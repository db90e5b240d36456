//! The experiments: each one a dataset, a model and a preset file (`host/presets/`).
//!
//! | experiment | paper | data | model |
//! |---|---|---|---|
//! | `digits-mlp` | — (offline) | shipped digits, 80/20 split | MLP 64→128→10 |
//! | `digits-cnn` | — (offline) | shipped digits, 80/20 split | CNN: two 3×3 convolutions, 2×2 max-pool, linear |
//! | `wikitext2-quick` | — (offline) | shipped WikiText-2 valid (train) / test (first 40,960 tokens) | tiny Transformer LM, 2,000 words |
//! | `cifar10-vgg16` | Figure 2 | CIFAR-10 (downloaded) | VGG16, plain (`--vgg bn`: with batch norm) |
//! | `tinyimagenet-resnet34` | Figure 3 | Tiny-ImageNet (downloaded) | ResNet34 |
//! | `wikitext2-transformer` | Figure 4 | WikiText-2 (downloaded) | 8-layer Transformer LM |
//! | `wikitext103-transformer` | Figure 5 | WikiText-103 (downloaded) | 24-layer Transformer LM |
//!
//! Every choice besides the data and the model sizes (augmentation, sequence length,
//! vocabulary, VGG variant, …) is read from the experiment's preset protocol.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::Device;

use super::data::{ClassificationData, LanguageData, TrainData};
use crate::data::batches::Images;
use crate::data::wikitext::{self, Corpus, TextSplit, Vocab};
use crate::data::{cifar10, digits, tiny_imagenet, Normalize, Split};
use crate::models::{
    Cnn, CnnConfig, Mlp, MlpConfig, Model, ResNet, ResNetConfig, TransformerConfig, TransformerLm, Vgg,
    VggConfig, VggVariant,
};
use crate::preset::{Augmentation, Choice, Preset, Vocabulary};

/// The offline LM's test tokens (the start of the test split), to keep evaluation short.
const QUICK_TEST_TOKENS: usize = 40_960;

/// One experiment of the runner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    /// Offline: an MLP on the shipped digits.
    DigitsMlp,
    /// Offline: a small CNN on the shipped digits (the same preset, splits and protocol as
    /// `DigitsMlp`; only the network differs).
    DigitsCnn,
    /// Offline: a tiny Transformer LM on the shipped WikiText-2 validation / test splits.
    WikiText2Quick,
    /// Figure 2: VGG16 (plain or batch-norm) on CIFAR-10.
    Cifar10Vgg16,
    /// Figure 3: ResNet34 on Tiny-ImageNet.
    TinyImageNetResNet34,
    /// Figure 4: the 8-layer Transformer LM on WikiText-2.
    WikiText2Transformer,
    /// Figure 5: the 24-layer Transformer LM on WikiText-103.
    WikiText103Transformer,
}

/// How to build an experiment.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// An offline copy of the dataset (`None`: the cache, downloading what is missing).
    pub data_dir: Option<PathBuf>,
    /// A CPU-sized model instead of the paper's (width 1/16 for the CNNs, the tiny
    /// Transformer), for tests and smoke runs.
    pub small: bool,
    /// Overrides the preset's minibatch size.
    pub batch_size: Option<usize>,
    /// Overrides the preset's VGG variant (`cifar10-vgg16` only).
    pub vgg: Option<VggVariant>,
    /// Where tensors live.
    pub device: Device,
    /// A preset in place of the experiment's own (e.g. the `best.json` of `homeadam sweep`).
    pub preset: Option<Preset>,
    /// Train on a nested stratified subset of the training split (the digits only).
    pub train_subset: Option<TrainSubset>,
}

impl BuildOptions {
    /// The small models on `device`, from the cache or the shipped data, with the experiment's
    /// own preset and every override off: what `quick` and the tests build.
    pub fn small_on(device: Device) -> Self {
        BuildOptions {
            data_dir: None,
            small: true,
            batch_size: None,
            vgg: None,
            device,
            preset: None,
            train_subset: None,
        }
    }
}

/// A training set of N examples drawn from the training split ([`digits::nested_subset`]): the
/// N of the generalization bounds, O(1/N) for HomeAdam(W) (Theorems 1–2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrainSubset {
    /// N, the examples trained on.
    pub size: usize,
    /// The seed of the order the subsets are prefixes of.
    pub seed: u64,
}

/// What a run evaluates on after each epoch (`metrics.csv`'s `test_*` columns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EvalSplit {
    /// The test split; the run trains on the whole training split.
    Test,
    /// A validation split carved from the training split (this fraction of it), which the run
    /// then does not train on; the test split is not read. For choosing hyper-parameters
    /// (`homeadam sweep`); implemented for the offline experiments.
    Validation(f64),
}

/// Makes the experiment's network, initialised from a seed.
pub type ModelFactory = Box<dyn Fn(u64) -> Result<Box<dyn Model>>>;

/// A built experiment.
pub struct Setup {
    /// Its data (loaded once, shared by every optimizer's run).
    pub data: Box<dyn TrainData>,
    /// A fresh network for each run.
    pub new_model: ModelFactory,
    /// The hyper-parameters of every optimizer.
    pub preset: Preset,
}

impl Experiment {
    /// Every experiment.
    pub const ALL: [Experiment; 7] = [
        Experiment::DigitsMlp,
        Experiment::DigitsCnn,
        Experiment::WikiText2Quick,
        Experiment::Cifar10Vgg16,
        Experiment::TinyImageNetResNet34,
        Experiment::WikiText2Transformer,
        Experiment::WikiText103Transformer,
    ];

    /// The name on the command line and of the run directory.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::DigitsMlp => "digits-mlp",
            Experiment::DigitsCnn => "digits-cnn",
            Experiment::WikiText2Quick => "wikitext2-quick",
            Experiment::Cifar10Vgg16 => "cifar10-vgg16",
            Experiment::TinyImageNetResNet34 => "tinyimagenet-resnet34",
            Experiment::WikiText2Transformer => "wikitext2-transformer",
            Experiment::WikiText103Transformer => "wikitext103-transformer",
        }
    }

    /// The experiment called `name`, or an error listing the known ones.
    pub fn from_name(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|e| e.name() == name).with_context(|| {
            let known: Vec<_> = Self::ALL.iter().map(|e| e.name()).collect();
            format!("unknown experiment {name:?} (known: {})", known.join(", "))
        })
    }

    /// `given` (e.g. a sweep's `best.json`) when it is this experiment's preset, else the
    /// experiment's own; another experiment's preset is refused, since its rows were chosen for
    /// another model and data.
    pub fn preset(self, given: Option<&Preset>) -> Result<Preset> {
        match given {
            None => Preset::load(self.preset_name()),
            Some(p) if p.experiment == self.preset_name() => Ok(p.clone()),
            Some(p) => bail!(
                "the preset given is {}'s, not {}'s ({}.json)",
                p.experiment,
                self.name(),
                self.preset_name()
            ),
        }
    }

    /// The preset file's name (`host/presets/<name>.json`).
    pub fn preset_name(self) -> &'static str {
        match self {
            Experiment::DigitsMlp | Experiment::DigitsCnn => "digits_quick",
            Experiment::WikiText2Quick => "wikitext2_quick",
            Experiment::Cifar10Vgg16 => "cifar10_vgg16",
            Experiment::TinyImageNetResNet34 => "tinyimagenet_resnet34",
            Experiment::WikiText2Transformer => "wikitext2_transformer",
            Experiment::WikiText103Transformer => "wikitext103_transformer",
        }
    }

    /// Loads the data (downloading it if needed) and builds the model.
    pub fn build(self, o: &BuildOptions) -> Result<Setup> {
        self.build_for(o, EvalSplit::Test)
    }

    /// [`Experiment::build`], evaluating on `eval`.
    pub fn build_for(self, o: &BuildOptions, eval: EvalSplit) -> Result<Setup> {
        let validation = match eval {
            EvalSplit::Test => None,
            EvalSplit::Validation(f) if f > 0.0 && f < 1.0 => Some(f),
            EvalSplit::Validation(f) => bail!("validation fraction {f} must lie strictly between 0 and 1"),
        };
        if validation.is_some()
            && !matches!(
                self,
                Experiment::DigitsMlp | Experiment::DigitsCnn | Experiment::WikiText2Quick
            )
        {
            bail!(
                "{}: a validation split is implemented for digits-mlp, digits-cnn and wikitext2-quick only",
                self.name()
            );
        }
        let preset = self.preset(o.preset.as_ref())?;
        let protocol = &preset.protocol;
        if o.train_subset.is_some() && !matches!(self, Experiment::DigitsMlp | Experiment::DigitsCnn) {
            bail!(
                "{}: a training subset is implemented for digits-mlp and digits-cnn only",
                self.name()
            );
        }
        if o.vgg.is_some() && self != Experiment::Cifar10Vgg16 {
            bail!("--vgg applies to cifar10-vgg16, not {}", self.name());
        }
        let name = preset.experiment.as_str();
        let augmentation = || needed(name, "augmentation", &protocol.augmentation).map(|c| c.value);
        let bptt = || needed(name, "sequence_length", &protocol.sequence_length).map(|c| c.value);
        let vocabulary = || needed(name, "vocabulary", &protocol.vocabulary).map(|c| c.value);
        let batch = o.batch_size.unwrap_or(preset.batch_size);
        let width = if o.small { 1.0 / 16.0 } else { 1.0 };
        let dev = o.device.clone();
        let (new_model, data): (ModelFactory, Box<dyn TrainData>) = match self {
            Experiment::DigitsMlp | Experiment::DigitsCnn => {
                let path = o
                    .data_dir
                    .as_ref()
                    .map_or_else(digits::shipped_path, |d| d.join("digits.csv.gz"));
                let all = digits::load(&path)?;
                // The splits' seeds are fixed: every run, whatever its seed, tests (or
                // validates) on the same images.
                let (train, test) = match validation {
                    None => digits::split(&all, digits::TEST_FRACTION, digits::TEST_SEED)?,
                    Some(f) => {
                        let h = digits::holdout(&all, f)?;
                        (all.subset(&h.train), all.subset(&h.validation))
                    }
                };
                let train = match o.train_subset {
                    Some(TrainSubset { size, seed }) => {
                        train.subset(&digits::nested_subset(&train, size, seed)?)
                    }
                    None => train,
                };
                let augment = augmentation()? != Augmentation::None;
                if augment {
                    bail!("{name}: the digits have no augmentation");
                }
                let (shape, factory): (_, ModelFactory) = if self == Experiment::DigitsMlp {
                    let factory: ModelFactory =
                        Box::new(move |seed| Ok(Box::new(Mlp::new(MlpConfig::digits(), seed, &dev)?)));
                    (vec![digits::FEATURES], factory)
                } else {
                    let config = CnnConfig::digits();
                    let factory: ModelFactory =
                        Box::new(move |seed| Ok(Box::new(Cnn::new(config, seed, &dev)?)));
                    (vec![1, config.side, config.side], factory)
                };
                let data = ClassificationData::new(train, test, shape, batch, augment, &o.device)?;
                (factory, Box::new(data))
            }
            Experiment::Cifar10Vgg16 => {
                let dir = o.data_dir.as_deref();
                let aug = augmentation()?;
                let pad = aug.padding().unwrap_or(0);
                let train = Images::new(cifar10::load(dir, Split::Train)?, cifar10::normalization(), pad)?;
                let test = Images::new(cifar10::load(dir, Split::Test)?, cifar10::normalization(), 0)?;
                let augment = aug != Augmentation::None;
                let data =
                    ClassificationData::new(train, test, cifar10::SHAPE.to_vec(), batch, augment, &dev)?;
                let variant = match o.vgg {
                    Some(v) => v,
                    None => needed(name, "vgg", &protocol.vgg)?.value,
                };
                let config = VggConfig {
                    width,
                    ..VggConfig::cifar10(variant)
                };
                let factory: ModelFactory = Box::new(move |seed| Ok(Box::new(Vgg::new(config, seed, &dev)?)));
                (factory, Box::new(data))
            }
            Experiment::TinyImageNetResNet34 => {
                let dir = o.data_dir.as_deref();
                let train = tiny_imagenet::load(dir, Split::Train)?;
                let test = tiny_imagenet::load(dir, Split::Test)?;
                let norm: Normalize = train.channel_stats();
                let shape = vec![train.channels, train.height, train.width];
                let classes = train.classes;
                let aug = augmentation()?;
                let train = Images::new(train, norm.clone(), aug.padding().unwrap_or(0))?;
                let test = Images::new(test, norm, 0)?;
                let augment = aug != Augmentation::None;
                let data = ClassificationData::new(train, test, shape, batch, augment, &dev)?;
                let config = ResNetConfig {
                    width,
                    classes,
                    ..ResNetConfig::tiny_imagenet()
                };
                let factory: ModelFactory =
                    Box::new(move |seed| Ok(Box::new(ResNet::new(config, seed, &dev)?)));
                (factory, Box::new(data))
            }
            Experiment::WikiText2Transformer | Experiment::WikiText103Transformer => {
                let corpus = if self == Experiment::WikiText2Transformer {
                    Corpus::WikiText2
                } else {
                    Corpus::WikiText103
                };
                let dir = o.data_dir.as_deref();
                let train_path = wikitext::locate(corpus, TextSplit::Train, dir)?;
                if vocabulary()?.max_words.is_some() {
                    bail!("{name}: a vocabulary of the most frequent words is implemented for wikitext2-quick only");
                }
                let vocab = wikitext::vocab_from_file(&train_path)?;
                let train = wikitext::read_split(&train_path, &vocab)?;
                let test = wikitext::read_split(&wikitext::locate(corpus, TextSplit::Test, dir)?, &vocab)?;
                let config = match (o.small, corpus) {
                    (true, _) => TransformerConfig::tiny(vocab.len()),
                    (false, Corpus::WikiText2) => TransformerConfig::wikitext2(vocab.len()),
                    (false, Corpus::WikiText103) => TransformerConfig::wikitext103(vocab.len()),
                };
                let data = LanguageData::new(&train.ids, &test.ids, vocab.len(), batch, bptt()?, &dev)?;
                let factory: ModelFactory =
                    Box::new(move |seed| Ok(Box::new(TransformerLm::new(config, seed, &dev)?)));
                (factory, Box::new(data))
            }
            Experiment::WikiText2Quick => {
                let tokens = quick_lm_tokens(o.data_dir.as_deref(), vocabulary()?, validation)?;
                let data =
                    LanguageData::new(&tokens.train, &tokens.test, tokens.vocab, batch, bptt()?, &dev)?;
                let config = TransformerConfig::tiny(tokens.vocab);
                let factory: ModelFactory =
                    Box::new(move |seed| Ok(Box::new(TransformerLm::new(config, seed, &dev)?)));
                (factory, Box::new(data))
            }
        };
        if data.train_batches() == 0 {
            bail!("{}: the training set yields no minibatch", self.name());
        }
        Ok(Setup {
            data,
            new_model,
            preset,
        })
    }
}

/// The offline LM's token streams (`wikitext2-quick`).
pub(crate) struct QuickLmTokens {
    /// The training stream: the shipped validation split (but its tail, with a validation
    /// fraction).
    pub train: Vec<u32>,
    /// The first [`QUICK_TEST_TOKENS`] of the test split, or the validation tail.
    pub test: Vec<u32>,
    /// The vocabulary's size.
    pub vocab: usize,
}

/// Reads and encodes `wikitext2-quick`'s streams from `data_dir` (default: the shipped copy),
/// the vocabulary built from the training stream as `vocabulary` says.
pub(crate) fn quick_lm_tokens(
    data_dir: Option<&Path>,
    vocabulary: Vocabulary,
    validation: Option<f64>,
) -> Result<QuickLmTokens> {
    let dir = data_dir.map_or_else(
        || crate::data::shipped_dir().join("wikitext-2"),
        Path::to_path_buf,
    );
    let read = |split| -> Result<String> {
        let path = wikitext::locate(Corpus::WikiText2, split, Some(&dir))?;
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    };
    let valid = read(TextSplit::Valid)?;
    let vocab = match vocabulary {
        Vocabulary { max_words: Some(n) } => Vocab::most_frequent(&valid, n),
        Vocabulary { max_words: None } => Vocab::build(&valid),
    };
    let mut train = wikitext::encode(&valid, &vocab)?.ids;
    let test = match validation {
        None => {
            let mut test = wikitext::encode(&read(TextSplit::Test)?, &vocab)?.ids;
            test.truncate(QUICK_TEST_TOKENS);
            test
        }
        // The stream's tail, so that no window spans both parts.
        Some(f) => train.split_off(train.len() - (train.len() as f64 * f).round() as usize),
    };
    Ok(QuickLmTokens {
        train,
        test,
        vocab: vocab.len(),
    })
}

/// A protocol choice an experiment of this kind needs ([`Preset::load`] checks that the preset
/// has it).
pub(crate) fn needed<'a, T>(preset: &str, key: &str, choice: &'a Option<Choice<T>>) -> Result<&'a Choice<T>> {
    choice
        .as_ref()
        .with_context(|| format!("preset {preset}.json: the protocol has no {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(train_subset: Option<TrainSubset>) -> BuildOptions {
        BuildOptions {
            train_subset,
            ..BuildOptions::small_on(Device::Cpu)
        }
    }

    #[test]
    fn a_training_subset_trains_on_its_n_examples_of_the_digits_only() {
        let subset = Some(TrainSubset { size: 180, seed: 1 });
        let setup = Experiment::DigitsMlp.build(&options(subset)).unwrap();
        // 180 examples in minibatches of 32, the last one partial.
        assert_eq!(setup.data.train_batches(), 6);
        let whole = Experiment::DigitsMlp.build(&options(None)).unwrap();
        assert_eq!(whole.data.train_batches(), 45);
        let err = Experiment::WikiText2Quick.build(&options(subset)).err().unwrap();
        assert!(
            err.to_string().contains("digits-mlp and digits-cnn only"),
            "{err}"
        );
    }
}
