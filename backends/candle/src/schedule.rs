//! Learning-rate schedules: η at schedule position k from the base rate η₀.
//!
//! The position counts whatever the caller advances it by (steps or epochs, see
//! [`crate::VarOptimizer::advance_schedule`]); it is saved with the optimizer state so a
//! resumed run continues on the same curve. A linear warm-up
//! ([`crate::OptimConfig::warmup`]) composes with every schedule
//! ([`Schedule::lr_after_warmup`]).

/// A learning-rate schedule.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Schedule {
    /// η_k = η₀.
    #[default]
    Constant,
    /// Cosine annealing to a floor (PyTorch `CosineAnnealingLR` without restarts):
    /// η_k = η_min + (η₀ − η_min) · (1 + cos(π · min(k, K) / K)) / 2, so η_K = η_min and the
    /// rate stays at the floor after K positions.
    Cosine {
        /// K, the positions the decay takes (> 0).
        total: u64,
        /// η_min, the floor.
        min_lr: f64,
    },
    /// Step decay (PyTorch `StepLR`): η_k = η₀ · γ^⌊k / N⌋.
    Step {
        /// N, positions between decays (> 0).
        every: u64,
        /// γ, the factor applied every N positions.
        gamma: f64,
    },
}

impl Schedule {
    /// `constant`, `cosine(total K, min_lr η_min)` or `step(every N, gamma γ)`, each number as
    /// the shortest text that reads back to the same value (as a saved state records it).
    pub(crate) fn text(&self) -> String {
        match *self {
            Schedule::Constant => "constant".into(),
            Schedule::Cosine { total, min_lr } => format!("cosine(total {total}, min_lr {min_lr})"),
            Schedule::Step { every, gamma } => format!("step(every {every}, gamma {gamma})"),
        }
    }

    /// The schedule [`Schedule::text`] wrote as `text`.
    pub(crate) fn parse(text: &str) -> Option<Schedule> {
        if text == "constant" {
            return Some(Schedule::Constant);
        }
        let (kind, args) = text.strip_suffix(')')?.split_once('(')?;
        let (first, second) = args.split_once(", ")?;
        let value = |arg: &str, key: &str| arg.strip_prefix(key)?.strip_prefix(' ').map(str::to_owned);
        match kind {
            "cosine" => Some(Schedule::Cosine {
                total: value(first, "total")?.parse().ok()?,
                min_lr: value(second, "min_lr")?.parse().ok()?,
            }),
            "step" => Some(Schedule::Step {
                every: value(first, "every")?.parse().ok()?,
                gamma: value(second, "gamma")?.parse().ok()?,
            }),
            _ => None,
        }
    }

