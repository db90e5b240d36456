//! `homeadam`: the command line of homeadam-rs.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Args, Parser, Subcommand};
use homeadam_host::device::DeviceSpec;
use homeadam_host::models::VggVariant;
use homeadam_host::preset::{departures_markdown, DecayMask, Preset, ALL_OPTIMIZERS};
use homeadam_host::report::StabilityRecord;
use homeadam_host::sweep::output::summary_markdown;
use homeadam_host::sweep::space::{Axis, Range};
use homeadam_host::sweep::{run_sweep, SweepOptions};
use homeadam_host::train::bench::{bench_train, BenchOptions};
use homeadam_host::train::experiments::{BuildOptions, Experiment, TrainSubset};
use homeadam_host::train::run::RunSettings;
use homeadam_host::train::runner::{outcome, run_experiment, ExperimentOutcome, ExperimentRun};
use homeadam_host::train::stability::{matched_loss, run_stability, ReplacedRun, StabilityOptions};

#[derive(Parser)]
#[command(
    name = "homeadam",
    version,
    about = "HomeAdam(W) and the paper's baselines: experiments, figures and golden-vector replay"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline, in minutes on the CPU: every optimizer trains an MLP on the shipped digits,
    /// and eight train a small Transformer LM on the shipped WikiText-2 splits; prints the
    /// tables, writes CSVs and figures.
    Quick {
        /// The run directory (one folder per experiment).
        #[arg(long, default_value = "runs/quick")]
        out: PathBuf,
        /// Epochs of the digits MLP.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        epochs: u64,
        /// Optimizers of the digits MLP (comma-separated, or `all`).
        #[arg(long, default_value = "all")]
        optimizers: String,
        /// Optimizers of the language model (comma-separated, or `all`).
        #[arg(
            long,
            default_value = "adamw,adamw-q8,adamw-srf,homeadamw,homeadamw-ew,homeadamw-ew-q8,homeadamw-active,homeadamw-calibrated"
        )]
        lm_optimizers: String,
        /// Epochs of the language model.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
        lm_epochs: u64,
        /// Minibatches per language-model epoch (16 × 32 tokens each).
        #[arg(long, default_value_t = 80, value_parser = positive)]
        lm_batches: usize,
        /// Skip the language model.
        #[arg(long)]
        no_lm: bool,
        /// Seed of initialisation and data order.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        #[command(flatten)]
        device: DeviceArg,
    },
    /// Train one experiment with one or more optimizers (the paper's Figures 2–5).
    Train(TrainArgs),
    /// Per optimizer, the same number of configurations drawn log-uniformly from the ranges of
    /// the knobs its rule reads (the preset's `search` section), each scored on a validation
    /// split carved from the training split; the best then trained with several seeds and
    /// tested on the test split. Writes sweep.csv, best.json, summary.md and sweep.png; running
    /// the same command again skips the finished runs.
    Sweep(SweepArgs),
    /// The stability experiment: per optimizer, the distance between two models trained from
    /// the same seed on data sets that differ in one example, and their loss gaps, after every
    /// epoch (CSV and figure). Offline on the shipped digits by default.
    Stability {
        /// digits-mlp, digits-cnn, wikitext2-quick or cifar10-vgg16.
        #[arg(long, default_value = "digits-mlp")]
        experiment: String,
        /// An offline copy of CIFAR-10 (default: the cache, downloading what is missing) or of
        /// WikiText-2 for wikitext2-quick (default: the shipped one).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// A CPU-sized VGG (widths / 16).
        #[arg(long)]
        small: bool,
        /// VGG16 without (`plain`) or with (`bn`) batch norm (default: the preset's).
        #[arg(long, value_enum)]
        vgg: Option<VggVariant>,
        /// Decay every parameter (`all`, as Alg. 1–3) or all but biases and normalisation
        /// parameters (`no-bias-norm`) (default: the preset's).
        #[arg(long, value_enum)]
        decay_mask: Option<DecayMask>,
        /// Comma-separated optimizer names, or `all`.
        #[arg(long, default_value = "all")]
        optimizers: String,
        /// Epochs.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        epochs: u64,
        /// A preset file in place of the experiment's own, e.g. the `best.json` of `homeadam
        /// sweep`: stability at the tuned settings.
        #[arg(long)]
        preset: Option<PathBuf>,
        /// The examples of S that the S⁽ⁱ⁾ replace, comma-separated (e.g. 0,72,144): θ(S) is
        /// trained once, each S⁽ⁱ⁾ beside it; with several, a folder per example (RUN_DIR/replace72/
        /// for example 72).
        /// On wikitext2-quick an example is one window of one column, in stream order.
        #[arg(long, value_delimiter = ',', default_value = "0")]
        replace: Vec<usize>,
        /// At most this many minibatches per epoch (on wikitext2-quick, S is the windows they
        /// read).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        max_batches: Option<u64>,
        /// A row every this many minibatches instead of after every epoch (it must divide an
        /// epoch's minibatches); a row's `epoch` column then counts rows.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        every_batches: Option<u64>,
        /// Score the losses on the leading minibatches of S and of the test split holding at
        /// least N predictions (examples, or tokens for the LM) instead of all of them.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
        eval_subset: Option<u64>,
        /// Seed of initialisation, data order and dropout.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The run directory.
        #[arg(long, default_value = "runs/stability")]
        out: PathBuf,
        /// No progress bars.
        #[arg(long)]
        quiet: bool,
        #[command(flatten)]
        device: DeviceArg,
    },
    /// Streams the digits fine-tuning set to a board's serial port, framed for the firmware's
    /// `board` app (firmware/README.md): raw 115,200 baud 8N1, frames back to back.
    SendSamples {
        /// The serial port (e.g. /dev/ttyUSB0).
        #[arg(long)]
        port: PathBuf,
        /// The samples: 65-byte records (64 pixels 0..=16, then the label).
        #[arg(long, default_value = homeadam_host::send_samples::DEFAULT_SAMPLES)]
        samples: PathBuf,
        /// Passes over the set (the board saves to flash after each).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
        passes: u32,
        /// RTS/CTS flow control, for an adapter and a receiver that have it (the firmware's
        /// board app keeps up without it).
        #[arg(long)]
        rtscts: bool,
    },
    /// The training step's speed on synthetic data of an experiment's shapes (no download):
    /// images or tokens per second and the time per phase (data, forward, backward,
    /// optimizer), to compare with `host/benches/torch_train.py`.
    BenchTrain {
        /// cifar10-vgg16, tinyimagenet-resnet34, wikitext2-transformer or
        /// wikitext103-transformer.
        #[arg(long)]
        experiment: String,
        /// Timed steps.
        #[arg(long, default_value_t = 20, value_parser = positive)]
        steps: usize,
        /// Untimed steps before them.
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// Minibatch size (default: the preset's).
        #[arg(long, value_parser = positive)]
        batch_size: Option<usize>,
        /// The optimizer, by preset name (adamw is PyTorch's fused AdamW's peer).
        #[arg(long, default_value = "adamw")]
        optimizer: String,
        /// A CPU-sized model (CNN widths / 16, a 2-layer Transformer).
        #[arg(long)]
        small: bool,
        /// Seed of the model and the synthetic data.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        #[command(flatten)]
        device: DeviceArg,
    },
    /// Print every preset's protocol: each choice, its value and its source (the paper's line,
    /// or our reason).
    Presets {
        /// Print only the departures from the paper (every `ours:` choice), as the Markdown list
        /// the README carries.
        #[arg(long)]
        departures: bool,
    },
    /// Redraw the figures of a run directory from its CSVs and print its summary; of a sweep
    /// directory (holding `sweep.csv`), redraw `sweep.png` from `sweep.csv` and `sweep.json`.
    Plot {
        /// The run directory (holding one folder per optimizer), or a sweep directory.
        run_dir: PathBuf,
    },
    /// Replay recorded gradients through a rule; print one JSON telemetry line per step.
    Replay {
        /// The rule and its hyper-parameters (JSON).
        #[arg(long)]
        config: PathBuf,
        /// `param.<k>` of shape `[d_k]` and `grad.<k>` of shape `[T, d_k]`, F32 (safetensors).
        #[arg(long)]
        input: PathBuf,
        /// Where to write `param.<k>` and the state tensors (safetensors).
        #[arg(long)]
        output: PathBuf,
    },
}

