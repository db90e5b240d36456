//! Global / element-wise HomeAdamW step time on the step bench's model (16 M `f32` parameters in
//! 8 tensors of 2 M, the same values, τ = 1e-12, the default finite check, one thread), with
//! the rules' steps alternating so that the load of a shared machine falls on each alike; the
//! global rule also with [`Step::exact_decision`] (its first pass at every step):
//!
//! ```sh
//! cargo run --release -p homeadam-core --example global_ratio -- 40
//! ```
//!
//! Prints the median step time of each and the median of the per-round ratios.

use std::time::Instant;

use homeadam_core::{Config, Optimizer, Rule, Step, Switch, Tensor, TensorAux};

const PARAMS: usize = 16 << 20;
const TENSORS: usize = 8;

struct Model {
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    states: Vec<Vec<f32>>,
    aux: Vec<TensorAux>,
}

impl Model {
    fn new(opt: &Optimizer) -> Self {
        let n = PARAMS / TENSORS;
        let values = |offset: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|i| ((i + offset) as f32 * 0.618).sin() * scale)
                .collect()
        };
        Model {
            params: vec![values(0, 1.0); TENSORS],
            grads: vec![values(7, 1e-3); TENSORS],
            states: vec![vec![0.0; opt.state_len(n)]; TENSORS],
            aux: vec![TensorAux::default(); TENSORS],
        }
    }

    /// One step; `exact` decides on the first pass. Returns its seconds.
    fn step(&mut self, opt: &mut Optimizer, exact: bool) -> f64 {
        let mut tensors: Vec<Tensor<'_, f32, f32, f32>> = self
            .params
            .iter_mut()
            .zip(&self.grads)
            .zip(self.states.iter_mut())
            .zip(self.aux.iter_mut())
            .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
            .collect();
        let start = Instant::now();
        let mut step: Step<'_> = opt.begin(1.0).unwrap();
        if exact {
            step = step.exact_decision();
        }
        step.check(&mut tensors).unwrap();
        let mut updates = step.decide().unwrap();
        updates.update(&mut tensors).unwrap();
        updates.finish().unwrap();
        start.elapsed().as_secs_f64()
    }
}

fn median(mut x: Vec<f64>) -> f64 {
    x.sort_by(f64::total_cmp);
    x[x.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(40, |r| r.parse().expect("rounds"));
    let variants = [
        ("element-wise", Switch::Element, false),
        ("global", Switch::Global, false),
        ("global, exact first pass", Switch::Global, true),
    ];
    let mut runs: Vec<(Optimizer, Model)> = variants
        .iter()
        .map(|&(_, switch, _)| {
            let mut config = Config::new(Rule::HomeAdamW(switch));
            config.tau = 1e-12;
            let opt = Optimizer::new(config).unwrap();
            let model = Model::new(&opt);
            (opt, model)
        })
        .collect();
    let mut times = vec![Vec::new(); variants.len()];
    for round in 0..rounds + 3 {
        for (k, ((opt, model), &(_, _, exact))) in runs.iter_mut().zip(&variants).enumerate() {
            let t = model.step(opt, exact);
            // The first rounds warm the caches and give the global rule its bound.
            if round >= 3 {
                times[k].push(t);
            }
        }
    }
    for (k, &(name, ..)) in variants.iter().enumerate() {
        let ratios: Vec<f64> = times[k].iter().zip(&times[0]).map(|(a, b)| a / b).collect();
        println!(
            "{name}: median {:.2} ms, median ratio to element-wise {:.3}",
            1e3 * median(times[k].clone()),
            median(ratios)
        );
    }
    let (opt, _) = &runs[1];
    println!(
        "global: {} exact first passes in {} steps",
        opt.exact_first_passes(),
        opt.step_count()
    );
}
