//! The CUDA C sources, the metadata they share with Rust, and the kernels' names.
//!
//! # Sources
//!
//! - `kernels/homeadam_math.h`: the per-element math of every rule (also compiled by g++ for
//!   the parity test).
//! - `kernels/homeadam_exact.h`: the core's [`ExactSum`] (exact sums of products of `f32`, for
//!   SWATS's dot products and [`crate::CudaOptimizer::grad_norm`]), also compiled by g++.
//! - `kernels/homeadam.cuh`: the multi-tensor kernel templates and the `HA_UPDATE` / `HA_CHECK`
//!   / `HA_PRE` / `HA_HOME_BOUND` / `HA_HIST` / `HA_GRAD_SQ` macros that instantiate them as
//!   `extern "C"` kernels.
//! - `kernels/instantiations.cu`: every kernel ([`all_kernel_names`]), for the compile check.
//!   At run time a model compiles only its own kernels ([`model_source`]).
//!
//! [`crate::nvrtc`] compiles them with `--fmad=false --prec-div=true --prec-sqrt=true
//! --ftz=false` (DESIGN §4): every `f32` operation is the IEEE one the core performs, in the
//! same order.
//!
//! # One source for the metadata
//!
//! The update kernels' ids (`HA_RULE_*`, positions in the core's kernel table
//! [`ElementKernel::ALL`]), the flag bits (`HA_*`, [`flags`]), [`CHUNK`] (`HA_CHUNK`),
//! [`BOUND_CHUNK`] (`HA_BOUND_CHUNK`), the
//! buckets of a calibration histogram (`HA_BUCKETS`, the core's [`BUCKETS`]), the q8 state's block
//! size, slot-key salt, hash multipliers and code maps (`HA_Q8_BLOCK`, `HA_Q8_SALT`,
//! `HA_Q8_HASH_MUL0/1`, `HA_Q8_UNSIGNED`,
//! `HA_Q8_SIGNED`: the core's [`q8`] constants and tables, as `f32` bits), the sizes of the
//! structs the host shares with the kernels (`HA_SIZE_*`, asserted by the C sources), the fields
//! of `HaScalars` and their offsets (`HA_SCALARS_FIELDS`, `HA_SCALARS_OFFSETS`, from the core's
//! [`StepScalars::FIELDS`]), the format of
//! [`ExactSum`] (`HA_EXACT_*`, from the core's constants), each
//! update kernel's state slots, ρ slot, second-moment slots (on q8's unsigned map) and C element
//! function (from the core's kernel table) and the kernel lists
//! (`HA_RULE_KERNELS`, `HA_STORAGE_P/G/S/E`, from which
//! the C sources build every kernel name) are defined here only, as [`defines`]. The C files
//! define none of them: `homeadam_math.h` includes `homeadam_defs.h` unless `HA_METADATA` is
//! already defined, and each consumer gets the values from Rust:
//!
//! - NVRTC: `homeadam_defs.h` is [`defs_header`], handed over in memory with the other
//!   headers (NVRTC reads no file, so a build always has the values of this build);
//! - g++ (the parity test): one `-D` flag per entry of [`defines`];
//! - an editor or `nvcc` compiling `instantiations.cu` alone: the generated copy
//!   `kernels/homeadam_defs.h`, which a unit test keeps equal to [`defs_header`].

use homeadam_core::backend::{mix64, StepScalars, BUCKETS};
use homeadam_core::q8::{self, Q8Block};
use homeadam_core::rules::ElementKernel;
use homeadam_core::{Config, Dtype, ExactSum, RhoOver, Switch};

use crate::device::{HaStatus, HaTensor};

