//! [`VarOptimizer`](crate::VarOptimizer)'s state as bytes: one core checkpoint of the whole
//! model, in an envelope that describes it (the rule, the hyper-parameters it reads, the state
//! type, the adapter's options, each variable's name, shape, dtype and group) and holds the
//! schedule's place.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "HACANDLE"
//!      8     2  format version (4)
//!     10     2  reserved, 0
//!     12     4  variable count V
//!     16     8  schedule position k
//!     24     8  base learning rate η₀ (f64 bits)
//!     32     8  skipped steps
//! then, each text as 1 length byte and UTF-8:
//!                 rule name (`Rule::name`), state dtype name (`Dtype::name`)
//!              2  hyper-parameter count H, then H × (name text, value text): the rule's knobs
//!                 as `Config::knobs` lists them (η = η₀) and `Knob`'s `Display` writes them
//!              2  option count O, then O × (name text, 2 value length bytes, UTF-8 value):
//!                 schedule, warm-up, clipping norm, skip policy, decay_all and the groups
//!                 (`options.rs` lists them and writes their values)
//! per variable, in stepping order:
//!              2  name length, then the UTF-8 name
//!              1  rank r, then r dimensions of 8 bytes
//!                 dtype name text (`f32`, `bf16`, `f16`)
//!              8  group learning-rate multiplier (f64 bits)
//!              1  group decay (0 or 1)
//!         4 × 9  the group's λ, ε, β1, β2: 1 byte set (0 or 1), then the value (f64 bits)
//! then:
//!              8  length L, then L bytes in the core's checkpoint format (core/src/checkpoint.rs)
//!                 with every variable in stepping order
//! end          4  CRC-32 (IEEE) of every byte before it
//! ```
//! All integers little-endian. Version 3 has no options: it still loads, with the optimizer's
//! options unchecked. Version 2 (homeadam-candle before the self-describing state) has no
//! skipped count, texts, dtypes or group overrides either: it still loads, with only η₀
//! checked (its one hyper-parameter). Version 1 held one core checkpoint per parameter group;
//! it is refused by name. Loading checks everything before it changes anything.

use candle_core::{DType, Result};

use crate::error::bail;
use homeadam_core::backend::Crc32;
use homeadam_core::{
    Dtype, Group, Optimizer, Rule, SliceSink, StateStorage, TensorAux, TensorState, TensorStateMut,
};

use super::error::core_err;
use super::groups::overrides;
use super::options::{self, OptimConfig};
use super::params::{OnStates, OnStatesMut, Param, States};

const MAGIC: &[u8; 8] = b"HACANDLE";
const VERSION: u16 = 4;
/// The format before the envelope recorded the adapter's options.
const VERSION_3: u16 = 3;
/// The format before the envelope described its state.
const VERSION_2: u16 = 2;

/// A hyper-parameter or option that
/// [`VarOptimizer::load_state_adopting`](crate::VarOptimizer::load_state_adopting) took from
/// the saved state, with the value it replaced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adopted {
    /// The knob's name, as [`homeadam_core::Config::knobs`] lists it (`lr` is η₀), or the
    /// option's: `schedule`, `warmup`, `max_grad_norm` or `on_skip`.
    pub name: String,
    /// The optimizer's value before the load.
    pub was: String,
    /// The saved value, now the optimizer's.
    pub now: String,
}

/// The name of a variable's dtype in the envelope.
fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::BF16 => "bf16",
        DType::F16 => "f16",
        _ => "f32",
    }
}

/// Appends a text of at most 255 bytes after its length.
fn put_text(out: &mut Vec<u8>, text: &str) -> Result<()> {
    let Ok(len) = u8::try_from(text.len()) else {
        bail!("homeadam optimizer state: {text:?} is longer than 255 bytes");
    };
    out.push(len);
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// Appends a text of at most 65535 bytes after its two length bytes.
fn put_long_text(out: &mut Vec<u8>, text: &str) -> Result<()> {
    let Ok(len) = u16::try_from(text.len()) else {
        bail!("homeadam optimizer state: an option's value is longer than 65535 bytes");
    };
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(text.as_bytes());
    Ok(())
}

/// Appends the core checkpoint of every variable, lent as it is (no copy), after its length.
struct SaveCore<'a> {
    opt: &'a Optimizer,
    params: &'a [Param],
    aux: &'a [TensorAux],
    out: &'a mut Vec<u8>,
}

