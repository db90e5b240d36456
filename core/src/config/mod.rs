//! Rules, hyper-parameters and their validation. The hyper-parameters are the lines of the
//! knob table ([`crate::knobs`]); this module generates the config from it.

mod knob;

use crate::calibration::TauCalibration;
use crate::error::Error;
use crate::kernel::Options;
use crate::knobs::knob_table;
use crate::reduce::RhoOver;
use crate::rounding::Rounding;
use crate::rules::spec::{reads, Kernels, LastSlot, RuleKnobs, StepInputs, ONE_BETA2};
use crate::rules::{ElementKernel, Rule, Switch, ALL_RULES};
use crate::scalars::{powi_by_squaring, StepScalars};
use crate::storage::Dtype;
use crate::tensor::Group;
use knob::{
    always, calibration, check, check_calibration, closed_unit, decays, decouple_choice, eps, positive, read,
    rounding, rounding_name, scale, unit, KnobSpec, EPS_RANGE, TAU_HINT, UNIT, UP_TO_LARGEST,
};
pub use knob::{Knob, LARGEST_KNOB};

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

/// Generates [`Config`], its defaults ([`Config::new`]), its range checks, its JSON keys and
/// [`KNOBS`] from the knob table's lines.
macro_rules! config_from_table {
    (
        defaults $d:ident;
        $($(#[$doc:meta])* $field:ident: $ty:ty = $default:expr, valid $valid:tt,
            $(knob $knob:tt,)* json $json:tt, $step:ident;)*
    ) => {
        /// Hyper-parameters of a rule, in the paper's symbols. Start from [`Config::new`], which
        /// sets the peer packages' defaults, then set fields; [`crate::Optimizer::new`]
        /// validates.
        #[derive(Clone, Copy, Debug, PartialEq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct Config {
            /// The rule.
            pub rule: Rule,
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Config {
            /// The rule with the defaults of its peer package (PyTorch, adabelief-pytorch 0.2.1,
            /// pytorch-optimizer 4.1.0, official MIAdam, lion-pytorch 0.2.5: the rule's
            /// [`crate::rules::spec::Defaults`]); for the paper's rules, Adam(W)'s defaults but
            /// ε = 1e-3 ([`crate::rules::homeadam::SRF_EPS`] says why), and τ = 1e-12 (the
            /// paper's CIFAR-10 HomeAdam setting).
            pub const fn new(rule: Rule) -> Self {
                let $d = rule.spec().defaults;
                Config {
                    rule,
                    $($field: $default,)*
                }
            }

            /// The knobs a JSON config sets by a key of their own, as `(key, knob)` with the
            /// knob's name in [`Config::knobs`]; the others (β1 and β2 as `betas`, τ and its
            /// calibration as `tau`, the home scale as `home_lr`) are set in their own forms.
            pub const JSON_KEYS: &'static [(&'static str, &'static str)] = &{
                const ALL: [Option<(&str, &str)>; [$(stringify!($field)),*].len()] =
                    [$(json_key!($json $(, $knob)*)),*];
                const N: usize = count_some(&ALL);
                let mut keys = [("", ""); N];
                let (mut k, mut n) = (0, 0);
                while k < ALL.len() {
                    if let Some(key) = ALL[k] {
                        keys[n] = key;
                        n += 1;
                    }
                    k += 1;
                }
                keys
            };

            /// The table's range checks, in its order.
            fn check_ranges(&self) -> Result<(), Error> {
                $(valid!(self, $field, $valid);)*
                Ok(())
            }

            /// Copies the per-step knobs into `s` (the table's lines marked `step`) and those
            /// the rule's hook reads into `knobs` (marked `rule`).
            fn copy_step_knobs(&self, s: &mut StepScalars, knobs: &mut RuleKnobs) {
                $(knob_scalar!($step, s, knobs, self, $field);)*
            }
        }

        /// Every knob, in the order [`Config::knobs`] lists them.
        const KNOBS: &[KnobSpec] = &[$($(knob_spec!($field, $knob),)*)*];

        /// Each line's field and whether it is a per-step scalar.
        #[cfg(test)]
        const LINES: &[(&str, bool)] = &[$((stringify!($field), per_step!($step))),*];
    };
}

