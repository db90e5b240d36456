//! Any config and any slices → `Optimizer::step`: Ok or a typed error, never a panic (the
//! fuzz build and the `ci` profile keep overflow checks on). Every step also runs through the
//! scalar reference on a copy, which must give the same result, optimizer and bits (NaN compared
//! as NaN: under `FiniteCheck::Trust` a non-finite gradient is applied, and which NaN comes out
//! is not specified).
//!
//! The input is decoded with `arbitrary::Unstructured`: a rule and its hyper-parameters (each
//! knob mostly at its default, else a special value such as NaN, ∞, 0, 1 − 2⁻⁵³, or any bits),
//! rounding, finite check, an optional restored step counter (up to u64::MAX) and SWATS phase,
//! the grad scale, 1 to 3 slices of P/G/S storage types (a mixed model steps as one step
//! in two phases), each of tensors of any length (mismatched gradient and state lengths
//! included) in any parameter group, and 1 to 3 steps, optionally with checks and updates in any
//! order (a check after the first update, which cannot be written, is dropped), an external
//! finish or a new learning rate between steps. An exhausted input reads as zeros,
//! which decode to defaults.
//!
//! An accepted config writes finite parameters from finite gradients: a copy of the model at
//! unit scale (finite parameters and gradients clamped to [−1, 1], zero state, default
//! per-tensor scalars) takes one step of a fresh optimizer, and every parameter must be
//! finite after it. Not asserted where parameters or state are f16, whose range (65504) a step
//! of an accepted η can leave.

use arbitrary::{Result, Unstructured};
use homeadam_core::backend::{Crc32, Histogram, Outcome, StepScalars};
use homeadam_core::{
    bf16, f16, Config, Dtype, Error, FiniteCheck, Group, Knob, Optimizer, RhoOver, Rounding, SliceSink, Step,
    StepReport, Storage, TauCalibration, Tensor, TensorAux, Updates, ALL_RULES,
};

/// Values that sit on the edges of the hyper-parameters' ranges, or beyond them.
const SPECIAL: [f64; 22] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    0.9,
    0.999,
    1.0 - f64::EPSILON / 2.0,
    1e-8,
    1e-12,
    1e-30,
    1e-300,
    f64::MIN_POSITIVE,
    5e-324,
    65504.0,
    3.4028235e38,
    1e300,
    f64::MAX,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    2.0,
];

/// Checkpoint offsets (core/src/checkpoint.rs) used to restore a step counter, SWATS phase and,
/// with a calibrated τ, its state: with no tensors, the calibration block (τ, 128 counts) follows
/// the 36-byte header, and the CRC-32 ends the bytes.
const PHASE: usize = 13;
const STEP: usize = 16;
const SWATS_LR: usize = 24;
const CALIBRATION: usize = 36;

/// Decodes a config, a model and steps from `data` and steps it on the fast path and the
/// reference, as the [module](self) describes; panics where they differ.
pub fn step(data: &[u8]) {
    let _ = fuzz(&mut Unstructured::new(data));
}

fn fuzz(u: &mut Unstructured<'_>) -> Result<()> {
    let config = config(u)?;
    let mut fast = match Optimizer::new(config) {
        Ok(opt) => opt,
        Err(e) => {
            let _ = e.to_string();
            return Ok(());
        }
    };
    if flip(u)? {
        restore(&mut fast, u)?;
    }
    let mut grad_scale = 1.0;
    if flip(u)? {
        grad_scale = hyper(u, 1.0)?;
    }
    let slices = u.int_in_range(1..=3)?;
    let mut model = Vec::new();
    for _ in 0..slices {
        model.push(slice(u, config.state_slots())?);
    }
    let mut reference = fast.clone();
    let mut model_ref: Vec<_> = model.iter().map(|s| s.boxed_clone()).collect();
    let mut unit: Vec<_> = model.iter().map(|s| s.unit_clone()).collect();
    for _ in 0..u.int_in_range(1..=3)? {
        if flip(u)? {
            let lr = hyper(u, config.lr)?;
            assert_eq!(show(fast.set_lr(lr)), show(reference.set_lr(lr)));
        }
        let ops = ops(u, model.len())?;
        let got = drive(&mut fast, &mut model, grad_scale, &ops, false);
        let want = drive(&mut reference, &mut model_ref, grad_scale, &ops, true);
        assert_eq!(got, want, "fast path and reference: results");
        assert_eq!(
            format!("{fast:?}"),
            format!("{reference:?}"),
            "fast path and reference: optimizers"
        );
        for (k, (a, b)) in model.iter().zip(&model_ref).enumerate() {
            assert_eq!(a.bits(), b.bits(), "fast path and reference: slice {k}");
        }
    }
    unit_step_is_finite(config, &mut unit);
    Ok(())
}

