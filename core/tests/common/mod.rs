//! Helpers shared by the core's integration tests.
#![allow(dead_code, unused_macros)]

use homeadam_core::{
    bf16, f16, Config, Group, Optimizer, Q8Block, RhoOver, Rule, Simd, StateStorage, StepReport, Storage,
    Switch, TauCalibration, Tensor, TensorAux, ALL_RULES,
};

/// A deterministic draw for element `i` of stream `seed`: its hash, whose low bits a caller may
/// read to pick a magnitude, and a value in [-1, 1) from the hash's top 24 bits.
pub fn draw(seed: u64, i: u64) -> (u64, f32) {
    let z = homeadam_core::backend::mix64(seed ^ homeadam_core::backend::mix64(i));
    (z, (z >> 40) as f32 / 16_777_216.0 * 2.0 - 1.0)
}

/// A state item's bits, for comparisons.
pub trait StateBits: StateStorage {
    fn bits(&self) -> Vec<u32>;
}

macro_rules! element_bits {
    ($($t:ty),*) => {$(
        impl StateBits for $t {
            fn bits(&self) -> Vec<u32> {
                vec![self.to_bits32()]
            }
        }
    )*};
}
element_bits!(f32, f16, bf16);

impl StateBits for Q8Block {
    fn bits(&self) -> Vec<u32> {
        let mut out = vec![self.scale.to_bits()];
        out.extend(self.codes.iter().map(|&c| c as u32));
        out
    }
}

/// The driver of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// `Updates::update`: the fast path with this CPU's best instruction set.
    Fast,
    /// `Updates::update_on(simd)`: the fast path with that instruction set.
    On(Simd),
    /// `Updates::update_reference`: the scalar reference.
    Reference,
    /// `Updates::update` with the step spread over this many threads.
    Threads(usize),
}

/// The paths every fast-path test compares with the reference: every instruction set this CPU
/// has (the portable code, and AVX2 and AVX-512 or NEON where present); only the best in
/// unoptimized builds (the everyday `cargo test`: the optimized run covers them all).
pub fn fast_paths() -> Vec<Path> {
    if cfg!(homeadam_unoptimized) {
        return vec![Path::Fast];
    }
    Simd::ALL
        .into_iter()
        .filter(|simd| simd.is_available())
        .map(Path::On)
        .collect()
}

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

impl<P: Storage, G: Storage, S: StateBits> Model<P, G, S> {
    pub fn new(opt: &Optimizer, params: &[Vec<f32>]) -> Self {
        Model {
            params: params
                .iter()
                .map(|t| t.iter().map(|&x| P::from_f32(x)).collect())
                .collect(),
            grads: params.iter().map(|t| vec![G::default(); t.len()]).collect(),
            states: params
                .iter()
                .map(|t| vec![S::default(); opt.state_len_of::<S>(t.len())])
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
        let path = if reference { Path::Reference } else { Path::Fast };
        self.step_on(opt, grad_scale, path)
    }

    /// One step through `path`.
    pub fn step_on(
        &mut self,
        opt: &mut Optimizer,
        grad_scale: f64,
        path: Path,
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
        let threads = match path {
            Path::Threads(n) => n,
            _ => 1,
        };
        let mut step = opt.begin(grad_scale)?.with_threads(threads);
        if path == Path::Reference {
            // The reference decides on the exact first pass; the fast paths on its bounds.
            step = step.exact_decision();
        }
        step.check(&mut tensors)?;
        let mut updates = step.decide()?;
        match path {
            Path::Fast | Path::Threads(_) => updates.update(&mut tensors)?,
            Path::On(simd) => updates.update_on(&mut tensors, simd)?,
            Path::Reference => updates.update_reference(&mut tensors)?,
        }
        updates.finish()
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
            .map(|t| t.iter().flat_map(|x| x.bits()).collect())
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
    for switch in [Switch::Global, Switch::Layer] {
        let mut c = base(Rule::HomeAdamW(switch));
        c.tau = 1e-6;
        c.rho_over = RhoOver::Active;
        out.push(c);
    }
    for switch in [Switch::Global, Switch::Layer, Switch::Element] {
        let mut c = base(Rule::HomeAdamW(switch));
        c.home_lr_scale = 50.0;
        c.tau_calibration = Some(TauCalibration {
            home_share: 0.3,
            every: 2,
        });
        if switch != Switch::Element {
            c.rho_over = RhoOver::Active;
        }
        out.push(c);
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
    let mut c = base(Rule::Lion);
    c.weight_decay = 1e-1;
    out.push(c);
    out
}

/// Calls `$m! { name: P, G, S; … }` with every parameter × gradient × state storage
/// combination (27), and q8 state with each parameter and gradient type, so that each test file
/// makes one test per combination. Under emulation (`--cfg homeadam_emulated`: `cargo xtask`
/// runs the aarch64 tests in QEMU, where building and running all 27 costs minutes), each
/// storage type in each position, and every conversion NEON does itself (f16 and bf16 loads and
/// stores of θ, g and the state): the first call, and q8 state of bf16 θ and g.
macro_rules! every_storage {
    ($m:ident) => {
        $m! {
            p32_g32_s32: f32, f32, f32;
            pb16_gb16_sb16: bf16, bf16, bf16;
            p16_g16_s16: f16, f16, f16;
            pb16_g32_s32: bf16, f32, f32;
            p32_gb16_s16: f32, bf16, f16;
            p16_g32_sb16: f16, f32, bf16;
        }
        #[cfg(homeadam_emulated)]
        $m! {
            pb16_gb16_q8: bf16, bf16, Q8Block;
        }
        #[cfg(not(homeadam_emulated))]
        $m! {
            p32_g32_s16: f32, f32, f16;
            p32_g32_sb16: f32, f32, bf16;
            p32_g16_s32: f32, f16, f32;
            p32_g16_s16: f32, f16, f16;
            p32_g16_sb16: f32, f16, bf16;
            p32_gb16_s32: f32, bf16, f32;
            p32_gb16_sb16: f32, bf16, bf16;
            p16_g32_s32: f16, f32, f32;
            p16_g32_s16: f16, f32, f16;
            p16_g16_s32: f16, f16, f32;
            p16_g16_sb16: f16, f16, bf16;
            p16_gb16_s32: f16, bf16, f32;
            p16_gb16_s16: f16, bf16, f16;
            p16_gb16_sb16: f16, bf16, bf16;
            pb16_g32_s16: bf16, f32, f16;
            pb16_g32_sb16: bf16, f32, bf16;
            pb16_g16_s32: bf16, f16, f32;
            pb16_g16_s16: bf16, f16, f16;
            pb16_g16_sb16: bf16, f16, bf16;
            pb16_gb16_s32: bf16, bf16, f32;
            pb16_gb16_s16: bf16, bf16, f16;
            p32_g32_q8: f32, f32, Q8Block;
            p32_gb16_q8: f32, bf16, Q8Block;
            pb16_g16_q8: bf16, f16, Q8Block;
        }
    };
}