impl OnStates for SaveCore<'_> {
    type Out = Result<()>;
    fn on<S: StateStorage>(self, states: &[Vec<S>]) -> Result<()> {
        let at = self.out.len();
        self.out.extend_from_slice(&[0; 8]);
        write_core(
            self.opt,
            self.params,
            states,
            self.aux,
            0..self.params.len(),
            self.out,
        )?;
        let len = (self.out.len() - at - 8) as u64;
        self.out[at..at + 8].copy_from_slice(&len.to_le_bytes());
        Ok(())
    }
}

/// Appends the core checkpoint of the variables `which` (indices into `params`, in order).
pub(crate) fn write_core<S: StateStorage>(
    opt: &Optimizer,
    params: &[Param],
    states: &[Vec<S>],
    aux: &[TensorAux],
    which: impl Iterator<Item = usize>,
    out: &mut Vec<u8>,
) -> Result<()> {
    let views: Vec<_> = which
        .map(|k| TensorState {
            numel: params[k].var.elem_count(),
            state: &states[k],
            aux: &aux[k],
        })
        .collect();
    let len = opt.state_bytes(views.iter().map(|v| v.numel), S::DTYPE);
    let start = out.len();
    out.resize(start + len, 0);
    let mut sink = SliceSink::new(&mut out[start..]);
    opt.save_state(&views, &mut sink).map_err(core_err)?;
    if sink.len() != len {
        bail!(
            "homeadam optimizer state: the core wrote {} bytes, not {len}",
            sink.len()
        );
    }
    Ok(())
}

/// Loads the core checkpoint into the variables' state; the core changes nothing on error.
struct LoadCore<'a> {
    opt: &'a mut Optimizer,
    params: &'a [Param],
    aux: &'a mut [TensorAux],
    bytes: &'a [u8],
}

impl OnStatesMut for LoadCore<'_> {
    type Out = Result<()>;
    fn on<S: StateStorage>(self, states: &mut Vec<Vec<S>>) -> Result<()> {
        let mut views: Vec<_> = self
            .params
            .iter()
            .zip(states.iter_mut().zip(self.aux.iter_mut()))
            .map(|(p, (state, aux))| TensorStateMut {
                numel: p.var.elem_count(),
                state,
                aux,
            })
            .collect();
        self.opt.load_state(self.bytes, &mut views).map_err(core_err)
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        match self
            .at
            .checked_add(n)
            .and_then(|end| self.bytes.get(self.at..end))
        {
            Some(s) => {
                self.at += n;
                Ok(s)
            }
            None => bail!("homeadam optimizer state: truncated"),
        }
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        b.copy_from_slice(self.take(N)?);
        Ok(b)
    }
    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }
    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }
    fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_le_bytes)
    }
    fn u8(&mut self) -> Result<u8> {
        self.array().map(|[b]| b)
    }
    fn text(&mut self) -> Result<String> {
        let len = self.u8()? as usize;
        self.utf8(len)
    }
    fn long_text(&mut self) -> Result<String> {
        let len = self.u16()? as usize;
        self.utf8(len)
    }
    fn utf8(&mut self, len: usize) -> Result<String> {
        match std::str::from_utf8(self.take(len)?) {
            Ok(text) => Ok(text.to_string()),
            Err(_) => bail!("homeadam optimizer state: a text is not UTF-8"),
        }
    }
    fn f64(&mut self) -> Result<f64> {
        self.u64().map(f64::from_bits)
    }
}

/// A group as the envelope shows it in errors.
fn describe(g: Group) -> String {
    let mut text = format!(
        "lr × {}, {}",
        g.lr_scale,
        if g.decay { "decayed" } else { "not decayed" }
    );
    for (name, value) in overrides(g) {
        if let Some(value) = value {
            text += &format!(", {name} {value:e}");
        }
    }
    text
}