#[derive(Args)]
struct TrainArgs {
    /// digits-mlp, digits-cnn, wikitext2-quick, cifar10-vgg16, tinyimagenet-resnet34,
    /// wikitext2-transformer or wikitext103-transformer.
    experiment: String,
    /// Comma-separated optimizer names, or `all` (the 11 of the paper, the element-wise
    /// HomeAdam(W), and homeadamw-active and homeadamw-calibrated beyond the paper).
    #[arg(long, default_value = "all")]
    optimizers: String,
    /// Epochs per optimizer.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// At most this many minibatches per epoch.
    #[arg(long, value_parser = positive)]
    max_batches: Option<usize>,
    /// Minibatch size (default: the preset's, i.e. the paper's).
    #[arg(long, value_parser = positive)]
    batch_size: Option<usize>,
    /// A CPU-sized model (CNN widths / 16, a 2-layer Transformer) instead of the paper's.
    #[arg(long)]
    small: bool,
    /// An offline copy of the dataset (default: the cache, `$HOMEADAM_DATA` or
    /// `~/.cache/homeadam`, downloading what is missing).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The run directory (default `runs/<experiment>`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// A preset file in place of the experiment's own, e.g. the `best.json` of `homeadam sweep`.
    #[arg(long)]
    preset: Option<PathBuf>,
    /// Write a checkpoint every N steps (one is always written after each epoch).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    checkpoint_every: Option<u64>,
    /// Continue each optimizer's run from its checkpoint.
    #[arg(long)]
    resume: bool,
    /// Also record the training loss, home share, ρ (over all and over the active elements)
    /// and τ every N steps (`iterations.csv`).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    log_every: Option<u64>,
    /// Also evaluate the test subset every N steps: its loss and accuracy or perplexity in
    /// `iterations.csv`.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    eval_every: Option<u64>,
    /// Predictions (images or tokens) of the test subset `--eval-every` evaluates: the leading
    /// test minibatches holding at least N (default: the preset's).
    #[arg(long, value_parser = positive)]
    eval_subset: Option<usize>,
    /// Also evaluate the training split after every epoch in eval mode (no dropout or
    /// augmentation): `clean_train_*` columns of `metrics.csv`.
    #[arg(long)]
    eval_train: bool,
    /// Train on N examples of the training split (digits only): the first N of a stratified
    /// order of it, so that a smaller N's set lies inside a larger one's and each digit keeps
    /// its share (with `--eval-train`, the generalization gap against N).
    #[arg(long, value_name = "N")]
    train_subset: Option<usize>,
    /// Also write ‖∇f(θ_t)‖², the squared norm of the full-batch gradient of the training loss
    /// (over the training split, or its first `--max-batches` minibatches), before the first
    /// step and every N steps (`grad_norms.csv`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    grad_norm_every: Option<u64>,
    /// Seed of the order `--train-subset` takes its first N from.
    #[arg(long, default_value_t = 0, requires = "train_subset")]
    subset_seed: u64,
    /// Seed of initialisation and data order (the first, with `--seeds`).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Runs per optimizer, with seeds `--seed`, `--seed`+1, …, each in
    /// `RUN_DIR/<optimizer>/seed-<s>/` (default: the preset's, 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    seeds: Option<u64>,
    /// Decay every parameter (`all`, as Alg. 1–3) or all but biases and normalisation
    /// parameters (`no-bias-norm`) (default: the preset's).
    #[arg(long, value_enum)]
    decay_mask: Option<DecayMask>,
    /// VGG16 without (`plain`) or with (`bn`) batch norm, cifar10-vgg16 only (default: the
    /// preset's).
    #[arg(long, value_enum)]
    vgg: Option<VggVariant>,
    #[command(flatten)]
    device: DeviceArg,
    /// No progress bars.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct SweepArgs {
    /// digits-mlp, digits-cnn or wikitext2-quick (the experiments with a validation split).
    experiment: String,
    /// Comma-separated optimizer names (preset entries, e.g. `adamw,homeadamw-ew`).
    #[arg(long)]
    optimizers: String,
    /// Configurations per optimizer.
    #[arg(long)]
    budget: usize,
    /// Also this many configurations per knob the optimizer's rule reads, where that is more
    /// than --budget (SGDM reads 1, HomeAdamW 5); summary.md then reports the equal budget's
    /// choice beside this one's.
    #[arg(long, value_name = "M")]
    budget_per_knob: Option<usize>,
    /// Rounds of widening: while the best trial has a knob in the outer 10 % of its log range,
    /// at most this many times, that end of the range moves out by half its log width and as
    /// many trials again are drawn (a sweep run again with more rounds continues).
    #[arg(long, default_value_t = 0, value_name = "ROUNDS")]
    widen: usize,
    /// Seeds of the chosen configuration's runs on the test split.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Epochs of every run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    epochs: u64,
    /// At most this many minibatches per epoch.
    #[arg(long, value_parser = positive)]
    max_batches: Option<usize>,
    /// The share of the training split held out for validation.
    #[arg(long, default_value_t = 0.2)]
    validation_fraction: f64,
    /// A knob's log-uniform range in place of the preset's: `KNOB=LOW:HIGH`, or `KNOB=xF` for
    /// the entry's value / F to its value × F (knobs: lr, eps, weight_decay, tau, home_share,
    /// home_lr). Repeatable.
    #[arg(long = "range", value_name = "KNOB=RANGE")]
    ranges: Vec<String>,
    /// Seed of the draws (each experiment its own stream of them), of every trial's
    /// initialisation and data order, and the first seed of the test runs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Runs at a time (each thread builds its own copy of the data and model).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// The sweep directory (default `runs/sweep-<experiment>`).
    #[arg(long)]
    out: Option<PathBuf>,
    /// An offline copy of the dataset.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Minibatch size (default: the preset's).
    #[arg(long, value_parser = positive)]
    batch_size: Option<usize>,
    #[command(flatten)]
    device: DeviceArg,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// `--device`, shared by `train`, `quick` and `stability`.
#[derive(Args)]
struct DeviceArg {
    /// Where models, minibatches, losses and metrics live: `cpu`, `cuda` (CUDA device 0) or
    /// `cuda:N`. CUDA needs a build with the `cuda` feature: `cargo build --release -p
    /// homeadam-host --features cuda` with a CUDA toolkit, `cargo xtask build-cuda` without one.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
}

impl DeviceArg {
    /// Opens the device and says on stdout which one trains.
    fn open(&self) -> Result<Device> {
        let device = self.device.open()?;
        println!("device: {}", homeadam_host::device::name(&device));
        Ok(device)
    }
}

/// A count that must be at least 1.
fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{s:?} is not a positive integer")),
    }
}

