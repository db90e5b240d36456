//! Typed errors: every invalid input is reported, nothing panics.

use core::fmt;

/// Everything that can go wrong in this crate.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// A hyper-parameter is out of its range (`expected` says which range).
    InvalidHyper {
        /// The config key, e.g. `"lr"`.
        name: &'static str,
        /// The value given.
        value: f64,
        /// The accepted range, in words.
        expected: &'static str,
    },
    /// A setting that this rule does not have, e.g. weight decay on Adam-srf (λ = 0 by definition).
    NotForRule {
        /// The config key.
        name: &'static str,
        /// The rule's name.
        rule: &'static str,
        /// What to do instead.
        hint: &'static str,
    },
    /// Decoupled weight decay would flip the parameters' sign: ηλ ≥ 1 (λ ≥ 1 with
    /// `fixed_decay`), the learning rate including the tensor's group scale.
    DecayTooLarge {
        /// η.
        lr: f64,
        /// λ.
        weight_decay: f64,
        /// Whether the decay is λ (`fixed_decay`) rather than ηλ.
        fixed: bool,
    },
    /// A tensor's gradient is not as long as its parameters.
    GradLength {
        /// Index of the tensor in the model.
        tensor: usize,
        /// Parameters of the tensor.
        numel: usize,
        /// The gradient's length.
        actual: usize,
    },
    /// A tensor's state is not `slots × per_slot` items long.
    StateLength {
        /// Index of the tensor in the model.
        tensor: usize,
        /// State slots of the rule ([`crate::Config::state_slots`]).
        slots: usize,
        /// Parameters of the tensor.
        numel: usize,
        /// Items per slot ([`crate::StateStorage::slot_len`]: `numel`, or its q8 blocks).
        per_slot: usize,
        /// The state's length.
        actual: usize,
    },
    /// A tensor's group has a learning-rate scale that is not finite and ≥ 0.
    InvalidLrScale {
        /// Index of the tensor in the model.
        tensor: usize,
        /// The scale given.
        value: f64,
    },
    /// The tensors of a step's [`crate::Updates`] are not the ones its [`crate::Step`] checked:
    /// each is updated once, in the check order; or a backend's calibration was not called
    /// once at a step that calibrates.
    StepOrder(&'static str),
    /// f16 second-moment state was asked for without `allow_f16_state` (DESIGN §3).
    F16SecondMoment,
    /// The gradient scale is not finite and positive.
    InvalidGradScale(f64),
    /// The step counter would overflow.
    StepOverflow,
    /// A checkpoint could not be written or read.
    Checkpoint(CheckpointError),
    /// [`crate::Updates::update_on`] named an instruction set this CPU or build lacks.
    SimdUnavailable(crate::Simd),
    /// The config's rule is not in the rule set this step was built with
    /// ([`crate::Optimizer::step_only`], [`crate::rules::only`]).
    RuleNotLinked {
        /// The config's name.
        rule: &'static str,
    },
}

