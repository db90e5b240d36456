//! One step of a model whose tensors are split across processes (each process owns some of
//! them, as FSDP or ZeRO-1 do), taking the decisions that one process over the whole model
//! would take.
//!
//! A step's model-wide decisions read only what its checking phase found: whether every
//! gradient is finite, ρ_t = min v̂_t (over all elements and over the active ones) for the
//! global rule, and the calibration values of a calibrated τ. Each process checks its own
//! tensors, takes its [`ShardCheck`] with [`Step::shard_check`], the processes combine theirs
//! ([`ShardCheck::merge`]: a logical and, minima and integer sums, so that any order of
//! combination gives the same result, as an all-reduce may take), and each hands the
//! combined check to [`Step::merge_shards`] before [`Step::decide`]. Every process then decides
//! as the whole model's step does, and updates its tensors to the bits that step would give
//! them.
//!
//! Stochastic rounding and 8-bit state draw random bits keyed by a tensor's index in the model:
//! a process updates its tensors with [`Updates::update_as`] and their model-wide index.
//!
//! The global rule's bound on ρ_t ([`Step::check`]) knows one process's tensors only, so a
//! sharded step runs the exact first pass ([`Step::exact_decision`]). SWATS is refused: its
//! switch test reads every tensor's dot products in the model's order.

use crate::calibration::Histogram;
use crate::error::Error;
use crate::rules::only::RuleSet;
use crate::simd::Isa;
use crate::state::StateStorage;
use crate::step::{Step, Updates};
use crate::storage::Storage;
use crate::tensor::Tensor;

/// What a process's checking phase found, for the step's model-wide decisions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShardCheck {
    /// Every unscaled gradient checked was finite.
    pub finite: bool,
    /// min v̂_t over the elements checked (+∞ for none): ρ_t of the global rule.
    pub rho: f32,
    /// min v̂_t over the elements checked with v_t > 0 (+∞ for none).
    pub rho_active: f32,
    /// The values a calibrated τ counts at this step so far (the per-layer rule's ρ of each
    /// tensor, the element-wise rule's v̂ at a calibrating step); empty otherwise.
    pub decisions: Histogram,
}

impl ShardCheck {
    /// The check of both shards together: finite if both are, the smaller ρ's (exact; never
    /// NaN, which the first pass does not count), the counts summed (exact).
    pub fn merge(&self, other: &ShardCheck) -> ShardCheck {
        let mut decisions = self.decisions;
        decisions.merge(&other.decisions);
        ShardCheck {
            finite: self.finite && other.finite,
            rho: self.rho.min(other.rho),
            rho_active: self.rho_active.min(other.rho_active),
            decisions,
        }
    }
}

impl<F: RuleSet> Step<'_, F> {
    /// This process's check, after [`Step::check`] of every tensor it owns. Refused unless the
    /// step was started with [`Step::exact_decision`], and for SWATS.
    pub fn shard_check(&self) -> Result<ShardCheck, Error> {
        self.check_sharded()?;
        Ok(ShardCheck {
            finite: self.finite,
            rho: self.rho,
            rho_active: self.rho_active,
            decisions: self.opt.decisions.pending,
        })
    }

    /// Takes the check of the whole model (every process's [`ShardCheck`], merged, this one
    /// included) in place of this process's, before [`Step::decide`].
    pub fn merge_shards(&mut self, model: &ShardCheck) -> Result<(), Error> {
        self.check_sharded()?;
        self.finite = model.finite;
        self.rho = model.rho;
        self.rho_active = model.rho_active;
        self.opt.decisions.pending = model.decisions;
        Ok(())
    }

    fn check_sharded(&self) -> Result<(), Error> {
        let config = &self.opt.config;
        if let Some(switch) = config.rule.spec().phase_switch() {
            return Err(Error::NotForRule {
                name: "a step sharded across processes",
                rule: config.name(),
                hint: switch.unsharded,
            });
        }
        if !self.exact {
            return Err(Error::StepOrder(
                "a sharded step without Step::exact_decision (the bound on ρ knows one process's tensors)",
            ));
        }
        Ok(())
    }
}

