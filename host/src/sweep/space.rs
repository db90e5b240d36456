//! The search space: which knobs each rule reads, their log-uniform ranges (a preset's
//! `search` section, or `--range` on the command line), and the seeded draw of a trial.

use std::collections::BTreeMap;
use std::fmt;

use anyhow::{bail, Context, Result};
use homeadam_core::{Config, Knob as CoreKnob};
use homeadam_replay::{Calibration, HyperParams, Tau};
use serde::{Deserialize, Serialize};

use crate::preset::OptimizerPreset;
use crate::rng::Rng;

/// A hyper-parameter the sweep varies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
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

impl Knob {
    /// Every knob, in the column order of `sweep.csv`.
    pub const ALL: [Knob; 6] = [
        Knob::Lr,
        Knob::Eps,
        Knob::WeightDecay,
        Knob::Tau,
        Knob::HomeShare,
        Knob::HomeLr,
    ];

    /// The preset key (and column) of the knob: for η, ε and λ the key of the core's knob
    /// table ([`Config::JSON_KEYS`]), for the others one of the forms τ and η_h are written in.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Lr => "lr",
            Knob::Eps => "eps",
            Knob::WeightDecay => "weight_decay",
            Knob::Tau => "tau",
            Knob::HomeShare => "home_share",
            Knob::HomeLr => "home_lr",
        }
    }

    /// The knob called `name`, or an error listing them.
    pub fn from_name(name: &str) -> Result<Knob> {
        Knob::ALL.into_iter().find(|k| k.name() == name).with_context(|| {
            let names: Vec<_> = Knob::ALL.iter().map(|k| k.name()).collect();
            format!("unknown knob {name:?} (known: {})", names.join(", "))
        })
    }

    /// The knobs the rule of `c` reads (the core's [`Config::knobs`], from the rule's spec): η
    /// always; ε where the rule reads it; λ where the entry decays (a rule run without decay
    /// has no λ to tune); for HomeAdam(W), τ (or the home share when τ is calibrated) and the
    /// home-branch rate. λ is drawn log-uniformly, so never 0: the decay-free candidate is the
    /// rule's non-W entry (`adam` for `adamw`), swept beside it.
    pub fn read_by(c: &Config) -> Vec<Knob> {
        let reads = |name: &str| c.knobs().any(|(knob, _)| knob == name);
        let mut knobs = vec![Knob::Lr];
        if reads("eps") {
            knobs.push(Knob::Eps);
        }
        if c.weight_decay > 0.0 {
            knobs.push(Knob::WeightDecay);
        }
        if reads("tau") {
            knobs.push(match c.tau_calibration {
                Some(_) => Knob::HomeShare,
                None => Knob::Tau,
            });
            knobs.push(Knob::HomeLr);
        }
        knobs
    }

    /// The knob's value in `c`.
    pub fn value_in(self, c: &Config) -> f64 {
        match self {
            Knob::Lr | Knob::Eps | Knob::WeightDecay => match c.knob(self.name()) {
                Some(CoreKnob::Real(x)) => x,
                _ => f64::NAN,
            },
            Knob::Tau => c.tau,
            Knob::HomeShare => c.tau_calibration.map_or(f64::NAN, |t| t.home_share),
            Knob::HomeLr => c.lr * c.home_lr_scale,
        }
    }
}

