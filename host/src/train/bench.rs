//! `homeadam bench-train`: the training step's speed on synthetic data of an experiment's real
//! shapes (nothing downloaded), split into its phases, for comparison with
//! `host/benches/torch_train.py` (the same networks in PyTorch).
//!
//! A step is what [`super::run::train`] does for one minibatch: the minibatch (assembled and
//! augmented as the preset says on a thread of its own while the step before trains, then
//! copied to the device: [`super::prefetch`]), the forward pass and the loss, the
//! backward pass, the optimizer step (which reads its status back). Warm-up steps run first and
//! are not timed. The phases are timed by CUDA events on the device's stream (so they add up to
//! the GPU's timeline, idle gaps included) and by the wall clock on the CPU; the throughput is
//! the wall clock over the timed steps, the device synchronised at both ends. Each phase's time
//! on the host is measured too, with the host time inside each of the models' own CUDA ops
//! ([`crate::models::host_time`]): where a phase's GPU time is its host time, the host's
//! launches bound it, and what its ops do not account for is candle's.

use std::time::Instant;

use anyhow::{bail, ensure, Result};
use candle_core::Device;
use serde::Serialize;

use super::data::{ClassificationData, LanguageData, TrainData};
use super::experiments::{needed, Experiment};
use super::prefetch::Pipeline;
use super::scores::loss_and_correct;
use crate::data::batches::Images;
use crate::data::{cifar10, ImageSet, Normalize};
use crate::models::host_time::{self, OpTime};
use crate::models::{Model, ResNet, ResNetConfig, TransformerConfig, TransformerLm, Vgg, VggConfig};
use crate::preset::{Augmentation, Preset};
use crate::report::Task;
use crate::rng::Rng;
use homeadam_candle::VarOptimizer;

/// WikiText-2's vocabulary (words of its training split, `<eos>` and `<unk>` included).
pub const WIKITEXT2_VOCAB: usize = 33_278;
/// WikiText-103's vocabulary.
pub const WIKITEXT103_VOCAB: usize = 267_735;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// One of the paper's four experiments.
    pub experiment: Experiment,
    /// Minibatch size (`None`: the preset's).
    pub batch_size: Option<usize>,
    /// The optimizer, by preset name.
    pub optimizer: String,
    /// Untimed steps first (kernel compilation, allocator warm-up).
    pub warmup: usize,
    /// Timed steps.
    pub steps: usize,
    /// The CPU-sized model ([`super::experiments::BuildOptions::small`]).
    pub small: bool,
    /// Seed of the model and the synthetic data.
    pub seed: u64,
}

/// Seconds spent in each phase over the timed steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Phases {
    /// Assembling the minibatch and copying it to the device.
    pub data: f64,
    /// The forward pass and the loss.
    pub forward: f64,
    /// The backward pass.
    pub backward: f64,
    /// The optimizer step.
    pub optimizer: f64,
}

