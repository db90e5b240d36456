//! Writes the seed corpora of the fuzz targets into `DIR/<target>/` (`homeadam-fuzz-seeds DIR`),
//! generated rather than committed: checkpoints saved by the core after two real steps, the
//! golden cases' replay configs and inputs, and deterministic byte strings for `step`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::exit;

use homeadam_core::backend::mix64;
use homeadam_core::{
    bf16, f16, Config, Optimizer, Rule, SliceSink, Storage, Tensor, TensorAux, TensorState, ALL_RULES,
};

/// Tensor sizes of the saved models: an empty tensor between two short ones.
const NUMELS: [usize; 3] = [3, 0, 5];

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: homeadam-fuzz-seeds DIR");
        exit(2);
    };
    let written = checkpoints(&dir.join("checkpoint"))
        + regressions(&dir.join("checkpoint"))
        + steps(&dir.join("step"))
        + golden(&dir.join("replay_config"), "config.json")
        + golden(&dir.join("replay_safetensors"), "input.safetensors");
    println!("{written} seeds in {}", dir.display());
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    fs::create_dir_all(dir)
        .and_then(|()| fs::write(dir.join(name), bytes))
        .unwrap_or_else(|e| {
            eprintln!(
                "homeadam-fuzz-seeds: cannot write {}: {e}",
                dir.join(name).display()
            );
            exit(1)
        });
}

/// The checkpoint target's input: mode byte 0 (load as written) and a checkpoint, for every
/// rule (SGD with and without momentum, AdaBelief with and without AMSGrad) in f32, bf16 and,
/// where no second moment is kept, f16 state.
fn checkpoints(dir: &Path) -> usize {
    let mut configs: Vec<Config> = ALL_RULES.iter().map(|&r| Config::new(r)).collect();
    configs.extend(Config::named("sgdm"));
    configs.push(Config {
        amsgrad: true,
        ..Config::new(Rule::AdaBelief)
    });
    let mut written = 0;
    for (k, config) in configs.into_iter().enumerate() {
        let mut save = |dtype: &str, bytes: Vec<u8>| {
            let mut seed = vec![0u8];
            seed.extend(bytes);
            write(dir, &format!("{k:02}-{}-{dtype}", config.name()), &seed);
            written += 1;
        };
        save("f32", checkpoint::<f32>(config));
        save("bf16", checkpoint::<bf16>(config));
        if config.check_state_dtype(homeadam_core::Dtype::F16).is_ok() {
            save("f16", checkpoint::<f16>(config));
        }
    }
    written
}

/// Checkpoints the target once failed on, as loads that must be refused: mode 1 (the target
/// recomputes the CRC) and a saved checkpoint with one field patched (offsets of
/// core/src/checkpoint.rs), and a tensor size whose byte count overflows with its header.
fn regressions(dir: &Path) -> usize {
    let saved = checkpoint::<f32>(Config::new(Rule::AdamW));
    let patched = |at: usize, byte: u8| {
        let mut seed = vec![1u8];
        seed.extend(&saved);
        seed[1 + at] = byte;
        seed
    };
    write(dir, "regression-reserved", &patched(14, 1));
    write(dir, "regression-swats-lr-before-switch", &patched(24, 1));
    // AdamW's f32 state: 8 bytes per element, so 8·d fits a usize and 8·d + 12 does not.
    let mut overflow = vec![0u8];
    overflow.extend(&saved[..36]);
    overflow.extend((u64::MAX / 8).to_le_bytes());
    write(dir, "regression-size-overflow", &overflow);
    3
}

/// The state of `config` with `S` state after two steps on fixed gradients, saved.
fn checkpoint<S: Storage>(config: Config) -> Vec<u8> {
    let mut opt = Optimizer::new(config).expect("a rule's defaults are valid");
    let mut params: Vec<Vec<f32>> = NUMELS
        .iter()
        .map(|&d| (0..d).map(|i| i as f32 - 1.5).collect())
        .collect();
    let grads: Vec<Vec<f32>> = NUMELS
        .iter()
        .map(|&d| (0..d).map(|i| 0.25 - 0.1 * i as f32).collect())
        .collect();
    let mut states: Vec<Vec<S>> = NUMELS
        .iter()
        .map(|&d| vec![S::default(); opt.state_len(d)])
        .collect();
    let mut auxes = vec![TensorAux::default(); NUMELS.len()];
    for _ in 0..2 {
        let mut model: Vec<Tensor<'_, f32, f32, S>> = params
            .iter_mut()
            .zip(&grads)
            .zip(states.iter_mut())
            .zip(auxes.iter_mut())
            .map(|(((p, g), s), a)| Tensor::new(p, g, s, a))
            .collect();
        opt.step(&mut model, 1.0).expect("a step on finite gradients");
    }
    let saved: Vec<TensorState<'_, S>> = NUMELS
        .iter()
        .zip(&states)
        .zip(&auxes)
        .map(|((&numel, state), aux)| TensorState { numel, state, aux })
        .collect();
    let mut bytes = vec![0u8; opt.state_bytes(NUMELS, S::DTYPE)];
    opt.save_state(&saved, &mut SliceSink::new(&mut bytes))
        .expect("a state saves");
    bytes
}

/// The step target decodes its input with `arbitrary`, whose first byte picks the rule: one
/// seed per rule, the rest splitmix64 bytes.
fn steps(dir: &Path) -> usize {
    for k in 0..ALL_RULES.len() {
        let mut seed = vec![k as u8];
        seed.extend((0..128u64).flat_map(|i| mix64(((k as u64) << 32) | i).to_le_bytes()));
        write(dir, &format!("rule-{k}"), &seed);
    }
    ALL_RULES.len()
}

/// Every golden case's `file`, named after its case.
fn golden(dir: &Path, file: &str) -> usize {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/cases");
    let mut entries: Vec<_> = fs::read_dir(&cases)
        .unwrap_or_else(|e| {
            eprintln!("homeadam-fuzz-seeds: cannot read {}: {e}", cases.display());
            exit(1)
        })
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|case| case.join(file).is_file())
        .collect();
    entries.sort();
    for case in &entries {
        let bytes = fs::read(case.join(file)).unwrap_or_else(|e| {
            eprintln!(
                "homeadam-fuzz-seeds: cannot read {}: {e}",
                case.join(file).display()
            );
            exit(1)
        });
        let name = case.file_name().expect("a case directory").to_string_lossy();
        write(dir, &name, &bytes);
    }
    entries.len()
}
