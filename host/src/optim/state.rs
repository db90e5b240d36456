//! [`VarOptimizer`]'s state as bytes: the core's checkpoints of each group, in an envelope that
//! names the variables and holds the schedule.
//!
//! ```text
//! offset  size  field
//!      0     8  magic "HACANDLE"
//!      8     2  format version (1)
//!     10     2  reserved, 0
//!     12     4  variable count V
//!     16     4  group count G
//!     20     8  schedule position k
//!     28     8  base learning rate η₀ (f64 bits)
//! per variable, in stepping order:
//!              2  name length, then the UTF-8 name
//!              1  rank r, then r dimensions of 8 bytes
//!              4  group index
//! per group:
//!              8  length L, then L bytes in the core's checkpoint format (core/src/checkpoint.rs)
//!                 with that group's variables in stepping order
//! end          4  CRC-32 (IEEE) of every byte before it
//! ```
//! All integers little-endian. Loading checks everything before it changes anything.

use candle_core::{bail, Result};
use homeadam_core::{Crc32, Optimizer, SliceSink, Storage, TensorAux, TensorState};

use super::adapter::{States, VarOptimizer};

const MAGIC: &[u8; 8] = b"HACANDLE";
const VERSION: u16 = 1;

fn core_err(group: usize, e: homeadam_core::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!("homeadam optimizer state, group {group}: {e}"))
}

/// The core checkpoint of one group: the members' state and aux, in order.
fn save_group<S: Storage>(
    opt: &Optimizer,
    states: &[Vec<S>],
    aux: &[TensorAux],
    members: &[usize],
    group: usize,
) -> Result<Vec<u8>> {
    // The core's TensorState borrows mutably; copies keep `save_state(&self)`.
    let mut st: Vec<Vec<S>> = members.iter().map(|&k| states[k].clone()).collect();
    let mut ax: Vec<TensorAux> = members.iter().map(|&k| aux[k]).collect();
    let slots = opt.config().state_slots();
    let views: Vec<_> = st
        .iter_mut()
        .zip(ax.iter_mut())
        .map(|(s, a)| TensorState {
            numel: s.len() / slots.max(1),
            state: s.as_mut_slice(),
            aux: a,
        })
        .collect();
    let numels = views.iter().map(|v| v.numel);
    let mut buf = vec![0u8; opt.state_bytes(numels, S::DTYPE)];
    let mut sink = SliceSink::new(&mut buf);
    opt.save_state(&views, &mut sink)
        .map_err(|e| core_err(group, e))?;
    Ok(buf)
}

/// Loads one group's core checkpoint into fresh copies (so that a later error changes nothing).
fn load_group<S: Storage>(
    opt: &mut Optimizer,
    bytes: &[u8],
    numels: &[usize],
    group: usize,
) -> Result<Vec<(Vec<S>, TensorAux)>> {
    let slots = opt.config().state_slots();
    let zero = S::from_f32(0.0);
    let mut out: Vec<(Vec<S>, TensorAux)> = numels
        .iter()
        .map(|&n| (vec![zero; slots * n], TensorAux::default()))
        .collect();
    let mut views: Vec<_> = out
        .iter_mut()
        .zip(numels)
        .map(|((s, a), &numel)| TensorState {
            numel,
            state: s.as_mut_slice(),
            aux: a,
        })
        .collect();
    opt.load_state(bytes, &mut views)
        .map_err(|e| core_err(group, e))?;
    Ok(out)
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
    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        b.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(b))
    }
    fn u16(&mut self) -> Result<u16> {
        let mut b = [0u8; 2];
        b.copy_from_slice(self.take(2)?);
        Ok(u16::from_le_bytes(b))
    }
}

impl VarOptimizer {
    fn members(&self, group: usize) -> Vec<usize> {
        (0..self.params.len())
            .filter(|&k| self.params[k].group == group)
            .collect()
    }

