//! Helpers shared by the core's integration tests.
#![allow(dead_code)]

use homeadam_core::{Config, Optimizer, Rule, StepReport, Storage, Switch, Tensor, TensorAux, ALL_RULES};

/// One model's tensors, owned.
#[derive(Clone, Debug)]
pub struct Model<P, G, S> {
    pub params: Vec<Vec<P>>,
    pub grads: Vec<Vec<G>>,
    pub states: Vec<Vec<S>>,
    pub aux: Vec<TensorAux>,
}

impl<P: Storage, G: Storage, S: Storage> Model<P, G, S> {
    pub fn new(opt: &Optimizer, params: &[Vec<f32>]) -> Self {
        Model {
            params: params
                .iter()
                .map(|t| t.iter().map(|&x| P::from_f32(x)).collect())
                .collect(),
            grads: params.iter().map(|t| vec![G::default(); t.len()]).collect(),
            states: params
                .iter()
                .map(|t| vec![S::default(); opt.state_len(t.len())])
                .collect(),
            aux: vec![TensorAux::default(); params.len()],
        }
    }

    pub fn set_grads(&mut self, grads: &[Vec<f32>]) {
        for (dst, src) in self.grads.iter_mut().zip(grads) {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = G::from_f32(s);
            }
        }
    }

    pub fn step(
        &mut self,
        opt: &mut Optimizer,
        grad_scale: f64,
        reference: bool,
    ) -> Result<StepReport, homeadam_core::Error> {
        let mut tensors: Vec<Tensor<'_, P, G, S>> = self
            .params
            .iter_mut()
            .zip(&self.grads)
            .zip(self.states.iter_mut())
            .zip(self.aux.iter_mut())
            .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
            .collect();
        if reference {
            opt.step_reference(&mut tensors, grad_scale)
        } else {
            opt.step(&mut tensors, grad_scale)
        }
    }

    pub fn param_bits(&self) -> Vec<Vec<u32>> {
        self.params
            .iter()
            .map(|t| t.iter().map(|x| x.to_bits32()).collect())
            .collect()
    }

    pub fn state_bits(&self) -> Vec<Vec<u32>> {
        self.states
            .iter()
            .map(|t| t.iter().map(|x| x.to_bits32()).collect())
            .collect()
    }

    pub fn aux_bits(&self) -> Vec<[u32; 3]> {
        self.aux
            .iter()
            .map(|a| [a.swats_lambda.to_bits(), a.rho.to_bits(), a.home_elements])
            .collect()
    }

    pub fn params_f32(&self) -> Vec<Vec<f32>> {
        self.params
            .iter()
            .map(|t| t.iter().map(|x| x.to_f32()).collect())
            .collect()
    }
}

/// The configs every property test runs: each rule at its defaults plus the variants that take
/// other code paths.
pub fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for rule in ALL_RULES {
        let mut c = Config::new(rule);
        c.lr = 1e-2;
        c.allow_f16_state = true;
        out.push(c);
    }
    let base = |rule| {
        let mut c = Config::new(rule);
        c.lr = 1e-2;
        c.allow_f16_state = true;
        c
    };
    let mut c = base(Rule::Sgd);
    c.weight_decay = 1e-2;
    c.momentum = 0.9;
    c.dampening = 0.1;
    out.push(c);
    let mut c = base(Rule::Sgdm);
    c.nesterov = true;
    out.push(c);
    let mut c = base(Rule::Adam);
    c.weight_decay = 1e-2;
    out.push(c);
    for tau in [1e-30, 1e-6, 1e3] {
        for switch in [Switch::Global, Switch::Layer, Switch::Element] {
            let mut c = base(Rule::HomeAdamW(switch));
            c.tau = tau;
            out.push(c);
        }
    }
    let mut c = base(Rule::AdaBelief);
    c.amsgrad = true;
    c.weight_decouple = false;
    c.weight_decay = 1e-3;
    out.push(c);
    let mut c = base(Rule::AdaBelief);
    c.rectify = false;
    c.fixed_decay = true;
    c.weight_decay = 1e-3;
    out.push(c);
    let mut c = base(Rule::Swats);
    c.eps = 0.5; // a loose switch test, so the SGD phase is reached in a few steps
    c.weight_decay = 1e-3;
    out.push(c);
    let mut c = base(Rule::MiAdam);
    c.kappa = 0.9;
    c.switch_step = 2;
    c.weight_decay = 1e-3;
    out.push(c);
    out
}
