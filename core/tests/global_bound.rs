//! The global rule's decision on bounds of ρ_t (`Step::check`): the same bits as the exact
//! first pass while ρ_t crosses τ both ways, with skipped steps, a gradient scale, groups, a
//! calibrated τ, a weight that never gets a gradient, several slices and half-precision or q8
//! state; and the first pass left out at most steps where the bounds decide.

mod common;

use common::{Model, Path, StateBits};
use homeadam_core::*;

/// Three tensors: two of several chunks around a small one.
const SIZES: [usize; 3] = [700, 5, 300];
const STEPS: usize = 30;

fn params() -> Vec<Vec<f32>> {
    SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| ((i * 7 + k) as f32 * 0.37).sin()).collect())
        .collect()
}

/// Step `s`'s gradients: an amplitude a that falls and rises by decades, so that with β2 = 0.5
/// (v̂ follows g² within a few steps) ρ_t ≈ (a / 2)² crosses τ = 1e-5 both ways. With `dead`
/// one element never gets a gradient (ρ = 0: home at every step). Step 7 has a NaN (skipped).
fn grads(s: usize, dead: bool) -> Vec<Vec<f32>> {
    const AMPLITUDE: [f32; 10] = [1e-2, 1e-2, 1e-2, 1e-4, 1e-4, 1e-4, 1e-4, 1e-2, 1e-2, 1e-3];
    let a = AMPLITUDE[s % AMPLITUDE.len()];
    let mut g: Vec<Vec<f32>> = SIZES
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            (0..n)
                .map(|i| a * (1.5 + ((i * 3 + s + k) as f32 * 0.91).sin()))
                .collect()
        })
        .collect();
    if dead {
        g[2][280] = 0.0;
    }
    if s == 7 {
        g[0][600] = f32::NAN;
    }
    g
}

fn config(calibrated: bool) -> Config {
    let mut c = Config::new(Rule::HomeAdamW(Switch::Global));
    c.lr = 1e-3;
    c.beta2 = 0.5;
    c.tau = 1e-5;
    c.allow_f16_state = true;
    c.weight_decay = 1e-2;
    if calibrated {
        c.tau_calibration = Some(TauCalibration {
            home_share: 0.5,
            every: 5,
        });
    }
    c
}

fn with_groups<P: Storage, G: Storage, S: StateBits>(mut m: Model<P, G, S>) -> Model<P, G, S> {
    m.groups[1] = Group::NO_DECAY;
    m.groups[2] = Group {
        lr_scale: 0.5,
        ..Group::DEFAULT
    };
    m
}

/// Steps the fast path (bounded decisions) and the reference (exact first pass) side by side,
/// bit for bit; returns the fast optimizer's exact first passes, the steps taken, and how many
/// steps went home and how many took the srf branch.
fn bounded_equals_exact<P: Storage, G: Storage, S: StateBits>(
    calibrated: bool,
    dead: bool,
) -> (u64, u64, usize, usize) {
    let mut fast_opt = Optimizer::new(config(calibrated)).unwrap();
    let mut exact_opt = fast_opt.clone();
    let mut fast = with_groups(Model::<P, G, S>::new(&fast_opt, &params()));
    let mut exact = fast.clone();
    let total: usize = SIZES.iter().sum();
    let (mut home, mut srf) = (0, 0);
    for s in 0..STEPS {
        let scale = if s % 3 == 1 { 1024.0 } else { 1.0 };
        let g: Vec<Vec<f32>> = grads(s, dead)
            .iter()
            .map(|t| t.iter().map(|&x| x * scale as f32).collect())
            .collect();
        fast.set_grads(&g);
        exact.set_grads(&g);
        let a = fast.step_on(&mut fast_opt, scale, Path::Fast).unwrap();
        let b = exact.step_on(&mut exact_opt, scale, Path::Reference).unwrap();
        let what = format!("{} step {s}", S::DTYPE.name());
        assert_eq!(format!("{a:?}"), format!("{b:?}"), "report, {what}");
        assert_eq!(fast.param_bits(), exact.param_bits(), "params, {what}");
        assert_eq!(fast.state_bits(), exact.state_bits(), "state, {what}");
        assert_eq!(fast.aux_bits(), exact.aux_bits(), "aux, {what}");
        assert_eq!(fast_opt.tau(), exact_opt.tau(), "τ, {what}");
        assert_eq!(
            fast_opt.calibration_window(),
            exact_opt.calibration_window(),
            "window, {what}"
        );
        assert_eq!(s == 7, a.skipped, "{what}");
        if !a.skipped {
            home += (a.home_elements == total as u64) as usize;
            srf += (a.home_elements == 0) as usize;
        }
    }
    assert_eq!(exact_opt.exact_first_passes(), exact_opt.step_count());
    (fast_opt.exact_first_passes(), fast_opt.step_count(), home, srf)
}

fn bounds_decide_most_steps<P: Storage, G: Storage, S: StateBits>() {
    let (exact, steps, home, srf) = bounded_equals_exact::<P, G, S>(false, false);
    assert_eq!(steps, STEPS as u64 - 1);
    assert!(
        home >= 5 && srf >= 5,
        "ρ crosses τ both ways: {home} home, {srf} srf"
    );
    assert!(exact < steps / 2, "{exact} exact first passes in {steps} steps");

    let (exact, _, home, _) = bounded_equals_exact::<P, G, S>(false, true);
    assert_eq!(home, STEPS - 1, "ρ = 0 sends every step home");
    assert_eq!(exact, 1, "only the first step, which has no bound");

    let (exact, steps, ..) = bounded_equals_exact::<P, G, S>(true, false);
    assert!(exact < steps, "{exact} exact first passes in {steps} steps");
}