/// The element math header, `homeadam_math.h`.
pub const MATH_HEADER: &str = include_str!("../kernels/homeadam_math.h");
/// The multi-tensor kernel templates, `homeadam.cuh`.
pub const KERNELS: &str = include_str!("../kernels/homeadam.cuh");
/// The exact accumulator, `homeadam_exact.h`.
pub const EXACT_HEADER: &str = include_str!("../kernels/homeadam_exact.h");
/// The translation unit of every kernel, `instantiations.cu`.
pub const INSTANTIATIONS: &str = include_str!("../kernels/instantiations.cu");
/// The architectures the compile check builds SASS for: Xavier, Orin, Ada, Hopper.
pub const ARCHS: [&str; 4] = ["sm_72", "sm_87", "sm_89", "sm_90"];
/// The storage types of parameters and gradients in the instantiations.
pub const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];
/// The storage types of the state in the instantiations: [`DTYPES`] and q8.
pub const STATE_DTYPES: [Dtype; 4] = [Dtype::F32, Dtype::F16, Dtype::BF16, Dtype::Q8];
/// Elements per block-table entry (`HA_CHUNK`).
pub const CHUNK: usize = 16384;
/// Elements per chunk of the global rule's bound (`HA_BOUND_CHUNK`): the core's, so that the
/// bound's chunk, and with it every decision the bound proves, is the core's.
pub const BOUND_CHUNK: usize = homeadam_core::backend::BOUND_CHUNK;

// A bound's chunk lies in one block-table entry.
const _: () = assert!(CHUNK.is_multiple_of(BOUND_CHUNK));
/// Dynamic shared memory of a kernel that sums into `sums` exact accumulators per block
/// (SWATS's Adam phase: 2; `ha_grad_sq_{g}`: 1).
pub const fn exact_shared_bytes(sums: u32) -> u32 {
    sums * (ExactSum::WORDS * 8) as u32
}

/// Flag bits of the update kernels (`HA_*` in the C sources).
pub mod flags {
    /// Nesterov momentum (SGD, SWATS).
    pub const NESTEROV: u32 = 1;
    /// Decoupled weight decay (AdaBelief, SWATS).
    pub const WEIGHT_DECOUPLE: u32 = 2;
    /// Stochastic rounding of parameter stores.
    pub const STOCHASTIC: u32 = 4;
    /// Global / per-layer HomeAdam: ρ over the elements with v_t > 0 ([`RhoOver::Active`]).
    ///
    /// [`RhoOver::Active`]: homeadam_core::RhoOver::Active
    pub const RHO_ACTIVE: u32 = 8;
    /// Global HomeAdam with ρ over every element and state of one element per parameter: the
    /// update keeps the next step's bound (u = min v_t as stored, and the chunk that held
    /// min v_t) and min v_t over v_t > 0.
    pub const BOUND: u32 = 16;
    /// The HomeAdam switch (one of the `SWITCH_*` values) is `flags >> SWITCH_SHIFT & 3`.
    pub const SWITCH_SHIFT: u32 = 8;
    /// One decision per element.
    pub const SWITCH_ELEMENT: u32 = 0;
    /// One decision for the model, on the first pass's min v̂.
    pub const SWITCH_GLOBAL: u32 = 1;
    /// One decision per tensor.
    pub const SWITCH_LAYER: u32 = 2;
    /// Always the srf step (Adam(W)-srf).
    pub const SWITCH_SRF: u32 = 3;
}

/// The name of an update kernel's id macro, e.g. `HA_RULE_HOMEADAM`: the kernel's position in
/// [`ElementKernel::ALL`] (the core's kernel table, which also names its C function).
pub fn id_macro(kernel: ElementKernel) -> String {
    format!("HA_RULE_{}", kernel.name().to_uppercase())
}

/// The update kernel ([`Config::kernel`]) and its flag bits for `config` (SWATS in its SGD
/// phase when `swats_sgd`). Stochastic rounding is added by the caller.
pub fn rule_kernel(config: &Config, swats_sgd: bool) -> (ElementKernel, u32) {
    let mut f = 0;
    if config.nesterov {
        f |= flags::NESTEROV;
    }
    if config.weight_decouple {
        f |= flags::WEIGHT_DECOUPLE;
    }
    // The core refuses `rho_over` on every rule but global and per-layer HomeAdam.
    if config.rho_over == RhoOver::Active {
        f |= flags::RHO_ACTIVE;
    }
    let kernel = config.kernel(swats_sgd);
    if kernel == ElementKernel::HomeAdam {
        let switch = match config.rule.switch() {
            Some(Switch::Global) => flags::SWITCH_GLOBAL,
            Some(Switch::Layer) => flags::SWITCH_LAYER,
            Some(Switch::Element) => flags::SWITCH_ELEMENT,
            None => flags::SWITCH_SRF,
        };
        f |= switch << flags::SWITCH_SHIFT;
    }
    (kernel, f)
}