fn optimizer_list(spec: &str) -> Result<Vec<String>> {
    if spec == "all" {
        return Ok(ALL_OPTIMIZERS.iter().map(|s| s.to_string()).collect());
    }
    let names: Vec<String> = spec
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if names.is_empty() {
        bail!(
            "no optimizer given (a comma-separated list of: all, {})",
            ALL_OPTIMIZERS.join(", ")
        );
    }
    Ok(names)
}

fn print_outcome(title: &str, o: &ExperimentOutcome) {
    println!("\n{title}\n\n{}", o.table.to_text());
    for f in &o.figures {
        println!("figure: {}", f.display());
    }
}

fn quick(
    out: PathBuf,
    epochs: u64,
    optimizers: &str,
    lm: Option<(&str, u64, usize)>,
    seed: u64,
    device: Device,
) -> Result<()> {
    let build = BuildOptions::small_on(device);
    let digits = ExperimentRun {
        experiment: Experiment::DigitsMlp,
        optimizers: optimizer_list(optimizers)?,
        seed,
        seeds: None,
        decay_mask: None,
        settings: RunSettings::new(epochs, out.join(Experiment::DigitsMlp.name())),
        build,
    };
    let digits_outcome = run_experiment(&digits)?;
    print_outcome(
        "digits-mlp: MLP 64-128-10 on the shipped digits (1,438 train / 359 test)",
        &digits_outcome,
    );
    if let Some((lm_optimizers, lm_epochs, lm_batches)) = lm {
        let run = ExperimentRun {
            experiment: Experiment::WikiText2Quick,
            optimizers: optimizer_list(lm_optimizers)?,
            settings: RunSettings {
                epochs: lm_epochs,
                max_batches: Some(lm_batches),
                out_dir: out.join(Experiment::WikiText2Quick.name()),
                log_every: Some(10),
                ..digits.settings
            },
            ..digits
        };
        print_outcome(
            "wikitext2-quick: 2-layer Transformer LM, trained on WikiText-2 valid, tested on test",
            &run_experiment(&run)?,
        );
    }
    Ok(())
}

