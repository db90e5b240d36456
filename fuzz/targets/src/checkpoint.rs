//! A checkpoint's bytes → `Optimizer::load_state`: Ok or a typed error, never a panic. On Ok,
//! `save_state` writes the same bytes back; on an error, nothing changed.
//!
//! Input: one mode byte, then the checkpoint. The model the bytes are loaded into (config,
//! state dtype, tensor sizes) is the one the checkpoint's own header names, so that mutated
//! checkpoints reach every check after the header; the mode byte asks for another one:
//! - bit 0: the trailing CRC-32 is recomputed first, so that mutations get past the checksum;
//! - bit 1: the config is `config(mode >> 4)` instead of the header's rule and slot count;
//! - bit 2: the state dtype is `mode >> 4` (mod 4: f32, f16, bf16, q8) instead of the header's;
//! - bit 3: one tensor has one element more (or the model one tensor more) than the header's.
//!
//! Mode 0 loads a checkpoint as written: the seeds are `0` followed by a saved checkpoint.

use homeadam_core::backend::checkpoint_layout::{COUNT, DTYPE, HEADER, RULE, SLOTS, TENSOR_HEADER};
use homeadam_core::backend::Crc32;
use homeadam_core::{
    bf16, f16, ByteSink, CheckpointError, Config, Optimizer, Q8Block, Rule, StateStorage, Storage, TensorAux,
    TensorState, TensorStateMut, ALL_RULES,
};

/// Bounds on the model built from a header, so that a huge stored size cannot exhaust memory.
const MAX_TENSORS: usize = 64;
const MAX_ELEMENTS: usize = 1 << 16;
/// What a slice's elements and Λ hold before the load: an error must leave them so.
const UNTOUCHED: f32 = 0.5;

/// Loads `data` (a mode byte and a checkpoint) as the [module](self) describes; panics on a
/// failed check.
pub fn checkpoint(data: &[u8]) {
    let Some((&mode, bytes)) = data.split_first() else {
        return;
    };
    let mut bytes = bytes.to_vec();
    if mode & 1 != 0 && bytes.len() >= 4 {
        let body = bytes.len() - 4;
        let mut crc = Crc32::default();
        crc.update(&bytes[..body]);
        bytes[body..].copy_from_slice(&crc.finish().to_le_bytes());
    }
    let config = if mode & 2 != 0 {
        config(usize::from(mode >> 4))
    } else {
        header_config(&bytes)
    };
    let dtype_code = if mode & 4 != 0 {
        mode >> 4
    } else {
        bytes.get(DTYPE).copied().unwrap_or(0)
    };
    let mut numels = stored_numels(&bytes);
    if mode & 8 != 0 {
        match numels.get_mut(usize::from(mode >> 4)) {
            Some(d) => *d += 1,
            None => numels.push(usize::from(mode >> 4)),
        }
    }
    match dtype_code % 4 {
        0 => round_trip::<f32>(config, &bytes, &numels),
        1 => round_trip::<f16>(config, &bytes, &numels),
        2 => round_trip::<bf16>(config, &bytes, &numels),
        _ => round_trip::<Q8Block>(config, &bytes, &numels),
    }
}

/// A state item as it is before a load, which an error must leave so.
trait Untouched: StateStorage {
    fn untouched() -> Self;
    fn is_untouched(&self) -> bool;
}

macro_rules! untouched_element {
    ($($t:ty),*) => {$(
        impl Untouched for $t {
            fn untouched() -> Self {
                <$t as Storage>::from_f32(UNTOUCHED)
            }
            fn is_untouched(&self) -> bool {
                self.to_f32() == UNTOUCHED
            }
        }
    )*};
}
untouched_element!(f32, f16, bf16);

impl Untouched for Q8Block {
    fn untouched() -> Self {
        Q8Block {
            scale: UNTOUCHED,
            codes: [0xAB; 256],
        }
    }
    fn is_untouched(&self) -> bool {
        *self == Self::untouched()
    }
}

