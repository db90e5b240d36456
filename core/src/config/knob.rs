//! A knob's value ([`Knob`]), what the knob table's lines are built from ([`KnobSpec`]) and the
//! pieces its lines name: the ranges and their texts, whether a rule reads a knob, the
//! accessors of the knobs that are no plain field.

use super::Config;
use crate::calibration::TauCalibration;
use crate::error::Error;
use crate::reduce::RhoOver;
use crate::rounding::Rounding;
use crate::rules::spec::{reads, Decay};

/// The largest value of η, λ, μ, κ, ε, τ and the home scale ([`Config::validate`]).
pub const LARGEST_KNOB: f64 = 1e6;
/// The range of a knob bounded by [`LARGEST_KNOB`], as errors state it.
pub(super) const UP_TO_LARGEST: &str = "a finite value in [0, 1e6]";
/// The range of ε, as errors state it.
pub(super) const EPS_RANGE: &str = "a finite value in [1.2e-38, 1e6]: the smallest normal f32 or more, as \
                         the update divides by v̂ + ε, which is 0 where a gradient has been 0";
/// The range of β1 and β2, as errors state it.
pub(super) const UNIT: &str = "a finite value in [0, 1)";
/// Why τ and its calibration are refused for a rule that does not read them.
pub(super) const TAU_HINT: &str = "τ is the HomeAdam(W) threshold";

/// [0, [`LARGEST_KNOB`]]: η, λ, μ, κ and the home scale.
pub(super) fn scale(x: f64) -> bool {
    (0.0..=LARGEST_KNOB).contains(&x)
}

/// [0, 1): β1 and β2.
pub(super) fn unit(x: f64) -> bool {
    (0.0..1.0).contains(&x)
}

/// [0, 1]: the dampening.
pub(super) fn closed_unit(x: f64) -> bool {
    (0.0..=1.0).contains(&x)
}

/// ε: from the smallest normal `f32` to [`LARGEST_KNOB`].
pub(super) fn eps(x: f64) -> bool {
    (f32::MIN_POSITIVE as f64..=LARGEST_KNOB).contains(&x)
}

/// τ: (0, [`LARGEST_KNOB`]].
pub(super) fn positive(x: f64) -> bool {
    x > 0.0 && scale(x)
}

/// The calibration's own check, where the rule reads τ.
pub(super) fn check_calibration(c: &Config) -> Result<(), Error> {
    match c.tau_calibration {
        Some(t) if read::<{ reads::HOME }>(c) => t.validate(),
        _ => Ok(()),
    }
}

/// `value` if it is finite and `ok`, else the error naming the knob and its range.
pub(super) fn check(
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
                Knob::CHOICES.into_iter().find(|&name| name == text)?,
            )),
        }
    }

    /// Every name a knob of named values takes: the roundings', then ρ's sets'.
    pub(super) const CHOICES: [&'static str; ROUNDING.len() + RhoOver::NAMES.len()] = {
        let mut names = [""; ROUNDING.len() + RhoOver::NAMES.len()];
        let mut k = 0;
        while k < names.len() {
            names[k] = if k < ROUNDING.len() {
                ROUNDING[k]
            } else {
                RhoOver::NAMES[k - ROUNDING.len()]
            };
            k += 1;
        }
        names
    };

    pub(super) fn real(self) -> f64 {
        match self {
            Knob::Real(x) => x,
            _ => f64::NAN,
        }
    }

    pub(super) fn flag(self) -> bool {
        matches!(self, Knob::Flag(true))
    }

    pub(super) fn count(self) -> u64 {
        match self {
            Knob::Count(n) => n,
            _ => 0,
        }
    }

    pub(super) fn choice<T>(self, of: impl Fn(&str) -> Option<T>) -> Option<T> {
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
pub(super) const ROUNDING: [&str; 2] = ["nearest", "stochastic"];

/// The config name of `r`.
pub(super) const fn rounding_name(r: Rounding) -> &'static str {
    match r {
        Rounding::Nearest => ROUNDING[0],
        Rounding::Stochastic => ROUNDING[1],
    }
}

/// The rounding a [`Knob::Choice`] names (nearest for any other name).
pub(super) fn rounding(k: Knob) -> Rounding {
    match k.choice(|name| ROUNDING.iter().position(|&r| r == name)) {
        Some(1) => Rounding::Stochastic,
        _ => Rounding::Nearest,
    }
}

/// One knob: how to read and set it on a config, whether the config's rule reads it, and
/// why not where it does not. A table of functions in flash, so that validation on a
/// microcontroller costs no stack for it.
pub(super) struct KnobSpec {
    pub(super) name: &'static str,
    pub(super) get: fn(&Config) -> Knob,
    pub(super) set: fn(&mut Config, Knob),
    pub(super) reads: fn(&Config) -> bool,
    pub(super) hint: &'static str,
}

/// Every rule reads the knob.
pub(super) fn always(_: &Config) -> bool {
    true
}

/// Whether the rule reads the knobs of `BITS` ([`reads`]), from its spec.
pub(super) const fn read<const BITS: u32>(c: &Config) -> bool {
    c.rule.spec().reads & BITS != 0
}

/// Whether the rule applies λ at all.
pub(super) fn decays(c: &Config) -> bool {
    !matches!(c.rule.spec().decay, Decay::None)
}

/// Whether the rule chooses how λ applies (AdaBelief, SWATS).
pub(super) fn decouple_choice(c: &Config) -> bool {
    matches!(c.rule.spec().decay, Decay::Chosen)
}

/// `c`'s τ calibration with its share or period replaced (the other from `c`, or defaults
/// that validation refuses until both are set).
pub(super) fn calibration(c: &Config, share: Option<f64>, every: Option<u64>) -> Option<TauCalibration> {
    let old = c.tau_calibration;
    let home_share = share.or(old.map(|o| o.home_share)).unwrap_or(0.0);
    let every = every.map_or(old.map_or(0, |o| o.every), |e| {
        u32::try_from(e).unwrap_or(u32::MAX)
    });
    (home_share != 0.0 || every != 0).then_some(TauCalibration { home_share, every })
}
