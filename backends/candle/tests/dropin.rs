//! homeadam-candle in place of candle-nn's `AdamW`, as the README's swap shows: the same model,
//! the same data and the same defaults give candle-nn's numbers.
//!
//! The two optimizers order their `f32` operations differently, so each step may differ by an
//! ulp, and a free run lets such differences grow by an amount that depends on the start and on
//! the CPU's matmul kernels. So the rule is compared step by step from the same parameters, where
//! nothing can grow; only the decay mask's effect, far larger, is measured over a free run.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{linear, Optimizer, ParamsAdamW, VarBuilder, VarMap};
use homeadam_candle::core::{Config, Rule};
use homeadam_candle::{OptimConfig, VarOptimizer};

/// A 4-8-1 MLP with biases (which a decay mask would exempt), from a fixed start, on 16 fixed
/// points.
struct Setup {
    varmap: VarMap,
    model: candle_nn::Sequential,
    x: Tensor,
    y: Tensor,
}

fn setup() -> Setup {
    let dev = Device::Cpu;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
    let model = candle_nn::seq()
        .add(linear(4, 8, vb.pp("fc1")).unwrap())
        .add(candle_nn::Activation::Relu)
        .add(linear(8, 1, vb.pp("fc2")).unwrap());
    for var in varmap.all_vars() {
        let n = var.elem_count();
        let start = Tensor::arange(0f32, n as f32, &dev)
            .unwrap()
            .affine(0.5 / n as f64, -0.25)
            .unwrap();
        var.set(&start.reshape(var.shape()).unwrap()).unwrap();
    }
    let x = Tensor::arange(0f32, 64.0, &dev)
        .unwrap()
        .affine(1.0 / 32.0, -1.0)
        .unwrap();
    let x = x.reshape((16, 4)).unwrap();
    let y = x.sin().unwrap().sum_keepdim(1).unwrap();
    Setup { varmap, model, x, y }
}

/// Both optimizers' parameters start from the same values.
fn copy_vars(from: &VarMap, to: &VarMap) {
    let data = from.data().lock().unwrap();
    for (name, var) in data.iter() {
        let mut to = to.clone();
        to.set_one(name, var.as_tensor()).unwrap();
    }
}

fn train(s: &Setup, opt: &mut impl Optimizer, steps: usize) {
    for _ in 0..steps {
        let loss = s
            .model
            .forward(&s.x)
            .unwrap()
            .sub(&s.y)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap();
        opt.backward_step(&loss).unwrap();
    }
}

fn params(varmap: &VarMap) -> Vec<(String, Vec<f32>)> {
    let mut all: Vec<_> = varmap
        .data()
        .lock()
        .unwrap()
        .iter()
        .map(|(n, v)| (n.clone(), v.flatten_all().unwrap().to_vec1().unwrap()))
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// The largest difference between two runs' parameters.
fn max_difference(a: &VarMap, b: &VarMap) -> f32 {
    let (a, b) = (params(a), params(b));
    let mut worst = 0f32;
    for ((na, va), (nb, vb)) in a.iter().zip(&b) {
        assert_eq!(na, nb);
        for (x, y) in va.iter().zip(vb) {
            worst = worst.max((x - y).abs());
        }
    }
    worst
}

#[test]
fn adamw_matches_candle_nn_at_each_of_900_steps() {
    let (ours, theirs) = (setup(), setup());
    let mut reference = candle_nn::AdamW::new(theirs.varmap.all_vars(), ParamsAdamW::default()).unwrap();
    let mut opt =
        VarOptimizer::from_varmap(&ours.varmap, OptimConfig::new(Config::new(Rule::AdamW))).unwrap();
    let mut worst = 0f32;
    for _ in 0..900 {
        train(&theirs, &mut reference, 1);
        train(&ours, &mut opt, 1);
        worst = worst.max(max_difference(&ours.varmap, &theirs.varmap));
        copy_vars(&ours.varmap, &theirs.varmap);
    }
    assert!(worst < 1e-6, "largest difference in one step {worst}");
}

#[test]
fn the_decay_mask_asked_for_is_the_one_difference() {
    let (masked, theirs) = (setup(), setup());
    let mut reference = candle_nn::AdamW::new(theirs.varmap.all_vars(), ParamsAdamW::default()).unwrap();
    let config = OptimConfig {
        decay_all: false,
        ..OptimConfig::new(Config::new(Rule::AdamW))
    };
    let mut opt = VarOptimizer::from_varmap(&masked.varmap, config).unwrap();
    train(&theirs, &mut reference, 900);
    train(&masked, &mut opt, 900);
    let worst = max_difference(&masked.varmap, &theirs.varmap);
    assert!(worst > 1e-3, "the undecayed biases moved only {worst}");
}