/// Why a checkpoint was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CheckpointError {
    /// The bytes do not start with the checkpoint magic.
    BadMagic,
    /// A format version this build does not read.
    UnsupportedVersion(u16),
    /// The bytes end before the checkpoint does.
    Truncated,
    /// Bytes follow the checkpoint's checksum.
    TrailingBytes,
    /// The CRC-32 does not match: the bytes are corrupt.
    ChecksumMismatch,
    /// The checkpoint is of another rule.
    RuleMismatch,
    /// The checkpoint's state storage type differs from the slices given.
    DtypeMismatch,
    /// The checkpoint holds another number of tensors.
    TensorCountMismatch {
        /// Tensors in the checkpoint.
        stored: u32,
        /// Tensors given.
        given: u32,
    },
    /// A tensor of the checkpoint has another number of elements.
    TensorSizeMismatch {
        /// Index of the tensor.
        tensor: u32,
    },
    /// The checkpoint holds a calibrated τ's state and the config has none, or the reverse.
    CalibrationMismatch,
    /// A field holds an impossible value.
    Corrupt,
    /// The output buffer is too small.
    BufferTooSmall,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::InvalidHyper {
                name,
                value,
                expected,
            } => {
                write!(f, "invalid {name} = {value}: expected {expected}")
            }
            Error::NotForRule { name, rule, hint } => {
                write!(f, "{rule} has no {name}: {hint}")
            }
            Error::DecayTooLarge {
                lr,
                weight_decay,
                fixed: false,
            } => write!(
                f,
                "lr * weight_decay = {lr} * {weight_decay} >= 1: decoupled decay θ(1 - ηλ) would \
                 flip the parameters' sign; lower lr or weight_decay"
            ),
            Error::DecayTooLarge {
                weight_decay,
                fixed: true,
                ..
            } => write!(
                f,
                "weight_decay = {weight_decay} >= 1 with fixed_decay: θ(1 - λ) would flip the \
                 parameters' sign"
            ),
            Error::GradLength {
                tensor,
                numel,
                actual,
            } => write!(
                f,
                "tensor {tensor}: grad has {actual} elements, the parameters {numel}"
            ),
            Error::StateLength {
                tensor,
                slots,
                numel,
                per_slot,
                actual,
            } => {
                let expected = slots.saturating_mul(per_slot);
                let what = if per_slot == numel {
                    "elements"
                } else {
                    "q8 blocks"
                };
                write!(
                    f,
                    "tensor {tensor}: state has {actual} {what}, expected {expected} = {slots} state slots × "
                )?;
                if per_slot != numel {
                    write!(f, "{per_slot} blocks of 256 for ")?;
                }
                write!(f, "{numel} parameters")
            }
            Error::InvalidLrScale { tensor, value } => write!(
                f,
                "tensor {tensor}: invalid group lr_scale = {value}: expected a finite value >= 0"
            ),
            Error::StepOrder(what) => write!(f, "step phases out of order: {what}"),
            Error::F16SecondMoment => f.write_str(
                "f16 state cannot hold the second moment of small gradients ((1-beta2)*g^2 \
                 underflows for |g| < ~2e-4): use bf16 or f32 state, or allow f16 state explicitly",
            ),
            Error::InvalidGradScale(s) => {
                write!(f, "invalid grad_scale = {s}: expected a finite value > 0")
            }
            Error::StepOverflow => f.write_str("the step counter would overflow"),
            Error::Checkpoint(e) => write!(f, "checkpoint: {e}"),
            Error::SimdUnavailable(simd) => write!(
                f,
                "the {} instruction set is not available on this CPU or build",
                simd.name()
            ),
            Error::RuleNotLinked { rule } => write!(
                f,
                "the rule {rule:?} is not in the rule set this step was built with \
                 (rules::only; Optimizer::step_only)"
            ),
        }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CheckpointError::BadMagic => f.write_str("not a homeadam optimizer state (bad magic)"),
            CheckpointError::UnsupportedVersion(v) => write!(
                f,
                "format version {v}, but this build reads versions {} and {} only (version 1 \
                 came from homeadam-core 0.1, whose rule codes differ; retrain or convert)",
                crate::format::VERSION,
                crate::format::VERSION_CALIBRATED
            ),
            CheckpointError::CalibrationMismatch => {
                f.write_str("saved with a calibrated τ and loaded without one, or the other way round")
            }
            CheckpointError::Truncated => f.write_str("truncated"),
            CheckpointError::TrailingBytes => f.write_str("unexpected bytes after the checksum"),
            CheckpointError::ChecksumMismatch => f.write_str("checksum mismatch (corrupt data)"),
            CheckpointError::RuleMismatch => f.write_str("saved by another rule"),
            CheckpointError::DtypeMismatch => f.write_str("state storage type differs"),
            CheckpointError::TensorCountMismatch { stored, given } => {
                write!(f, "holds {stored} tensors, the model has {given}")
            }
            CheckpointError::TensorSizeMismatch { tensor } => {
                write!(f, "tensor {tensor} has another number of elements")
            }
            CheckpointError::Corrupt => f.write_str("a field holds an impossible value"),
            CheckpointError::BufferTooSmall => f.write_str("output buffer too small"),
        }
    }
}

impl core::error::Error for Error {}
impl core::error::Error for CheckpointError {}

impl From<CheckpointError> for Error {
    fn from(e: CheckpointError) -> Self {
        Error::Checkpoint(e)
    }
}