/// The stochastic-rounding base of step `t`, mix64(mix64(seed) ^ t): the kernels key tensor k
/// with mix64(base ^ k), the core's `tensor_key(seed, t, k)`.
pub fn sr_base(seed: u64, t: u64) -> u64 {
    mix64(mix64(seed) ^ t)
}

/// The C type of a storage type in the sources.
fn c_type(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "float",
        Dtype::F16 => "ha_f16",
        Dtype::BF16 => "ha_bf16",
        Dtype::Q8 => "HaQ8Block",
    }
}

/// The metadata the C sources use, as `(macro, replacement)` pairs (a function-like macro's
/// parameters are part of its name). See the module documentation.
pub fn defines() -> Vec<(String, String)> {
    let mut d: Vec<(String, String)> = vec![
        ("HA_METADATA".into(), "1".into()),
        ("HA_CHUNK".into(), CHUNK.to_string()),
        ("HA_BOUND_CHUNK".into(), BOUND_CHUNK.to_string()),
    ];
    for (name, bits) in [
        ("NESTEROV", flags::NESTEROV),
        ("WEIGHT_DECOUPLE", flags::WEIGHT_DECOUPLE),
        ("STOCHASTIC", flags::STOCHASTIC),
        ("RHO_ACTIVE", flags::RHO_ACTIVE),
        ("BOUND", flags::BOUND),
        ("SWITCH_ELEMENT", flags::SWITCH_ELEMENT),
        ("SWITCH_GLOBAL", flags::SWITCH_GLOBAL),
        ("SWITCH_LAYER", flags::SWITCH_LAYER),
        ("SWITCH_SRF", flags::SWITCH_SRF),
    ] {
        d.push((format!("HA_{name}"), format!("{bits}u")));
    }
    d.push(("HA_SWITCH_SHIFT".into(), flags::SWITCH_SHIFT.to_string()));
    // HaScalars, the core's StepScalars field by field, and each field's offset, which the C
    // sources built by g++ assert.
    let fields = StepScalars::FIELDS.map(|(name, c, _)| format!("{c} {name};"));
    d.push(("HA_SCALARS_FIELDS".into(), fields.join(" ")));
    let offsets = StepScalars::FIELDS.map(|(name, _, offset)| format!("X({name}, {offset})"));
    d.push(("HA_SCALARS_OFFSETS(X)".into(), offsets.join(" ")));
    d.push(("HA_BUCKETS".into(), format!("{BUCKETS}u")));
    // The sizes of the structs the host shares with the kernels, which the C sources assert.
    for (name, size) in [
        ("SCALARS", std::mem::size_of::<StepScalars>()),
        ("TENSOR", std::mem::size_of::<HaTensor>()),
        ("STATUS", std::mem::size_of::<HaStatus>()),
        ("Q8", std::mem::size_of::<Q8Block>()),
    ] {
        d.push((format!("HA_SIZE_{name}"), size.to_string()));
    }
    for (name, value) in [
        ("LIMBS", ExactSum::LIMBS.to_string()),
        ("WORDS", ExactSum::WORDS.to_string()),
        ("DIGIT_BITS", ExactSum::DIGIT_BITS.to_string()),
        ("LSB_EXP", format!("({})", ExactSum::LSB_EXP)),
        ("NAN", format!("{}ull", ExactSum::NAN)),
        ("POS_INF", format!("{}ull", ExactSum::POS_INF)),
        ("NEG_INF", format!("{}ull", ExactSum::NEG_INF)),
    ] {
        d.push((format!("HA_EXACT_{name}"), value));
    }
    d.push(("HA_Q8_BLOCK".into(), q8::BLOCK.to_string()));
    d.push(("HA_Q8_SALT".into(), format!("{:#x}ull", q8::SLOT_SALT)));
    for (k, m) in q8::HASH_MULTIPLIERS.iter().enumerate() {
        d.push((format!("HA_Q8_HASH_MUL{k}"), format!("{m:#x}u")));
    }
    for (name, table) in [("UNSIGNED", &q8::UNSIGNED[..]), ("SIGNED", &q8::SIGNED[..])] {
        let bits: Vec<String> = table.iter().map(|x| format!("{:#x}u", x.to_bits())).collect();
        d.push((format!("HA_Q8_{name}"), bits.join(", ")));
    }
    for k in ElementKernel::ALL {
        d.push((id_macro(k), (k as u32).to_string()));
    }
    let max_slots = ElementKernel::ALL.map(ElementKernel::slots).into_iter().max();
    d.push(("HA_MAX_SLOTS".into(), max_slots.unwrap_or(0).to_string()));
    // X(name, id, state slots, ρ slot or −1, q8 slots on the unsigned map (the second
    // moments), element function) for every update kernel.
    let rules: Vec<String> = ElementKernel::ALL
        .iter()
        .map(|&k| {
            let rho = k.rho_slot().map_or(-1, |s| s as i64);
            let (name, id, slots, unsigned) = (k.name(), id_macro(k), k.slots(), k.second_moments());
            format!("X({name}, {id}, {slots}, {rho}, {unsigned}u, {})", k.c_function())
        })
        .collect();
    d.push(("HA_RULE_KERNELS(X)".into(), rules.join(" ")));
    // X(C type, name, context...) for every storage type; one list per nesting level, as a
    // macro is not expanded again inside its own expansion.
    let types = |list: &[Dtype]| -> String {
        let xs: Vec<String> = list
            .iter()
            .map(|&t| format!("X({}, {}, __VA_ARGS__)", c_type(t), t.name()))
            .collect();
        xs.join(" ")
    };
    // E: the state types that keep the global rule's bound (not q8).
    for (level, list) in [
        ("P", &DTYPES[..]),
        ("G", &DTYPES[..]),
        ("S", &STATE_DTYPES[..]),
        ("E", &DTYPES[..]),
    ] {
        d.push((format!("HA_STORAGE_{level}(X, ...)"), types(list)));
    }
    d
}