    /// The optimizer state as bytes (format in this module's source).
    pub fn save_state(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&(self.params.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.groups.len() as u32).to_le_bytes());
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
            out.push(dims.len() as u8);
            for &d in dims {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&(p.group as u32).to_le_bytes());
        }
        for (g, group) in self.groups.iter().enumerate() {
            let members = self.members(g);
            let bytes = match &self.states {
                States::F32(s) => save_group(&group.opt, s, &self.aux, &members, g)?,
                States::BF16(s) => save_group(&group.opt, s, &self.aux, &members, g)?,
                States::F16(s) => save_group(&group.opt, s, &self.aux, &members, g)?,
            };
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
        let mut crc = Crc32::default();
        crc.update(&out);
        out.extend_from_slice(&crc.finish().to_le_bytes());
        Ok(out)
    }

    /// Restores state saved by [`VarOptimizer::save_state`] for the same variables (names,
    /// shapes, order), rule and state type; on any error nothing changes.
    pub fn load_state(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() < MAGIC.len() || &bytes[..8] != MAGIC {
            bail!("homeadam optimizer state: bad magic (not a VarOptimizer state)");
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
        let mut r = Reader { bytes: body, at: 8 };
        let version = r.u16()?;
        if version != VERSION {
            bail!("homeadam optimizer state: unsupported version {version}");
        }
        r.take(2)?;
        let vars = r.u32()? as usize;
        let group_count = r.u32()? as usize;
        if vars != self.params.len() {
            bail!(
                "homeadam optimizer state: holds {vars} variables, this optimizer has {}",
                self.params.len()
            );
        }
        if group_count != self.groups.len() {
            bail!(
                "homeadam optimizer state: holds {group_count} parameter groups, this optimizer has {} \
                 (other decay or lr-multiplier settings?)",
                self.groups.len()
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
            let rank = r.take(1)?[0] as usize;
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
            let group = r.u32()? as usize;
            if group != p.group {
                bail!(
                    "homeadam optimizer state: {} is in group {group}, here in group {}",
                    p.name,
                    p.group
                );
            }
        }
        let mut cores = Vec::with_capacity(self.groups.len());
        for _ in 0..self.groups.len() {
            let len = usize::try_from(r.u64()?).unwrap_or(usize::MAX);
            cores.push(r.take(len)?);
        }
        if r.at != body.len() {
            bail!("homeadam optimizer state: unexpected bytes after the last group");
        }
        let old = (self.position, self.base_lr);
        (self.position, self.base_lr) = (position, base_lr);
        let loaded = self.apply_lr().and_then(|()| self.load_groups(&cores));
        if loaded.is_err() {
            (self.position, self.base_lr) = old;
            self.apply_lr()?;
        }
        loaded
    }

    fn load_groups(&mut self, cores: &[&[u8]]) -> Result<()> {
        let mut opts: Vec<Optimizer> = self.groups.iter().map(|g| g.opt.clone()).collect();
        match &mut self.states {
            States::F32(s) => load_all(&self.params, &mut opts, cores, s, &mut self.aux)?,
            States::BF16(s) => load_all(&self.params, &mut opts, cores, s, &mut self.aux)?,
            States::F16(s) => load_all(&self.params, &mut opts, cores, s, &mut self.aux)?,
        }
        for (group, opt) in self.groups.iter_mut().zip(opts) {
            group.opt = opt;
        }
        Ok(())
    }
}

/// Loads every group into copies, then commits them all.
fn load_all<S: Storage>(
    params: &[super::adapter::Param],
    opts: &mut [Optimizer],
    cores: &[&[u8]],
    states: &mut [Vec<S>],
    aux: &mut [TensorAux],
) -> Result<()> {
    let mut loaded = Vec::with_capacity(opts.len());
    for (g, (opt, bytes)) in opts.iter_mut().zip(cores).enumerate() {
        let members: Vec<usize> = (0..params.len()).filter(|&k| params[k].group == g).collect();
        let numels: Vec<usize> = members.iter().map(|&k| params[k].var.elem_count()).collect();
        loaded.push((members, load_group::<S>(opt, bytes, &numels, g)?));
    }
    for (members, group) in loaded {
        for (k, (s, a)) in members.into_iter().zip(group) {
            states[k] = s;
            aux[k] = a;
        }
    }
    Ok(())
}
