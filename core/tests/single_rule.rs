//! The single-rule entry point (`Optimizer::step_only`, `rules::only`): the same bits as
//! `Optimizer::step` for every rule built with its own marker, and a typed error, with nothing
//! written, for a rule the set does not hold.

use homeadam_core::rules::only::{self, RuleSet};
use homeadam_core::{
    bf16, Config, Error, Optimizer, Q8Block, Rule, StateStorage, Storage, Switch, Tensor, TensorAux,
};

const N: usize = 300;

/// Gradients of step `t`: varied signs and magnitudes, some zeros (HomeAdam's home branch).
fn grads(t: u64) -> Vec<f32> {
    (0..N)
        .map(|i| match (i as u64 * 7 + t) % 11 {
            0 => 0.0,
            k => (k as f32 - 5.5) * 1e-3 * (1.0 + t as f32),
        })
        .collect()
}

/// θ, state and reports after five steps of `config`, by `Optimizer::step` or, with `only`,
/// by `Optimizer::step_only::<F>`.
fn run<F: RuleSet, P: Storage, S: StateStorage>(
    config: Config,
    only: bool,
) -> (Vec<u32>, Vec<S>, Vec<String>) {
    let mut opt = Optimizer::new(config).unwrap();
    let mut params: Vec<P> = (0..N).map(|i| P::from_f32(0.5 - i as f32 * 1e-3)).collect();
    let mut state = vec![S::default(); opt.state_len_of::<S>(N)];
    let mut aux = TensorAux::default();
    let mut reports = Vec::new();
    for t in 0..5 {
        let g = grads(t);
        let mut model = [Tensor::new(&mut params[..], &g[..], &mut state[..], &mut aux)];
        let report = if only {
            opt.step_only::<F, _, _, _>(&mut model, 2.0)
        } else {
            opt.step(&mut model, 2.0)
        };
        reports.push(format!("{:?} {:?}", report.unwrap(), aux));
    }
    (params.iter().map(|p| p.to_bits32()).collect(), state, reports)
}

fn same_as_step<F: RuleSet>(config: Config) {
    assert!(F::admits(config.rule));
    let name = config.name();
    let (p, s, r) = run::<F, f32, f32>(config, true);
    let (p0, s0, r0) = run::<F, f32, f32>(config, false);
    assert_eq!(p, p0, "{name}: θ");
    let bits = |s: &[f32]| s.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&s), bits(&s0), "{name}: state");
    assert_eq!(r, r0, "{name}: reports");
    let (p, s, r) = run::<F, bf16, Q8Block>(config, true);
    let (p0, s0, r0) = run::<F, bf16, Q8Block>(config, false);
    assert!(p == p0 && s == s0 && r == r0, "{name}: bf16 θ, q8 state");
}

#[test]
fn every_rule_alone_gives_the_bits_of_step() {
    for name in Config::NAMES {
        let config = Config::named(name).unwrap();
        match config.rule {
            Rule::Sgd => same_as_step::<only::Sgd>(config),
            Rule::Adam => same_as_step::<only::Adam>(config),
            Rule::AdamW => same_as_step::<only::AdamW>(config),
            Rule::AdamSrf => same_as_step::<only::AdamSrf>(config),
            Rule::AdamWSrf => same_as_step::<only::AdamWSrf>(config),
            Rule::HomeAdam(Switch::Element) => same_as_step::<only::HomeAdamElement>(config),
            Rule::HomeAdamW(Switch::Element) => same_as_step::<only::HomeAdamWElement>(config),
            Rule::HomeAdam(_) => same_as_step::<only::HomeAdam>(config),
            Rule::HomeAdamW(_) => same_as_step::<only::HomeAdamW>(config),
            Rule::AdaBelief => same_as_step::<only::AdaBelief>(config),
            Rule::Swats => same_as_step::<only::Swats>(config),
            Rule::MiAdam => same_as_step::<only::MiAdam>(config),
            Rule::Lion => same_as_step::<only::Lion>(config),
        }
        same_as_step::<only::All>(config);
        same_as_step::<(only::MiAdam, only::All)>(config);
    }
}

#[test]
fn a_rule_outside_the_set_is_refused_before_anything_is_written() {
    let refused = |config: Config, rule: &'static str| {
        let mut opt = Optimizer::new(config).unwrap();
        let mut params = [0.5f32; N];
        let g = grads(1);
        let mut state = vec![0.0f32; opt.state_len(N)];
        let mut aux = TensorAux::default();
        let before = (params, state.clone(), aux);
        let mut model = [Tensor::new(&mut params[..], &g[..], &mut state[..], &mut aux)];
        let err = opt.step_only::<(only::HomeAdamWElement, only::Sgd), _, _, _>(&mut model, 1.0);
        assert_eq!(err, Err(Error::RuleNotLinked { rule }));
        assert_eq!((params, state, aux), before, "{rule}: nothing written");
        assert_eq!(opt.step_count(), 0);
        let err = opt.begin_only::<only::HomeAdamWElement>(1.0).err();
        assert_eq!(err, Some(Error::RuleNotLinked { rule }));
        assert!(Error::RuleNotLinked { rule }.to_string().contains(rule));
    };
    refused(Config::new(Rule::AdamW), "adamw");
    // The element-wise marker does not link the global rule's first pass or kernels.
    refused(Config::new(Rule::HomeAdamW(Switch::Global)), "homeadamw");
    refused(Config::new(Rule::HomeAdam(Switch::Element)), "homeadam-ew");
    // SGD with momentum is the rule `sgd`: in the set.
    let mut opt = Optimizer::new(Config::named("sgdm").unwrap()).unwrap();
    let (mut p, g, mut s, mut aux) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4], TensorAux::default());
    let mut model = [Tensor::new(&mut p, &g, &mut s, &mut aux)];
    let report = opt.step_only::<(only::HomeAdamWElement, only::Sgd), _, _, _>(&mut model, 1.0);
    assert_eq!(report.unwrap().step, 1);
}

#[test]
fn the_markers_admit_their_rules_only() {
    use homeadam_core::ALL_RULES;
    let admitted = |f: fn(Rule) -> bool| ALL_RULES.iter().filter(|&&r| f(r)).count();
    assert_eq!(admitted(only::All::admits), ALL_RULES.len());
    assert_eq!(admitted(only::HomeAdamW::admits), 3);
    assert_eq!(admitted(only::HomeAdamWElement::admits), 1);
    assert_eq!(admitted(<(only::AdamW, only::HomeAdamW)>::admits), 4);
}
