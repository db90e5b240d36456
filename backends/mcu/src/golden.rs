//! Golden vectors: the host core's scalar reference ([`Optimizer::step_reference`]) writes the
//! expected bits, the device's fast path must reproduce them exactly.
//!
//! Inputs are not stored: both sides derive them from [`homeadam_core::backend::mix64`] with
//! exact integer-to-float conversions. The file is
//!
//! ```text
//! "HAG1", u32 case count, then for each case of CASES, little-endian u32 words:
//!   the N parameter bits after STEPS steps, then the slots × N state bits (bits32 of S)
//! ```
//!
//! [`Optimizer::step_reference`]: homeadam_core::Optimizer::step_reference

use homeadam_core::backend::mix64;
use homeadam_core::{
    bf16, ByteSink, CheckpointError, Config, RhoOver, Rule, Storage, Switch, TauCalibration,
};

use crate::trainer::{Trainer, TrainerError};

/// Parameters per case: odd, so fast paths with lanes have a tail.
pub const N: usize = 61;
/// Steps per case.
pub const STEPS: u64 = 6;
const MAGIC: &[u8; 4] = b"HAG1";

/// One golden case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Case {
    /// The rule's defaults but η = 1e-2 (and SGD's μ = 0.9: the config `sgdm`).
    pub config: Config,
    /// State stored as bf16 (else f32).
    pub bf16_state: bool,
    /// A step whose gradient holds a NaN (the core skips it).
    pub nan_step: Option<u64>,
    /// The last element never gets a gradient (v = 0: what `rho_over` is about), and the
    /// one before it only at step 1, and below the others, so that its v̂ ≈ g₁² / t is ρ and falls.
    pub dead: bool,
    /// The loss scale each step divides the gradients by: 2 (1/grad_scale is a multiply), or
    /// 1, the device's usual case, where a chunk whose gradients are found finite first runs
    /// the loop that takes g as loaded (and on hard-float Arm, the check's assembly).
    pub grad_scale: f64,
}

const fn case(rule: Rule, bf16_state: bool, nan_step: Option<u64>) -> Case {
    let mut config = Config::new(rule);
    config.lr = 1e-2;
    Case {
        config,
        bf16_state,
        nan_step,
        dead: false,
        grad_scale: 2.0,
    }
}

/// `case` stepped with grad_scale = 1.
const fn unscaled(mut case: Case) -> Case {
    case.grad_scale = 1.0;
    case
}

/// HomeAdamW beyond the paper: its home step at 20 η, τ calibrated to `home_share` every
/// `every` steps, and for the global rule ρ over the active elements, with a dead element.
const fn beyond_paper(switch: Switch, tau: TauCalibration, bf16_state: bool, nan_step: Option<u64>) -> Case {
    let mut c = case(Rule::HomeAdamW(switch), bf16_state, nan_step);
    c.config.home_lr_scale = 20.0;
    c.config.tau_calibration = Some(tau);
    if matches!(switch, Switch::Global) {
        c.config.rho_over = RhoOver::Active;
    }
    c.dead = true;
    c
}

const fn sgdm(bf16_state: bool) -> Case {
    let mut sgdm = case(Rule::Sgd, bf16_state, None);
    sgdm.config.momentum = 0.9;
    sgdm
}

/// Lion with λ = 0.1, so that its decoupled decay acts.
const fn lion(bf16_state: bool, nan_step: Option<u64>) -> Case {
    let mut c = case(Rule::Lion, bf16_state, nan_step);
    c.config.weight_decay = 0.1;
    c
}

const fn calibration(home_share: f64, every: u32) -> TauCalibration {
    TauCalibration { home_share, every }
}

/// The cases, in file order.
pub const CASES: [Case; 16] = [
    case(Rule::HomeAdamW(Switch::Element), false, None),
    case(Rule::HomeAdamW(Switch::Element), true, None),
    case(Rule::HomeAdamW(Switch::Global), false, None),
    case(Rule::HomeAdamW(Switch::Global), true, Some(3)),
    case(Rule::AdamW, false, None),
    case(Rule::AdamW, true, Some(4)),
    sgdm(false),
    sgdm(true),
    case(Rule::AdamWSrf, false, None),
    // Steps 2..=5 make the window of the calibration at t = 5 (the 4th call is skipped).
    beyond_paper(Switch::Global, calibration(0.9, 5), false, None),
    beyond_paper(Switch::Element, calibration(0.3, 2), true, None),
    unscaled(case(Rule::HomeAdamW(Switch::Element), false, None)),
    unscaled(case(Rule::HomeAdamW(Switch::Element), false, Some(3))),
    unscaled(case(Rule::AdamW, true, None)),
    lion(false, None),
    lion(true, Some(2)),
];