/// The model's config `k`: every rule's defaults, SGD with momentum and AdaBelief with AMSGrad
/// (the configs whose state slots differ from their rule's defaults).
fn config(k: usize) -> Config {
    match k % (ALL_RULES.len() + 2) {
        0 => Config::named("sgdm").expect("a config name"),
        1 => Config {
            amsgrad: true,
            ..Config::new(Rule::AdaBelief)
        },
        k => Config::new(ALL_RULES[k - 2]),
    }
}

/// The config a header names by its rule code and slot count (the first config for an unknown
/// code, which the load refuses).
fn header_config(bytes: &[u8]) -> Config {
    let rule = bytes
        .get(RULE)
        .copied()
        .and_then(Rule::from_code)
        .unwrap_or(Rule::Sgd);
    let slots = bytes.get(SLOTS).copied().unwrap_or(0);
    let mut c = Config::new(rule);
    match rule {
        Rule::Sgd if slots == 1 => c.momentum = 0.9,
        Rule::AdaBelief if slots == 3 => c.amsgrad = true,
        _ => {}
    }
    c
}

/// The tensor sizes the checkpoint stores, as far as its bytes go (and within the bounds).
fn stored_numels(bytes: &[u8]) -> Vec<usize> {
    let count = read(bytes, COUNT, 4).unwrap_or(0) as usize;
    let slots = usize::from(bytes.get(SLOTS).copied().unwrap_or(0));
    let width = if bytes.get(DTYPE) == Some(&0) { 4 } else { 2 };
    let (mut numels, mut at, mut total) = (Vec::new(), HEADER, 0usize);
    for _ in 0..count.min(MAX_TENSORS) {
        let Some(d) = read(bytes, at, 8) else { break };
        let d = usize::try_from(d).unwrap_or(usize::MAX).min(MAX_ELEMENTS - total);
        total += d;
        numels.push(d);
        at = at.saturating_add(TENSOR_HEADER + d * slots.max(1) * width);
    }
    numels
}

fn read(bytes: &[u8], at: usize, len: usize) -> Option<u64> {
    let field = bytes.get(at..at.checked_add(len)?)?;
    Some(field.iter().rev().fold(0, |x, &b| x << 8 | u64::from(b)))
}

/// A growing buffer as a sink.
struct VecSink(Vec<u8>);

impl ByteSink for VecSink {
    fn write(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.0.extend_from_slice(bytes);
        Ok(())
    }
}

fn round_trip<S: Untouched>(config: Config, bytes: &[u8], numels: &[usize]) {
    let mut opt = Optimizer::new(config).expect("the model's configs are valid");
    let slots = config.state_slots();
    let mut states: Vec<Vec<S>> = numels
        .iter()
        .map(|&d| vec![S::untouched(); slots * S::slot_len(d)])
        .collect();
    let untouched = TensorAux {
        swats_lambda: UNTOUCHED,
        ..TensorAux::default()
    };
    let mut auxes = vec![untouched; numels.len()];
    let mut tensors: Vec<TensorStateMut<'_, S>> = numels
        .iter()
        .zip(states.iter_mut())
        .zip(auxes.iter_mut())
        .map(|((&numel, state), aux)| TensorStateMut { numel, state, aux })
        .collect();
    match opt.load_state(bytes, &mut tensors) {
        Err(e) => {
            let _ = e.to_string();
            assert_eq!(opt, Optimizer::new(config).unwrap(), "{e}: the optimizer changed");
            assert!(
                states.iter().flatten().all(Untouched::is_untouched),
                "{e}: a state element changed"
            );
            assert!(auxes.iter().all(|a| *a == untouched), "{e}: a tensor's Λ changed");
        }
        Ok(()) => {
            let saved: Vec<TensorState<'_, S>> = tensors
                .iter()
                .map(|t| TensorState {
                    numel: t.numel,
                    state: t.state,
                    aux: t.aux,
                })
                .collect();
            let mut sink = VecSink(Vec::new());
            opt.save_state(&saved, &mut sink).expect("a loaded state saves");
            assert_eq!(sink.0.len(), opt.state_bytes(numels.iter().copied(), S::DTYPE));
            let first_difference = sink.0.iter().zip(bytes).position(|(a, b)| a != b);
            assert!(
                sink.0 == bytes,
                "loaded {} bytes, saved {}; first difference at byte {first_difference:?}",
                bytes.len(),
                sink.0.len()
            );
        }
    }
}
