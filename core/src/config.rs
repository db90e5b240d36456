//! Rules, hyper-parameters and their validation.

use crate::calibration::TauCalibration;
use crate::error::Error;
use crate::rounding::Rounding;
use crate::storage::Dtype;
use crate::tensor::Group;

/// Where HomeAdam(W) decides between the srf step and the home (SGDM) step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Switch {
    /// Alg. 2: one decision for the whole model, on min v̂ over every element of every tensor.
    Global,
    /// One decision per tensor, on that tensor's min v̂.
    Layer,
    /// Alg. 3: one decision per element.
    Element,
}

/// Over which elements the global and per-layer HomeAdam(W) rules take ρ = min v̂.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RhoOver {
    /// Every element (Alg. 2). An element that has never had a non-zero gradient has v̂ = 0,
    /// so ρ = 0 < τ and the rule goes home at every step on most real models.
    #[default]
    All,
    /// The elements with v_t > 0, those that have had a non-zero gradient; ρ = 0 when there
    /// is none. Not in the paper.
    Active,
}

impl RhoOver {
    /// The config names, in order: `all`, `active`.
    pub const NAMES: [&'static str; 2] = ["all", "active"];

    /// The config name.
    pub const fn name(self) -> &'static str {
        match self {
            RhoOver::All => RhoOver::NAMES[0],
            RhoOver::Active => RhoOver::NAMES[1],
        }
    }

    /// The value of a config name.
    pub fn from_name(name: &str) -> Option<Self> {
        [RhoOver::All, RhoOver::Active]
            .into_iter()
            .find(|r| r.name() == name)
    }

    /// The ρ that decides, from min v̂ over all elements and over the active ones (+∞ when
    /// none is active).
    #[inline]
    pub fn rho(self, all: f32, active: f32) -> f32 {
        match self {
            RhoOver::All => all,
            RhoOver::Active if active == f32::INFINITY => 0.0,
            RhoOver::Active => active,
        }
    }
}

/// An update rule. [`Rule::from_name`] takes the config names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Rule {
    /// `sgd`: SGD with optional momentum μ (PyTorch `SGD`); the config name `sgdm`
    /// ([`Config::named`]) is this rule with μ = 0.9.
    Sgd,
    /// `adam`: Adam with coupled L2 (PyTorch `Adam`).
    Adam,
    /// `adamw`: Adam with decoupled weight decay (PyTorch `AdamW`).
    AdamW,
    /// `adam-srf`: Alg. 1 with λ = 0.
    AdamSrf,
    /// `adamw-srf`: Alg. 1.
    AdamWSrf,
    /// `homeadam`, `homeadam-layer`, `homeadam-ew`: Alg. 2 / 3 with λ = 0.
    HomeAdam(Switch),
    /// `homeadamw`, `homeadamw-layer`, `homeadamw-ew`: Alg. 2 / 3.
    HomeAdamW(Switch),
    /// `adabelief`: `adabelief-pytorch` 0.2.1.
    AdaBelief,
    /// `swats`: `pytorch-optimizer` 4.1.0 `SWATS`.
    Swats,
    /// `miadam`: the official `MIAdam1`.
    MiAdam,
}

/// The config name of SGD with momentum.
const SGDM: &str = "sgdm";

/// Every rule, in the order of the README's table.
pub const ALL_RULES: [Rule; 14] = [
    Rule::Sgd,
    Rule::Adam,
    Rule::AdamW,
    Rule::AdamSrf,
    Rule::AdamWSrf,
    Rule::HomeAdam(Switch::Global),
    Rule::HomeAdamW(Switch::Global),
    Rule::HomeAdam(Switch::Layer),
    Rule::HomeAdamW(Switch::Layer),
    Rule::HomeAdam(Switch::Element),
    Rule::HomeAdamW(Switch::Element),
    Rule::AdaBelief,
    Rule::Swats,
    Rule::MiAdam,
];