/// One step of a fresh optimizer of the accepted `config` over the unit-scale `model` leaves
/// every parameter finite.
fn unit_step_is_finite(config: Config, model: &mut [Box<dyn Slice>]) {
    let mut opt = Optimizer::new(config).expect("the config was accepted");
    let results = drive(&mut opt, model, 1.0, &Ops::InOrder, false);
    for (k, slice) in model.iter().enumerate() {
        assert!(
            slice.params_finite(),
            "{config:?}: unit-scale slice {k} holds a non-finite parameter after {results:?}"
        );
    }
}

/// The real knobs drawn after the others, where the seeds' bytes have them.
const DRAWN_LAST: [&str; 2] = ["tau.home_share", "home_lr_scale"];

/// A config of any rule, with each knob at its default more often than not (a knob the rule
/// ignores is refused unless at its default). The knob table's real knobs, then its flags, in
/// the table's order ([`Config::KNOB_NAMES`]): a new knob is drawn without a line here, and the
/// kept inputs' bytes keep their meaning while the table keeps its order.
fn config(u: &mut Unstructured<'_>) -> Result<Config> {
    let mut c = Config::new(*u.choose(&ALL_RULES)?);
    for name in Config::KNOB_NAMES {
        if let Some(Knob::Real(x)) = c.knob(name).filter(|_| !DRAWN_LAST.contains(&name)) {
            c.set_knob_to(name, Knob::Real(hyper(u, x)?));
        }
    }
    for name in Config::KNOB_NAMES {
        if let Some(Knob::Flag(b)) = c.knob(name) {
            c.set_knob_to(name, Knob::Flag(b ^ flip(u)?));
        }
    }
    c.allow_f16_state ^= flip(u)?;
    if flip(u)? {
        c.switch_step = u.arbitrary()?;
    }
    c.seed = u.arbitrary()?;
    if flip(u)? {
        c.rounding = Rounding::Stochastic;
    }
    if flip(u)? {
        c.finite_check = FiniteCheck::Trust;
    }
    c.home_lr_scale = hyper(u, c.home_lr_scale)?;
    if flip(u)? {
        c.rho_over = RhoOver::Active;
    }
    if flip(u)? {
        c.tau_calibration = Some(TauCalibration {
            home_share: hyper(u, 0.1)?,
            every: u.arbitrary()?,
        });
    }
    Ok(c)
}

/// One time in four: reads zero as false, so that an exhausted input keeps defaults.
fn flip(u: &mut Unstructured<'_>) -> Result<bool> {
    Ok(u.int_in_range(0u8..=3)? == 3)
}

/// A hyper-parameter: `default` half of the time, else a special value, any bits, or a value
/// in [0, 1] on a grid of 1/1000.
fn hyper(u: &mut Unstructured<'_>, default: f64) -> Result<f64> {
    Ok(match u.int_in_range(0u8..=7)? {
        0..=3 => default,
        4 | 5 => *u.choose(&SPECIAL)?,
        6 => f64::from_bits(u.arbitrary()?),
        _ => f64::from(u.int_in_range(0u16..=1000)?) / 1000.0,
    })
}

/// Sets the step counter (and SWATS's phase, a calibrated τ and its window) through a checkpoint
/// of no tensors, the only way in: a long-running state, or one the checkpoint format lets
/// through, is an input too.
fn restore(opt: &mut Optimizer, u: &mut Unstructured<'_>) -> Result<()> {
    let step: u64 = match u.int_in_range(0u8..=3)? {
        0 => u64::MAX,
        1 => u64::MAX - 1,
        2 => u.int_in_range(0..=1000)?,
        _ => u.arbitrary()?,
    };
    let swats_lr = if flip(u)? { Some(hyper(u, 1e-3)?) } else { None };
    let mut bytes = vec![0u8; opt.state_bytes([], Dtype::F32)];
    opt.save_state::<f32, _>(&[], &mut SliceSink::new(&mut bytes))
        .expect("an empty state saves");
    bytes[STEP..STEP + 8].copy_from_slice(&step.to_le_bytes());
    bytes[PHASE] = swats_lr.is_some().into();
    bytes[SWATS_LR..SWATS_LR + 8].copy_from_slice(&swats_lr.unwrap_or(0.0).to_bits().to_le_bytes());
    let checksummed = bytes.len() - 4;
    if checksummed > CALIBRATION {
        // τ: none yet, a power of two (as calibrated) or any bits (refused unless valid).
        let tau: u32 = match u.int_in_range(0u8..=2)? {
            0 => 0,
            1 => u32::from(u.int_in_range(1u8..=127)?) << 23,
            _ => u.arbitrary()?,
        };
        bytes[CALIBRATION..CALIBRATION + 4].copy_from_slice(&tau.to_le_bytes());
        for count in bytes[CALIBRATION + 4..checksummed].chunks_exact_mut(4) {
            count.copy_from_slice(&u.arbitrary::<u32>()?.to_le_bytes());
        }
    }
    let mut crc = Crc32::default();
    crc.update(&bytes[..checksummed]);
    bytes[checksummed..].copy_from_slice(&crc.finish().to_le_bytes());
    // A state the core refuses (a corrupt SWATS learning rate, say) leaves `opt` as it was.
    let _ = opt.load_state::<f32>(&bytes, &mut []);
    Ok(())
}