impl Phases {
    /// The phases' names in a step's order: their JSON keys, and the phases
    /// [`host_time`] records.
    const NAMES: [&'static str; 4] = ["data", "forward", "backward", "optimizer"];

    /// Adds one step's seconds per phase, in a step's order.
    fn add(&mut self, [data, forward, backward, optimizer]: [f64; 4]) {
        self.data += data;
        self.forward += forward;
        self.backward += backward;
        self.optimizer += optimizer;
    }

    /// Each phase's name and seconds, in a step's order.
    fn named(&self) -> [(&'static str, f64); 4] {
        let [data, forward, backward, optimizer] = Self::NAMES;
        [
            (data, self.data),
            (forward, self.forward),
            (backward, self.backward),
            (optimizer, self.optimizer),
        ]
    }
}

/// One measurement, as `bench-train --json` writes it (the keys `torch_train.py` writes too).
#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    /// `homeadam`.
    pub implementation: &'static str,
    /// The experiment's name.
    pub experiment: String,
    /// `cpu`, `cuda:0`, ….
    pub device: String,
    /// The optimizer's name.
    pub optimizer: String,
    /// Examples per minibatch.
    pub batch_size: usize,
    /// `images` or `tokens`.
    pub unit: &'static str,
    /// Units per minibatch.
    pub units_per_step: usize,
    /// Trainable parameters.
    pub parameters: usize,
    /// Timed steps.
    pub steps: usize,
    /// Wall-clock seconds of the timed steps.
    pub seconds: f64,
    /// Units per second.
    pub throughput: f64,
    /// Seconds per phase over the timed steps (on CUDA the GPU's timeline).
    pub phases: Phases,
    /// Seconds per phase on the host's clock: from the phase's first call to its return.
    pub host_phases: Phases,
    /// Host time inside the models' own ops over the timed steps, by phase and op.
    pub host_ops: Vec<OpTime>,
    /// The threads of the CPU's ops (rayon's pool; `RAYON_NUM_THREADS` sets it).
    pub threads: usize,
}

/// What a benchmark trains: the network, its synthetic data, the experiment's preset.
struct Bench {
    model: Box<dyn Model>,
    data: Box<dyn TrainData>,
    preset: Preset,
    /// Examples per minibatch.
    batch: usize,
}

/// The network, its synthetic data and the optimizer's preset of `o`, on `device`.
fn setup(o: &BenchOptions, device: &Device) -> Result<Bench> {
    let preset = Preset::load(o.experiment.preset_name())?;
    let batch = o.batch_size.unwrap_or(preset.batch_size);
    let protocol = &preset.protocol;
    let name = preset.experiment.as_str();
    let width = if o.small { 1.0 / 16.0 } else { 1.0 };
    let batches = o.warmup + o.steps;
    let mut rng = Rng::new(o.seed).fork(u64::MAX - 1);
    let images = |shape: [usize; 3], classes: usize, rng: &mut Rng| -> ImageSet {
        let mut set = ImageSet::empty(shape[0], shape[1], shape[2], classes);
        set.n = batch * batches.max(1);
        set.pixels = (0..set.n * set.image_len())
            .map(|_| rng.below(256) as u8)
            .collect();
        set.labels = (0..set.n).map(|_| rng.below(classes) as u32).collect();
        set
    };
    let classification = |set: ImageSet, norm: Normalize, rng: &mut Rng| -> Result<Box<dyn TrainData>> {
        let aug = needed(name, "augmentation", &protocol.augmentation)?.value;
        let shape = vec![set.channels, set.height, set.width];
        let test = images([set.channels, set.height, set.width], set.classes, rng);
        let train = Images::new(set, norm.clone(), aug.padding().unwrap_or(0))?;
        let test = Images::new(test, norm, 0)?;
        let augment = aug != Augmentation::None;
        Ok(Box::new(ClassificationData::new(
            train, test, shape, batch, augment, device,
        )?))
    };
    let (model, data): (Box<dyn Model>, Box<dyn TrainData>) = match o.experiment {
        Experiment::Cifar10Vgg16 => {
            let variant = needed(name, "vgg", &protocol.vgg)?.value;
            let config = VggConfig {
                width,
                ..VggConfig::cifar10(variant)
            };
            let set = images(cifar10::SHAPE, 10, &mut rng);
            let data = classification(set, cifar10::normalization(), &mut rng)?;
            (Box::new(Vgg::new(config, o.seed, device)?), data)
        }
        Experiment::TinyImageNetResNet34 => {
            let config = ResNetConfig {
                width,
                ..ResNetConfig::tiny_imagenet()
            };
            let set = images([3, 64, 64], config.classes, &mut rng);
            let norm = set.channel_stats();
            let data = classification(set, norm, &mut rng)?;
            (Box::new(ResNet::new(config, o.seed, device)?), data)
        }
        Experiment::WikiText2Transformer | Experiment::WikiText103Transformer => {
            let bptt = needed(name, "sequence_length", &protocol.sequence_length)?.value;
            let (vocab, config) = match (o.small, o.experiment) {
                (true, _) => (2_000, TransformerConfig::tiny(2_000)),
                (false, Experiment::WikiText2Transformer) => {
                    (WIKITEXT2_VOCAB, TransformerConfig::wikitext2(WIKITEXT2_VOCAB))
                }
                (false, _) => (
                    WIKITEXT103_VOCAB,
                    TransformerConfig::wikitext103(WIKITEXT103_VOCAB),
                ),
            };
            let tokens = batch * (bptt * batches.max(1) + 1);
            let ids: Vec<u32> = (0..tokens).map(|_| rng.below(vocab) as u32).collect();
            let test = &ids[..2 * batch];
            let data = LanguageData::new(&ids, test, vocab, batch, bptt, device)?;
            (
                Box::new(TransformerLm::new(config, o.seed, device)?),
                Box::new(data),
            )
        }
        other => bail!(
            "bench-train measures cifar10-vgg16, tinyimagenet-resnet34, wikitext2-transformer and \
             wikitext103-transformer, not {}",
            other.name()
        ),
    };
    Ok(Bench {
        model,
        data,
        preset,
        batch,
    })
}

/// Runs the benchmark on `device`.
pub fn bench_train(o: &BenchOptions, device: &Device) -> Result<BenchResult> {
    ensure!(o.steps > 0, "bench-train: --steps must be at least 1");
    let Bench {
        model,
        data,
        preset,
        batch,
    } = setup(o, device)?;
    let steps_per_epoch = data.train_batches() as u64;
    let config = preset.optim_config(&o.optimizer, steps_per_epoch, preset.protocol.decay_mask.value)?;
    let mut opt = VarOptimizer::from_named(model.vars(), config)?;
    let clock = Clock::new(device)?;
    let mut phases = Phases::default();
    let mut host = Phases::default();
    let mut units = 0;
    let mut start = Instant::now();
    let [data_phase, forward_phase, backward_phase, optimizer_phase] = Phases::NAMES;
    let pipeline = Pipeline::new(data.as_ref(), o.seed);
    let timed = std::thread::scope(|scope| -> Result<()> {
        let mut prefetch = pipeline.epoch(scope, 0, o.warmup + o.steps);
        for i in 0..o.warmup + o.steps {
            if i == o.warmup {
                device.synchronize()?;
                start = Instant::now();
                host_time::start(data_phase);
            }
            host_time::set_phase(data_phase);
            let (h0, t0) = (Instant::now(), clock.mark()?);
            let mb = prefetch.batch(i)?;
            let (h1, t1) = (Instant::now(), clock.mark()?);
            host_time::set_phase(forward_phase);
            let logits = model.forward(&mb.input, true)?;
            let (loss, _correct) = loss_and_correct(&logits, &mb.target, data.task())?;
            let (h2, t2) = (Instant::now(), clock.mark()?);
            host_time::set_phase(backward_phase);
            let grads = crate::models::param_grads::backward(&loss)?;
            let (h3, t3) = (Instant::now(), clock.mark()?);
            host_time::set_phase(optimizer_phase);
            opt.step_with_report(&grads)?;
            let (h4, t4) = (Instant::now(), clock.mark()?);
            if i >= o.warmup {
                phases.add([
                    clock.seconds(&t0, &t1)?,
                    clock.seconds(&t1, &t2)?,
                    clock.seconds(&t2, &t3)?,
                    clock.seconds(&t3, &t4)?,
                ]);
                host.add([h1 - h0, h2 - h1, h3 - h2, h4 - h3].map(|d| d.as_secs_f64()));
                units = mb.predictions;
            }
        }
        Ok(())
    });
    let host_ops = host_time::finish();
    timed?;
    device.synchronize()?;
    let seconds = start.elapsed().as_secs_f64();
    Ok(BenchResult {
        implementation: "homeadam",
        experiment: o.experiment.name().to_string(),
        device: crate::device::name(device),
        optimizer: o.optimizer.clone(),
        batch_size: batch,
        unit: match data.task() {
            Task::LanguageModel => "tokens",
            Task::Classification => "images",
        },
        units_per_step: units,
        parameters: model.param_count(),
        steps: o.steps,
        seconds,
        throughput: (units * o.steps) as f64 / seconds,
        phases,
        host_phases: host,
        host_ops,
        threads: rayon::current_num_threads(),
    })
}

impl BenchResult {
    /// A few lines for the terminal; where the models' own ops ran, also the host's time per
    /// phase and in those ops.
    pub fn summary(&self) -> String {
        let phases = self.phases.named();
        let total = phases.iter().map(|&(_, s)| s).sum::<f64>().max(f64::MIN_POSITIVE);
        let share = |x: f64| {
            format!(
                "{:.1} ms ({:.0} %)",
                1e3 * x / self.steps as f64,
                100.0 * x / total
            )
        };
        let per_step: Vec<String> = phases.iter().map(|&(n, s)| format!("{n} {}", share(s))).collect();
        let mut text = format!(
            "{} on {} ({} threads), {} × {} {} per step, {} parameters, {}: {:.0} {}/s ({:.2} ms/step)\n\
             per step: {}",
            self.experiment,
            self.device,
            self.threads,
            self.batch_size,
            self.units_per_step / self.batch_size.max(1),
            self.unit,
            self.parameters,
            self.optimizer,
            self.throughput,
            self.unit,
            1e3 * self.seconds / self.steps as f64,
            per_step.join(", "),
        );
        if !self.host_ops.is_empty() {
            text.push_str(&self.host_summary());
        }
        text
    }