/// `homeadam_defs.h`: [`defines`] as a header.
pub fn defs_header() -> String {
    let mut h = String::from(
        "// homeadam_defs.h: generated from homeadam-cuda's src/kernels.rs (`kernels::defs_header`),\n\
         // the one source of these values; do not edit. Builds through Rust (NVRTC, the g++ parity\n\
         // test) get them from kernels.rs itself; this copy serves a build of one file alone.\n",
    );
    for (name, value) in defines() {
        h.push_str(&format!("#define {name} {value}\n"));
    }
    h
}

/// The headers the sources include, as `(name, text)`: what NVRTC is handed.
pub fn headers() -> [(&'static str, String); 4] {
    [
        ("homeadam_defs.h", defs_header()),
        ("homeadam_math.h", MATH_HEADER.to_string()),
        ("homeadam_exact.h", EXACT_HEADER.to_string()),
        ("homeadam.cuh", KERNELS.to_string()),
    ]
}

/// The source of one model's kernels: `ha_reset`, `ha_check_{g}`, `ha_home_pre_{g}_{s}`,
/// `ha_home_bound_{g}_{s}` (state of one element per parameter), `ha_home_hist_{g}_{s}`,
/// `ha_grad_sq_{g}` and the update kernels `{rule}_{p}_{g}_{s}` of `update` (SWATS has two), a
/// fraction of [`INSTANTIATIONS`]' compile time.
pub fn model_source(update: &[ElementKernel], p: Dtype, g: Dtype, s: Dtype) -> String {
    let (pn, gn, sn) = (p.name(), g.name(), s.name());
    let (pt, gt, st) = (c_type(p), c_type(g), c_type(s));
    let mut source = format!(
        "#include \"homeadam.cuh\"\nHA_CHECK({gt}, {gn})\nHA_PRE({gt}, {st}, {gn}, {sn})\n\
         HA_HIST({gt}, {st}, {gn}, {sn})\nHA_GRAD_SQ({gt}, {gn})\n"
    );
    if s.is_element() {
        source.push_str(&format!("HA_HOME_BOUND({gt}, {st}, {gn}, {sn})\n"));
    }
    for k in update {
        source.push_str(&format!(
            "HA_UPDATE({}, {}, {pt}, {gt}, {st}, {pn}, {gn}, {sn})\n",
            k.name(),
            id_macro(*k)
        ));
    }
    source
}

/// `{rule}_{p}_{g}_{s}`, e.g. `homeadam_bf16_bf16_f32`.
pub fn kernel_name(kernel: ElementKernel, p: Dtype, g: Dtype, s: Dtype) -> String {
    format!("{}_{}_{}_{}", kernel.name(), p.name(), g.name(), s.name())
}

/// Every `extern "C"` kernel of [`INSTANTIATIONS`].
pub fn all_kernel_names() -> Vec<String> {
    let mut names = vec!["ha_reset".to_string()];
    for g in DTYPES {
        names.push(format!("ha_check_{}", g.name()));
        names.push(format!("ha_grad_sq_{}", g.name()));
        for s in STATE_DTYPES {
            names.push(format!("ha_home_pre_{}_{}", g.name(), s.name()));
            names.push(format!("ha_home_hist_{}_{}", g.name(), s.name()));
        }
        for s in DTYPES {
            names.push(format!("ha_home_bound_{}_{}", g.name(), s.name()));
        }
    }
    for kernel in ElementKernel::ALL {
        for p in DTYPES {
            for g in DTYPES {
                for s in STATE_DTYPES {
                    names.push(kernel_name(kernel, p, g, s));
                }
            }
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use homeadam_core::backend::tensor_key;

    use homeadam_core::Rule;

    use super::*;

    #[test]
    fn the_committed_defs_header_is_generated_from_this_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/kernels/homeadam_defs.h");
        let generated = defs_header();
        if std::env::var_os("HOMEADAM_BLESS").is_some() {
            std::fs::write(path, &generated).expect("write kernels/homeadam_defs.h");
        }
        assert!(
            include_str!("../kernels/homeadam_defs.h") == generated,
            "kernels/homeadam_defs.h is out of date: regenerate it with \
             `HOMEADAM_BLESS=1 cargo test -p homeadam-cuda --lib committed_defs_header`"
        );
    }

    #[test]
    fn kernel_names_are_unique() {
        for k in ElementKernel::ALL {
            let same = ElementKernel::ALL.iter().filter(|o| o.name() == k.name());
            assert_eq!(same.count(), 1);
        }
        assert_eq!(
            all_kernel_names().len(),
            1 + 3 + 3 + 2 * 12 + 9 + ElementKernel::ALL.len() * 36
        );
    }

    #[test]
    fn rho_over_active_is_a_flag_of_the_home_kernel() {
        for switch in [Switch::Global, Switch::Layer] {
            let all = Config::new(Rule::HomeAdamW(switch));
            let active = Config {
                rho_over: RhoOver::Active,
                ..all
            };
            assert_eq!(rule_kernel(&all, false).1 & flags::RHO_ACTIVE, 0);
            assert_eq!(
                rule_kernel(&active, false).1,
                rule_kernel(&all, false).1 | flags::RHO_ACTIVE
            );
        }
        // No bit of a flag in the switch's two bits.
        let others =
            flags::NESTEROV | flags::WEIGHT_DECOUPLE | flags::STOCHASTIC | flags::RHO_ACTIVE | flags::BOUND;
        assert_eq!(others & (3 << flags::SWITCH_SHIFT), 0);
    }

    #[test]
    fn sr_base_keys_tensors_as_the_core() {
        for (seed, t, k) in [(0, 1, 0), (7, 3, 2), (u64::MAX, 1 << 40, 99)] {
            assert_eq!(mix64(sr_base(seed, t) ^ k), tensor_key(seed, t, k));
        }
    }
}