/// A line's range check ([`crate::knobs`]).
macro_rules! valid {
    ($c:ident, $field:ident, -) => {};
    ($c:ident, $field:ident, ($expected:expr, $ok:expr, if $when:expr)) => {
        if $when($c) {
            check($c.$field, stringify!($field), $expected, $ok)?;
        }
    };
    ($c:ident, $field:ident, ($expected:expr, $ok:expr)) => {
        check($c.$field, stringify!($field), $expected, $ok)?;
    };
    ($c:ident, $field:ident, [$check:expr]) => {
        $check($c)?;
    };
}

/// A line's knob ([`crate::knobs`]) as a [`KnobSpec`].
macro_rules! knob_spec {
    ($field:ident, ($name:literal, real, $reads:expr, $hint:expr)) => {
        knob_spec!(
            $field,
            (
                $name,
                (|c| Knob::Real(c.$field), |c, k| c.$field = k.real()),
                $reads,
                $hint
            )
        )
    };
    ($field:ident, ($name:literal, flag, $reads:expr, $hint:expr)) => {
        knob_spec!(
            $field,
            (
                $name,
                (|c| Knob::Flag(c.$field), |c, k| c.$field = k.flag()),
                $reads,
                $hint
            )
        )
    };
    ($field:ident, ($name:literal, count, $reads:expr, $hint:expr)) => {
        knob_spec!(
            $field,
            (
                $name,
                (|c| Knob::Count(c.$field), |c, k| c.$field = k.count()),
                $reads,
                $hint
            )
        )
    };
    ($field:ident, ($name:literal, ($get:expr, $set:expr), $reads:expr, $hint:expr)) => {
        KnobSpec {
            name: $name,
            get: $get,
            set: $set,
            reads: $reads,
            hint: $hint,
        }
    };
}

/// A line's per-step copy ([`crate::knobs`]): `step` lines into the scalars, `rule` lines into
/// the hook's knobs.
macro_rules! knob_scalar {
    (step, $s:ident, $k:ident, $c:ident, $field:ident) => {
        $s.$field = $c.$field as f32;
    };
    (rule, $s:ident, $k:ident, $c:ident, $field:ident) => {
        $k.$field = $c.$field;
    };
    (config, $s:ident, $k:ident, $c:ident, $field:ident) => {};
}

/// Whether a line is a per-step scalar ([`crate::knobs`]).
#[cfg(test)]
macro_rules! per_step {
    (step) => {
        true
    };
    (rule) => {
        false
    };
    (config) => {
        false
    };
}

/// A line's JSON key ([`crate::knobs`]) and the name of the knob it sets.
macro_rules! json_key {
    (- $(, $knob:tt)*) => {
        None
    };
    ($key:literal, ($name:literal, $($rest:tt)*)) => {
        Some(($key, $name))
    };
}

knob_table!(config_from_table);

/// How many of `items` are `Some`.
const fn count_some(items: &[Option<(&str, &str)>]) -> usize {
    let (mut k, mut n) = (0, 0);
    while k < items.len() {
        n += items[k].is_some() as usize;
        k += 1;
    }
    n
}

impl Config {
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