fn presets(departures: bool) -> Result<()> {
    if departures {
        print!("{}", departures_markdown()?);
        return Ok(());
    }
    for experiment in Preset::experiments() {
        println!("{experiment}:");
        for c in Preset::load(experiment)?.protocol_choices()? {
            println!("  {} = {}\n      {}", c.key, c.value, c.source);
        }
    }
    Ok(())
}

fn stability(o: &StabilityOptions) -> Result<()> {
    let (runs, figures) = run_stability(o)?;
    for run in &runs {
        stability_table(o, run);
    }
    for f in figures {
        println!("figure: {}", f.display());
    }
    Ok(())
}

/// The last rows, and those at the matched training loss, against one S⁽ⁱ⁾.
fn stability_table(o: &StabilityOptions, run: &ReplacedRun) {
    let rows = &run.summaries;
    let s = match o.experiment {
        Experiment::WikiText2Quick => "the windows trained on; S(i): window {} replaced by the stream's last",
        _ => "the training split but its last example; S(i): example {} replaced by it",
    };
    println!(
        "\nstability on {} (S: {})\n",
        o.experiment.name(),
        s.replace("{}", &run.replace.to_string())
    );
    // With --every-batches a row is not an epoch.
    let unit = if o.every_batches.is_some() { "row" } else { "epoch" };
    let width = rows.iter().map(|r| r.optimizer.len()).max().unwrap_or(0).max(9);
    println!(
        "{:<width$} {:>6} {:>14} {:>12} {:>11} {:>11} {:>11} {:>11}",
        "optimizer", unit, "|θ(S)-θ(Si)|", "/ |θ(S)-θ0|", "train loss", "train gap", "test gap", "gen. gap"
    );
    let line = |name: &str, l: &StabilityRecord| {
        let or_dash = |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |x| format!("{x:.digits$}"));
        println!(
            "{name:<width$} {:>6} {:>14.6} {:>12} {:>11} {:>11.3e} {:>11.3e} {:>11.4}",
            l.epoch,
            l.param_distance,
            or_dash(l.relative_distance(), 4),
            or_dash(l.train_loss, 4),
            l.train_loss_gap,
            l.test_loss_gap,
            l.generalization_gap
        );
    };
    for r in rows {
        line(&r.optimizer, r.last());
    }
    if let Some(loss) = matched_loss(rows) {
        println!(
            "\nat the first {unit} with training loss <= {loss:.4}, the loss every optimizer reached:\n"
        );
        for r in rows {
            if let Some(l) = r.at_loss(loss) {
                line(&r.optimizer, l);
            }
        }
    }
}

