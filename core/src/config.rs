//! Rules, hyper-parameters and their validation.

use crate::calibration::TauCalibration;
use crate::error::Error;
use crate::kernel::Options;
use crate::reduce::RhoOver;
use crate::rounding::Rounding;
use crate::rules::spec::{reads, Decay, Kernels, LastSlot};
use crate::rules::{adabelief, ElementKernel, Rule, Switch, ALL_RULES};
use crate::scalars::{powi_by_squaring, StepScalars};
use crate::storage::Dtype;
use crate::tensor::Group;

/// The config name of SGD with momentum.
const SGDM: &str = "sgdm";

/// What a step does with a non-finite gradient (DESIGN §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FiniteCheck {
    /// Check every gradient before touching anything; one non-finite value skips the whole
    /// step. Costs one extra read of the gradients (none for per-layer HomeAdam, whose first
    /// pass reads them anyway, nor for global HomeAdam where its first pass runs).
    #[default]
    SkipStep,
    /// The caller guarantees finite gradients (e.g. its loss scaler checked them): one pass.
    /// A non-finite gradient is still detected and reported in
    /// [`crate::StepReport::nonfinite_applied`], never silently. Global and per-layer
    /// HomeAdam(W) check and skip as [`FiniteCheck::SkipStep`] does: their first pass reads
    /// the gradients anyway, and the global rule's steps that its bounds decide without it
    /// ([`crate::Step::check`]) read them once to keep that behaviour.
    Trust,
}

/// Hyper-parameters of a rule, in the paper's symbols. Start from [`Config::new`], which sets
/// the peer packages' defaults, then set fields; [`crate::Optimizer::new`] validates.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Config {
    /// The rule.
    pub rule: Rule,
    /// η, the learning rate (≥ 0). The srf and HomeAdam rules step by η · m̂ / (v̂ + ε), at most
    /// η / (2√ε) per element: Adam's η is far too large for them with a small ε (see
    /// "Choosing hyper-parameters" on the crate's front page).
    pub lr: f64,
    /// β1 ∈ [0, 1).
    pub beta1: f64,
    /// β2 ∈ [0, 1).
    pub beta2: f64,
    /// ε ≥ 0. For the srf and HomeAdam rules it bounds the step: η / (2√ε) at |g| = √ε.
    pub eps: f64,
    /// λ ≥ 0: coupled L2 for SGD, Adam, MIAdam (and SWATS / AdaBelief unless decoupled);
    /// decoupled for AdamW, AdamW-srf, HomeAdamW.
    pub weight_decay: f64,
    /// τ > 0, the HomeAdam threshold: the home (SGDM) step where v̂ < τ — on ρ = min v̂ over
    /// the model (global), over a tensor (per layer), or per element. ρ is 0 whenever an element
    /// has never had a non-zero gradient, which sends the global rule home at every step.
    pub tau: f64,
    /// Global and per-layer HomeAdam(W): the elements ρ is taken over ([`RhoOver::All`], the
    /// paper, by default).
    pub rho_over: RhoOver,
    /// HomeAdam(W): τ set from a histogram of the decision values instead of `tau`, so that
    /// about a share q of decisions goes home ([`crate::calibration`]); `None`: τ = `tau`.
    pub tau_calibration: Option<TauCalibration>,
    /// HomeAdam(W): η_h / η, the home branch's learning rate relative to η (1: the paper).
    /// The home step is θ(1 − ηλ) − η_h m̂: with one η the branches differ by 1 / (v̂ + ε),
    /// 10³–10⁶ in practice. A ratio, so that schedules and group scales move η_h with η.
    pub home_lr_scale: f64,
    /// μ, SGD momentum.
    pub momentum: f64,
    /// SGD dampening ∈ [0, 1].
    pub dampening: f64,
    /// Nesterov momentum (SGD, and SWATS's SGD phase).
    pub nesterov: bool,
    /// AdaBelief / SWATS: decoupled weight decay.
    pub weight_decouple: bool,
    /// AdaBelief / SWATS with `weight_decouple`: θ ← θ(1 − λ) instead of θ(1 − ηλ).
    pub fixed_decay: bool,
    /// AdaBelief: RAdam's rectification.
    pub rectify: bool,
    /// AdaBelief: AMSGrad's running max of s.
    pub amsgrad: bool,
    /// MIAdam: κ, the multiple-integration rate.
    pub kappa: f64,
    /// MIAdam: steps t ≤ switch_step use the integrated update.
    pub switch_step: u64,
    /// How parameter stores round.
    pub rounding: Rounding,
    /// Seed of stochastic rounding.
    pub seed: u64,
    /// Allow f16 storage for the second moment (refused by default, DESIGN §3).
    pub allow_f16_state: bool,
    /// What a non-finite gradient does.
    pub finite_check: FiniteCheck,
}