impl fmt::Display for Knob {
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
    pub fn check(&self, knob: Knob) -> Result<()> {
        match *self {
            Range::Around { factor } if !(factor > 1.0 && factor.is_finite()) => {
                bail!("range of {knob}: factor {factor} must be a finite number above 1")
            }
            Range::Between { low, high } if !(low > 0.0 && low < high && high.is_finite()) => {
                bail!("range of {knob}: {low}..{high} must satisfy 0 < low < high < inf (the draw is log-uniform)")
            }
            Range::Between { high, .. } if knob == Knob::HomeShare && high >= 1.0 => {
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
    pub ranges: BTreeMap<Knob, Range>,
}

impl SearchSpace {
    /// Checks every range; a knob a rule reads without a range is refused when drawn.
    pub fn check(&self) -> Result<()> {
        self.ranges.iter().try_for_each(|(k, r)| r.check(*k))
    }
}

/// One configuration of one optimizer: the knobs drawn for it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    /// The trial's number among the optimizer's, from 0.
    pub index: usize,
    /// The drawn values.
    pub knobs: BTreeMap<Knob, f64>,
}

/// Rounds to three significant digits, so that the configurations read as typed.
fn three_digits(x: f64) -> f64 {
    format!("{x:.2e}").parse().unwrap_or(x)
}

/// FNV-1a of a name: the optimizer's stream of draws, independent of the list's order.
fn name_stream(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Trial `index` of optimizer `name` whose validated config is `c`: each knob it reads drawn
/// log-uniformly from its range, from a stream fixed by (`seed`, `name`, `index`) alone, so a
/// trial's values do not depend on the budget, the other optimizers or the order of running.
pub fn draw(space: &SearchSpace, name: &str, c: &Config, seed: u64, index: usize) -> Result<Trial> {
    let mut rng = Rng::new(seed).fork(name_stream(name)).fork(index as u64);
    let mut knobs = BTreeMap::new();
    for knob in Knob::read_by(c) {
        let range = space.ranges.get(&knob).with_context(|| {
            format!("{name} reads {knob}, which has no range (add one to the preset's search section or pass --range {knob}=LOW:HIGH)")
        })?;
        let (low, high) = range.bounds(knob.value_in(c));
        // A range around the entry's value is checked only here, where the value is known.
        let share_above_1 = knob == Knob::HomeShare && high >= 1.0;
        if !(low > 0.0 && low < high && high.is_finite()) || share_above_1 {
            bail!(
                "{name}: the range of {knob} around its value {} is {low}..{high}: give it as LOW:HIGH{}",
                knob.value_in(c),
                if share_above_1 { " below 1" } else { "" }
            );
        }
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let value = (low.ln() + u * (high.ln() - low.ln())).exp();
        knobs.insert(knob, three_digits(value));
    }
    Ok(Trial { index, knobs })
}

/// `entry` with the trial's knobs in place of its own.
pub fn apply(entry: &OptimizerPreset, trial: &Trial) -> OptimizerPreset {
    let mut hyper: HyperParams = entry.hyper.clone();
    for (&knob, &value) in &trial.knobs {
        match knob {
            Knob::Lr | Knob::Eps | Knob::WeightDecay => hyper
                .set(knob.name(), CoreKnob::Real(value))
                .expect("the plain knobs are real keys of the core's knob table"),
            Knob::Tau => hyper.tau = Some(Tau::Fixed(value)),
            Knob::HomeShare => {
                let every = match hyper.tau {
                    Some(Tau::Calibrated(c)) => c.every,
                    _ => 1,
                };
                hyper.tau = Some(Tau::Calibrated(Calibration {
                    home_share: value,
                    every,
                }));
            }
            Knob::HomeLr => hyper.home_lr = Some(value),
        }
    }
    OptimizerPreset {
        hyper,
        ..entry.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knob_names_are_keys_of_the_core_table_or_the_forms_of_tau_and_home_lr() {
        let c = Config::new(homeadam_core::Rule::HomeAdamW(homeadam_core::Switch::Global));
        for knob in Knob::ALL {
            let table = Config::JSON_KEYS.iter().find(|(key, _)| *key == knob.name());
            match knob {
                Knob::Lr | Knob::Eps | Knob::WeightDecay => {
                    let (_, name) = table.unwrap_or_else(|| panic!("{knob} is no key of the table"));
                    assert!(matches!(c.knob(name), Some(CoreKnob::Real(_))), "{knob}");
                    assert_eq!(c.knob(name), Some(CoreKnob::Real(knob.value_in(&c))));
                }
                Knob::Tau | Knob::HomeShare | Knob::HomeLr => assert!(table.is_none(), "{knob}"),
            }
        }
    }

    fn space() -> SearchSpace {
        serde_json::from_str(
            r#"{"source": "ours: test", "ranges": {"lr": {"factor": 10}, "eps": {"low": 1e-8, "high": 1e-2},
                "weight_decay": {"factor": 10}, "tau": {"factor": 100}, "home_lr": {"factor": 10},
                "home_share": {"low": 0.01, "high": 0.5}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn each_rule_draws_the_knobs_it_reads_within_range() {
        let s = space();
        s.check().unwrap();
        let named = |n: &str| Config::named(n).unwrap();
        let sgdm = draw(&s, "sgdm", &named("sgdm"), 0, 0).unwrap();
        assert_eq!(sgdm.knobs.keys().copied().collect::<Vec<_>>(), [Knob::Lr]);
        let mut c = named("homeadamw");
        c.lr = 0.01;
        let t = draw(&s, "homeadamw", &c, 0, 3).unwrap();
        assert_eq!(
            t.knobs.keys().copied().collect::<Vec<_>>(),
            [Knob::Lr, Knob::Eps, Knob::WeightDecay, Knob::Tau, Knob::HomeLr]
        );
        assert!((1e-3..=0.1).contains(&t.knobs[&Knob::Lr]));
        assert!((1e-8..=1e-2).contains(&t.knobs[&Knob::Eps]));
        assert_eq!(t, draw(&s, "homeadamw", &c, 0, 3).unwrap());
        assert_ne!(t, draw(&s, "homeadamw", &c, 0, 4).unwrap());
        assert_ne!(t, draw(&s, "homeadamw", &c, 1, 3).unwrap());
    }

    #[test]
    fn a_preset_with_a_bad_search_section_is_refused() {
        let text = crate::preset::Preset::json("digits_quick").unwrap();
        let with = |ranges: &str| {
            let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
            v["search"]["ranges"] = serde_json::from_str(ranges).unwrap();
            crate::preset::Preset::from_json(&v.to_string()).map(|_| ())
        };
        with(r#"{"lr": {"factor": 10}}"#).unwrap();
        for (ranges, needle) in [
            (r#"{"lr": {"factor": 0.5}}"#, "above 1"),
            (r#"{"lr": {"low": 1, "high": 0.1}}"#, "0 < low"),
            (r#"{"beta": {"factor": 10}}"#, "beta"),
            (r#"{"lr": {"fctor": 10}}"#, "fctor"),
            (r#"{"lr": {"factor": 10, "low": 1}}"#, "a range is"),
        ] {
            let err = format!("{:#}", with(ranges).unwrap_err());
            assert!(err.contains(needle), "{ranges}: {err}");
        }
    }

    #[test]
    fn bad_ranges_and_names_are_errors() {
        for (text, needle) in [
            ("x1", "above 1"),
            ("0:1", "0 < low"),
            ("2:1", "0 < low"),
            ("1e-3:inf", "0 < low"),
            ("a:1", "not a number"),
            ("5", "LOW:HIGH"),
        ] {
            let err = Range::parse(text).and_then(|r| r.check(Knob::Lr)).unwrap_err();
            assert!(format!("{err:#}").contains(needle), "{text}: {err:#}");
        }
        let err = Range::parse("0.1:1").unwrap().check(Knob::HomeShare).unwrap_err();
        assert!(err.to_string().contains("below 1"), "{err}");
        assert!(Knob::from_name("beta")
            .unwrap_err()
            .to_string()
            .contains("home_lr"));
        let mut wide = space();
        wide.ranges
            .insert(Knob::HomeShare, Range::Around { factor: 20.0 });
        let preset = crate::preset::Preset::load("digits_quick").unwrap();
        let calibrated = preset.config("homeadamw-calibrated", 45).unwrap();
        let err = draw(&wide, "homeadamw-calibrated", &calibrated, 0, 0).unwrap_err();
        assert!(err.to_string().contains("below 1"), "{err}");
        let mut s = space();
        s.ranges.remove(&Knob::Eps);
        let err = draw(&s, "adam", &Config::named("adam").unwrap(), 0, 0).unwrap_err();
        assert!(err.to_string().contains("--range eps="), "{err}");
    }
}
