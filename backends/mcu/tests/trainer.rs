//! The trainer's own contract: capacity, skipped steps, and refused checkpoints that change
//! nothing.

use homeadam_core::{CheckpointError, Config, Error, Rule, SliceSink, StepReport};
use homeadam_mcu::{Trainer, TrainerError};

const N: usize = 8;
type Model = Trainer<f32, N, { 2 * N }>;

fn model() -> Model {
    Model::new(Config::new(Rule::AdamW), [0.5; N]).unwrap()
}

#[test]
fn a_rule_that_needs_more_state_than_the_capacity_is_refused() {
    let three_slots = Config::new(Rule::MiAdam);
    assert_eq!(
        Model::new(three_slots, [0.0; N]).err(),
        Some(TrainerError::Capacity {
            needed: 3 * N,
            capacity: 2 * N
        })
    );
    let sgdm = Config::named("sgdm").unwrap();
    assert!(Trainer::<f32, N, N>::new(sgdm, [0.0; N]).is_ok());
}

#[test]
fn a_non_finite_gradient_skips_the_step_and_keeps_the_count() {
    let mut m = model();
    m.step(&[1e-2; N], 1.0).unwrap();
    let before = m.clone();
    let mut grad = [1e-2; N];
    grad[3] = f32::NAN;
    assert_eq!(m.step(&grad, 1.0), Ok(StepReport::skipped(1)));
    assert_eq!((m.params(), m.state()), (before.params(), before.state()));
}

#[test]
fn save_then_load_round_trips_and_a_torn_save_is_refused_untouched() {
    let mut m = model();
    m.step(&[1e-2; N], 1.0).unwrap();
    let mut buf = [0u8; 256];
    let mut sink = SliceSink::new(&mut buf);
    m.save(&mut sink).unwrap();
    let len = sink.len();
    assert_eq!(len, m.saved_len());

    let mut fresh = model();
    for cut in [0, 4 * N - 1, len - 1] {
        assert!(matches!(
            fresh.load(&buf[..cut]),
            Err(TrainerError::Core(Error::Checkpoint(
                CheckpointError::Truncated | CheckpointError::BadMagic
            )))
        ));
        assert_eq!(fresh.params(), &[0.5; N]);
        assert_eq!(fresh.optimizer().step_count(), 0);
    }
    fresh.load(&buf[..len]).unwrap();
    assert_eq!((fresh.params(), fresh.state()), (m.params(), m.state()));
    assert_eq!(fresh.optimizer(), m.optimizer());
}