/// The phases of one step, in order.
enum Ops {
    /// Check every slice, update every slice, finish (one slice: `Optimizer::step`).
    InOrder,
    /// Any sequence, then an end.
    Any(Vec<Op>, End),
}

enum Op {
    Check(usize),
    Update(usize),
    Scalars(Group),
}

enum End {
    Finish,
    /// Boxed: an outcome carries a 512-byte histogram.
    External(Box<Outcome>),
    Drop,
}

fn ops(u: &mut Unstructured<'_>, slices: usize) -> Result<Ops> {
    if u.int_in_range(0u8..=7)? != 7 {
        return Ok(Ops::InOrder);
    }
    let mut ops = Vec::new();
    for _ in 0..u.int_in_range(0..=6)? {
        let k = u.int_in_range(0..=slices - 1)?;
        ops.push(match u.int_in_range(0u8..=2)? {
            0 => Op::Check(k),
            1 => Op::Update(k),
            _ => Op::Scalars(group(u)?),
        });
    }
    let end = match u.int_in_range(0u8..=2)? {
        0 => End::Finish,
        1 => End::External(Box::new(Outcome {
            skipped: u.arbitrary()?,
            v_min: u.arbitrary::<Option<u32>>()?.map(f32::from_bits),
            v_min_active: u.arbitrary::<Option<u32>>()?.map(f32::from_bits),
            home_elements: u.arbitrary()?,
            nonfinite_applied: u.arbitrary()?,
            decisions: Histogram::from_counts(u.arbitrary()?),
            exact_pass: u.arbitrary()?,
        })),
        _ => End::Drop,
    };
    Ok(Ops::Any(ops, end))
}

/// One step over `model` as `ops` say; every call's result, as text (so NaN equals NaN).
fn drive(
    opt: &mut Optimizer,
    model: &mut [Box<dyn Slice>],
    grad_scale: f64,
    ops: &Ops,
    reference: bool,
) -> Vec<String> {
    if let ([slice], Ops::InOrder) = (&mut *model, ops) {
        return vec![show(slice.step(opt, grad_scale, reference))];
    }
    let mut step = match opt.begin(grad_scale) {
        Ok(step) => step,
        Err(e) => return vec![show::<()>(Err(e))],
    };
    let mut results = Vec::new();
    match ops {
        Ops::InOrder => {
            for slice in model.iter_mut() {
                results.push(show(slice.check(&mut step)));
            }
            let mut updates = match step.decide() {
                Ok(updates) => updates,
                Err(e) => return [results, vec![show::<()>(Err(e))]].concat(),
            };
            for slice in model.iter_mut() {
                results.push(show(slice.update(&mut updates, reference)));
            }
            results.push(show(updates.finish()));
        }
        Ops::Any(list, end) => {
            // Checks until the first update, which decides; later checks cannot be written.
            let mut phase = Phase::Checking(step);
            for op in list {
                phase = match (phase, op) {
                    (Phase::Checking(mut step), &Op::Check(k)) => {
                        results.push(show(model[k].check(&mut step)));
                        Phase::Checking(step)
                    }
                    (Phase::Checking(step), &Op::Update(k)) => match step.decide() {
                        Ok(mut updates) => {
                            results.push(show(model[k].update(&mut updates, reference)));
                            Phase::Updating(updates)
                        }
                        Err(e) => {
                            results.push(show::<()>(Err(e)));
                            return results;
                        }
                    },
                    (Phase::Updating(mut updates), &Op::Update(k)) => {
                        results.push(show(model[k].update(&mut updates, reference)));
                        Phase::Updating(updates)
                    }
                    (phase @ Phase::Updating(_), Op::Check(_)) => phase,
                    (phase, &Op::Scalars(group)) => {
                        results.push(format!("{:?}", phase.group_scalars(group)));
                        phase
                    }
                };
            }
            match (end, phase) {
                (End::Finish, Phase::Checking(step)) => {
                    results.push(show(step.decide().and_then(|updates| updates.finish())))
                }
                (End::Finish, Phase::Updating(updates)) => results.push(show(updates.finish())),
                (End::External(outcome), Phase::Checking(step)) => {
                    results.push(show(step.finish_external(**outcome)))
                }
                // Dropped unfinished (an external end after an update drops it too): the step
                // must not count.
                (End::External(_) | End::Drop, _) => {}
            }
        }
    }
    results
}

