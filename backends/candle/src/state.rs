//! [`VarOptimizer`]'s state as bytes: one core checkpoint of the whole model, in an envelope
//! that names the variables and holds their groups and the schedule.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "HACANDLE"
//!      8     2  format version (2)
//!     10     2  reserved, 0
//!     12     4  variable count V
//!     16     8  schedule position k
//!     24     8  base learning rate η₀ (f64 bits)
//! per variable, in stepping order:
//!              2  name length, then the UTF-8 name
//!              1  rank r, then r dimensions of 8 bytes
//!              8  group learning-rate multiplier (f64 bits)
//!              1  group decay (0 or 1)
//! then:
//!              8  length L, then L bytes in the core's checkpoint format (core/src/checkpoint.rs)
//!                 with every variable in stepping order
//! end          4  CRC-32 (IEEE) of every byte before it
//! ```
//! All integers little-endian. Version 1 held one core checkpoint per parameter group; it is
//! refused by name. Loading checks everything before it changes anything.

use candle_core::{bail, Result};
use homeadam_core::backend::Crc32;
use homeadam_core::{Group, Optimizer, SliceSink, StateStorage, TensorAux, TensorState, TensorStateMut};

use std::borrow::Cow;

#[cfg(feature = "cuda")]
use super::adapter::fresh_states;
use super::adapter::{Param, Placement, States, VarOptimizer};

const MAGIC: &[u8; 8] = b"HACANDLE";
const VERSION: u16 = 2;

fn core_err(e: homeadam_core::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("homeadam optimizer state: {e}"))
}