    /// The host's time per step in each phase, and how much of it the models' own ops took,
    /// op by op (largest first); the rest of a phase is candle's.
    fn host_summary(&self) -> String {
        let steps = self.steps.max(1) as f64;
        let ms = |s: f64| format!("{:.2} ms", 1e3 * s / steps);
        let host = self.host_phases.named();
        let per_step: Vec<String> = host.iter().map(|&(n, s)| format!("{n} {}", ms(s))).collect();
        let mut text = format!("\non the host per step: {}", per_step.join(", "));
        for (phase, phase_seconds) in host {
            let mut ops: Vec<&OpTime> = self.host_ops.iter().filter(|t| t.phase == phase).collect();
            if ops.is_empty() {
                continue;
            }
            ops.sort_by(|a, b| b.seconds.total_cmp(&a.seconds));
            let ours: f64 = ops.iter().map(|t| t.seconds).sum();
            let each: Vec<String> = ops
                .iter()
                .map(|t| {
                    format!(
                        "{} {:.1} × {:.1} µs",
                        t.op,
                        t.calls as f64 / steps,
                        1e6 * t.seconds / t.calls.max(1) as f64
                    )
                })
                .collect();
            text.push_str(&format!(
                "\n  {phase}: our ops {} ({}), the rest {}",
                ms(ours),
                each.join(", "),
                ms(phase_seconds - ours)
            ));
        }
        text
    }
}

/// A point in time of the step: an instant on the CPU, an event on the CUDA stream.
enum Mark {
    Wall(Instant),
    #[cfg(feature = "cuda")]
    Event(candle_core::cuda::cudarc::driver::CudaEvent),
}

/// Where marks come from.
enum Clock {
    Wall,
    #[cfg(feature = "cuda")]
    Cuda(std::sync::Arc<candle_core::cuda::cudarc::driver::CudaStream>),
}

impl Clock {
    fn new(device: &Device) -> Result<Self> {
        match device {
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => Ok(Clock::Cuda(d.cuda_stream())),
            _ => Ok(Clock::Wall),
        }
    }