impl Config {
    /// The rule with the defaults of its peer package (PyTorch, adabelief-pytorch 0.2.1,
    /// pytorch-optimizer 4.1.0, official MIAdam, lion-pytorch 0.2.5: the rule's
    /// [`crate::rules::spec::Defaults`]); for the paper's rules, Adam(W)'s defaults but
    /// ε = 1e-3 ([`crate::rules::homeadam::SRF_EPS`] says why), and τ = 1e-12 (the paper's
    /// CIFAR-10 HomeAdam setting).
    pub const fn new(rule: Rule) -> Self {
        let d = rule.spec().defaults;
        Config {
            rule,
            lr: d.lr,
            beta1: 0.9,
            beta2: d.beta2,
            eps: d.eps,
            weight_decay: d.weight_decay,
            tau: 1e-12,
            rho_over: RhoOver::All,
            tau_calibration: None,
            home_lr_scale: 1.0,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decouple: d.weight_decouple,
            fixed_decay: false,
            rectify: true,
            amsgrad: false,
            kappa: 0.0,
            switch_step: 0,
            rounding: Rounding::Nearest,
            seed: 0,
            allow_f16_state: false,
            finite_check: FiniteCheck::SkipStep,
        }
    }

    /// The config of a config name ([`Config::NAMES`]): a rule name ([`Rule::from_name`])
    /// with its defaults, or `sgdm`, which is `sgd` with momentum μ = 0.9.
    pub fn named(name: &str) -> Option<Self> {
        if name == SGDM {
            let mut c = Config::new(Rule::Sgd);
            c.momentum = 0.9;
            return Some(c);
        }
        Rule::from_name(name).map(Config::new)
    }

    /// Every config name [`Config::named`] takes: the rules' names, then `sgdm`.
    pub const NAMES: [&'static str; ALL_RULES.len() + 1] = {
        let mut names = [SGDM; ALL_RULES.len() + 1];
        let mut k = 0;
        while k < ALL_RULES.len() {
            names[k] = ALL_RULES[k].name();
            k += 1;
        }
        names
    };

