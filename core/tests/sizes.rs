//! The fast path, with every instruction set of this CPU (the portable code included), equals
//! the scalar reference bit for bit at sizes that cross the fast path's 256-element chunk and
//! the vector tails (every size class from 1 to 2,000, and one tensor of 20,011 elements, 79
//! chunks, in optimized builds), for every rule × storage × rounding, with tensors in several
//! parameter groups. Tensors large enough for the parallel step's split are `parallel.rs`'s.

#[macro_use]
mod common;

use common::{configs, draw, fast_paths, Model, Path, StateBits};
use homeadam_core::{bf16, f16, Group, Optimizer, Q8Block, Rounding, Storage};

/// Sizes around every power of two up to the chunk's multiples, and the range's ends.
const SIZES: [usize; 33] = [
    1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513,
    767, 1000, 1023, 1024, 1025, 1999, 2000,
];

/// One tensor crossing many chunks (a prime, so no chunk or vector boundary divides it); a
/// debug build (no vectorization, 30× slower) and the emulated aarch64 run
/// (`homeadam_emulated`) skip it.
const LARGE: usize = 20_011;

/// A deterministic value of every magnitude class the rules meet: ordinary, small, tiny
/// (denormal), huge (g² overflows) and zero.
fn value(seed: u64, i: u64) -> f32 {
    let (z, u) = draw(seed, i);
    match z & 15 {
        0 => 0.0,
        1 => u * 1e-38,
        2 => u * 1e18,
        3..=6 => u * 1e-3,
        7 => u * 1e-7,
        _ => u,
    }
}

fn sizes() -> Vec<usize> {
    let mut sizes = SIZES.to_vec();
    if !cfg!(homeadam_unoptimized) && !cfg!(homeadam_emulated) {
        sizes.push(LARGE);
    }
    sizes
}

fn tensors(seed: u64) -> Vec<Vec<f32>> {
    sizes()
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| value(seed ^ k as u64, i as u64)).collect())
        .collect()
}

/// Tensor k's group: the default, a scaled rate with its own β1 and λ (where `config`'s rule
/// reads them), or no decay.
fn group(k: usize, config: &homeadam_core::Config) -> Group {
    let own = Group {
        lr_scale: 0.5,
        beta1: Some(0.8),
        weight_decay: Some(0.05),
        ..Group::DEFAULT
    };
    match k % 3 {
        0 => Group::DEFAULT,
        1 if config.check_group(own).is_ok() => own,
        1 => Group {
            lr_scale: 0.5,
            ..Group::DEFAULT
        },
        _ => Group::NO_DECAY,
    }
}

/// Each fast path against one reference run (the scalar reference is the slow part).
fn same<P: Storage, G: Storage, S: StateBits>() {
    let params = tensors(1);
    for mut config in configs() {
        for rounding in [Rounding::Nearest, Rounding::Stochastic] {
            config.rounding = rounding;
            config.seed = 7;
            let mut ref_opt = Optimizer::new(config).unwrap();
            let mut reference = Model::<P, G, S>::new(&ref_opt, &params);
            reference.groups = (0..params.len()).map(|k| group(k, &config)).collect();
            let mut fast: Vec<_> = fast_paths()
                .into_iter()
                .map(|path| (path, ref_opt.clone(), reference.clone()))
                .collect();
            for t in 2..5u64 {
                let grads = tensors(t);
                reference.set_grads(&grads);
                let b = format!(
                    "{:?}",
                    reference.step_on(&mut ref_opt, 1.0, Path::Reference).unwrap()
                );
                let (params, state) = (reference.param_bits(), reference.state_bits());
                for (path, fast_opt, model) in &mut fast {
                    model.set_grads(&grads);
                    let a = model.step_on(fast_opt, 1.0, *path).unwrap();
                    let what = format!("{} {rounding:?} {path:?} step {t}", config.name());
                    assert_eq!(format!("{a:?}"), b, "report, {what}");
                    assert!(model.param_bits() == params, "params, {what}");
                    assert!(model.state_bits() == state, "state, {what}");
                    assert_eq!(model.aux_bits(), reference.aux_bits(), "aux, {what}");
                    assert_eq!(*fast_opt, ref_opt, "{what}");
                }
            }
        }
    }
}

macro_rules! combos {
    ($($name:ident: $p:ty, $g:ty, $s:ty;)*) => {
        $(
            #[test]
            fn $name() {
                same::<$p, $g, $s>();
            }
        )*
    };
}

every_storage!(combos);