impl Rule {
    /// The config name, e.g. `"homeadamw-ew"`.
    pub const fn name(self) -> &'static str {
        match self {
            Rule::Sgd => "sgd",
            Rule::Adam => "adam",
            Rule::AdamW => "adamw",
            Rule::AdamSrf => "adam-srf",
            Rule::AdamWSrf => "adamw-srf",
            Rule::HomeAdam(Switch::Global) => "homeadam",
            Rule::HomeAdam(Switch::Layer) => "homeadam-layer",
            Rule::HomeAdam(Switch::Element) => "homeadam-ew",
            Rule::HomeAdamW(Switch::Global) => "homeadamw",
            Rule::HomeAdamW(Switch::Layer) => "homeadamw-layer",
            Rule::HomeAdamW(Switch::Element) => "homeadamw-ew",
            Rule::AdaBelief => "adabelief",
            Rule::Swats => "swats",
            Rule::MiAdam => "miadam",
        }
    }

    /// Parses a rule name (see [`Config::named`] for the config names, which add `sgdm`).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_RULES.iter().copied().find(|r| r.name() == name)
    }

    /// The rule's code in the state byte format: fixed forever, whatever the order of
    /// [`ALL_RULES`] (a checkpoint names its rule by this number).
    pub const fn code(self) -> u8 {
        match self {
            Rule::Sgd => 1,
            Rule::Adam => 3,
            Rule::AdamW => 4,
            Rule::AdamSrf => 5,
            Rule::AdamWSrf => 6,
            Rule::HomeAdam(Switch::Global) => 7,
            Rule::HomeAdamW(Switch::Global) => 8,
            Rule::HomeAdam(Switch::Layer) => 9,
            Rule::HomeAdamW(Switch::Layer) => 10,
            Rule::HomeAdam(Switch::Element) => 11,
            Rule::HomeAdamW(Switch::Element) => 12,
            Rule::AdaBelief => 13,
            Rule::Swats => 14,
            Rule::MiAdam => 15,
        }
    }

    /// The rule of a [`Rule::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        ALL_RULES.iter().copied().find(|r| r.code() == code)
    }

    /// The HomeAdam switch granularity, if this is a HomeAdam(W) rule.
    pub const fn switch(self) -> Option<Switch> {
        match self {
            Rule::HomeAdam(s) | Rule::HomeAdamW(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the rule keeps a second moment: v, or AdaBelief's s (f16 storage is refused
    /// for it unless allowed). Not the same as reporting ρ: see [`Config::rho_slot`].
    pub const fn has_second_moment(self) -> bool {
        !matches!(self, Rule::Sgd)
    }

    /// Whether λ is decoupled (θ ← θ(1 − ηλ)) rather than coupled L2 (g ← g + λθ).
    pub const fn decoupled_decay(self, weight_decouple: bool) -> bool {
        match self {
            Rule::AdamW | Rule::AdamWSrf | Rule::HomeAdamW(_) => true,
            Rule::AdaBelief | Rule::Swats => weight_decouple,
            _ => false,
        }
    }

    const fn takes_weight_decay(self) -> bool {
        !matches!(self, Rule::AdamSrf | Rule::HomeAdam(_))
    }
}

/// What a step does with a non-finite gradient (DESIGN §3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum FiniteCheck {
    /// Check every gradient before touching anything; one non-finite value skips the whole
    /// step. Costs one extra read of the gradients (none for global / per-layer HomeAdam,
    /// whose first pass reads them anyway).
    #[default]
    SkipStep,
    /// The caller guarantees finite gradients (e.g. its loss scaler checked them): one pass.
    /// A non-finite gradient is still detected and reported in
    /// [`crate::StepReport::nonfinite_applied`], never silently.
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
    /// pytorch-optimizer 4.1.0, official MIAdam); for the paper's rules, AdamW's defaults and
    /// τ = 1e-12 (the paper's CIFAR-10 HomeAdam setting).
    pub const fn new(rule: Rule) -> Self {
        let (lr, beta2, eps, weight_decay, momentum, weight_decouple) = match rule {
            Rule::Sgd => (1e-3, 0.999, 1e-8, 0.0, 0.0, false),
            Rule::AdamW | Rule::AdamWSrf | Rule::HomeAdamW(_) => (1e-3, 0.999, 1e-8, 1e-2, 0.0, true),
            Rule::AdaBelief => (1e-3, 0.999, 1e-16, 0.0, 0.0, true),
            Rule::Swats => (1e-3, 0.999, 1e-6, 0.0, 0.0, false),
            _ => (1e-3, 0.999, 1e-8, 0.0, 0.0, false),
        };
        Config {
            rule,
            lr,
            beta1: 0.9,
            beta2,
            eps,
            weight_decay,
            tau: 1e-12,
            rho_over: RhoOver::All,
            tau_calibration: None,
            home_lr_scale: 1.0,
            momentum,
            dampening: 0.0,
            nesterov: false,
            weight_decouple,
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

    /// The config a tensor of `group` steps with: η · lr_scale, and λ = 0 without decay.
    pub fn for_group(&self, group: Group) -> Config {
        let mut c = *self;
        c.lr *= group.lr_scale;
        if !group.decay {
            c.weight_decay = 0.0;
        }
        c
    }

    /// Number of state slots (each one element per parameter) the rule keeps.
    pub const fn state_slots(&self) -> usize {
        match self.rule {
            Rule::Sgd => (self.momentum != 0.0) as usize,
            Rule::AdaBelief => 2 + self.amsgrad as usize,
            Rule::Swats | Rule::MiAdam => 3,
            _ => 2,
        }
    }

    /// Whether state slot `slot` holds a second moment (f16 is refused there).
    pub const fn is_second_moment_slot(&self, slot: usize) -> bool {
        self.rule.has_second_moment()
            && slot >= 1
            && !(matches!(self.rule, Rule::Swats | Rule::MiAdam) && slot == 2)
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
    /// (reported by every step); `None` for rules that report no ρ (SGD, AdaBelief). SWATS
    /// reports it in its adaptive phase only.
    pub const fn rho_slot(&self) -> Option<usize> {
        match self.rule {
            Rule::Sgd | Rule::AdaBelief => None,
            _ => Some(1),
        }
    }

    /// Refuses f16 storage for a second moment unless `allow_f16_state` (DESIGN §3): every
    /// backend asks this, so all refuse the same configurations.
    pub fn check_state_dtype(&self, dtype: Dtype) -> Result<(), Error> {
        let second_moment = (0..self.state_slots()).any(|k| self.is_second_moment_slot(k));
        if dtype == Dtype::F16 && !self.allow_f16_state && second_moment {
            return Err(Error::F16SecondMoment);
        }
        Ok(())
    }

    /// Names of the state slots, as in checkpoints and `homeadam replay` outputs.
    pub const fn state_names(&self) -> &'static [&'static str] {
        match self.rule {
            Rule::Sgd if self.momentum == 0.0 => &[],
            Rule::Sgd => &["b"],
            Rule::AdaBelief if self.amsgrad => &["m", "s", "s_max"],
            Rule::AdaBelief => &["m", "s"],
            Rule::Swats | Rule::MiAdam => &["m", "v", "b"],
            _ => &["m", "v"],
        }
    }

    /// Checks every hyper-parameter; the error names the first one out of range.
    pub fn validate(&self) -> Result<(), Error> {
        let unit = "a finite value in [0, 1)";
        check(self.lr, "lr", "a finite value >= 0", |x| x >= 0.0)?;
        check(self.beta1, "beta1", unit, |x| (0.0..1.0).contains(&x))?;
        check(self.beta2, "beta2", unit, |x| (0.0..1.0).contains(&x))?;
        check(self.eps, "eps", "a finite value >= 0", |x| x >= 0.0)?;
        check(self.weight_decay, "weight_decay", "a finite value >= 0", |x| {
            x >= 0.0
        })?;
        check(self.momentum, "momentum", "a finite value >= 0", |x| x >= 0.0)?;
        check(self.dampening, "dampening", "a finite value in [0, 1]", |x| {
            (0.0..=1.0).contains(&x)
        })?;
        check(self.kappa, "kappa", "a finite value >= 0", |x| x >= 0.0)?;
        if self.rule.switch().is_some() {
            check(self.tau, "tau", "a finite value > 0", |x| x > 0.0)?;
            check(self.home_lr_scale, "home_lr_scale", "a finite value >= 0", |x| {
                x >= 0.0
            })?;
            if let Some(c) = self.tau_calibration {
                c.validate()?;
            }
        }
        if self.weight_decay != 0.0 && !self.rule.takes_weight_decay() {
            return Err(Error::NotForRule {
                name: "weight_decay",
                rule: self.name(),
                hint: "λ = 0 by definition (Alg. 1/2); use the W variant for weight decay",
            });
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
        if self.rule == Rule::Sgd && self.nesterov && (self.momentum == 0.0 || self.dampening != 0.0) {
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
        let d = Config::new(self.rule);
        let rule = self.rule;
        let sgd = rule == Rule::Sgd;
        let swats = rule == Rule::Swats;
        let adabelief = rule == Rule::AdaBelief;
        let same = |a: f64, b: f64| a.to_bits() == b.to_bits();
        let home = rule.switch().is_some();
        let decides_on_rho = matches!(rule.switch(), Some(Switch::Global | Switch::Layer));
        let knobs: [(&'static str, bool, bool, &'static str); 15] = [
            (
                "beta1",
                same(self.beta1, d.beta1),
                !sgd,
                "SGD has momentum, not betas",
            ),
            (
                "beta2",
                same(self.beta2, d.beta2),
                !sgd,
                "SGD keeps no second moment",
            ),
            (
                "eps",
                same(self.eps, d.eps),
                !sgd,
                "SGD divides by no second moment",
            ),
            (
                "tau",
                same(self.tau, d.tau),
                rule.switch().is_some(),
                "τ is the HomeAdam(W) threshold",
            ),
            (
                "rho_over",
                self.rho_over == d.rho_over,
                decides_on_rho,
                "ρ decides the global and per-layer HomeAdam(W) rules only",
            ),
            (
                "tau (calibrated)",
                self.tau_calibration == d.tau_calibration,
                home,
                "τ is the HomeAdam(W) threshold",
            ),
            (
                "home_lr_scale",
                same(self.home_lr_scale, d.home_lr_scale),
                home,
                "the home branch is HomeAdam(W)'s",
            ),
            (
                "momentum",
                same(self.momentum, d.momentum),
                sgd,
                "momentum is SGD's (Adam-like rules use beta1)",
            ),
            (
                "dampening",
                same(self.dampening, d.dampening),
                sgd,
                "dampening is SGD's",
            ),
            (
                "nesterov",
                self.nesterov == d.nesterov,
                sgd || swats,
                "Nesterov momentum is SGD's and SWATS's",
            ),
            (
                "weight_decouple",
                self.weight_decouple == d.weight_decouple,
                adabelief || swats,
                "the rule fixes how λ applies (the W variants decouple it)",
            ),
            (
                "fixed_decay",
                self.fixed_decay == d.fixed_decay,
                (adabelief || swats) && self.weight_decouple,
                "fixed_decay applies to AdaBelief / SWATS with weight_decouple",
            ),
            (
                "rectify",
                self.rectify == d.rectify,
                adabelief,
                "rectification is AdaBelief's",
            ),
            (
                "amsgrad",
                self.amsgrad == d.amsgrad,
                adabelief,
                "AMSGrad is offered for AdaBelief only",
            ),
            (
                "kappa / switch_step",
                same(self.kappa, d.kappa) && self.switch_step == d.switch_step,
                rule == Rule::MiAdam,
                "κ and the switch step are MIAdam's",
            ),
        ];
        for (name, is_default, read, hint) in knobs {
            if !is_default && !read {
                return Err(Error::NotForRule {
                    name,
                    rule: self.name(),
                    hint,
                });
            }
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
        refused(Rule::AdamW, |c| c.kappa = 0.5, "kappa");
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