    /// The config name: the rule's name, or `sgdm` for SGD with momentum.
    pub fn name(&self) -> &'static str {
        match self.rule {
            Rule::Sgd if self.momentum != 0.0 => SGDM,
            rule => rule.name(),
        }
    }

    /// Whether the rule bounds ρ_t from its last update, so that its first pass runs only where
    /// the bounds do not decide ([`crate::Step::check`]): global HomeAdam(W) with ρ over every
    /// element (with [`RhoOver::Active`] a newly active element may undercut the bound). State
    /// whose blocks share a scale (q8) keeps no bound either.
    pub fn keeps_rho_bound(&self) -> bool {
        self.rule.switch() == Some(Switch::Global) && self.rho_over == RhoOver::All
    }

    /// The config a tensor of `group` steps with: η · lr_scale; the group's λ, ε, β1 and β2
    /// where it sets them; λ = 0 without decay.
    pub fn for_group(&self, group: Group) -> Config {
        let mut c = *self;
        c.lr *= group.lr_scale;
        c.weight_decay = group.weight_decay.unwrap_or(c.weight_decay);
        if !group.decay {
            c.weight_decay = 0.0;
        }
        c.eps = group.eps.unwrap_or(c.eps);
        c.beta1 = group.beta1.unwrap_or(c.beta1);
        c.beta2 = group.beta2.unwrap_or(c.beta2);
        c
    }

    /// Checks `group` for this config: its η scale and the config it steps with
    /// ([`Config::for_group`]), and refuses a group β2 (or SWATS's ε) where one value must hold
    /// for the whole model (see [`Group`]).
    pub fn check_group(&self, group: Group) -> Result<(), Error> {
        check(group.lr_scale, "lr_scale", "a finite value >= 0", |x| x >= 0.0)?;
        let first_pass = matches!(self.rule.switch(), Some(Switch::Global | Switch::Layer))
            || (self.rule.switch().is_some() && self.tau_calibration.is_some());
        let model_wide = [
            (
                "beta2 (of a group)",
                group.beta2.is_some() && (first_pass || self.rule == Rule::Swats),
                "ρ, τ calibration and SWATS's switch compare v̂ = v / (1 − β2^t) over the whole \
                 model: one β2 for every group",
            ),
            (
                "eps (of a group)",
                group.eps.is_some() && self.rule == Rule::Swats,
                "SWATS switches the whole model on one test that reads ε: one ε for every group",
            ),
        ];
        for (name, refused, hint) in model_wide {
            if refused {
                return Err(Error::NotForRule {
                    name,
                    rule: self.name(),
                    hint,
                });
            }
        }
        self.for_group(group).validate()
    }

    /// Number of state slots (each one element per parameter) the rule keeps: its spec's,
    /// less the last where this config does not keep it.
    pub const fn state_slots(&self) -> usize {
        self.rule.spec().slots.len() - !self.keeps_last_slot() as usize
    }

    /// Whether the config keeps its rule's last slot ([`LastSlot`]).
    const fn keeps_last_slot(&self) -> bool {
        match self.rule.spec().last_slot {
            LastSlot::Always => true,
            LastSlot::WithMomentum => self.momentum != 0.0,
            LastSlot::WithAmsgrad => self.amsgrad,
        }
    }

    /// The element kernel a step of this config runs ([`crate::rules::spec::Kernels`]); SWATS
    /// after its switch to SGD when `swats_sgd_phase`.
    pub const fn kernel(&self, swats_sgd_phase: bool) -> ElementKernel {
        match self.rule.spec().kernels {
            Kernels::One(k) => k,
            Kernels::ByLastSlot(without, with) => {
                if self.keeps_last_slot() {
                    with
                } else {
                    without
                }
            }
            Kernels::ByPhase(adaptive, sgd) => {
                if swats_sgd_phase {
                    sgd
                } else {
                    adaptive
                }
            }
        }
    }

    /// What the element kernels read from the config besides the step's scalars.
    pub(crate) const fn kernel_options(&self) -> Options {
        Options {
            nesterov: self.nesterov,
            weight_decouple: self.weight_decouple,
        }
    }

    /// Whether state slot `slot` holds a second moment (f16 is refused there).
    pub const fn is_second_moment_slot(&self, slot: usize) -> bool {
        slot < self.state_slots() && self.rule.spec().second_moments >> slot & 1 == 1
    }

    /// The q8 code map of state slot `slot` ([`crate::q8`]): unsigned for second moments,
    /// signed for every other slot.
    pub const fn q8_map(&self, slot: usize) -> crate::q8::Map {
        if self.is_second_moment_slot(slot) {
            crate::q8::Map::Unsigned
        } else {
            crate::q8::Map::Signed
        }
    }

    /// The state slot holding v, whose minimum over the elements divided by bc2 is ρ = min v̂
    /// (reported by every step); `None` for rules that report no ρ (SGD, AdaBelief, Lion).
    /// SWATS reports it in its adaptive phase only.
    pub const fn rho_slot(&self) -> Option<usize> {
        self.rule.spec().rho_slot
    }

    /// Refuses f16 storage for a second moment unless `allow_f16_state` (DESIGN §3): every
    /// backend asks this, so all refuse the same configurations.
    pub fn check_state_dtype(&self, dtype: Dtype) -> Result<(), Error> {
        let second_moment = || (0..self.state_slots()).any(|k| self.is_second_moment_slot(k));
        if dtype == Dtype::F16 && !self.allow_f16_state && second_moment() {
            return Err(Error::F16SecondMoment);
        }
        Ok(())
    }

    /// Names of the state slots, as in checkpoints and `homeadam replay` outputs.
    pub const fn state_names(&self) -> &'static [&'static str] {
        self.rule.spec().slots.split_at(self.state_slots()).0
    }

    /// Checks every hyper-parameter; the error names the first one out of range.
    ///
    /// The ranges keep every step of finite gradients finite (no 0 / 0, no ∞): ε ≥ the
    /// smallest normal `f32` (ε = 0 makes m̂ / (v̂ + ε) and m̂ / (√v̂ + ε) 0 / 0 where a
    /// gradient has been 0, and a smaller ε rounds to 0 in the kernels' `f32`), and η, λ, μ,
    /// κ, ε, τ and the home scale at most [`LARGEST_KNOB`], so that their products
    /// (η / bc1 · home scale, η / (2√ε), η² / bc1, η · μ) stay inside `f32`'s range.
    pub fn validate(&self) -> Result<(), Error> {
        let unit = "a finite value in [0, 1)";
        let scale = |x: f64| (0.0..=LARGEST_KNOB).contains(&x);
        check(self.lr, "lr", UP_TO_LARGEST, scale)?;
        check(self.beta1, "beta1", unit, |x| (0.0..1.0).contains(&x))?;
        check(self.beta2, "beta2", unit, |x| (0.0..1.0).contains(&x))?;
        check(self.eps, "eps", EPS_RANGE, |x| {
            (f32::MIN_POSITIVE as f64..=LARGEST_KNOB).contains(&x)
        })?;
        check(self.weight_decay, "weight_decay", UP_TO_LARGEST, scale)?;
        check(self.momentum, "momentum", UP_TO_LARGEST, scale)?;
        check(self.dampening, "dampening", "a finite value in [0, 1]", |x| {
            (0.0..=1.0).contains(&x)
        })?;
        check(self.kappa, "kappa", UP_TO_LARGEST, scale)?;
        if reads(self, reads::HOME) {
            check(self.tau, "tau", "a finite value in (0, 1e6]", |x| {
                x > 0.0 && scale(x)
            })?;
            check(self.home_lr_scale, "home_lr_scale", UP_TO_LARGEST, scale)?;
            if let Some(c) = self.tau_calibration {
                c.validate()?;
            }
        }
        if self.rule.decoupled_decay(self.weight_decouple) {
            let shrink = if self.fixed_decay {
                self.weight_decay
            } else {
                self.lr * self.weight_decay
            };
            if shrink >= 1.0 {
                return Err(Error::DecayTooLarge {
                    lr: self.lr,
                    weight_decay: self.weight_decay,
                    fixed: self.fixed_decay,
                });
            }
        }
        if reads(self, reads::MOMENTUM) && self.nesterov && (self.momentum == 0.0 || self.dampening != 0.0) {
            return Err(Error::InvalidHyper {
                name: "nesterov",
                value: self.dampening,
                expected: "momentum > 0 and dampening = 0 with Nesterov momentum",
            });
        }
        self.check_knobs()
    }

    /// Refuses a knob the rule does not read, set to anything but [`Config::new`]'s default:
    /// it would be silently ignored.
    fn check_knobs(&self) -> Result<(), Error> {
        let default = Config::new(self.rule);
        for knob in &KNOBS {
            if !(knob.reads)(self) && !(knob.get)(self).same((knob.get)(&default)) {
                return Err(Error::NotForRule {
                    name: knob.name,
                    rule: self.name(),
                    hint: knob.hint,
                });
            }
        }
        Ok(())
    }

    /// The hyper-parameters the rule reads, with their values, in a fixed order (η first; a
    /// knob the rule ignores is not listed; rounding and its seed last). What a saved state
    /// records, to refuse a resume under other settings.
    pub fn knobs(&self) -> impl Iterator<Item = (&'static str, Knob)> + '_ {
        KNOBS
            .iter()
            .filter(|knob| (knob.reads)(self))
            .map(|knob| (knob.name, (knob.get)(self)))
    }

    /// Sets the knob `name` ([`Config::knobs`]) to `text`, a value as [`Knob`]'s `Display`
    /// writes it; `None` (nothing changed) for an unknown name or a value of another kind.
    /// The caller validates the result.
    pub fn set_knob(&mut self, name: &str, text: &str) -> Option<()> {
        let knob = KNOBS.iter().find(|knob| knob.name == name)?;
        let value = (knob.get)(self).parse_like(text)?;
        (knob.set)(self, value);
        Some(())
    }
}