    /// Checks the schedule's own parameters.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Schedule::Constant => Ok(()),
            Schedule::Cosine { total: 0, .. } => Err("cosine schedule: total must be > 0".into()),
            Schedule::Cosine { min_lr, .. } if !(min_lr.is_finite() && min_lr >= 0.0) => Err(format!(
                "cosine schedule: min_lr = {min_lr}, expected a finite value >= 0"
            )),
            Schedule::Step { every: 0, .. } => Err("step schedule: every must be > 0".into()),
            Schedule::Step { gamma, .. } if !(gamma.is_finite() && gamma >= 0.0) => Err(format!(
                "step schedule: gamma = {gamma}, expected a finite value >= 0"
            )),
            _ => Ok(()),
        }
    }

    /// η at position `k` for base rate `base` after `warmup` = W positions of linear warm-up:
    /// η_k = schedule(η₀, 0) · (k + 1) / W for k < W (the rate reaches the schedule's start at
    /// the last warm-up position; no position steps at 0), then η_k = schedule(η₀, k − W), so
    /// the schedule runs its whole course after the warm-up. W = 0 is the schedule alone.
    pub fn lr_after_warmup(&self, base: f64, k: u64, warmup: u64) -> f64 {
        if k < warmup {
            self.lr(base, 0) * (k + 1) as f64 / warmup as f64
        } else {
            self.lr(base, k - warmup)
        }
    }

    /// η at position `k` for base rate `base`.
    pub fn lr(&self, base: f64, k: u64) -> f64 {
        match *self {
            Schedule::Constant => base,
            Schedule::Cosine { total, min_lr } => {
                let progress = k.min(total) as f64 / total.max(1) as f64;
                min_lr + (base - min_lr) * (1.0 + (std::f64::consts::PI * progress).cos()) / 2.0
            }
            Schedule::Step { every, gamma } => {
                let decays = (k / every.max(1)).min(i32::MAX as u64) as i32;
                base * gamma.powi(decays)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant() {
        assert_eq!(Schedule::Constant.lr(0.1, 0), 0.1);
        assert_eq!(Schedule::Constant.lr(0.1, 1_000_000), 0.1);
    }

    #[test]
    fn cosine_exact_points() {
        let s = Schedule::Cosine {
            total: 4,
            min_lr: 0.0,
        };
        assert_eq!(s.lr(1.0, 0), 1.0);
        // cos(π/2) is 6.1e-17 in f64, not 0.
        assert_eq!(s.lr(1.0, 2), (1.0 + std::f64::consts::FRAC_PI_2.cos()) / 2.0);
        assert!((s.lr(1.0, 2) - 0.5).abs() < 1e-16);
        assert!((s.lr(1.0, 1) - (2.0 + 2f64.sqrt()) / 4.0).abs() < 1e-16);
        assert_eq!(s.lr(1.0, 4), 0.0);
        let floor = Schedule::Cosine {
            total: 10,
            min_lr: 0.01,
        };
        assert_eq!(floor.lr(0.1, 10), 0.01);
        assert_eq!(floor.lr(0.1, 25), 0.01);
    }

    #[test]
    fn step_exact_points() {
        let s = Schedule::Step {
            every: 30,
            gamma: 0.1,
        };
        assert_eq!(s.lr(1.0, 0), 1.0);
        assert_eq!(s.lr(1.0, 29), 1.0);
        assert_eq!(s.lr(1.0, 30), 0.1);
        assert_eq!(s.lr(1.0, 60), 0.1 * 0.1);
        let half = Schedule::Step { every: 2, gamma: 0.5 };
        assert_eq!(half.lr(0.8, 5), 0.2);
    }

    #[test]
    fn warmup_then_the_whole_schedule() {
        let cosine = Schedule::Cosine {
            total: 4,
            min_lr: 0.0,
        };
        let lr: Vec<f64> = (0..8).map(|k| cosine.lr_after_warmup(1.0, k, 4)).collect();
        assert_eq!(lr[..4], [0.25, 0.5, 0.75, 1.0]);
        assert_eq!(lr[4..], (0..4).map(|k| cosine.lr(1.0, k)).collect::<Vec<_>>());
        assert_eq!(Schedule::Constant.lr_after_warmup(0.1, 0, 0), 0.1);
        let step = Schedule::Step { every: 2, gamma: 0.5 };
        assert_eq!(step.lr_after_warmup(0.8, 1, 2), 0.8);
        assert_eq!(step.lr_after_warmup(0.8, 4, 2), 0.4);
    }

    #[test]
    fn text_reads_back() {
        for s in [
            Schedule::Constant,
            Schedule::Cosine {
                total: 4,
                min_lr: 1e-5,
            },
            Schedule::Step {
                every: 30,
                gamma: 0.1,
            },
        ] {
            assert_eq!(Schedule::parse(&s.text()), Some(s), "{s:?}");
        }
        assert_eq!(Schedule::parse("cosine(total 4)"), None);
    }

    #[test]
    fn bad_parameters_are_refused() {
        assert!(Schedule::Cosine {
            total: 0,
            min_lr: 0.0
        }
        .validate()
        .is_err());
        assert!(Schedule::Cosine {
            total: 5,
            min_lr: f64::NAN
        }
        .validate()
        .is_err());
        assert!(Schedule::Step { every: 0, gamma: 0.5 }.validate().is_err());
        assert!(Schedule::Step {
            every: 3,
            gamma: -1.0
        }
        .validate()
        .is_err());
        assert!(Schedule::Step { every: 3, gamma: 0.5 }.validate().is_ok());
    }
}
