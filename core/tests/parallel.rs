//! The parallel step gives the same bits for any thread count: equal to one thread and to the
//! scalar reference, for every rule × rounding and the storage combinations with distinct
//! conversions, on tensors large enough to be split (and one too small to be).

#[macro_use]
mod common;

use common::{configs, draw, Model, Path, StateBits};
use homeadam_core::{bf16, f16, Optimizer, Q8Block, Rounding, Storage};

/// Two tensors that split into several pieces (not on chunk boundaries) and one that does not.
const SIZES: [usize; 3] = [131_101, 70_003, 1_000];

fn value(seed: u64, i: u64) -> f32 {
    let (z, u) = draw(seed, i);
    match z & 7 {
        0 => 0.0,
        1 => u * 1e-7,
        2 | 3 => u * 1e-3,
        _ => u,
    }
}

fn tensors(seed: u64) -> Vec<Vec<f32>> {
    SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| value(seed ^ k as u64, i as u64)).collect())
        .collect()
}

fn same<P: Storage, G: Storage, S: StateBits>() {
    let params = tensors(1);
    for mut config in configs() {
        for rounding in [Rounding::Nearest, Rounding::Stochastic] {
            config.rounding = rounding;
            config.seed = 3;
            let opt = Optimizer::new(config).unwrap();
            let start = Model::<P, G, S>::new(&opt, &params);
            let mut runs: Vec<(Path, Optimizer, Model<P, G, S>)> = [
                Path::Reference,
                Path::Threads(1),
                Path::Threads(2),
                Path::Threads(3),
            ]
            .into_iter()
            .map(|path| (path, opt.clone(), start.clone()))
            .collect();
            for t in 2..4u64 {
                let grads = tensors(t);
                let mut reports = Vec::new();
                for (path, opt, model) in runs.iter_mut() {
                    model.set_grads(&grads);
                    reports.push(format!("{:?}", model.step_on(opt, 1.0, *path).unwrap()));
                }
                let (reference, rest) = runs.split_first().unwrap();
                for (k, (path, opt, model)) in rest.iter().enumerate() {
                    let what = format!("{} {rounding:?} {path:?} step {t}", config.name());
                    assert_eq!(reports[k + 1], reports[0], "report, {what}");
                    assert!(model.param_bits() == reference.2.param_bits(), "params, {what}");
                    assert!(model.state_bits() == reference.2.state_bits(), "state, {what}");
                    assert_eq!(model.aux_bits(), reference.2.aux_bits(), "aux, {what}");
                    assert_eq!(opt, &reference.1, "{what}");
                }
            }
        }
    }
}

#[test]
#[cfg_attr(homeadam_unoptimized, ignore = "minutes unoptimized; runs optimized")]
fn f32_everywhere() {
    same::<f32, f32, f32>();
}

#[test]
#[cfg_attr(homeadam_unoptimized, ignore = "minutes unoptimized; runs optimized")]
fn bf16_params_and_state() {
    same::<bf16, bf16, bf16>();
}

#[test]
#[cfg_attr(homeadam_unoptimized, ignore = "minutes unoptimized; runs optimized")]
fn f16_params_f32_grads_f16_state() {
    same::<f16, f32, f16>();
}

#[test]
#[cfg_attr(homeadam_unoptimized, ignore = "minutes unoptimized; runs optimized")]
fn bf16_params_f16_grads_f32_state() {
    same::<bf16, f16, f32>();
}

#[test]
#[cfg_attr(homeadam_unoptimized, ignore = "minutes unoptimized; runs optimized")]
fn bf16_params_q8_state() {
    same::<bf16, f32, Q8Block>();
}