fn train(a: TrainArgs) -> Result<()> {
    let experiment = Experiment::from_name(&a.experiment)?;
    let preset = a.preset.as_deref().map(Preset::read).transpose()?;
    let device = a.device.open()?;
    let run = ExperimentRun {
        experiment,
        optimizers: optimizer_list(&a.optimizers)?,
        seed: a.seed,
        seeds: a.seeds,
        decay_mask: a.decay_mask,
        settings: RunSettings {
            epochs: a.epochs,
            max_batches: a.max_batches,
            out_dir: a
                .out
                .unwrap_or_else(|| PathBuf::from("runs").join(experiment.name())),
            checkpoint_every: a.checkpoint_every,
            resume: a.resume,
            log_every: a.log_every,
            eval_every: a.eval_every,
            eval_subset: a.eval_subset,
            eval_train: a.eval_train,
            grad_norm_every: a.grad_norm_every,
            progress: !a.quiet,
        },
        build: BuildOptions {
            data_dir: a.data_dir,
            small: a.small,
            batch_size: a.batch_size,
            vgg: a.vgg,
            device,
            preset,
            train_subset: a.train_subset.map(|size| TrainSubset {
                size,
                seed: a.subset_seed,
            }),
        },
    };
    print_outcome(experiment.name(), &run_experiment(&run)?);
    Ok(())
}