/// The largest value of η, λ, μ, κ, ε, τ and the home scale ([`Config::validate`]).
pub const LARGEST_KNOB: f64 = 1e6;
/// The range of a knob bounded by [`LARGEST_KNOB`], as errors state it.
const UP_TO_LARGEST: &str = "a finite value in [0, 1e6]";
/// The range of ε, as errors state it.
const EPS_RANGE: &str = "a finite value in [1.2e-38, 1e6]: the smallest normal f32 or more, as \
                         the update divides by v̂ + ε, which is 0 where a gradient has been 0";

/// A hyper-parameter's value, as [`Config::knobs`] lists it. Its `Display` is exact: a real
/// is written as the shortest text that parses back to the same bits (`0.999`, `1e-8`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Knob {
    /// A real number.
    Real(f64),
    /// A switch.
    Flag(bool),
    /// A whole number.
    Count(u64),
    /// One of a knob's named values.
    Choice(&'static str),
}

impl Knob {
    /// The value of `text` (as [`Knob`]'s `Display` writes it) of the same kind as `self`.
    pub fn parse_like(self, text: &str) -> Option<Knob> {
        match self {
            Knob::Real(_) => text.parse().ok().map(Knob::Real),
            Knob::Flag(_) => text.parse().ok().map(Knob::Flag),
            Knob::Count(_) => text.parse().ok().map(Knob::Count),
            Knob::Choice(_) => Some(Knob::Choice(
                ROUNDING
                    .into_iter()
                    .chain(RhoOver::NAMES)
                    .find(|&name| name == text)?,
            )),
        }
    }

    fn real(self) -> f64 {
        match self {
            Knob::Real(x) => x,
            _ => f64::NAN,
        }
    }

    fn flag(self) -> bool {
        matches!(self, Knob::Flag(true))
    }

    fn count(self) -> u64 {
        match self {
            Knob::Count(n) => n,
            _ => 0,
        }
    }

