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
use homeadam_core::{bf16, ByteSink, CheckpointError, Config, Rule, Storage, Switch};

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
}

const fn case(rule: Rule, bf16_state: bool, nan_step: Option<u64>) -> Case {
    let mut config = Config::new(rule);
    config.lr = 1e-2;
    Case {
        config,
        bf16_state,
        nan_step,
    }
}

const fn sgdm(bf16_state: bool) -> Case {
    let mut sgdm = case(Rule::Sgd, bf16_state, None);
    sgdm.config.momentum = 0.9;
    sgdm
}

/// The cases, in file order.
pub const CASES: [Case; 9] = [
    case(Rule::HomeAdamW(Switch::Element), false, None),
    case(Rule::HomeAdamW(Switch::Element), true, None),
    case(Rule::HomeAdamW(Switch::Global), false, None),
    case(Rule::HomeAdamW(Switch::Global), true, Some(3)),
    case(Rule::AdamW, false, None),
    case(Rule::AdamW, true, Some(4)),
    sgdm(false),
    sgdm(true),
    case(Rule::AdamWSrf, false, None),
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

/// The (scaled by 2) gradient of step `t`: magnitudes 1, 1e-3 and 1e-7 in turn, so HomeAdam
/// takes both branches; a NaN at element 7 if asked.
pub fn grad(t: u64, nan: bool) -> [f32; N] {
    core::array::from_fn(|j| {
        let scale = [2.0, 2e-3, 2e-7][j % 3];
        if nan && j == 7 {
            f32::NAN
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
        let g = grad(t, case.nan_step == Some(t));
        if reference {
            trainer.step_reference(&g, 2.0)?;
        } else {
            trainer.step(&g, 2.0)?;
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