/// The settings a saved state records, compared on load.
struct Saved {
    skipped: u64,
    /// `(name, value)` of each hyper-parameter; η₀ only for version 2.
    knobs: Vec<(String, String)>,
    /// `(name, value)` of each option; none before version 4.
    options: Vec<(String, String)>,
}

/// What a state records of the optimizer besides its variables: restored by a load.
pub(crate) struct Settings {
    /// The schedule position k.
    pub(crate) position: u64,
    /// Steps skipped.
    pub(crate) skipped: u64,
    /// The rule, the hyper-parameters (with η = η₀) and the options.
    pub(crate) config: OptimConfig,
}

/// The envelope of a state: every byte before the core checkpoint.
pub(crate) fn envelope(settings: &Settings, state_dtype: Dtype, params: &[Param]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    let Ok(count) = u32::try_from(params.len()) else {
        bail!("homeadam optimizer state: more than 2^32 variables");
    };
    out.extend_from_slice(&count.to_le_bytes());
    out.extend_from_slice(&settings.position.to_le_bytes());
    let config = settings.config.core;
    out.extend_from_slice(&config.lr.to_bits().to_le_bytes());
    out.extend_from_slice(&settings.skipped.to_le_bytes());
    put_text(&mut out, config.rule.name())?;
    put_text(&mut out, state_dtype.name())?;
    let knobs: Vec<_> = config.knobs().collect();
    out.extend_from_slice(&(knobs.len() as u16).to_le_bytes());
    for (name, value) in knobs {
        put_text(&mut out, name)?;
        put_text(&mut out, &value.to_string())?;
    }
    let recorded: Vec<_> = options::recorded(&settings.config).collect();
    out.extend_from_slice(&(recorded.len() as u16).to_le_bytes());
    for (name, value) in recorded {
        put_text(&mut out, name)?;
        put_long_text(&mut out, &value)?;
    }
    for p in params {
        let name = p.name.as_bytes();
        let Ok(len) = u16::try_from(name.len()) else {
            bail!("homeadam optimizer state: variable name longer than 65535 bytes");
        };
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(name);
        let dims = p.var.dims();
        let Ok(rank) = u8::try_from(dims.len()) else {
            bail!(
                "homeadam optimizer state: {} has more than 255 dimensions",
                p.name
            );
        };
        out.push(rank);
        for &d in dims {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        put_text(&mut out, dtype_name(p.var.dtype()))?;
        out.extend_from_slice(&p.group.lr_scale.to_bits().to_le_bytes());
        out.push(p.group.decay as u8);
        for (_, value) in overrides(p.group) {
            out.push(value.is_some() as u8);
            out.extend_from_slice(&value.unwrap_or(0.0).to_bits().to_le_bytes());
        }
    }
    Ok(out)
}

/// A whole state: the `envelope`, then the core checkpoint of every variable and the
/// checksum.
pub(crate) fn seal(
    mut envelope: Vec<u8>,
    core: &Optimizer,
    params: &[Param],
    states: &States,
    aux: &[TensorAux],
) -> Result<Vec<u8>> {
    states.visit(SaveCore {
        opt: core,
        params,
        aux,
        out: &mut envelope,
    })?;
    let mut crc = Crc32::default();
    crc.update(&envelope);
    envelope.extend_from_slice(&crc.finish().to_le_bytes());
    Ok(envelope)
}

/// A state checked against the optimizer that loads it: what the load commits.
pub(crate) struct Checked<'a> {
    /// The settings to load, with the hyper-parameters to load with.
    pub(crate) settings: Settings,
    /// The hyper-parameters taken from the state.
    pub(crate) adopted: Vec<Adopted>,
    /// The core checkpoint.
    pub(crate) core: &'a [u8],
}