    fn choice<T>(self, of: impl Fn(&str) -> Option<T>) -> Option<T> {
        match self {
            Knob::Choice(name) => of(name),
            _ => None,
        }
    }

    /// Whether two values are the same bits (NaN equals itself, 0 differs from −0).
    pub fn same(self, other: Knob) -> bool {
        match (self, other) {
            (Knob::Real(a), Knob::Real(b)) => a.to_bits() == b.to_bits(),
            (a, b) => a == b,
        }
    }
}

impl core::fmt::Display for Knob {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Knob::Real(x) => write!(f, "{x:?}"),
            Knob::Flag(b) => write!(f, "{b}"),
            Knob::Count(n) => write!(f, "{n}"),
            Knob::Choice(name) => f.write_str(name),
        }
    }
}

/// The config names of [`Rounding`]'s values.
const ROUNDING: [&str; 2] = ["nearest", "stochastic"];

/// One knob: how to read and set it on a config, whether the config's rule reads it, and
/// why not where it does not. A table of functions in flash, so that validation on a
/// microcontroller costs no stack for it.
struct KnobSpec {
    name: &'static str,
    get: fn(&Config) -> Knob,
    set: fn(&mut Config, Knob),
    reads: fn(&Config) -> bool,
    hint: &'static str,
}

/// Whether the rule reads the knobs of `bits` ([`reads`]), from its spec.
const fn reads(c: &Config, bits: u32) -> bool {
    c.rule.spec().reads & bits != 0
}

/// Whether the rule chooses how λ applies (AdaBelief, SWATS).
fn decouple_choice(c: &Config) -> bool {
    matches!(c.rule.spec().decay, Decay::Chosen)
}