    /// Every knob's name, in the knob table's order (`knobs.rs`), whether or not a rule
    /// reads it.
    pub const KNOB_NAMES: [&'static str; KNOBS.len()] = {
        let mut names = [""; KNOBS.len()];
        let mut k = 0;
        while k < KNOBS.len() {
            names[k] = KNOBS[k].name;
            k += 1;
        }
        names
    };

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
    /// ([`Config::for_group`]), and refuses a group β2 (or what the rule's spec lists,
    /// [`crate::rules::spec::Spec::model_wide`]) where one value must hold for the whole model
    /// (see [`Group`]).
    pub fn check_group(&self, group: Group) -> Result<(), Error> {
        check(group.lr_scale, "lr_scale", "a finite value >= 0", |x| x >= 0.0)?;
        let first_pass = matches!(self.rule.switch(), Some(Switch::Global | Switch::Layer))
            || (self.rule.switch().is_some() && self.tau_calibration.is_some());
        // The group overrides one value must hold for across the model: β2 for the rules
        // with a first pass, and the spec's.
        let first_pass_wide: &[(u32, &str)] = if first_pass {
            &[(reads::BETA2, ONE_BETA2)]
        } else {
            &[]
        };
        for &(bits, hint) in first_pass_wide.iter().chain(self.rule.spec().model_wide) {
            let (name, set) = match bits {
                reads::BETA2 => ("beta2 (of a group)", group.beta2.is_some()),
                reads::EPS => ("eps (of a group)", group.eps.is_some()),
                _ => continue,
            };
            if set {
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

    /// The element kernel a step of this config runs ([`crate::rules::spec::Kernels`]); that of
    /// the rule's second phase when `second_phase` (SWATS after its switch to SGD).
    pub const fn kernel(&self, second_phase: bool) -> ElementKernel {
        match self.rule.spec().kernels {
            Kernels::One(k) => k,
            Kernels::ByLastSlot(without, with) => {
                if self.keeps_last_slot() {
                    with
                } else {
                    without
                }
            }
            Kernels::ByPhase(first, second, _) => {
                if second_phase {
                    second
                } else {
                    first
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
        self.check_ranges()?;
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
        if read::<{ reads::MOMENTUM }>(self)
            && self.nesterov
            && (self.momentum == 0.0 || self.dampening != 0.0)
        {
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
        for knob in KNOBS {
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
        let value = self.knob(name)?.parse_like(text)?;
        self.set_knob_to(name, value)
    }

    /// Sets the knob `name` ([`Config::KNOB_NAMES`]) to `value`, a value of its kind; `None`
    /// (nothing changed) for an unknown name or a value of another kind. The caller validates
    /// the result.
    pub fn set_knob_to(&mut self, name: &str, value: Knob) -> Option<()> {
        let knob = KNOBS.iter().find(|knob| knob.name == name)?;
        if core::mem::discriminant(&(knob.get)(self)) != core::mem::discriminant(&value) {
            return None;
        }
        (knob.set)(self, value);
        Some(())
    }

    /// The value of the knob `name` ([`Config::knobs`]), whether or not the rule reads it;
    /// `None` for an unknown name.
    pub fn knob(&self, name: &str) -> Option<Knob> {
        KNOBS
            .iter()
            .find(|knob| knob.name == name)
            .map(|knob| (knob.get)(self))
    }

    /// The names the knob `name` takes, for a knob of named values ([`Knob::Choice`]); none
    /// for the others.
    pub fn choices(name: &str) -> impl Iterator<Item = &'static str> + '_ {
        Knob::CHOICES.into_iter().filter(move |&choice| {
            let mut c = Config::new(Rule::Sgd);
            c.knob(name).is_some_and(|k| matches!(k, Knob::Choice(_)))
                && c.set_knob(name, choice).is_some()
                && c.knob(name) == Some(Knob::Choice(choice))
        })
    }
}

impl StepScalars {
    /// The scalars of step `t` (≥ 1) for `config`, with gradient scale `grad_scale` and, where
    /// the rule's second phase replaces η ([`crate::rules::spec::PhaseSwitch`]), that phase's
    /// rate `phase_lr`: the shared ones here, the rule's own from its spec's hook
    /// ([`crate::rules::spec::Spec::scalars`]), the per-step knobs from the knob table.
    pub fn new(config: &Config, t: u64, grad_scale: f64, phase_lr: Option<f64>) -> Self {
        let beta1 = config.beta1;
        let beta2 = config.beta2;
        // The phase's rate replaces η in the decoupled decay too.
        let lr = phase_lr.unwrap_or(config.lr);
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
        // Once: in software on cores without a double-precision FPU.
        let sqrt_bc2 = libm::sqrt(bc2);
        let mut s = StepScalars {
            lr: lr as f32,
            one_minus_beta1: (1.0 - beta1) as f32,
            one_minus_beta2: (1.0 - beta2) as f32,
            decay: decay as f32,
            bc2: bc2 as f32,
            sqrt_bc2: sqrt_bc2 as f32,
            lr_over_bc1: (lr / bc1) as f32,
            momentum: config.momentum as f32,
            one_minus_dampening: (1.0 - config.dampening) as f32,
            inv_grad_scale: (1.0 / grad_scale) as f32,
            first_step: (t == 1) as u32,
            ..StepScalars::default()
        };
        let mut knobs = RuleKnobs::default();
        config.copy_step_knobs(&mut s, &mut knobs);
        let inputs = StepInputs {
            t,
            lr,
            beta1,
            beta2,
            beta2_t,
            bc1,
            sqrt_bc2,
            knobs,
        };
        (config.rule.spec().scalars)(&inputs, &mut s);
        s
    }

    /// The scalars of step `t` for a tensor of `group`: [`StepScalars::new`] of
    /// [`Config::for_group`] (the phase's rate scaled as η is).
    pub fn for_group(config: &Config, group: Group, t: u64, grad_scale: f64, phase_lr: Option<f64>) -> Self {
        let phase_lr = phase_lr.map(|lr| lr * group.lr_scale);
        StepScalars::new(&config.for_group(group), t, grad_scale, phase_lr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generated_pieces_agree() {
        let names: Vec<&str> = KNOBS.iter().map(|k| k.name).collect();
        for (k, name) in names.iter().enumerate() {
            assert!(!names[..k].contains(name), "knob {name} twice");
        }
        for (k, (key, name)) in Config::JSON_KEYS.iter().enumerate() {
            assert!(names.contains(name), "JSON key {key}: no knob {name}");
            assert!(
                Config::JSON_KEYS[..k].iter().all(|(other, _)| other != key),
                "{key}"
            );
        }
        // Every per-step knob is a field of the scalars, holding the config's value.
        let mut c = Config::new(Rule::MiAdam);
        for (k, (field, _)) in LINES.iter().enumerate() {
            let value = Knob::Real(0.5 / (k + 2) as f64).to_string();
            c.set_knob(field, &value);
        }
        let s = StepScalars::new(&c, 3, 1.0, None);
        // SAFETY: StepScalars is repr(C) plain data, read as bytes it is made of.
        let bytes = unsafe {
            core::slice::from_raw_parts(&s as *const StepScalars as *const u8, size_of::<StepScalars>())
        };
        let steps: Vec<&str> = LINES.iter().filter(|(_, step)| *step).map(|(f, _)| *f).collect();
        assert!(steps.contains(&"eps") && !steps.contains(&"lr"), "{steps:?}");
        for field in steps {
            let (_, c_type, offset) = StepScalars::FIELDS
                .into_iter()
                .find(|(name, _, _)| *name == field)
                .unwrap_or_else(|| panic!("{field} is no field of StepScalars"));
            assert_eq!(c_type, "float");
            let got = f32::from_ne_bytes(bytes[offset..offset + 4].try_into().unwrap());
            let Some(Knob::Real(want)) = c.knob(field) else {
                panic!("{field} is no real knob")
            };
            assert_eq!(got, want as f32, "{field}");
        }
        // The scalars' fields tile the struct in order, 4 bytes each.
        for (k, (name, _, offset)) in StepScalars::FIELDS.into_iter().enumerate() {
            assert_eq!(offset, 4 * k, "{name}");
        }
        assert_eq!(size_of::<StepScalars>(), 4 * StepScalars::FIELDS.len());
    }

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
        assert_eq!(
            Config::new(Rule::AdamW).set_knob_to("beta1", Knob::Flag(true)),
            None
        );
        let mut c = Config::new(Rule::AdamW);
        assert_eq!(c.set_knob_to("beta1", Knob::Real(0.5)), Some(()));
        assert_eq!((c.beta1, Config::KNOB_NAMES[0]), (0.5, "lr"));
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