/// Reads a state and checks it against an optimizer of `params` with settings `ours` and
/// state type `state_dtype`; when adopting, its hyper-parameters may differ.
pub(crate) fn check<'a>(
    bytes: &'a [u8],
    ours: &Settings,
    state_dtype: Dtype,
    params: &[Param],
    adopt: bool,
) -> Result<Checked<'a>> {
    if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
        bail!("homeadam optimizer state: bad magic (not a VarOptimizer state)");
    }
    let mut r = Reader { bytes, at: 8 };
    let version = r.u16()?;
    if !(VERSION_2..=VERSION).contains(&version) {
        bail!(
            "homeadam optimizer state: format version {version}, but this build reads versions \
             {VERSION_2} to {VERSION} only (version 1 kept one core optimizer per parameter \
             group); retrain"
        );
    }
    let Some(body_len) = bytes.len().checked_sub(4) else {
        bail!("homeadam optimizer state: truncated");
    };
    let (body, crc_bytes) = bytes.split_at(body_len);
    let mut crc = Crc32::default();
    crc.update(body);
    if crc.finish().to_le_bytes() != crc_bytes {
        bail!("homeadam optimizer state: checksum mismatch (corrupt or truncated bytes)");
    }
    r.bytes = body;
    r.take(2)?;
    let vars = r.u32()? as usize;
    if vars != params.len() {
        bail!(
            "homeadam optimizer state: holds {vars} variables, this optimizer has {}",
            params.len()
        );
    }
    let position = r.u64()?;
    let base_lr = r.f64()?;
    let saved = if version >= VERSION_3 {
        read_settings(&mut r, ours.config.core.rule, state_dtype, version)?
    } else {
        Saved {
            skipped: ours.skipped,
            knobs: vec![("lr".into(), homeadam_core::Knob::Real(base_lr).to_string())],
            options: Vec::new(),
        }
    };
    let (config, adopted) = settle(&ours.config, &saved, adopt)?;
    for p in params {
        check_variable(&mut r, p, version)?;
    }
    let len = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
    let core = r.take(len)?;
    if r.at != body.len() {
        bail!("homeadam optimizer state: unexpected bytes after the core checkpoint");
    }
    let settings = Settings {
        position,
        skipped: saved.skipped,
        config,
    };
    Ok(Checked {
        settings,
        adopted,
        core,
    })
}

/// The skipped count, rule, state type, hyper-parameters and (from version 4) options of a
/// state; the rule and state type must be `rule_here` and `state_here`.
fn read_settings(r: &mut Reader<'_>, rule_here: Rule, state_here: Dtype, version: u16) -> Result<Saved> {
    let skipped = r.u64()?;
    let (rule, state) = (r.text()?, r.text()?);
    let here = rule_here.name();
    if rule != here {
        bail!("homeadam optimizer state: saved by another rule ({rule}); this optimizer steps {here}");
    }
    let here = state_here.name();
    if state != here {
        bail!("homeadam optimizer state: the state storage type differs: saved {state}, here {here}");
    }
    let count = r.u16()?;
    let mut knobs = Vec::with_capacity(count as usize);
    for _ in 0..count {
        knobs.push((r.text()?, r.text()?));
    }
    let mut options = Vec::new();
    if version >= VERSION {
        for _ in 0..r.u16()? {
            options.push((r.text()?, r.long_text()?));
        }
    }
    Ok(Saved {
        skipped,
        knobs,
        options,
    })
}

/// The saved values of `saved` that differ from `here`'s, each with this optimizer's value.
fn differences<'a>(
    here: impl Iterator<Item = (&'a str, String)>,
    saved: &[(String, String)],
) -> Vec<Adopted> {
    let here: Vec<_> = here.collect();
    saved
        .iter()
        .filter_map(|(name, value)| {
            let mine = here.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
            (mine != Some(value.as_str())).then(|| Adopted {
                name: name.clone(),
                was: mine.unwrap_or("(not read by this rule)").to_string(),
                now: value.clone(),
            })
        })
        .collect()
}

/// `name = saved (here ours)` of each difference.
fn listed(differences: &[&Adopted]) -> String {
    let list: Vec<String> = differences
        .iter()
        .map(|d| format!("{} = {} (here {})", d.name, d.now, d.was))
        .collect();
    list.join(", ")
}