/// Every knob, in the order [`Config::knobs`] lists them.
const KNOBS: [KnobSpec; 21] = [
    KnobSpec {
        name: "lr",
        get: |c| Knob::Real(c.lr),
        set: |c, k| c.lr = k.real(),
        reads: |_| true,
        hint: "",
    },
    KnobSpec {
        name: "beta1",
        get: |c| Knob::Real(c.beta1),
        set: |c, k| c.beta1 = k.real(),
        reads: |c| reads(c, reads::BETA1),
        hint: "the rule keeps no first moment with β1 (SGD's momentum is μ)",
    },
    KnobSpec {
        name: "beta2",
        get: |c| Knob::Real(c.beta2),
        set: |c, k| c.beta2 = k.real(),
        reads: |c| reads(c, reads::BETA2),
        hint: "the rule keeps no moment with β2",
    },
    KnobSpec {
        name: "eps",
        get: |c| Knob::Real(c.eps),
        set: |c, k| c.eps = k.real(),
        reads: |c| reads(c, reads::EPS),
        hint: "the rule divides by no second moment",
    },
    KnobSpec {
        name: "weight_decay",
        get: |c| Knob::Real(c.weight_decay),
        set: |c, k| c.weight_decay = k.real(),
        reads: |c| !matches!(c.rule.spec().decay, Decay::None),
        hint: "λ = 0 by definition (Alg. 1/2); use the W variant for weight decay",
    },
    KnobSpec {
        name: "tau",
        get: |c| Knob::Real(c.tau),
        set: |c, k| c.tau = k.real(),
        reads: |c| reads(c, reads::HOME),
        hint: "τ is the HomeAdam(W) threshold",
    },
    KnobSpec {
        name: "rho_over",
        get: |c| Knob::Choice(c.rho_over.name()),
        set: |c, k| c.rho_over = k.choice(RhoOver::from_name).unwrap_or(c.rho_over),
        reads: |c| reads(c, reads::RHO_OVER),
        hint: "ρ decides the global and per-layer HomeAdam(W) rules only",
    },
    KnobSpec {
        name: "tau.home_share",
        get: |c| Knob::Real(c.tau_calibration.map_or(0.0, |t| t.home_share)),
        set: |c, k| c.tau_calibration = calibration(c, Some(k.real()), None),
        reads: |c| reads(c, reads::HOME),
        hint: "τ is the HomeAdam(W) threshold",
    },
    KnobSpec {
        name: "tau.every",
        get: |c| Knob::Count(c.tau_calibration.map_or(0, |t| t.every as u64)),
        set: |c, k| c.tau_calibration = calibration(c, None, Some(k.count())),
        reads: |c| reads(c, reads::HOME),
        hint: "τ is the HomeAdam(W) threshold",
    },
    KnobSpec {
        name: "home_lr_scale",
        get: |c| Knob::Real(c.home_lr_scale),
        set: |c, k| c.home_lr_scale = k.real(),
        reads: |c| reads(c, reads::HOME),
        hint: "the home branch is HomeAdam(W)'s",
    },
    KnobSpec {
        name: "momentum",
        get: |c| Knob::Real(c.momentum),
        set: |c, k| c.momentum = k.real(),
        reads: |c| reads(c, reads::MOMENTUM),
        hint: "momentum is SGD's (Adam-like rules use beta1)",
    },
    KnobSpec {
        name: "dampening",
        get: |c| Knob::Real(c.dampening),
        set: |c, k| c.dampening = k.real(),
        reads: |c| reads(c, reads::MOMENTUM),
        hint: "dampening is SGD's",
    },
    KnobSpec {
        name: "nesterov",
        get: |c| Knob::Flag(c.nesterov),
        set: |c, k| c.nesterov = k.flag(),
        reads: |c| reads(c, reads::NESTEROV),
        hint: "Nesterov momentum is SGD's and SWATS's",
    },
    KnobSpec {
        name: "weight_decouple",
        get: |c| Knob::Flag(c.weight_decouple),
        set: |c, k| c.weight_decouple = k.flag(),
        reads: decouple_choice,
        hint: "the rule fixes how λ applies (the W variants decouple it)",
    },
    KnobSpec {
        name: "fixed_decay",
        get: |c| Knob::Flag(c.fixed_decay),
        set: |c, k| c.fixed_decay = k.flag(),
        reads: |c| decouple_choice(c) && c.weight_decouple,
        hint: "fixed_decay applies to AdaBelief / SWATS with weight_decouple",
    },
    KnobSpec {
        name: "rectify",
        get: |c| Knob::Flag(c.rectify),
        set: |c, k| c.rectify = k.flag(),
        reads: |c| reads(c, reads::ADABELIEF),
        hint: "rectification is AdaBelief's",
    },
    KnobSpec {
        name: "amsgrad",
        get: |c| Knob::Flag(c.amsgrad),
        set: |c, k| c.amsgrad = k.flag(),
        reads: |c| reads(c, reads::ADABELIEF),
        hint: "AMSGrad is offered for AdaBelief only",
    },
    KnobSpec {
        name: "kappa",
        get: |c| Knob::Real(c.kappa),
        set: |c, k| c.kappa = k.real(),
        reads: |c| reads(c, reads::MIADAM),
        hint: "κ is MIAdam's",
    },
    KnobSpec {
        name: "switch_step",
        get: |c| Knob::Count(c.switch_step),
        set: |c, k| c.switch_step = k.count(),
        reads: |c| reads(c, reads::MIADAM),
        hint: "the switch step is MIAdam's",
    },
    KnobSpec {
        name: "rounding",
        get: |c| {
            Knob::Choice(match c.rounding {
                Rounding::Nearest => ROUNDING[0],
                Rounding::Stochastic => ROUNDING[1],
            })
        },
        set: |c, k| {
            c.rounding = match k.choice(|name| ROUNDING.iter().position(|&r| r == name)) {
                Some(1) => Rounding::Stochastic,
                _ => Rounding::Nearest,
            }
        },
        reads: |_| true,
        hint: "",
    },
    KnobSpec {
        name: "seed",
        get: |c| Knob::Count(c.seed),
        set: |c, k| c.seed = k.count(),
        reads: |_| true,
        hint: "",
    },
];

/// `c`'s τ calibration with its share or period replaced (the other from `c`, or defaults
/// that validation refuses until both are set).
fn calibration(c: &Config, share: Option<f64>, every: Option<u64>) -> Option<TauCalibration> {
    let old = c.tau_calibration;
    let home_share = share.or(old.map(|o| o.home_share)).unwrap_or(0.0);
    let every = every.map_or(old.map_or(0, |o| o.every), |e| {
        u32::try_from(e).unwrap_or(u32::MAX)
    });
    (home_share != 0.0 || every != 0).then_some(TauCalibration { home_share, every })
}

fn check(
    value: f64,
    name: &'static str,
    expected: &'static str,
    ok: impl Fn(f64) -> bool,
) -> Result<(), Error> {
    if value.is_finite() && ok(value) {
        Ok(())
    } else {
        Err(Error::InvalidHyper {
            name,
            value,
            expected,
        })
    }
}

