//! The seed corpora, generated rather than committed: checkpoints saved by the core after two
//! real steps, the golden cases' replay configs and inputs, and deterministic byte strings for
//! `step`.

use std::fs;
use std::path::Path;

use homeadam_core::backend::mix64;
use homeadam_core::{
    bf16, f16, Config, Dtype, Optimizer, Rule, SliceSink, Storage, Tensor, TensorAux, TensorState, ALL_RULES,
};

/// Tensor sizes of the saved models: an empty tensor between two short ones.
const NUMELS: [usize; 3] = [3, 0, 5];

/// The seeds of the target named `target` (a name of [`TARGETS`](crate::TARGETS)), each with
/// its file name: the same on every call. `homeadam-fuzz-seeds DIR` writes them to
/// `DIR/<target>/<name>`, the corpus `cargo xtask fuzz` starts from.
///
/// # Panics
///
/// On a name that is not a target's, and where the golden cases (`tests/golden/cases`, whose
/// files seed the replay targets) cannot be read.
pub fn seeds(target: &str) -> Vec<(String, Vec<u8>)> {
    match target {
        "checkpoint" => {
            let mut seeds = checkpoints();
            seeds.extend(regressions());
            seeds
        }
        "step" => steps(),
        "replay_config" => golden("config.json"),
        "replay_safetensors" => golden("input.safetensors"),
        _ => panic!("no fuzz target is named {target:?}"),
    }
}

/// The checkpoint target's input: mode byte 0 (load as written) and a checkpoint, for every
/// rule (SGD with and without momentum, AdaBelief with and without AMSGrad) in f32, bf16 and,
/// where no second moment is kept, f16 state.
fn checkpoints() -> Vec<(String, Vec<u8>)> {
    let mut configs: Vec<Config> = ALL_RULES.iter().map(|&r| Config::new(r)).collect();
    configs.extend(Config::named("sgdm"));
    configs.push(Config {
        amsgrad: true,
        ..Config::new(Rule::AdaBelief)
    });
    let mut seeds = Vec::new();
    for (k, config) in configs.into_iter().enumerate() {
        let mut save = |dtype: &str, bytes: Vec<u8>| {
            let mut seed = vec![0u8];
            seed.extend(bytes);
            seeds.push((format!("{k:02}-{}-{dtype}", config.name()), seed));
        };
        save("f32", checkpoint::<f32>(config));
        save("bf16", checkpoint::<bf16>(config));
        if config.check_state_dtype(Dtype::F16).is_ok() {
            save("f16", checkpoint::<f16>(config));
        }
    }
    seeds
}

/// Checkpoints the target once failed on, as loads that must be refused: mode 1 (the target
/// recomputes the CRC) and a saved checkpoint with one field patched (offsets of
/// core/src/checkpoint.rs), and a tensor size whose byte count overflows with its header.
fn regressions() -> Vec<(String, Vec<u8>)> {
    let saved = checkpoint::<f32>(Config::new(Rule::AdamW));
    let patched = |at: usize, byte: u8| {
        let mut seed = vec![1u8];
        seed.extend(&saved);
        seed[1 + at] = byte;
        seed
    };
    // AdamW's f32 state: 8 bytes per element, so 8·d fits a usize and 8·d + 12 does not.
    let mut overflow = vec![0u8];
    overflow.extend(&saved[..36]);
    overflow.extend((u64::MAX / 8).to_le_bytes());
    vec![
        ("regression-reserved".into(), patched(14, 1)),
        ("regression-swats-lr-before-switch".into(), patched(24, 1)),
        ("regression-size-overflow".into(), overflow),
    ]
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

/// The step target decodes its input with `arbitrary`, whose first byte picks the rule: two
/// seeds per rule, one of splitmix64 bytes (whose config is mostly refused) and one whose
/// config bytes are zeros, which decode to the rule's defaults, so that it and most of its
/// mutants reach `Optimizer::step` on slices from the same splitmix64 bytes.
fn steps() -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for k in 0..ALL_RULES.len() {
        let random: Vec<u8> = (0..128u64)
            .flat_map(|i| mix64(((k as u64) << 32) | i).to_le_bytes())
            .collect();
        seeds.push((format!("rule-{k}"), [&[k as u8][..], &random].concat()));
        let defaults = [&[k as u8][..], &[0; CONFIG_BYTES], &random].concat();
        seeds.push((format!("rule-{k}-defaults"), defaults));
        seeds.extend(edges(k));
    }
    seeds
}

/// Indices in the step target's special values of 0, 5e-324, f32's largest and f64's largest.
const EDGE_VALUES: [(u8, &str); 4] = [(0, "zero"), (13, "least"), (15, "f32-max"), (17, "f64-max")];

/// The real knobs the step target decodes in order before its flags (lr, β1, β2, ε, λ, τ, μ,
/// dampening, κ); the home scale comes later.
const FIRST_KNOBS: usize = 9;

/// Rule `k` with one real knob at an edge value (the others at their defaults), on one f32
/// tensor of 4 zero parameters and zero gradients, one step: where validation accepts the
/// config, the target's unit-scale step must leave the parameters finite (ε = 0 would make
/// m̂ / (v̂ + ε) 0 / 0 there). Each byte follows the target's `arbitrary` decoding: 0 picks a
/// default or the first choice, `[4, i]` the special value `i`, `[2, 0, 0, 0]` the value 0.
fn edges(k: usize) -> Vec<(String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for knob in 0..=FIRST_KNOBS {
        for (special, name) in EDGE_VALUES {
            let hyper = |i: usize| if i == knob { vec![4, special] } else { vec![0] };
            let mut bytes = vec![k as u8];
            (0..FIRST_KNOBS).for_each(|i| bytes.extend(hyper(i)));
            // Six flags, the switch step's flag, the seed, rounding, the finite check.
            bytes.extend([0; 6 + 1 + 8 + 1 + 1]);
            bytes.extend(hyper(FIRST_KNOBS));
            // ρ over, τ calibration, restore, grad scale: none; one slice of f32/f32/f32 with
            // one tensor of 4 elements, its lengths as the tensor's.
            bytes.extend([0, 0, 0, 0, 0, 0, 1, 0, 4, 0, 0]);
            // Parameters, gradients, state (SGD keeps a slot with momentum), two scalars.
            let mut config = Config::new(ALL_RULES[k]);
            config.momentum = if knob == 6 && special != 0 {
                1.0
            } else {
                config.momentum
            };
            for _ in 0..4 + 4 + 4 * config.state_slots() + 2 {
                bytes.extend([2, 0, 0, 0]);
            }
            // Home elements, the default group, one step, no new rate, the phases in order.
            bytes.extend([0, 0, 0, 0, 0, 0, 0, 0]);
            seeds.push((format!("rule-{k}-knob-{knob}-{name}"), bytes));
        }
    }
    seeds
}

/// More than the bytes the step target's config decoding reads.
const CONFIG_BYTES: usize = 64;

/// Every golden case's `file`, named after its case, in the order of the cases' names.
fn golden(file: &str) -> Vec<(String, Vec<u8>)> {
    let cases = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/cases");
    let mut entries: Vec<_> = fs::read_dir(&cases)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", cases.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|case| case.join(file).is_file())
        .collect();
    entries.sort();
    entries
        .iter()
        .map(|case| {
            let path = case.join(file);
            let bytes = fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let name = case.file_name().expect("a case directory").to_string_lossy();
            (name.into_owned(), bytes)
        })
        .collect()
}