#[test]
fn f32_state() {
    bounds_decide_most_steps::<f32, f32, f32>();
}

#[test]
fn bf16_state() {
    bounds_decide_most_steps::<bf16, bf16, bf16>();
}

#[test]
fn f16_state() {
    bounds_decide_most_steps::<f32, bf16, f16>();
}

#[test]
fn q8_state_keeps_the_exact_first_pass() {
    for (calibrated, dead) in [(false, false), (false, true), (true, false)] {
        let (exact, steps, ..) = bounded_equals_exact::<f32, f32, Q8Block>(calibrated, dead);
        assert_eq!(exact, steps);
    }
}

fn tensors<S: StateBits>(m: &mut Model<f32, f32, S>) -> Vec<Tensor<'_, f32, f32, S>> {
    m.params
        .iter_mut()
        .zip(&m.grads)
        .zip(m.states.iter_mut())
        .zip(m.aux.iter_mut())
        .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
        .collect()
}

/// One step over two slices of different state types, each phase by hand: `exact` takes the
/// decision on the first pass.
fn two_slices(
    opt: &mut Optimizer,
    a: &mut Model<f32, f32, f32>,
    b: &mut Model<f32, f32, bf16>,
    exact: bool,
) -> StepReport {
    let mut ta = tensors(a);
    let mut tb = tensors(b);
    let mut step = opt.begin(1.0).unwrap();
    if exact {
        step = step.exact_decision();
    }
    step.check(&mut ta).unwrap();
    step.check(&mut tb).unwrap();
    let mut updates = step.decide().unwrap();
    if exact {
        updates.update_reference(&mut ta).unwrap();
        updates.update_reference(&mut tb).unwrap();
    } else {
        updates.update(&mut ta).unwrap();
        updates.update(&mut tb).unwrap();
    }
    updates.finish().unwrap()
}

#[test]
fn slices_of_two_state_types_share_the_bound() {
    for dead in [false, true] {
        let mut fast_opt = Optimizer::new(config(false)).unwrap();
        let mut exact_opt = fast_opt.clone();
        let p = params();
        let mut fa = Model::<f32, f32, f32>::new(&fast_opt, &p[..2]);
        let mut fb = Model::<f32, f32, bf16>::new(&fast_opt, &p[2..]);
        let (mut ea, mut eb) = (fa.clone(), fb.clone());
        for s in 0..STEPS {
            let g = grads(s, dead);
            for m in [&mut fa, &mut ea] {
                m.set_grads(&g[..2]);
            }
            for m in [&mut fb, &mut eb] {
                m.set_grads(&g[2..]);
            }
            let x = two_slices(&mut fast_opt, &mut fa, &mut fb, false);
            let y = two_slices(&mut exact_opt, &mut ea, &mut eb, true);
            assert_eq!(format!("{x:?}"), format!("{y:?}"), "step {s}");
            assert_eq!(fa.param_bits(), ea.param_bits(), "step {s}");
            assert_eq!(fb.param_bits(), eb.param_bits(), "step {s}");
            assert_eq!(fa.state_bits(), ea.state_bits(), "step {s}");
            assert_eq!(fb.state_bits(), eb.state_bits(), "step {s}");
        }
        assert!(fast_opt.exact_first_passes() < fast_opt.step_count() / 2);
    }
}

/// τ that the bound proves the srf branch against from the second step on.
fn low_tau() -> Config {
    let mut c = config(false);
    c.tau = 1e-6;
    c
}

#[test]
fn another_model_is_refused_once_and_forget_bound_drops_the_bound() {
    let mut opt = Optimizer::new(low_tau()).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &params());
    for s in 0..2 {
        m.set_grads(&grads(s, false));
        m.step(&mut opt, 1.0, false).unwrap();
    }
    assert_eq!(opt.exact_first_passes(), 1, "the second step is proven srf");
    let mut other = Model::<f32, f32, f32>::new(&opt, &params()[..2]);
    other.set_grads(&grads(0, false)[..2]);
    let before = (other.param_bits(), other.state_bits());
    assert!(matches!(
        other.step(&mut opt, 1.0, false),
        Err(Error::StepOrder(_))
    ));
    assert_eq!(
        (other.param_bits(), other.state_bits()),
        before,
        "nothing written"
    );
    assert_eq!(opt.step_count(), 2);
    other.step(&mut opt, 1.0, false).unwrap();
    assert_eq!(opt.exact_first_passes(), 2, "the refused step dropped the bound");

    let mut opt = Optimizer::new(low_tau()).unwrap();
    let mut m = Model::<f32, f32, f32>::new(&opt, &params());
    for s in 0..3 {
        if s == 2 {
            opt.forget_bound();
        }
        m.set_grads(&grads(s, false));
        m.step(&mut opt, 1.0, false).unwrap();
    }
    assert_eq!(opt.exact_first_passes(), 2);
}
