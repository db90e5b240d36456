//! A preset's `search` section: the knobs `homeadam sweep` varies, which of them each rule
//! reads, and their log-uniform ranges (or `--range` on the command line).

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{bail, Context, Result};
use homeadam_core::{Config, Knob};
use serde::{Deserialize, Serialize};

/// An axis of the sweep's search space: a hyper-parameter it varies, in the form a preset
/// writes it (τ, its home share and η_h are set in their own forms, not as the core's [`Knob`]s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Axis {
    /// η.
    Lr,
    /// ε.
    Eps,
    /// λ.
    WeightDecay,
    /// HomeAdam(W)'s fixed threshold τ.
    Tau,
    /// HomeAdam(W)'s calibrated home share q (τ recalibrated so that a share q of ρ lies below).
    HomeShare,
    /// HomeAdam(W)'s home-branch rate η_h.
    HomeLr,
}

impl Axis {
    /// Every axis, in the column order of `sweep.csv`.
    pub const ALL: [Axis; 6] = [
        Axis::Lr,
        Axis::Eps,
        Axis::WeightDecay,
        Axis::Tau,
        Axis::HomeShare,
        Axis::HomeLr,
    ];

    /// The preset key (and column) of the knob: for η, ε and λ the key of the core's knob
    /// table ([`Config::JSON_KEYS`]), for the others one of the forms τ and η_h are written in.
    pub fn name(self) -> &'static str {
        match self {
            Axis::Lr => "lr",
            Axis::Eps => "eps",
            Axis::WeightDecay => "weight_decay",
            Axis::Tau => "tau",
            Axis::HomeShare => "home_share",
            Axis::HomeLr => "home_lr",
        }
    }

    /// The knob called `name`, or an error listing them.
    pub fn from_name(name: &str) -> Result<Axis> {
        Axis::ALL.into_iter().find(|k| k.name() == name).with_context(|| {
            let names: Vec<_> = Axis::ALL.iter().map(|k| k.name()).collect();
            format!("unknown knob {name:?} (known: {})", names.join(", "))
        })
    }

    /// The knobs the rule of `c` reads (the core's [`Config::knobs`], from the rule's spec): η
    /// always; ε where the rule reads it; λ where the entry decays (a rule run without decay
    /// has no λ to tune); for HomeAdam(W), τ (or the home share when τ is calibrated) and the
    /// home-branch rate. λ is drawn log-uniformly, so never 0: the decay-free candidate is the
    /// rule's non-W entry (`adam` for `adamw`), swept beside it.
    pub fn read_by(c: &Config) -> Vec<Axis> {
        let reads = |name: &str| c.knobs().any(|(knob, _)| knob == name);
        let mut knobs = vec![Axis::Lr];
        if reads("eps") {
            knobs.push(Axis::Eps);
        }
        if c.weight_decay > 0.0 {
            knobs.push(Axis::WeightDecay);
        }
        if reads("tau") {
            knobs.push(match c.tau_calibration {
                Some(_) => Axis::HomeShare,
                None => Axis::Tau,
            });
            knobs.push(Axis::HomeLr);
        }
        knobs
    }

    /// The knob's value in `c`.
    pub fn value_in(self, c: &Config) -> f64 {
        match self {
            Axis::Lr | Axis::Eps | Axis::WeightDecay => match c.knob(self.name()) {
                Some(Knob::Real(x)) => x,
                _ => f64::NAN,
            },
            Axis::Tau => c.tau,
            Axis::HomeShare => c.tau_calibration.map_or(f64::NAN, |t| t.home_share),
            Axis::HomeLr => c.lr * c.home_lr_scale,
        }
    }
}

impl fmt::Display for Axis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A knob's log-uniform range: around the entry's value (`{"factor": f}`: from value / f to
/// value · f) or absolute (`{"low": a, "high": b}`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "RawRange")]
pub enum Range {
    /// From value / factor to value · factor (factor > 1).
    Around {
        /// The factor.
        factor: f64,
    },
    /// From low to high (0 < low < high).
    Between {
        /// The lower end.
        low: f64,
        /// The upper end.
        high: f64,
    },
}

/// A range as written, so that a misspelt key is named (an untagged enum would only say that
/// no variant matched).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRange {
    factor: Option<f64>,
    low: Option<f64>,
    high: Option<f64>,
}

impl TryFrom<RawRange> for Range {
    type Error = String;

    fn try_from(r: RawRange) -> Result<Self, String> {
        match (r.factor, r.low, r.high) {
            (Some(factor), None, None) => Ok(Range::Around { factor }),
            (None, Some(low), Some(high)) => Ok(Range::Between { low, high }),
            _ => Err("a range is {\"factor\": F} or {\"low\": A, \"high\": B}".to_string()),
        }
    }
}

impl Range {
    /// Refuses a range that is empty, not positive or not finite.
    pub fn check(&self, knob: Axis) -> Result<()> {
        match *self {
            Range::Around { factor } if !(factor > 1.0 && factor.is_finite()) => {
                bail!("range of {knob}: factor {factor} must be a finite number above 1")
            }
            Range::Between { low, high } if !(low > 0.0 && low < high && high.is_finite()) => {
                bail!("range of {knob}: {low}..{high} must satisfy 0 < low < high < inf (the draw is log-uniform)")
            }
            Range::Between { high, .. } if knob == Axis::HomeShare && high >= 1.0 => {
                bail!("range of {knob}: a home share must stay below 1")
            }
            _ => Ok(()),
        }
    }

    /// (low, high) around `center`.
    pub fn bounds(&self, center: f64) -> (f64, f64) {
        match *self {
            Range::Around { factor } => (center / factor, center * factor),
            Range::Between { low, high } => (low, high),
        }
    }

    /// Parses `LOW:HIGH` (absolute) or `xF` (around the entry's value).
    pub fn parse(text: &str) -> Result<Range> {
        let number = |s: &str| {
            s.trim()
                .parse::<f64>()
                .with_context(|| format!("{s:?} is not a number"))
        };
        if let Some(f) = text.strip_prefix('x') {
            return Ok(Range::Around { factor: number(f)? });
        }
        match text.split_once(':') {
            Some((low, high)) => Ok(Range::Between {
                low: number(low)?,
                high: number(high)?,
            }),
            None => bail!("range {text:?}: expected LOW:HIGH or xFACTOR"),
        }
    }
}

/// A preset's `search` section: every knob's range and where the ranges come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSpace {
    /// Why these ranges.
    pub source: String,
    /// Per knob, its range.
    pub ranges: BTreeMap<Axis, Range>,
}

impl SearchSpace {
    /// Checks every range; a knob a rule reads without a range is refused when drawn.
    pub fn check(&self) -> Result<()> {
        self.ranges.iter().try_for_each(|(k, r)| r.check(*k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_names_are_keys_of_the_core_table_or_the_forms_of_tau_and_home_lr() {
        let c = Config::new(homeadam_core::Rule::HomeAdamW(homeadam_core::Switch::Global));
        for knob in Axis::ALL {
            let table = Config::JSON_KEYS.iter().find(|(key, _)| *key == knob.name());
            match knob {
                Axis::Lr | Axis::Eps | Axis::WeightDecay => {
                    let (_, name) = table.unwrap_or_else(|| panic!("{knob} is no key of the table"));
                    assert!(matches!(c.knob(name), Some(Knob::Real(_))), "{knob}");
                    assert_eq!(c.knob(name), Some(Knob::Real(knob.value_in(&c))));
                }
                Axis::Tau | Axis::HomeShare | Axis::HomeLr => assert!(table.is_none(), "{knob}"),
            }
        }
    }
}
