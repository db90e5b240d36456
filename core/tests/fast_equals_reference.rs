//! The fast path, with every instruction set of this CPU (the portable code included), equals
//! the scalar reference bit for bit, for every rule × storage combination × rounding, on random
//! inputs with zeros, denormals, huge values and the odd non-finite one.

#[macro_use]
mod common;

use common::{configs, fast_paths, Model, Path, StateBits};
use homeadam_core::{bf16, f16, Optimizer, Q8Block, Rounding, Storage};
use proptest::prelude::*;

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        4 => -1.0f32..1.0,
        2 => (-1.0f32..1.0).prop_map(|x| x * 1e-3),
        1 => (-1.0f32..1.0).prop_map(|x| x * 1e-38), // denormal and near-denormal
        1 => (1u32..0x0080_0000).prop_map(f32::from_bits), // exact denormals
        1 => (-1.0f32..1.0).prop_map(|x| x * 1e18), // g² overflows to ∞
        1 => Just(0.0f32),
    ]
}

/// Now and then one gradient of a step is made non-finite (the whole step must be skipped).
fn poison() -> impl Strategy<Value = Option<(usize, f32)>> {
    prop_oneof![
        6 => Just(None),
        1 => (any::<usize>(), prop_oneof![Just(f32::NAN), Just(f32::INFINITY), Just(f32::NEG_INFINITY)]).prop_map(Some),
    ]
}

#[derive(Clone, Debug)]
struct Case {
    params: Vec<Vec<f32>>,
    grads: Vec<Vec<Vec<f32>>>, // [step][tensor][element]
    grad_scale: f64,
    seed: u64,
}

fn case() -> impl Strategy<Value = Case> {
    let sizes = prop::collection::vec(
        prop_oneof![0usize..8, Just(63usize), Just(64), Just(65), 100usize..200],
        1..4,
    );
    (
        sizes,
        prop_oneof![Just(1.0f64), Just(1024.0), Just(0.25)],
        any::<u64>(),
    )
        .prop_flat_map(|(sizes, grad_scale, seed)| {
            let params = sizes
                .iter()
                .map(|&n| prop::collection::vec(value(), n))
                .collect::<Vec<_>>();
            let step = sizes
                .iter()
                .map(|&n| prop::collection::vec(value(), n))
                .collect::<Vec<_>>();
            let grads = prop::collection::vec((step, poison()), 4).prop_map(|steps| {
                steps
                    .into_iter()
                    .map(|(mut g, poison)| {
                        let total: usize = g.iter().map(Vec::len).sum();
                        if let (Some((at, bad)), true) = (poison, total > 0) {
                            let mut at = at % total;
                            for t in g.iter_mut() {
                                if at < t.len() {
                                    t[at] = bad;
                                    break;
                                }
                                at -= t.len();
                            }
                        }
                        g
                    })
                    .collect::<Vec<_>>()
            });
            (params, grads, Just(grad_scale), Just(seed))
        })
        .prop_map(|(params, grads, grad_scale, seed)| Case {
            params,
            grads,
            grad_scale,
            seed,
        })
}

/// Each fast path against one reference run (the scalar reference is the slow part).
fn same<P: Storage, G: Storage, S: StateBits>(case: &Case) -> Result<(), TestCaseError> {
    for mut config in configs() {
        for rounding in [Rounding::Nearest, Rounding::Stochastic] {
            config.rounding = rounding;
            config.seed = case.seed;
            let mut ref_opt = Optimizer::new(config).unwrap();
            let mut reference = Model::<P, G, S>::new(&ref_opt, &case.params);
            let mut fast: Vec<_> = fast_paths()
                .into_iter()
                .map(|path| (path, ref_opt.clone(), reference.clone()))
                .collect();
            let rule = config.rule.name();
            for grads in &case.grads {
                reference.set_grads(grads);
                let b = format!(
                    "{:?}",
                    reference.step_on(&mut ref_opt, case.grad_scale, Path::Reference)
                );
                let (params, state) = (reference.param_bits(), reference.state_bits());
                for (path, fast_opt, model) in &mut fast {
                    model.set_grads(grads);
                    let a = model.step_on(fast_opt, case.grad_scale, *path);
                    prop_assert_eq!(format!("{a:?}"), b.as_str(), "report, {} {:?}", rule, path);
                    prop_assert_eq!(&model.param_bits(), &params, "params, {} {:?}", rule, path);
                    prop_assert_eq!(&model.state_bits(), &state, "state, {} {:?}", rule, path);
                    prop_assert_eq!(model.aux_bits(), reference.aux_bits(), "aux, {} {:?}", rule, path);
                    prop_assert_eq!(&*fast_opt, &ref_opt);
                }
            }
        }
    }
    Ok(())
}

/// 32 cases per combination, or `PROPTEST_CASES` (fewer under emulation, e.g. on aarch64).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(32)
}

macro_rules! combos {
    ($($name:ident: $p:ty, $g:ty, $s:ty;)*) => {
        proptest! {
            #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]
            $(
                #[test]
                fn $name(c in case()) {
                    same::<$p, $g, $s>(&c)?;
                }
            )*
        }
    };
}

every_storage!(combos);