fn sweep(a: SweepArgs) -> Result<()> {
    let experiment = Experiment::from_name(&a.experiment)?;
    let ranges = a
        .ranges
        .iter()
        .map(|r| {
            let (knob, range) = r
                .split_once('=')
                .with_context(|| format!("--range {r:?}: expected KNOB=LOW:HIGH or KNOB=xFACTOR"))?;
            let knob = Axis::from_name(knob.trim())?;
            let range = Range::parse(range).with_context(|| format!("--range {r}"))?;
            range.check(knob)?;
            Ok((knob, range))
        })
        .collect::<Result<Vec<_>>>()?;
    let options = SweepOptions {
        experiment,
        optimizers: optimizer_list(&a.optimizers)?,
        budget: a.budget,
        budget_per_knob: a.budget_per_knob,
        widen: a.widen,
        seeds: a.seeds,
        seed: a.seed,
        epochs: a.epochs,
        max_batches: a.max_batches,
        validation_fraction: a.validation_fraction,
        ranges,
        jobs: a.jobs,
        out_dir: a
            .out
            .unwrap_or_else(|| PathBuf::from("runs").join(format!("sweep-{}", experiment.name()))),
        progress: !a.quiet,
        build: BuildOptions {
            data_dir: a.data_dir,
            batch_size: a.batch_size,
            ..BuildOptions::small_on(a.device.open()?)
        },
    };
    let outcome = run_sweep(&options)?;
    println!("\n{}", summary_markdown(&options, &outcome));
    for f in &outcome.files {
        println!("wrote {}", f.display());
    }
    Ok(())
}

fn bench(options: &BenchOptions, json: Option<PathBuf>, device: Device) -> Result<()> {
    let result = bench_train(options, &device)?;
    println!("{}", result.summary());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&result)?;
        std::fs::write(&path, text + "\n").with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// candle's CPU elementwise ops run on a pool of their own whose threads spin between ops; the
