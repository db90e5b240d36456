//! The trainer's own contract: capacity, skipped steps, and refused checkpoints that change
//! nothing.

use homeadam_core::{CheckpointError, Config, Dtype, Error, Q8Block, Rule, SliceSink, StepReport};
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

/// 300 parameters: two q8 blocks per slot, the second one partial.
const Q: usize = 300;
type Q8Model = Trainer<Q8Block, Q, { 2 * Q.div_ceil(256) }>;

fn q8_grad(t: usize) -> [f32; Q] {
    core::array::from_fn(|j| ((j * 7 + t * 3) % 23) as f32 * 1e-3 - 1.1e-2)
}

#[test]
fn q8_state_steps_saves_loads_and_resumes_bit_for_bit() {
    let config = Config::named("homeadamw-ew").unwrap();
    let mut straight = Q8Model::new(config, [0.5; Q]).unwrap();
    let bytes = |m: &Q8Model| m.state().iter().flat_map(|b| b.to_bytes()).collect::<Vec<u8>>();
    for t in 1..=6 {
        straight.step(&q8_grad(t), 1.0).unwrap();
    }
    assert!(straight.state().iter().all(|b| b.scale > 0.0));
    assert!(straight.params().iter().any(|&p| p != 0.5));

    let mut first = Q8Model::new(config, [0.5; Q]).unwrap();
    for t in 1..=3 {
        first.step(&q8_grad(t), 1.0).unwrap();
    }
    let mut buf = vec![0u8; first.saved_len()];
    let mut sink = SliceSink::new(&mut buf);
    first.save(&mut sink).unwrap();
    assert_eq!(sink.len(), first.saved_len());
    assert_eq!(
        first.saved_len(),
        4 * Q + first.optimizer().state_bytes([Q], Dtype::Q8)
    );

    let mut resumed = Q8Model::new(config, [0.0; Q]).unwrap();
    resumed.load(&buf).unwrap();
    assert_eq!(bytes(&resumed), bytes(&first));
    for t in 4..=6 {
        resumed.step(&q8_grad(t), 1.0).unwrap();
    }
    assert_eq!(
        resumed.params().map(f32::to_bits),
        straight.params().map(f32::to_bits)
    );
    assert_eq!(bytes(&resumed), bytes(&straight));
    assert_eq!(resumed.optimizer(), straight.optimizer());
}

#[test]
fn q8_state_ram_is_its_blocks() {
    let m = Q8Model::new(Config::new(Rule::AdamW), [0.0; Q]).unwrap();
    assert_eq!(size_of::<Q8Block>(), 260);
    assert_eq!(size_of_val(m.state()), 2 * Dtype::Q8.slot_bytes(Q));
    assert_eq!(size_of_val(m.state()), 4 * 260);
    assert_eq!(
        Q8Model::new(Config::new(Rule::MiAdam), [0.0; Q]).err(),
        Some(TrainerError::Capacity {
            needed: 6,
            capacity: 4
        })
    );
}