impl StepScalars {
    /// The scalars of step `t` (≥ 1) for `config`, with gradient scale `grad_scale` and, once
    /// SWATS has switched, its SGD-phase learning rate `swats_sgd_lr`.
    pub fn new(config: &Config, t: u64, grad_scale: f64, swats_sgd_lr: Option<f64>) -> Self {
        let beta1 = config.beta1;
        let beta2 = config.beta2;
        // SWATS's SGD phase replaces the group's lr, which its decoupled decay uses too.
        let lr = swats_sgd_lr.unwrap_or(config.lr);
        let bc1 = 1.0 - powi_by_squaring(beta1, t);
        let beta2_t = powi_by_squaring(beta2, t);
        let bc2 = 1.0 - beta2_t;
        let decay = if !config.rule.decoupled_decay(config.weight_decouple) {
            1.0
        } else if config.fixed_decay {
            1.0 - config.weight_decay
        } else {
            1.0 - lr * config.weight_decay
        };
        let (momentum, dampening) = match config.rule {
            Rule::Swats => (beta1, 0.0),
            _ => (config.momentum, config.dampening),
        };
        // Once: in software on cores without a double-precision FPU.
        let sqrt_bc2 = libm::sqrt(bc2);
        let (rect_mode, rect_lr) = if config.rule == Rule::AdaBelief && config.rectify {
            adabelief::rectification(beta2, beta2_t, t, bc1, lr)
        } else {
            (0, 0.0)
        };
        StepScalars {
            lr: lr as f32,
            beta1: beta1 as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            beta2: beta2 as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            eps: config.eps as f32,
            weight_decay: config.weight_decay as f32,
            decay: decay as f32,
            bc2: bc2 as f32,
            sqrt_bc2: sqrt_bc2 as f32,
            lr_over_bc1: (lr / bc1) as f32,
            tau: config.tau as f32,
            momentum: momentum as f32,
            one_minus_dampening: (1.0 - dampening) as f32,
            inv_grad_scale: (1.0 / grad_scale) as f32,
            kappa: config.kappa as f32,
            // Each in software on cores without a double-precision FPU: for the rules that read it.
            lr2_over_bc1: if config.rule.spec().reads & reads::MIADAM != 0 {
                (lr * lr / bc1) as f32
            } else {
                0.0
            },
            rect_lr: rect_lr as f32,
            swats_step: if config.rule == Rule::Swats {
                (lr * sqrt_bc2 / bc1) as f32
            } else {
                0.0
            },
            swats_lr: lr as f32,
            first_step: (t == 1) as u32,
            mi_phase: (t <= config.switch_step) as u32,
            rect_mode,
            home_lr_over_bc1: (lr * config.home_lr_scale / bc1) as f32,
        }
    }

