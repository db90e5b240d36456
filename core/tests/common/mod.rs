//! Helpers shared by the core's integration tests.
#![allow(dead_code, unused_macros)]

use homeadam_core::{
    Config, Group, Optimizer, Rule, StepReport, Storage, Switch, Tensor, TensorAux, ALL_RULES,
};

/// One model's tensors, owned.
#[derive(Clone, Debug)]
pub struct Model<P, G, S> {
    pub params: Vec<Vec<P>>,
    pub grads: Vec<Vec<G>>,
    pub states: Vec<Vec<S>>,
    pub aux: Vec<TensorAux>,
    /// Each tensor's parameter group (all [`Group::DEFAULT`] from `new`).
    pub groups: Vec<Group>,
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
            groups: vec![Group::DEFAULT; params.len()],
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
            .zip(&self.groups)
            .map(|((((p, g), s), a), &group)| Tensor::new(p, g, s, a).in_group(group))
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
    let mut c = base(Rule::Sgd);
    c.momentum = 0.9;
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

/// Calls `$m! { name: P, G, S; … }` with every parameter × gradient × state storage
/// combination (27), so that each test file makes one test per combination.
macro_rules! every_storage {
    ($m:ident) => {
        $m! {
            p32_g32_s32: f32, f32, f32;
            p32_g32_s16: f32, f32, f16;
            p32_g32_sb16: f32, f32, bf16;
            p32_g16_s32: f32, f16, f32;
            p32_g16_s16: f32, f16, f16;
            p32_g16_sb16: f32, f16, bf16;
            p32_gb16_s32: f32, bf16, f32;
            p32_gb16_s16: f32, bf16, f16;
            p32_gb16_sb16: f32, bf16, bf16;
            p16_g32_s32: f16, f32, f32;
            p16_g32_s16: f16, f32, f16;
            p16_g32_sb16: f16, f32, bf16;
            p16_g16_s32: f16, f16, f32;
            p16_g16_s16: f16, f16, f16;
            p16_g16_sb16: f16, f16, bf16;
            p16_gb16_s32: f16, bf16, f32;
            p16_gb16_s16: f16, bf16, f16;
            p16_gb16_sb16: f16, bf16, bf16;
            pb16_g32_s32: bf16, f32, f32;
            pb16_g32_s16: bf16, f32, f16;
            pb16_g32_sb16: bf16, f32, bf16;
            pb16_g16_s32: bf16, f16, f32;
            pb16_g16_s16: bf16, f16, f16;
            pb16_g16_sb16: bf16, f16, bf16;
            pb16_gb16_s32: bf16, bf16, f32;
            pb16_gb16_s16: bf16, bf16, f16;
            pb16_gb16_sb16: bf16, bf16, bf16;
        }
    };
}
