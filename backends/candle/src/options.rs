//! [`OptimConfig`], everything the optimizer needs besides the variables, and its options
//! besides the core's hyper-parameters as a saved state records them: each by name with its
//! value as text, compared on load, and the ones a load may adopt.

use std::fmt::Write as _;

use candle_core::Result;
use homeadam_core::{Config, Dtype};

use super::clip::check_max_norm;
use super::error::bail;
use super::groups::{check_groups, overrides, GroupSettings};
use super::schedule::Schedule;

/// Everything [`VarOptimizer`](crate::VarOptimizer) needs besides the variables.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimConfig {
    /// The rule and its hyper-parameters; `core.lr` is the base rate η₀ and `core.weight_decay`
    /// the λ of decayed variables.
    pub core: Config,
    /// Storage of the optimizer state (f32, bf16 or q8, on the CPU and on CUDA; f16 only with
    /// `core.allow_f16_state`).
    pub state_dtype: Dtype,
    /// Decay every variable (the default, as candle-nn's `AdamW` and PyTorch's optimizers
    /// do); `false` exempts biases and normalisation parameters from weight decay (the mask
    /// of [`crate::is_no_decay`]).
    pub decay_all: bool,
    /// Parameter groups by name: `(name prefix, settings)`, the first matching prefix wins;
    /// a variable no prefix matches steps with [`GroupSettings::DEFAULT`]. Groups can also be
    /// added after construction ([`VarOptimizer::add_group`](crate::VarOptimizer::add_group)).
    pub groups: Vec<(String, GroupSettings)>,
    /// c of global-norm clipping (see [`crate::clip_grad_norm`]); `None`: no clipping.
    pub max_grad_norm: Option<f64>,
    /// η as a function of the schedule position (after the warm-up).
    pub schedule: Schedule,
    /// W, positions of linear warm-up before the schedule ([`Schedule::lr_after_warmup`]);
    /// 0: none.
    pub warmup: u64,
    /// What a step does when a gradient holds NaN or ±∞.
    pub on_skip: SkipPolicy,
}

impl OptimConfig {
    /// `core` with f32 state, weight decay on every variable, no clipping, a constant rate,
    /// and skipped steps counted.
    pub fn new(core: Config) -> Self {
        OptimConfig {
            core,
            state_dtype: Dtype::F32,
            decay_all: true,
            groups: Vec::new(),
            max_grad_norm: None,
            schedule: Schedule::Constant,
            warmup: 0,
            on_skip: SkipPolicy::Count,
        }
    }
}

/// What a step does when a gradient holds NaN or ±∞. The step is skipped in every case:
/// nothing changes, the step counter t included, and
/// [`VarOptimizer::skipped_steps`](crate::VarOptimizer::skipped_steps) counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SkipPolicy {
    /// Skip and count: [`VarOptimizer::skipped_steps`](crate::VarOptimizer::skipped_steps) and
    /// the step's report (`report.skipped`) say so, nothing else does.
    #[default]
    Count,
    /// Skip, count, and warn once per optimizer through its warning hook (standard error unless
    /// [`VarOptimizer::set_warning_hook`](crate::VarOptimizer::set_warning_hook) sets another).
    Warn,
    /// Skip, count, and return an error from the step (also from the
    /// `candle_nn::Optimizer` trait's `step` and `backward_step`).
    Error,
}

impl SkipPolicy {
    /// Every policy, by the name a saved state records.
    const NAMED: [(SkipPolicy, &'static str); 3] = [
        (SkipPolicy::Count, "count"),
        (SkipPolicy::Warn, "warn"),
        (SkipPolicy::Error, "error"),
    ];

    /// The policy's name: `count`, `warn` or `error`.
    pub(crate) fn name(self) -> &'static str {
        Self::NAMED
            .iter()
            .find(|(p, _)| *p == self)
            .map_or("count", |(_, n)| n)
    }

    /// The policy named `name`.
    pub(crate) fn parse(name: &str) -> Option<SkipPolicy> {
        Self::NAMED.iter().find(|(_, n)| *n == name).map(|(p, _)| *p)
    }
}

/// One recorded option: its name, its value as text, and how a load adopts a saved text
/// (`None`: never adopted, as it decides the variables' groups).
struct Recorded {
    name: &'static str,
    get: fn(&OptimConfig) -> String,
    adopt: Option<fn(&mut OptimConfig, &str) -> Option<()>>,
}

/// Every option a saved state records, in the order it records them.
const RECORDED: [Recorded; 6] = [
    Recorded {
        name: "schedule",
        get: |c| c.schedule.text(),
        adopt: Some(|c, text| {
            c.schedule = Schedule::parse(text)?;
            Some(())
        }),
    },
    Recorded {
        name: "warmup",
        get: |c| c.warmup.to_string(),
        adopt: Some(|c, text| {
            c.warmup = text.parse().ok()?;
            Some(())
        }),
    },
    Recorded {
        name: "max_grad_norm",
        get: |c| c.max_grad_norm.map_or("none".into(), |n| n.to_string()),
        adopt: Some(|c, text| {
            c.max_grad_norm = match text {
                "none" => None,
                _ => Some(text.parse().ok()?),
            };
            Some(())
        }),
    },
    Recorded {
        name: "on_skip",
        get: |c| c.on_skip.name().into(),
        adopt: Some(|c, text| {
            c.on_skip = SkipPolicy::parse(text)?;
            Some(())
        }),
    },
    Recorded {
        name: "decay_all",
        get: |c| c.decay_all.to_string(),
        adopt: None,
    },
    Recorded {
        name: "groups",
        get: |c| groups_text(&c.groups),
        adopt: None,
    },
];

/// The recorded options of `config`: `(name, value)` in [`RECORDED`]'s order.
pub(crate) fn recorded(config: &OptimConfig) -> impl Iterator<Item = (&'static str, String)> + '_ {
    RECORDED.iter().map(move |r| (r.name, (r.get)(config)))
}

/// Whether a load may adopt the saved value of option `name`.
pub(crate) fn adoptable(name: &str) -> bool {
    RECORDED.iter().any(|r| r.name == name && r.adopt.is_some())
}

/// `config` with the saved text of option `name`; `None` for an option that is never adopted
/// or a text that does not parse.
pub(crate) fn adopt(config: &OptimConfig, name: &str, text: &str) -> Option<OptimConfig> {
    let set = RECORDED.iter().find(|r| r.name == name)?.adopt?;
    let mut adopted = config.clone();
    set(&mut adopted, text)?;
    Some(adopted)
}

/// Checks the options of `config` that are the adapter's own (the core checks the rest).
pub(crate) fn check(config: &OptimConfig) -> Result<()> {
    if let Err(why) = config.schedule.validate() {
        bail!("homeadam: {why}");
    }
    if let Some(c) = config.max_grad_norm {
        check_max_norm(c)?;
    }
    check_groups(&config.groups)
}

/// The groups as text: `"prefix" (lr × s, weight_decay λ, …)` each, `;`-separated; `none`.
fn groups_text(groups: &[(String, GroupSettings)]) -> String {
    if groups.is_empty() {
        return "none".into();
    }
    let mut text = String::new();
    for (k, (prefix, s)) in groups.iter().enumerate() {
        let sep = if k == 0 { "" } else { "; " };
        let _ = write!(text, "{sep}{prefix:?} (lr × {}", s.lr_scale);
        for (name, value) in overrides(s.to_group(true)) {
            if let Some(value) = value {
                let _ = write!(text, ", {name} {value}");
            }
        }
        text.push(')');
    }
    text
}
