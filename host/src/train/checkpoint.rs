//! Run checkpoints: model values, optimizer state (the core's byte format), the position in the
//! data order, the RNG state and the running sums of the unfinished epoch — everything a killed
//! run needs to continue to the same bits.
//!
//! File layout (little-endian):
//!
//! ```text
//! magic    8 bytes  "HARUNCK\x01"
//! len      u64      length of the JSON header
//! header   len bytes JSON: RunMeta + the tensor index (name, shape, byte offset, length)
//! payload  the tensors' f32 values, then the optimizer bytes
//! crc      u32      CRC-32 of everything before it
//! ```
//!
//! Files are written atomically (temporary file, fsync, rename), so a crash leaves the previous
//! checkpoint or the new one, never a torn file.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use homeadam_core::backend::Crc32;
use serde::{Deserialize, Serialize};

use crate::models::SavedVar;

/// Writes `bytes` to `path` atomically: a temporary file beside it, fsync, rename (checkpoints,
/// summaries and every other output that a kill must not leave torn).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("output: {} is not a file path", path.display()))?;
    let tmp = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.with_context(|| format!("output: cannot write {}", path.display()))
}

const MAGIC: &[u8; 8] = b"HARUNCK\x01";

/// Where a run stands, and what it is: a checkpoint of another run is refused.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The experiment's name (e.g. `digits-mlp`).
    pub experiment: String,
    /// The optimizer's name (e.g. `homeadamw`).
    pub optimizer: String,
    /// The run's seed.
    pub seed: u64,
    /// Where the checkpoint was written (`cpu`, `cuda:0`; see [`crate::device`]); checkpoints
    /// of older versions, which trained on the CPU only, have none and read as `cpu`.
    #[serde(default = "cpu")]
    pub device: String,
    /// The epoch in progress (0-based).
    pub epoch: u64,
    /// Minibatches of `epoch` already taken.
    pub batch: u64,
    /// Optimizer steps taken so far.
    pub step: u64,
    /// The state of the run's RNG (dropout masks, augmentation) after `batch`.
    pub rng: u64,
    /// Running sums of the unfinished epoch.
    pub progress: EpochProgress,
    /// Running sums since the last row of `iterations.csv`.
    pub window: EpochProgress,
}

fn cpu() -> String {
    crate::device::DeviceSpec::Cpu.to_string()
}

/// Sums over the minibatches of the unfinished epoch, in the order they were taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EpochProgress {
    /// Σ over batches of (mean loss × batch size).
    pub loss_sum: f64,
    /// Correct predictions (classification) or 0.
    pub correct: u64,
    /// Examples (or predicted tokens) seen.
    pub seen: u64,
    /// Optimizer steps taken in this epoch.
    pub steps: u64,
    /// Σ over steps of the share of parameters on the home branch.
    pub home_share_sum: f64,
    /// The smallest ρ_t of the epoch's steps (`None`: no step had a second moment).
    pub rho_min: Option<f64>,
    /// The smallest ρ_t over the active elements (v > 0) of the epoch's steps (`None`: no step
    /// reported one); absent from checkpoints written before it existed.
    #[serde(default)]
    pub rho_active_min: Option<f64>,
    /// The τ of the epoch's last applied step (`None`: no step reported one); absent from
    /// checkpoints written before it existed.
    #[serde(default)]
    pub tau: Option<f64>,
    /// Seconds spent in this epoch before the checkpoint.
    pub seconds: f64,
}

impl EpochProgress {
    /// The mean loss over the examples (or predicted tokens) seen; 0 before any.
    pub fn mean_loss(&self) -> f64 {
        self.loss_sum / self.seen.max(1) as f64
    }

    /// The mean over the steps of the share of parameters on the home branch; 0 before any.
    pub fn mean_home_share(&self) -> f64 {
        self.home_share_sum / self.steps.max(1) as f64
    }
}