/// The config to load with: `ours` if every saved knob and option has its value there; else
/// (when adopting) the saved values, listed; else an error naming the differences. The decay
/// mask and the groups are never adopted: they decide each variable's group.
fn settle(ours: &OptimConfig, saved: &Saved, adopt: bool) -> Result<(OptimConfig, Vec<Adopted>)> {
    let knobs = differences(ours.core.knobs().map(|(n, v)| (n, v.to_string())), &saved.knobs);
    let options = differences(options::recorded(ours), &saved.options);
    if knobs.is_empty() && options.is_empty() {
        return Ok((ours.clone(), Vec::new()));
    }
    let fixed: Vec<&Adopted> = options.iter().filter(|d| !options::adoptable(&d.name)).collect();
    if !fixed.is_empty() {
        bail!(
            "homeadam optimizer state: saved with {}; build the optimizer with the saved decay \
             mask and groups (a load never adopts them)",
            listed(&fixed)
        );
    }
    if !adopt {
        bail!(
            "homeadam optimizer state: saved with {}; load_state_adopting takes the saved \
             values",
            listed(&knobs.iter().chain(&options).collect::<Vec<_>>())
        );
    }
    let mut config = ours.clone();
    for d in &knobs {
        if config.core.set_knob(&d.name, &d.now).is_none() {
            bail!(
                "homeadam optimizer state: cannot adopt {} = {} for rule {}",
                d.name,
                d.now,
                config.core.rule.name()
            );
        }
    }
    for d in &options {
        let Some(adopted) = options::adopt(&config, &d.name, &d.now) else {
            bail!("homeadam optimizer state: cannot adopt {} = {}", d.name, d.now);
        };
        config = adopted;
    }
    config.core.validate().map_err(core_err)?;
    options::check(&config)?;
    Ok((config, knobs.into_iter().chain(options).collect()))
}

/// Reads variable `p`'s entry and refuses one that is not `p` (name, shape, dtype, group).
fn check_variable(r: &mut Reader<'_>, p: &Param, version: u16) -> Result<()> {
    let len = r.u16()? as usize;
    let name = r.take(len)?;
    if name != p.name.as_bytes() {
        bail!(
            "homeadam optimizer state: variable {:?} where this optimizer has {:?}",
            String::from_utf8_lossy(name),
            p.name
        );
    }
    let rank = r.u8()? as usize;
    let mut dims = Vec::with_capacity(rank);
    for _ in 0..rank {
        dims.push(r.u64()?);
    }
    let here: Vec<u64> = p.var.dims().iter().map(|&d| d as u64).collect();
    if dims != here {
        bail!(
            "homeadam optimizer state: {} has shape {dims:?}, the variable {here:?}",
            p.name
        );
    }
    if version >= VERSION_3 {
        let (saved, here) = (r.text()?, dtype_name(p.var.dtype()));
        if saved != here {
            bail!(
                "homeadam optimizer state: {} was {saved}, the variable is {here}",
                p.name
            );
        }
    }
    let mut group = Group {
        lr_scale: r.f64()?,
        decay: match r.u8()? {
            0 => false,
            1 => true,
            b => bail!("homeadam optimizer state: {}: decay flag {b}", p.name),
        },
        ..Group::DEFAULT
    };
    if version >= VERSION_3 {
        let mut values = [None; 4];
        for value in &mut values {
            let set = r.u8()?;
            let bits = r.f64()?;
            *value = match set {
                0 => None,
                1 => Some(bits),
                b => bail!("homeadam optimizer state: {}: override flag {b}", p.name),
            };
        }
        [group.weight_decay, group.eps, group.beta1, group.beta2] = values;
    }
    if group != p.group {
        bail!(
            "homeadam optimizer state: {} was in group ({}), here ({}): other group or decay \
             settings?",
            p.name,
            describe(group),
            describe(p.group)
        );
    }
    Ok(())
}

/// [`LoadCore`] for the state type of `states`.
pub(crate) fn load_into(
    opt: &mut Optimizer,
    params: &[Param],
    states: &mut States,
    aux: &mut [TensorAux],
    core: &[u8],
) -> Result<()> {
    states.visit_mut(LoadCore {
        opt,
        params,
        aux,
        bytes: core,
    })
}
