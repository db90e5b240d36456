//! Two-slot persistence on a RAM NOR flash, including power cuts at every point of a save.

use homeadam_core::{bf16, Config, Rule, Switch};
use homeadam_mcu::{FlashError, FlashStore, RamFlash, Trainer};

const N: usize = 40;
const FLASH: usize = 4096;
type Model = Trainer<bf16, N, { 2 * N }>;

fn model() -> Model {
    let params = core::array::from_fn(|j| j as f32 * 0.01 - 0.2);
    Model::new(Config::new(Rule::HomeAdamW(Switch::Element)), params).unwrap()
}

fn train(m: &mut Model, steps: u64) {
    for _ in 0..steps {
        let t = m.optimizer().step_count() as f32;
        let grad = core::array::from_fn(|j| ((j as f32 + t) * 0.37).sin() * 1e-2);
        m.step(&grad, 1.0).unwrap();
    }
}

fn same(a: &Model, b: &Model) -> bool {
    a.params().map(f32::to_bits) == b.params().map(f32::to_bits)
        && a.state() == b.state()
        && a.optimizer() == b.optimizer()
}

#[test]
fn empty_flash_loads_nothing() {
    let mut mem = [0xFF; FLASH];
    let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
    let mut m = model();
    assert_eq!(store.load(&mut m, &mut [0; 1024]), Ok(None));
    assert_eq!(m.optimizer().step_count(), 0);
}

#[test]
fn bad_geometry_is_refused() {
    let mut mem = [0xFF; FLASH];
    assert!(FlashStore::new(RamFlash::new(&mut mem), 0, 4096).is_err());
    let mut mem = [0xFF; FLASH];
    assert!(FlashStore::new(RamFlash::new(&mut mem), 512, 1024).is_err());
}

#[test]
fn saves_alternate_slots_and_the_newest_wins() {
    let mut mem = [0xFF; FLASH];
    let mut m = model();
    let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
    for seq in 1..=3 {
        train(&mut m, 2);
        assert_eq!(store.save(&m), Ok(seq));
    }
    let mut loaded = model();
    assert_eq!(store.load(&mut loaded, &mut [0; 1024]), Ok(Some(3)));
    assert!(same(&loaded, &m));
    assert!(matches!(
        store.load(&mut loaded, &mut [0; 64]),
        Err(FlashError::Scratch { .. })
    ));
}

#[test]
fn a_power_cut_at_any_point_of_a_save_keeps_the_last_good_state() {
    let mut good = model();
    train(&mut good, 3);
    let mut newer = model();
    train(&mut newer, 5);
    let total = 2048 + 32 + newer.saved_len().div_ceil(32) * 32;
    for cut in (0..=total).step_by(7) {
        let mut mem = [0xFF; FLASH];
        let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
        assert_eq!(store.save(&good), Ok(1));
        let mut flash = store.release();
        flash.cut_after(cut);
        let result = FlashStore::new(flash, 0, 2048).unwrap().save(&newer);
        // Reset: a fresh trainer and a fresh store over the same memory.
        let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
        let mut resumed = model();
        let seq = store.load(&mut resumed, &mut [0; 1024]).unwrap();
        match result {
            Ok(2) => assert!(seq == Some(2) && same(&resumed, &newer), "cut {cut}"),
            // Cut before the commit: the old state; cut after it (in the header's padding):
            // the new one. Never a mix, never nothing.
            Err(FlashError::Flash(_)) => assert!(
                (seq == Some(1) && same(&resumed, &good)) || (seq == Some(2) && same(&resumed, &newer)),
                "cut {cut}"
            ),
            other => panic!("cut {cut}: {other:?}"),
        }
    }
}

#[test]
fn resumed_training_equals_uninterrupted_training() {
    let mut straight = model();
    train(&mut straight, 10);
    let mut first = model();
    train(&mut first, 4);
    let mut mem = [0xFF; FLASH];
    let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
    store.save(&first).unwrap();
    let mut resumed = model();
    store.load(&mut resumed, &mut [0; 1024]).unwrap();
    train(&mut resumed, 6);
    assert!(same(&resumed, &straight));
}

#[test]
fn a_state_of_another_rule_is_refused_untouched() {
    let mut mem = [0xFF; FLASH];
    let mut store = FlashStore::new(RamFlash::new(&mut mem), 0, 2048).unwrap();
    let mut m = model();
    train(&mut m, 2);
    store.save(&m).unwrap();
    let mut other = Model::new(Config::new(Rule::AdamW), [0.0; N]).unwrap();
    assert!(matches!(
        store.load(&mut other, &mut [0; 1024]),
        Err(FlashError::Trainer(_))
    ));
    assert_eq!(other.params(), &[0.0; N]);
}