impl Case {
    /// u32 words of its expected output.
    pub fn words(&self) -> usize {
        N * (1 + self.config.state_slots())
    }
}

/// A uniform value in [-1, 1) from 24 random bits (exact conversion).
fn uniform(key: u64) -> f32 {
    ((mix64(key) >> 40) as f32) * (2.0 / 16_777_216.0) - 1.0
}

/// The initial parameters.
pub fn initial_params() -> [f32; N] {
    core::array::from_fn(|j| uniform(0x1000 + j as u64))
}

/// The gradient of step `t` (scaled by 2): magnitudes 1, 1e-3 and 1e-7 in turn, so HomeAdam
/// takes both branches; a NaN at element 7 if asked; if `dead`, 0 at the last element and, after
/// step 1, at the one before it.
pub fn grad(t: u64, nan: bool, dead: bool) -> [f32; N] {
    core::array::from_fn(|j| {
        let scale = [2.0, 2e-3, 2e-7][j % 3];
        if nan && j == 7 {
            f32::NAN
        } else if dead && j == N - 1 {
            0.0
        } else if dead && j == N - 2 {
            if t == 1 {
                2e-8
            } else {
                0.0
            }
        } else {
            uniform((t << 32) ^ j as u64) * scale
        }
    })
}

/// Runs a case through the reference (`reference`) or fast path and passes every output
/// word to `emit`, in file order.
pub fn run(case: &Case, reference: bool, emit: &mut impl FnMut(u32)) -> Result<(), TrainerError> {
    if case.bf16_state {
        run_with::<bf16>(case, reference, emit)
    } else {
        run_with::<f32>(case, reference, emit)
    }
}

fn run_with<S: Storage>(
    case: &Case,
    reference: bool,
    emit: &mut impl FnMut(u32),
) -> Result<(), TrainerError> {
    let mut trainer = Trainer::<S, N, { 2 * N }>::new(case.config, initial_params())?;
    for t in 1..=STEPS {
        let g = grad(t, case.nan_step == Some(t), case.dead);
        if reference {
            trainer.step_reference(&g, case.grad_scale)?;
        } else {
            trainer.step(&g, case.grad_scale)?;
        }
    }
    trainer.params().iter().for_each(|p| emit(p.to_bits()));
    trainer.state().iter().for_each(|s| emit(s.to_bits32()));
    Ok(())
}

/// Writes the whole golden file with the reference path.
pub fn write<W: ByteSink>(sink: &mut W) -> Result<(), CheckpointError> {
    sink.write(MAGIC)?;
    sink.write(&(CASES.len() as u32).to_le_bytes())?;
    for case in &CASES {
        let mut result = Ok(());
        run(case, true, &mut |w| {
            result = result.and(sink.write(&w.to_le_bytes()));
        })
        .map_err(|_| CheckpointError::Corrupt)?;
        result?;
    }
    Ok(())
}

/// Bytes of the golden file.
pub fn file_len() -> usize {
    8 + 4 * CASES.iter().map(Case::words).sum::<usize>()
}

/// Runs case `index` with the fast path and returns the number of words that differ from
/// `file` (`None` if the file is not a golden file of these cases).
pub fn check(file: &[u8], index: usize) -> Result<Option<usize>, TrainerError> {
    if file.len() != file_len() || &file[..4] != MAGIC || file[4..8] != (CASES.len() as u32).to_le_bytes() {
        return Ok(None);
    }
    let start = 8 + 4 * CASES[..index].iter().map(Case::words).sum::<usize>();
    let mut words = file[start..].chunks_exact(4);
    let mut wrong = 0;
    run(&CASES[index], false, &mut |w| {
        let expected = words.next().map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        wrong += (expected != Some(w)) as usize;
    })?;
    Ok(Some(wrong))
}