/// host's ops and every matrix product run on rayon's pool, and the two pools' threads on the
/// same cores take each other's time. With one thread candle's pool has no workers
/// and runs its ops on the calling thread. A value the user set is kept.
fn keep_candle_off_the_cores() {
    const VARIABLE: &str = "CANDLE_NUM_THREADS";
    if std::env::var_os(VARIABLE).is_none() {
        // Sound: no other thread runs yet, and candle reads the variable when it first
        // starts its pool.
        std::env::set_var(VARIABLE, "1");
    }
}

/// glibc's allocator maps every block over its threshold anew and unmaps it when freed, and
/// returns freed memory at the top of its heap to the system: a training step's activations and
/// gradients then cost a page fault and a page of zeros per 4 KiB at every step. Blocks up to
/// the largest threshold glibc allows come from the heap instead, and the heap keeps what it
/// freed for the next step, whose tensors have the same sizes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory_for_the_next_step() {
    const LARGEST_MMAP_THRESHOLD: libc::c_int = 32 << 20;
    // SAFETY: mallopt only changes the allocator's parameters; no other thread runs yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, LARGEST_MMAP_THRESHOLD);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
    }
}

fn main() -> ExitCode {
    keep_candle_off_the_cores();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    keep_freed_memory_for_the_next_step();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Quick {
            out,
            epochs,
            optimizers,
            lm_optimizers,
            lm_epochs,
            lm_batches,
            no_lm,
            seed,
            device,
        } => device.open().and_then(|device| {
            let lm = (!no_lm).then_some((lm_optimizers.as_str(), lm_epochs, lm_batches));
            quick(out, epochs, &optimizers, lm, seed, device)
        }),
        Command::Train(args) => train(args),
        Command::Sweep(args) => sweep(args),
        Command::Stability {
            experiment,
            data_dir,
            small,
            vgg,
            decay_mask,
            optimizers,
            epochs,
            preset,
            replace,
            max_batches,
            every_batches,
            eval_subset,
            seed,
            out,
            quiet,
            device,
        } => Experiment::from_name(&experiment).and_then(|experiment| {
            let count = |n: Option<u64>| n.map(usize::try_from).transpose();
            stability(&StabilityOptions {
                experiment,
                data_dir,
                small,
                vgg,
                decay_mask,
                preset: preset.as_deref().map(Preset::read).transpose()?,
                optimizers: optimizer_list(&optimizers)?,
                epochs,
                seed,
                replace,
                max_batches: count(max_batches)?,
                every_batches: count(every_batches)?,
                eval_subset: count(eval_subset)?,
                out_dir: out,
                progress: !quiet,
                device: device.open()?,
            })
        }),
        Command::BenchTrain {
            experiment,
            steps,
            warmup,
            batch_size,
            optimizer,
            small,
            seed,
            json,
            device,
        } => Experiment::from_name(&experiment).and_then(|experiment| {
            let options = BenchOptions {
                experiment,
                batch_size,
                optimizer,
                warmup,
                steps,
                small,
                seed,
            };
            bench(&options, json, device.open()?)
        }),
        Command::Presets { departures } => presets(departures),
        Command::SendSamples {
            port,
            samples,
            passes,
            rtscts,
        } => {
            use homeadam_host::send_samples::{send_samples, Flow};
            let flow = if rtscts { Flow::RtsCts } else { Flow::None };
            send_samples(&port, &samples, passes, flow)
                .map(|sent| {
                    println!(
                        "sent {} frames ({} bytes) to {}",
                        sent.frames,
                        sent.bytes,
                        port.display()
                    )
                })
                .map_err(Into::into)
        }
        Command::Plot { run_dir } if homeadam_host::sweep::redraw::is_sweep(&run_dir) => {
            homeadam_host::sweep::redraw::redraw(&run_dir).map(|png| println!("figure: {}", png.display()))
        }
        Command::Plot { run_dir } => {
            outcome(&run_dir).map(|o| print_outcome(&run_dir.display().to_string(), &o))
        }
        Command::Replay {
            config,
            input,
            output,
        } => homeadam_host::replay::run(&config, &input, &output, &mut std::io::stdout().lock()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