/// Appends the core checkpoint of every variable, lent as it is (no copy), after its length.
fn save_core<S: StateStorage>(
    opt: &Optimizer,
    params: &[Param],
    states: &[Vec<S>],
    aux: &[TensorAux],
    out: &mut Vec<u8>,
) -> Result<()> {
    let at = out.len();
    out.extend_from_slice(&[0; 8]);
    write_core(opt, params, states, aux, 0..params.len(), out)?;
    let len = (out.len() - at - 8) as u64;
    out[at..at + 8].copy_from_slice(&len.to_le_bytes());
    Ok(())
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
fn load_core<S: StateStorage>(
    opt: &mut Optimizer,
    params: &[Param],
    states: &mut [Vec<S>],
    aux: &mut [TensorAux],
    bytes: &[u8],
) -> Result<()> {
    let mut views: Vec<_> = params
        .iter()
        .zip(states.iter_mut().zip(aux.iter_mut()))
        .map(|(p, (state, aux))| TensorStateMut {
            numel: p.var.elem_count(),
            state,
            aux,
        })
        .collect();
    opt.load_state(bytes, &mut views).map_err(core_err)
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
}

/// A group as the envelope shows it in errors.
fn describe(g: Group) -> String {
    format!(
        "lr × {}, {}",
        g.lr_scale,
        if g.decay { "decayed" } else { "not decayed" }
    )
}

impl VarOptimizer {
    /// The optimizer state as bytes (format in this module's source).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        let Ok(count) = u32::try_from(self.params.len()) else {
            bail!("homeadam optimizer state: more than 2^32 variables");
        };
        out.extend_from_slice(&count.to_le_bytes());
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.base_lr.to_bits().to_le_bytes());
        for p in &self.params {
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
            out.extend_from_slice(&p.group.lr_scale.to_bits().to_le_bytes());
            out.push(p.group.decay as u8);
        }
        let (states, aux) = self.host_state()?;
        let (core, params) = (self.core(), &self.params);
        match &*states {
            States::F32(s) => save_core(core, params, s, &aux, &mut out)?,
            States::BF16(s) => save_core(core, params, s, &aux, &mut out)?,
            States::F16(s) => save_core(core, params, s, &aux, &mut out)?,
            States::Q8(s) => save_core(core, params, s, &aux, &mut out)?,
        }
        let mut crc = Crc32::default();
        crc.update(&out);
        out.extend_from_slice(&crc.finish().to_le_bytes());
        Ok(out)
    }

    /// Restores state saved by [`VarOptimizer::save_state`] for the same variables (names,
    /// shapes, order, groups), rule and state type; on any error nothing changes.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
            bail!("homeadam optimizer state: bad magic (not a VarOptimizer state)");
        }
        let mut r = Reader { bytes, at: 8 };
        let version = r.u16()?;
        if version != VERSION {
            bail!(
                "homeadam optimizer state: format version {version}, but this build reads version \
                 {VERSION} only (version 1 kept one core optimizer per parameter group); retrain"
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
        if vars != self.params.len() {
            bail!(
                "homeadam optimizer state: holds {vars} variables, this optimizer has {}",
                self.params.len()
            );
        }
        let position = r.u64()?;
        let base_lr = f64::from_bits(r.u64()?);
        for p in &self.params {
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
            let group = Group {
                lr_scale: f64::from_bits(r.u64()?),
                decay: match r.u8()? {
                    0 => false,
                    1 => true,
                    b => bail!("homeadam optimizer state: {}: decay flag {b}", p.name),
                },
            };
            if group != p.group {
                bail!(
                    "homeadam optimizer state: {} was in group ({}), here ({}): other decay or \
                     lr-multiplier settings?",
                    p.name,
                    describe(group),
                    describe(p.group)
                );
            }
        }
        let len = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
        let core = r.take(len)?;
        if r.at != body.len() {
            bail!("homeadam optimizer state: unexpected bytes after the core checkpoint");
        }
        self.restore(position, base_lr, core)
    }

    /// The state and telemetry of every variable in host memory: lent on the CPU, copied
    /// from a CUDA device.
    fn host_state(&self) -> Result<(Cow<'_, States>, Cow<'_, [TensorAux]>)> {
        match &self.placement {
            Placement::Host(states) => Ok((Cow::Borrowed(states), Cow::Borrowed(&self.aux))),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => {
                let mut aux = self.aux.clone();
                d.read_aux(&mut aux)?;
                Ok((Cow::Owned(d.download(&self.params)?), Cow::Owned(aux)))
            }
        }
    }

    /// Commits a checked envelope: the rate first (it may be refused), then the core's
    /// checkpoint (refused without a change, or loaded whole).
    fn restore(&mut self, position: u64, base_lr: f64, core: &[u8]) -> Result<()> {
        let old = (self.position, self.base_lr, self.opt.clone());
        (self.position, self.base_lr) = (position, base_lr);
        let loaded = self.apply_lr().and_then(|()| self.load_states(core));
        match loaded {
            Ok(()) => self.refused_lr = None,
            Err(_) => {
                (self.position, self.base_lr, self.opt) = old;
                self.sync_device_lr()?;
            }
        }
        loaded
    }

    /// Loads the core's checkpoint into the core and every variable's state.
    fn load_states(&mut self, core: &[u8]) -> Result<()> {
        let (params, opt) = (&self.params, &mut self.opt);
        match &mut self.placement {
            Placement::Host(states) => load_into(opt, params, states, &mut self.aux, core),
            #[cfg(feature = "cuda")]
            Placement::Device(d) => {
                let slots = opt.config().state_slots();
                let sizes = params.iter().map(|p| p.var.elem_count());
                let mut states = fresh_states(self.config.state_dtype, slots, sizes);
                let mut aux = self.aux.clone();
                load_into(opt, params, &mut states, &mut aux, core)?;
                d.upload(&states)?;
                // The next step builds the kernels' table from the loaded core.
                d.reset_table();
                self.aux = aux;
                Ok(())
            }
        }
    }
}

/// [`load_core`] for the state type of `states`.
fn load_into(
    opt: &mut Optimizer,
    params: &[Param],
    states: &mut States,
    aux: &mut [TensorAux],
    core: &[u8],
) -> Result<()> {
    match states {
        States::F32(s) => load_core(opt, params, s, aux, core),
        States::BF16(s) => load_core(opt, params, s, aux, core),
        States::F16(s) => load_core(opt, params, s, aux, core),
        States::Q8(s) => load_core(opt, params, s, aux, core),
    }
}