impl<F: RuleSet> Updates<'_, F> {
    /// [`Updates::update`] of tensors that are the model's tensors `first`, `first + 1`, … :
    /// their random draws (stochastic rounding, q8 state) are keyed by these indices, as one
    /// process over the whole model keys them.
    pub fn update_as<P: Storage, G: Storage, S: StateStorage>(
        &mut self,
        tensors: &mut [Tensor<'_, P, G, S>],
        first: u64,
    ) -> Result<(), Error> {
        self.step
            .update_with::<false, P, G, S>(tensors, Isa::detect(), Some(first))
    }
}

#[cfg(test)]
mod tests {
    use crate::calibration::TauCalibration;
    use crate::rules::{Rule, Switch};
    use crate::state::StateStorage;
    use crate::{Config, Optimizer, Q8Block, Tensor, TensorAux};

    const SIZES: [usize; 4] = [300, 7, 1000, 33];

    fn grads(t: u64) -> Vec<Vec<f32>> {
        let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        SIZES
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                (0..n)
                    .map(|i| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        // Zeros in the first tensor for three steps: v̂ = 0 there sends the global rule home.
                        let zero = k == 0 && i < 3 && t <= 3;
                        if zero {
                            0.0
                        } else {
                            ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 10f32.powi(-(k as i32))
                        }
                    })
                    .collect()
            })
            .collect()
    }

    struct Model<S> {
        params: Vec<Vec<f32>>,
        states: Vec<Vec<S>>,
        auxes: Vec<TensorAux>,
    }

    fn model<S: StateStorage>(opt: &Optimizer) -> Model<S> {
        Model {
            params: SIZES
                .iter()
                .map(|&n| (0..n).map(|i| (i as f32 * 0.37).sin()).collect())
                .collect(),
            states: SIZES
                .iter()
                .map(|&n| vec![S::default(); opt.state_len_of::<S>(n)])
                .collect(),
            auxes: vec![TensorAux::default(); SIZES.len()],
        }
    }

    impl<S: StateStorage> Model<S> {
        /// The model's tensors with the gradients `g`.
        fn tensors<'a>(&'a mut self, g: &'a [Vec<f32>]) -> Vec<Tensor<'a, f32, f32, S>> {
            self.params
                .iter_mut()
                .zip(g)
                .zip(self.states.iter_mut().zip(self.auxes.iter_mut()))
                .map(|((p, g), (s, aux))| Tensor::new(p, g, s, aux))
                .collect()
        }
    }

    /// Steps a model with one optimizer per shard (tensors `0..split` and `split..`), their
    /// checks merged.
    fn sharded<S: StateStorage>(config: Config, steps: u64, split: usize) -> Model<S> {
        let (mut a, mut b) = (Optimizer::new(config).unwrap(), Optimizer::new(config).unwrap());
        let mut m = model::<S>(&a);
        for t in 1..=steps {
            let g = grads(t);
            let mut tensors = m.tensors(&g);
            let (left, right) = tensors.split_at_mut(split);
            let mut sa = a.begin(1.0).unwrap().exact_decision();
            let mut sb = b.begin(1.0).unwrap().exact_decision();
            sa.check(left).unwrap();
            sb.check(right).unwrap();
            let whole = sa.shard_check().unwrap().merge(&sb.shard_check().unwrap());
            sa.merge_shards(&whole).unwrap();
            sb.merge_shards(&whole).unwrap();
            let (mut ua, mut ub) = (sa.decide().unwrap(), sb.decide().unwrap());
            ua.update_as(left, 0).unwrap();
            ub.update_as(right, split as u64).unwrap();
            let (ra, rb) = (ua.finish().unwrap(), ub.finish().unwrap());
            assert_eq!((ra.step, ra.skipped, ra.tau), (rb.step, rb.skipped, rb.tau));
        }
        assert_eq!(a.tau(), b.tau());
        m
    }

    /// Steps a model with one optimizer; returns it and its home elements over the steps.
    fn whole<S: StateStorage>(config: Config, steps: u64) -> (Model<S>, u64) {
        let mut opt = Optimizer::new(config).unwrap();
        let mut m = model::<S>(&opt);
        let mut home = 0;
        for t in 1..=steps {
            let g = grads(t);
            let mut tensors = m.tensors(&g);
            home += opt.step(&mut tensors, 1.0).unwrap().home_elements;
        }
        (m, home)
    }

    #[test]
    fn shards_step_as_the_whole_model() {
        let calibrated = Some(TauCalibration {
            home_share: 0.3,
            every: 2,
        });
        for rule in [
            Rule::HomeAdamW(Switch::Global),
            Rule::HomeAdamW(Switch::Layer),
            Rule::HomeAdamW(Switch::Element),
            Rule::AdamW,
            Rule::Lion,
        ] {
            for tau_calibration in [None, calibrated] {
                let mut config = Config::new(rule);
                if rule.switch().is_some() {
                    config.tau = 1e-6;
                    config.tau_calibration = tau_calibration;
                } else if tau_calibration.is_some() {
                    continue;
                }
                let (one, home) = whole::<f32>(config, 6);
                if rule == Rule::HomeAdamW(Switch::Global) {
                    assert!(home > 0, "the zero gradients send some steps home");
                }
                let (one_q8, _) = whole::<Q8Block>(config, 6);
                for split in [0, 1, 3] {
                    let two = sharded::<f32>(config, 6, split);
                    assert_eq!(
                        one.params, two.params,
                        "{rule:?} {tau_calibration:?} split {split}"
                    );
                    assert_eq!(one.states, two.states);
                    // q8 state draws its rounding by the tensor's index in the model.
                    let two_q8 = sharded::<Q8Block>(config, 6, split);
                    assert_eq!(
                        one_q8.params, two_q8.params,
                        "q8 {rule:?} {tau_calibration:?} split {split}"
                    );
                    assert_eq!(one_q8.states, two_q8.states);
                }
            }
        }
    }

    #[test]
    fn a_non_finite_gradient_in_one_shard_skips_every_shard() {
        let config = Config::new(Rule::HomeAdamW(Switch::Global));
        let (mut a, mut b) = (Optimizer::new(config).unwrap(), Optimizer::new(config).unwrap());
        let (mut pa, mut pb) = ([1.0f32; 4], [1.0f32; 4]);
        let (ga, gb) = ([0.5f32; 4], [0.5, f32::NAN, 0.5, 0.5]);
        let (mut sa_state, mut sb_state) = ([0.0f32; 8], [0.0f32; 8]);
        let (mut xa, mut xb) = (TensorAux::default(), TensorAux::default());
        let mut ta = [Tensor::new(&mut pa, &ga, &mut sa_state, &mut xa)];
        let mut tb = [Tensor::new(&mut pb, &gb, &mut sb_state, &mut xb)];
        let mut sa = a.begin(1.0).unwrap().exact_decision();
        let mut sb = b.begin(1.0).unwrap().exact_decision();
        sa.check(&mut ta).unwrap();
        sb.check(&mut tb).unwrap();
        let whole = sa.shard_check().unwrap().merge(&sb.shard_check().unwrap());
        assert!(!whole.finite);
        sa.merge_shards(&whole).unwrap();
        let mut ua = sa.decide().unwrap();
        ua.update(&mut ta).unwrap();
        assert!(ua.finish().unwrap().skipped);
        assert_eq!(pa, [1.0; 4]);
    }

    #[test]
    fn refused_without_the_exact_decision_and_for_swats() {
        let mut opt = Optimizer::new(Config::new(Rule::HomeAdamW(Switch::Global))).unwrap();
        assert!(opt.begin(1.0).unwrap().shard_check().is_err());
        let mut swats = Optimizer::new(Config::new(Rule::Swats)).unwrap();
        assert!(swats.begin(1.0).unwrap().exact_decision().shard_check().is_err());
    }
}