/// A step of [`drive`]'s in one of its two phases.
enum Phase<'o> {
    Checking(Step<'o>),
    Updating(Updates<'o>),
}

impl Phase<'_> {
    fn group_scalars(&self, group: Group) -> StepScalars {
        match self {
            Phase::Checking(step) => step.group_scalars(group),
            Phase::Updating(updates) => updates.group_scalars(group),
        }
    }
}

/// A result as text, its error's message included (which must not panic either).
fn show<T: std::fmt::Debug>(result: std::result::Result<T, Error>) -> String {
    match result {
        Ok(x) => format!("{x:?}"),
        Err(e) => format!("{e:?}: {e}"),
    }
}

/// The tensors of one slice, of one P/G/S storage type triple.
trait Slice {
    fn check(&mut self, step: &mut Step<'_>) -> std::result::Result<(), Error>;
    fn update(&mut self, step: &mut Updates<'_>, reference: bool) -> std::result::Result<(), Error>;
    fn step(
        &mut self,
        opt: &mut Optimizer,
        grad_scale: f64,
        reference: bool,
    ) -> std::result::Result<StepReport, Error>;
    /// Parameters, state and per-tensor scalars, NaN as one NaN.
    fn bits(&self) -> Vec<u32>;
    fn boxed_clone(&self) -> Box<dyn Slice>;
    /// The slice at unit scale: finite parameters and gradients clamped to [−1, 1] (others 0),
    /// zero state, default per-tensor scalars.
    fn unit_clone(&self) -> Box<dyn Slice>;
    /// Whether every parameter is finite; true where the parameters or the state are f16.
    fn params_finite(&self) -> bool;
}

#[derive(Clone)]
struct Entry<P, G, S> {
    param: Vec<P>,
    grad: Vec<G>,
    state: Vec<S>,
    aux: TensorAux,
    group: Group,
}

#[derive(Clone)]
struct Tensors<P, G, S>(Vec<Entry<P, G, S>>);

impl<P: Storage, G: Storage, S: Storage> Tensors<P, G, S> {
    fn views(&mut self) -> Vec<Tensor<'_, P, G, S>> {
        self.0
            .iter_mut()
            .map(|e| Tensor::new(&mut e.param, &e.grad, &mut e.state, &mut e.aux).in_group(e.group))
            .collect()
    }
}

impl<P: Storage, G: Storage, S: Storage> Slice for Tensors<P, G, S> {
    fn check(&mut self, step: &mut Step<'_>) -> std::result::Result<(), Error> {
        step.check(&mut self.views())
    }

    fn update(&mut self, step: &mut Updates<'_>, reference: bool) -> std::result::Result<(), Error> {
        if reference {
            step.update_reference(&mut self.views())
        } else {
            step.update(&mut self.views())
        }
    }

    fn step(
        &mut self,
        opt: &mut Optimizer,
        grad_scale: f64,
        reference: bool,
    ) -> std::result::Result<StepReport, Error> {
        if reference {
            opt.step_reference(&mut self.views(), grad_scale)
        } else {
            opt.step(&mut self.views(), grad_scale)
        }
    }

    fn bits(&self) -> Vec<u32> {
        let mut bits = Vec::new();
        for e in &self.0 {
            bits.extend(e.param.iter().map(|x| canonical(x.to_f32())));
            bits.extend(e.state.iter().map(|x| canonical(x.to_f32())));
            bits.extend([e.aux.swats_lambda, e.aux.rho].map(canonical));
            bits.push(e.aux.home_elements);
        }
        bits
    }