    fn mark(&self) -> Result<Mark> {
        match self {
            Clock::Wall => Ok(Mark::Wall(Instant::now())),
            #[cfg(feature = "cuda")]
            Clock::Cuda(stream) => {
                use candle_core::cuda::cudarc::driver::sys::CUevent_flags;
                let event = stream
                    .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .map_err(|e| anyhow::anyhow!("bench-train: CUDA event: {e}"))?;
                Ok(Mark::Event(event))
            }
        }
    }

    fn seconds(&self, from: &Mark, to: &Mark) -> Result<f64> {
        match (from, to) {
            (Mark::Wall(a), Mark::Wall(b)) => Ok(b.duration_since(*a).as_secs_f64()),
            #[cfg(feature = "cuda")]
            (Mark::Event(a), Mark::Event(b)) => a
                .elapsed_ms(b)
                .map(|ms| f64::from(ms) / 1e3)
                .map_err(|e| anyhow::anyhow!("bench-train: CUDA event: {e}")),
            #[cfg(feature = "cuda")]
            _ => bail!("bench-train: marks of two clocks"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(experiment: Experiment, optimizer: &str) -> BenchOptions {
        BenchOptions {
            experiment,
            batch_size: Some(2),
            optimizer: optimizer.into(),
            warmup: 1,
            steps: 2,
            small: true,
            seed: 0,
        }
    }

    #[test]
    fn every_experiment_runs_small_on_the_cpu_and_reports_its_phases() {
        for (experiment, unit, units) in [
            (Experiment::Cifar10Vgg16, "images", 2),
            (Experiment::TinyImageNetResNet34, "images", 2),
            (Experiment::WikiText2Transformer, "tokens", 2 * 35),
        ] {
            let r = bench_train(&options(experiment, "homeadamw"), &Device::Cpu).unwrap();
            assert_eq!((r.unit, r.units_per_step, r.steps), (unit, units, 2));
            assert!(r.throughput > 0.0 && r.throughput.is_finite(), "{r:?}");
            for phases in [r.phases, r.host_phases] {
                assert!(phases.named().iter().all(|&(_, s)| s > 0.0), "{r:?}");
            }
            let convolves = r.host_ops.iter().any(|t| t.op == "homeadam-conv2d");
            assert_eq!(
                convolves,
                unit == "images",
                "the CPU runs our convolutions: {r:?}"
            );
            assert!(r.summary().contains("homeadamw"));
        }
    }

    #[test]
    fn the_phases_names_are_their_json_keys() {
        let json = serde_json::to_value(Phases::default()).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let mut names = Phases::NAMES.to_vec();
        keys.sort_unstable();
        names.sort_unstable();
        assert_eq!(keys, names);
    }

    #[test]
    fn the_host_summary_splits_each_phase_into_our_ops_and_the_rest() {
        let mut r = bench_train(&options(Experiment::Cifar10Vgg16, "adamw"), &Device::Cpu).unwrap();
        assert!(r.summary().contains("  backward: our ops"), "{}", r.summary());
        r.host_ops.clear();
        assert!(!r.summary().contains("on the host"), "{}", r.summary());
        r.host_phases.backward = 0.010;
        r.host_ops = vec![
            OpTime {
                phase: "backward",
                op: "small",
                calls: 4,
                seconds: 0.001,
            },
            OpTime {
                phase: "backward",
                op: "large",
                calls: 2,
                seconds: 0.004,
            },
        ];
        let text = r.summary();
        assert!(
            text.contains(
                "backward: our ops 2.50 ms (large 1.0 × 2000.0 µs, small 2.0 × 250.0 µs), the rest 2.50 ms"
            ),
            "{text}"
        );
        assert!(!text.contains("  forward:"), "{text}");
    }

    #[test]
    fn bad_requests_are_errors() {
        let err = bench_train(&options(Experiment::DigitsMlp, "adamw"), &Device::Cpu).unwrap_err();
        assert!(err.to_string().contains("not digits-mlp"), "{err}");
        let err = bench_train(&options(Experiment::Cifar10Vgg16, "nonsense"), &Device::Cpu).unwrap_err();
        assert!(format!("{err:#}").contains("nonsense"), "{err:#}");
        let o = BenchOptions {
            steps: 0,
            ..options(Experiment::Cifar10Vgg16, "adamw")
        };
        assert!(bench_train(&o, &Device::Cpu).is_err());
    }
}