/// A whole checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct RunCheckpoint {
    /// Position and identity.
    pub meta: RunMeta,
    /// Model parameters and buffers.
    pub model: Vec<SavedVar>,
    /// The optimizer's state bytes.
    pub optimizer: Vec<u8>,
}

#[derive(Serialize, Deserialize)]
struct IndexEntry {
    name: String,
    shape: Vec<usize>,
    offset: usize,
    len: usize,
}

#[derive(Serialize, Deserialize)]
struct Header {
    meta: RunMeta,
    tensors: Vec<IndexEntry>,
    optimizer_offset: usize,
    optimizer_len: usize,
}

impl RunCheckpoint {
    /// The file's bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut payload = Vec::new();
        let mut tensors = Vec::with_capacity(self.model.len());
        for t in &self.model {
            if t.shape.iter().product::<usize>() != t.values.len() {
                bail!(
                    "checkpoint: tensor {} has shape {:?} but {} values",
                    t.name,
                    t.shape,
                    t.values.len()
                );
            }
            tensors.push(IndexEntry {
                name: t.name.clone(),
                shape: t.shape.clone(),
                offset: payload.len(),
                len: t.values.len() * 4,
            });
            payload.extend(t.values.iter().flat_map(|v| v.to_le_bytes()));
        }
        let header = Header {
            meta: self.meta.clone(),
            tensors,
            optimizer_offset: payload.len(),
            optimizer_len: self.optimizer.len(),
        };
        payload.extend_from_slice(&self.optimizer);
        let header = serde_json::to_vec(&header)?;
        let mut out = Vec::with_capacity(20 + header.len() + payload.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u64).to_le_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&payload);
        let mut crc = Crc32::default();
        crc.update(&out);
        out.extend_from_slice(&crc.finish().to_le_bytes());
        Ok(out)
    }

    /// Parses and verifies a checkpoint's bytes: magic, CRC, header and every offset.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 20 || &bytes[..8] != MAGIC {
            bail!("not a homeadam run checkpoint (bad magic or shorter than 20 bytes)");
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        let mut check = Crc32::default();
        check.update(body);
        if check.finish().to_le_bytes() != crc {
            bail!("checkpoint is corrupt (CRC-32 mismatch)");
        }
        let len = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
        let header_end = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(16))
            .filter(|&e| e <= body.len())
            .ok_or_else(|| anyhow!("checkpoint header length {len} exceeds the file"))?;
        let header: Header =
            serde_json::from_slice(&body[16..header_end]).context("checkpoint header is not valid")?;
        let payload = &body[header_end..];
        let slice = |offset: usize, len: usize, what: &str| {
            offset
                .checked_add(len)
                .filter(|&end| end <= payload.len())
                .map(|end| &payload[offset..end])
                .ok_or_else(|| anyhow!("checkpoint: {what} lies outside the file"))
        };
        let mut model = Vec::with_capacity(header.tensors.len());
        for e in header.tensors {
            let raw = slice(e.offset, e.len, &e.name)?;
            if e.len % 4 != 0 || e.shape.iter().product::<usize>() * 4 != e.len {
                bail!(
                    "checkpoint: tensor {} has shape {:?} but {} bytes",
                    e.name,
                    e.shape,
                    e.len
                );
            }
            let values = raw
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect();
            model.push(SavedVar {
                name: e.name,
                shape: e.shape,
                values,
            });
        }
        let optimizer = slice(header.optimizer_offset, header.optimizer_len, "optimizer state")?.to_vec();
        Ok(RunCheckpoint {
            meta: header.meta,
            model,
            optimizer,
        })
    }

    /// Writes the checkpoint atomically to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_atomically(path, &self.to_bytes()?)
    }

    /// Reads and verifies the checkpoint at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let bytes =
            std::fs::read(path).with_context(|| format!("cannot read checkpoint {}", path.display()))?;
        Self::from_bytes(&bytes).with_context(|| format!("checkpoint {}", path.display()))
    }

    /// Refuses a checkpoint made by another experiment, optimizer or seed.
    pub fn check_matches(&self, experiment: &str, optimizer: &str, seed: u64) -> Result<()> {
        let m = &self.meta;
        if (m.experiment.as_str(), m.optimizer.as_str(), m.seed) != (experiment, optimizer, seed) {
            bail!(
                "checkpoint belongs to experiment {} / optimizer {} / seed {}, not {experiment} / {optimizer} / {seed}",
                m.experiment,
                m.optimizer,
                m.seed
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RunCheckpoint {
        RunCheckpoint {
            meta: RunMeta {
                experiment: "digits-mlp".into(),
                optimizer: "homeadamw".into(),
                seed: 3,
                device: "cuda:0".into(),
                epoch: 2,
                batch: 7,
                step: 51,
                rng: 0xdead_beef,
                progress: EpochProgress {
                    loss_sum: 1.25,
                    correct: 30,
                    seen: 64,
                    steps: 7,
                    home_share_sum: 0.5,
                    rho_min: Some(0.0),
                    rho_active_min: Some(1e-30),
                    tau: Some(2f64.powi(-40)),
                    seconds: 0.1,
                },
                window: EpochProgress::default(),
            },
            model: vec![
                SavedVar {
                    name: "fc1.weight".into(),
                    shape: vec![2, 3],
                    values: vec![1.0, -2.0, 3.5, f32::MIN_POSITIVE, 0.0, -0.0],
                },
                SavedVar {
                    name: "fc1.bias".into(),
                    shape: vec![2],
                    values: vec![0.25, 1e-30],
                },
            ],
            optimizer: vec![1, 2, 3, 4, 5],
        }
    }

    #[test]
    fn round_trip_is_exact() {
        let c = sample();
        let back = RunCheckpoint::from_bytes(&c.to_bytes().expect("bytes")).expect("parse");
        assert_eq!(back, c);
        let bits = |t: &SavedVar| t.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.model[0]), bits(&c.model[0]));
    }

    #[test]
    fn a_meta_without_a_device_was_written_on_the_cpu() {
        let mut json = serde_json::to_value(&sample().meta).expect("json");
        assert_eq!(json["device"], "cuda:0");
        json.as_object_mut().expect("object").remove("device");
        let meta: RunMeta = serde_json::from_value(json).expect("older meta");
        assert_eq!(meta.device, "cpu");
    }

    #[test]
    fn a_meta_without_rho_active_or_tau_reads_as_none() {
        let mut json = serde_json::to_value(&sample().meta).expect("json");
        let progress = json["progress"].as_object_mut().expect("object");
        progress.remove("rho_active_min").expect("rho_active_min");
        progress.remove("tau").expect("tau");
        let meta: RunMeta = serde_json::from_value(json).expect("older meta");
        assert_eq!((meta.progress.rho_active_min, meta.progress.tau), (None, None));
        assert_eq!(meta.progress.rho_min, sample().meta.progress.rho_min);
    }

    #[test]
    fn corrupt_truncated_and_foreign_files_are_errors() {
        let bytes = sample().to_bytes().expect("bytes");
        for i in [0, 9, 20, bytes.len() / 2, bytes.len() - 1] {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(
                RunCheckpoint::from_bytes(&bad).is_err(),
                "flipped byte {i} accepted"
            );
        }
        for n in [0, 10, 19, bytes.len() - 1] {
            assert!(
                RunCheckpoint::from_bytes(&bytes[..n]).is_err(),
                "truncated to {n} accepted"
            );
        }
        let err = sample().check_matches("digits-mlp", "adamw", 3).unwrap_err();
        assert!(err.to_string().contains("optimizer homeadamw"), "{err}");
    }

    #[test]
    fn save_is_atomic_and_load_names_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ck.bin");
        sample().save(&path).expect("save");
        assert_eq!(RunCheckpoint::load(&path).expect("load"), sample());
        std::fs::write(&path, b"junk").expect("write");
        let err = format!("{:#}", RunCheckpoint::load(&path).unwrap_err());
        assert!(err.contains("ck.bin") && err.contains("magic"), "{err}");
    }
}