    fn boxed_clone(&self) -> Box<dyn Slice> {
        Box::new(self.clone())
    }

    fn unit_clone(&self) -> Box<dyn Slice> {
        let mut unit = self.clone();
        for e in &mut unit.0 {
            clamp_to_unit(&mut e.param);
            clamp_to_unit(&mut e.grad);
            e.state.fill(S::from_f32(0.0));
            e.aux = TensorAux::default();
        }
        Box::new(unit)
    }

    fn params_finite(&self) -> bool {
        let f16_range = !P::from_f32(1e30).to_f32().is_finite() || !S::from_f32(1e30).to_f32().is_finite();
        f16_range
            || self
                .0
                .iter()
                .all(|e| e.param.iter().all(|x| x.to_f32().is_finite()))
    }
}

/// Finite values clamped to [−1, 1], the others 0.
fn clamp_to_unit<T: Storage>(values: &mut [T]) {
    for x in values {
        let v = x.to_f32();
        *x = T::from_f32(if v.is_finite() { v.clamp(-1.0, 1.0) } else { 0.0 });
    }
}

fn canonical(x: f32) -> u32 {
    if x.is_nan() {
        f32::NAN.to_bits()
    } else {
        x.to_bits()
    }
}

/// A slice of one of 6 P/G/S storage triples, which put each type in each place (every triple
/// is compiled with every rule's kernels: all 27 would take minutes to build).
fn slice(u: &mut Unstructured<'_>, slots: usize) -> Result<Box<dyn Slice>> {
    match u.int_in_range(0u8..=5)? {
        0 => tensors::<f32, f32, f32>(u, slots),
        1 => tensors::<bf16, bf16, bf16>(u, slots),
        2 => tensors::<f16, f16, f16>(u, slots),
        3 => tensors::<bf16, f16, f32>(u, slots),
        4 => tensors::<f16, f32, bf16>(u, slots),
        _ => tensors::<f32, bf16, f16>(u, slots),
    }
}

fn tensors<P: Storage, G: Storage, S: Storage>(
    u: &mut Unstructured<'_>,
    slots: usize,
) -> Result<Box<dyn Slice>> {
    let mut entries: Vec<Entry<P, G, S>> = Vec::new();
    for _ in 0..u.int_in_range(0..=4)? {
        // Mostly short tensors; some cross the fast path's chunk of 256 elements.
        let numel = match u.int_in_range(0u8..=7)? {
            0..=4 => u.int_in_range(0..=8)?,
            5 | 6 => u.int_in_range(0..=64)?,
            _ => u.int_in_range(0..=600)?,
        };
        let grad_len = length(u, numel)?;
        let state_len = length(u, slots * numel)?;
        entries.push(Entry {
            param: values(u, numel)?,
            grad: values(u, grad_len)?,
            state: values(u, state_len)?,
            aux: TensorAux {
                swats_lambda: value(u)?,
                rho: value(u)?,
                home_elements: u.arbitrary()?,
            },
            group: group(u)?,
        });
    }
    Ok(Box::new(Tensors(entries)))
}

/// `len` mostly; one time in 16 another length near it.
fn length(u: &mut Unstructured<'_>, len: usize) -> Result<usize> {
    if u.int_in_range(0u8..=15)? == 15 {
        u.int_in_range(0..=len + 2)
    } else {
        Ok(len)
    }
}

fn values<T: Storage>(u: &mut Unstructured<'_>, len: usize) -> Result<Vec<T>> {
    (0..len).map(|_| value(u).map(T::from_f32)).collect()
}

/// Any bits, a special value, or a moderate value k · 2⁻ⁿ (|k| < 2¹⁵, n ≤ 40).
fn value(u: &mut Unstructured<'_>) -> Result<f32> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => f32::from_bits(u.arbitrary()?),
        1 => *u.choose(&SPECIAL)? as f32,
        _ => f32::from(u.arbitrary::<i16>()?) * (-f32::from(u.int_in_range(0u8..=40)?)).exp2(),
    })
}

fn group(u: &mut Unstructured<'_>) -> Result<Group> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 | 1 => Group::DEFAULT,
        2 => Group::NO_DECAY,
        _ => Group {
            lr_scale: hyper(u, 1.0)?,
            decay: u.arbitrary()?,
            beta1: if u.arbitrary()? {
                Some(hyper(u, 0.8)?)
            } else {
                None
            },
            weight_decay: if u.arbitrary()? {
                Some(hyper(u, 0.01)?)
            } else {
                None
            },
            ..Group::DEFAULT
        },
    })
}