    /// The scalars of step `t` for a tensor of `group`: [`StepScalars::new`] of
    /// [`Config::for_group`] (SWATS's SGD-phase rate scaled as η is).
    pub fn for_group(
        config: &Config,
        group: Group,
        t: u64,
        grad_scale: f64,
        swats_sgd_lr: Option<f64>,
    ) -> Self {
        let swats = swats_sgd_lr.map(|lr| lr * group.lr_scale);
        StepScalars::new(&config.for_group(group), t, grad_scale, swats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_texts_state_the_largest_knob() {
        let largest = format!("{LARGEST_KNOB:e}");
        assert!(UP_TO_LARGEST.ends_with(&format!("{largest}]")));
        assert!(EPS_RANGE.contains(&format!(", {largest}]")));
        assert!(EPS_RANGE.contains(&format!("[{:.1e}", f32::MIN_POSITIVE)));
    }

    #[test]
    fn names_round_trip() {
        for rule in ALL_RULES {
            assert_eq!(Rule::from_name(rule.name()), Some(rule));
            assert_eq!(Rule::from_code(rule.code()), Some(rule));
            assert_eq!(Config::named(rule.name()), Some(Config::new(rule)));
        }
        assert_eq!(Rule::from_name("adamax"), None);
        for name in Config::NAMES {
            assert_eq!(Config::named(name).map(|c| c.name()), Some(name));
        }
        let sgdm = Config::named("sgdm").unwrap();
        assert_eq!((sgdm.rule, sgdm.momentum, sgdm.name()), (Rule::Sgd, 0.9, "sgdm"));
    }

    #[test]
    fn knobs_a_rule_ignores_are_refused() {
        let refused = |rule: Rule, set: fn(&mut Config), knob: &str| {
            let mut c = Config::new(rule);
            set(&mut c);
            match c.validate() {
                Err(Error::NotForRule { name, .. }) => assert!(name.contains(knob), "{name}"),
                other => panic!("{rule:?} with {knob}: {other:?}"),
            }
        };
        refused(Rule::AdamW, |c| c.amsgrad = true, "amsgrad");
        refused(Rule::Adam, |c| c.nesterov = true, "nesterov");
        refused(Rule::AdamW, |c| c.tau = 1e-3, "tau");
        refused(Rule::Sgd, |c| c.beta2 = 0.99, "beta2");
        refused(Rule::MiAdam, |c| c.momentum = 0.9, "momentum");
        refused(Rule::AdamSrf, |c| c.weight_decay = 1e-4, "weight_decay");
        refused(Rule::AdamW, |c| c.kappa = 0.5, "kappa");
        refused(Rule::Lion, |c| c.eps = 1e-6, "eps");
        refused(Rule::Lion, |c| c.momentum = 0.9, "momentum");
        refused(
            Rule::AdaBelief,
            |c| {
                c.weight_decouple = false;
                c.fixed_decay = true
            },
            "fixed_decay",
        );
        let mut c = Config::new(Rule::MiAdam);
        (c.kappa, c.switch_step) = (0.5, 100);
        c.validate().unwrap();
    }

    #[test]
    fn knobs_list_what_the_rule_reads_and_set_back() {
        let names = |c: &Config| c.knobs().map(|(name, _)| name).collect::<Vec<_>>();
        assert_eq!(
            names(&Config::new(Rule::AdamW)),
            ["lr", "beta1", "beta2", "eps", "weight_decay", "rounding", "seed"]
        );
        assert!(names(&Config::new(Rule::HomeAdamW(Switch::Global))).contains(&"rho_over"));
        assert!(!names(&Config::new(Rule::HomeAdamW(Switch::Element))).contains(&"rho_over"));
        assert!(!names(&Config::new(Rule::AdamSrf)).contains(&"weight_decay"));
        for rule in ALL_RULES {
            let mut saved = Config::new(rule);
            (saved.lr, saved.seed, saved.rounding) = (0.0123, 7, Rounding::Stochastic);
            if rule.switch().is_some() {
                saved.tau = 3e-9;
                saved.tau_calibration = Some(TauCalibration {
                    home_share: 0.25,
                    every: 3,
                });
            }
            if rule == Rule::MiAdam {
                (saved.kappa, saved.switch_step) = (0.5, 40);
            }
            let mut fresh = Config::new(rule);
            for (name, value) in saved.knobs() {
                assert_eq!(fresh.set_knob(name, &value.to_string()), Some(()), "{name}");
            }
            assert_eq!(fresh, saved, "{rule:?}");
        }
        assert_eq!(Config::new(Rule::AdamW).set_knob("beta1", "yes"), None);
        assert_eq!(Config::new(Rule::AdamW).set_knob("nothing", "1"), None);
    }

    #[test]
    fn group_overrides_apply_and_model_wide_ones_are_refused() {
        let config = Config::new(Rule::AdamW);
        let group = Group {
            weight_decay: Some(0.5),
            eps: Some(1e-3),
            beta1: Some(0.8),
            beta2: Some(0.99),
            ..Group::DEFAULT
        };
        let c = config.for_group(group);
        assert_eq!((c.weight_decay, c.eps, c.beta1, c.beta2), (0.5, 1e-3, 0.8, 0.99));
        assert_eq!(
            config
                .for_group(Group {
                    decay: false,
                    ..group
                })
                .weight_decay,
            0.0
        );
        assert_eq!(config.for_group(Group::DEFAULT), config);
        config.check_group(group).unwrap();
        Config::new(Rule::HomeAdamW(Switch::Element))
            .check_group(group)
            .unwrap();
        for rule in [
            Rule::HomeAdamW(Switch::Global),
            Rule::HomeAdam(Switch::Layer),
            Rule::Swats,
        ] {
            let err = Config::new(rule).check_group(Group {
                weight_decay: None,
                ..group
            });
            assert!(matches!(err, Err(Error::NotForRule { .. })), "{rule:?}: {err:?}");
        }
        let mut calibrated = Config::new(Rule::HomeAdamW(Switch::Element));
        calibrated.tau_calibration = Some(TauCalibration {
            home_share: 0.1,
            every: 1,
        });
        assert!(calibrated.check_group(group).is_err());
        let bad = Group {
            beta1: Some(1.0),
            ..Group::DEFAULT
        };
        assert!(matches!(
            config.check_group(bad),
            Err(Error::InvalidHyper { name: "beta1", .. })
        ));
    }

    #[test]
    fn defaults_validate() {
        for rule in ALL_RULES {
            Config::new(rule).validate().unwrap();
        }
    }

    #[test]
    fn bad_values_are_named() {
        let mut c = Config::new(Rule::AdamW);
        c.lr = f64::NAN;
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidHyper { name: "lr", .. })
        ));
        let mut c = Config::new(Rule::HomeAdamW(Switch::Element));
        c.tau = 0.0;
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidHyper { name: "tau", .. })
        ));
        let mut c = Config::new(Rule::AdamSrf);
        c.weight_decay = 1e-4;
        assert!(matches!(c.validate(), Err(Error::NotForRule { .. })));
        let mut c = Config::new(Rule::Adam);
        c.beta2 = 1.0;
        assert!(matches!(
            c.validate(),
            Err(Error::InvalidHyper { name: "beta2", .. })
        ));
    }
}
