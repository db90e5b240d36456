//! The CUDA C sources, their names and their compilation by NVRTC.
//!
//! `kernels/homeadam_math.h` holds the per-element math (also compiled by g++ for the parity
//! test); `kernels/homeadam.cu` the multi-tensor kernels. NVRTC compiles them with
//! `--fmad=false --prec-div=true --prec-sqrt=true --ftz=false` (DESIGN §4): every `f32`
//! operation is the IEEE one the core performs, in the same order.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::nvrtc::{result, sys};
use homeadam_core::{Config, Dtype, Rule, Switch};

/// The element math header.
pub const MATH_HEADER: &str = include_str!("../kernels/homeadam_math.h");
/// The multi-tensor kernel templates (the header is prepended by [`source`]).
pub const KERNELS: &str = include_str!("../kernels/homeadam.cu");
/// Every `extern "C"` instantiation of [`KERNELS`].
pub const INSTANTIATIONS: &str = include_str!("../kernels/instantiations.cu");
/// The architectures the compile check builds SASS for: Xavier, Orin, Ada, Hopper.
pub const ARCHS: [&str; 4] = ["sm_72", "sm_87", "sm_89", "sm_90"];
/// Every update kernel's rule part, in `{rule}_{p}_{g}_{s}`.
pub const RULE_KERNELS: [&str; 10] = [
    "sgd",
    "sgdm",
    "adam",
    "adamw",
    "homeadam",
    "adabelief",
    "adabelief_amsgrad",
    "swats_adam",
    "swats_sgd",
    "miadam",
];
/// The storage types of the instantiations.
pub const DTYPES: [Dtype; 3] = [Dtype::F32, Dtype::F16, Dtype::BF16];

/// Flag bits of the update kernels (`HA_*` in homeadam_math.h).
pub mod flags {
    /// Nesterov momentum (SGD, SWATS).
    pub const NESTEROV: u32 = 1;
    /// Decoupled weight decay (AdaBelief, SWATS).
    pub const WEIGHT_DECOUPLE: u32 = 2;
    /// Stochastic rounding of parameter stores.
    pub const STOCHASTIC: u32 = 4;
    /// The HomeAdam switch (one of the `SWITCH_*` values) is `flags >> SWITCH_SHIFT & 3`.
    pub const SWITCH_SHIFT: u32 = 8;
    /// One decision for the model, on the first pass's min v̂.
    pub const SWITCH_GLOBAL: u32 = 1;
    /// One decision per tensor.
    pub const SWITCH_LAYER: u32 = 2;
    /// Always the srf step (Adam(W)-srf).
    pub const SWITCH_SRF: u32 = 3;
}

/// Elements per block-table entry (`HA_CHUNK`).
pub const CHUNK: usize = 16384;

/// The full NVRTC source: the header, the kernels, every instantiation.
pub fn source() -> String {
    format!("{MATH_HEADER}\n{KERNELS}\n{INSTANTIATIONS}")
}

/// The source of one model's kernels: `ha_reset`, `ha_check_{g}`, `ha_home_pre_{g}_{s}` and
/// the update kernel `{rule}_{p}_{g}_{s}` (a fraction of [`source`]'s compile time).
pub fn model_source(rule: &str, p: Dtype, g: Dtype, s: Dtype) -> String {
    let id = format!(
        "HA_RULE_{}",
        if rule == "homeadam" { "HOME" } else { rule }.to_uppercase()
    );
    let (pn, gn, sn) = (p.name(), g.name(), s.name());
    let (pt, gt, st) = (c_type(p), c_type(g), c_type(s));
    format!(
        "{MATH_HEADER}\n{KERNELS}\nHA_UPDATE({rule}, {id}, {pt}, {gt}, {st}, {pn}, {gn}, {sn})\n\
         HA_CHECK({gt}, {gn})\nHA_PRE({gt}, {st}, {gn}, {sn})\n"
    )
}

fn c_type(d: Dtype) -> &'static str {
    match d {
        Dtype::F32 => "float",
        Dtype::F16 => "ha_f16",
        Dtype::BF16 => "ha_bf16",
    }
}

/// `{rule}_{p}_{g}_{s}`, e.g. `homeadam_bf16_bf16_f32`.
pub fn kernel_name(rule: &str, p: Dtype, g: Dtype, s: Dtype) -> String {
    format!("{rule}_{}_{}_{}", p.name(), g.name(), s.name())
}

/// Every `extern "C"` kernel of [`source`].
pub fn all_kernel_names() -> Vec<String> {
    let mut names = vec!["ha_reset".to_string()];
    for g in DTYPES {
        names.push(format!("ha_check_{}", g.name()));
        for s in DTYPES {
            names.push(format!("ha_home_pre_{}_{}", g.name(), s.name()));
        }
    }
    for rule in RULE_KERNELS {
        for p in DTYPES {
            for g in DTYPES {
                for s in DTYPES {
                    names.push(kernel_name(rule, p, g, s));
                }
            }
        }
    }
    names
}

/// The update kernel's rule part and flag bits for `config` (SWATS in its SGD phase when
/// `swats_sgd`). Stochastic rounding is added by the caller.
pub fn rule_kernel(config: &Config, swats_sgd: bool) -> (&'static str, u32) {
    let mut f = 0;
    if config.nesterov {
        f |= flags::NESTEROV;
    }
    if config.weight_decouple {
        f |= flags::WEIGHT_DECOUPLE;
    }
    let switch = |s: u32| f | (s << flags::SWITCH_SHIFT);
    match config.rule {
        Rule::Sgd if config.momentum == 0.0 => ("sgd", f),
        Rule::Sgd | Rule::Sgdm => ("sgdm", f),
        Rule::Adam => ("adam", f),
        Rule::AdamW => ("adamw", f),
        Rule::AdamSrf | Rule::AdamWSrf => ("homeadam", switch(flags::SWITCH_SRF)),
        Rule::HomeAdam(s) | Rule::HomeAdamW(s) => (
            "homeadam",
            switch(match s {
                Switch::Global => flags::SWITCH_GLOBAL,
                Switch::Layer => flags::SWITCH_LAYER,
                Switch::Element => 0,
            }),
        ),
        Rule::AdaBelief if config.amsgrad => ("adabelief_amsgrad", f),
        Rule::AdaBelief => ("adabelief", f),
        Rule::Swats if swats_sgd => ("swats_sgd", f),
        Rule::Swats => ("swats_adam", f),
        Rule::MiAdam => ("miadam", f),
    }
}

/// NVRTC's options for `arch` (`sm_XX` gives SASS, `compute_XX` PTX only).
pub fn options(arch: &str, ptxas_verbose: bool) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={arch}"),
        "--fmad=false".into(),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--ftz=false".into(),
        "--std=c++14".into(),
    ];
    if ptxas_verbose {
        o.push("--ptxas-options=-v".into());
    }
    o
}

/// What NVRTC produced.
pub struct Compiled {
    /// The PTX text.
    pub ptx: Vec<u8>,
    /// The SASS image (empty for a `compute_XX` target).
    pub cubin: Vec<u8>,
    /// NVRTC's log (ptxas' `-v` lines included).
    pub log: String,
}

/// An NVRTC failure with its log.
#[derive(Debug)]
pub struct CompileError(pub String);

impl std::fmt::Display for CompileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NVRTC: {}", self.0)
    }
}

impl std::error::Error for CompileError {}

/// Compiles `source` (see [`source`], [`model_source`]) for `arch`. Needs libnvrtc (found on
/// the loader path).
pub fn compile(source: &str, arch: &str, ptxas_verbose: bool) -> Result<Compiled, CompileError> {
    let src = CString::new(source).map_err(|e| CompileError(e.to_string()))?;
    let name = CString::new("homeadam.cu").map_err(|e| CompileError(e.to_string()))?;
    let prog = result::create_program(&src, Some(&name)).map_err(|e| CompileError(format!("{e:?}")))?;
    let out = (|| {
        let opts = options(arch, ptxas_verbose);
        // SAFETY: `prog` is a live program; the options are C strings.
        let compiled = unsafe { result::compile_program(prog, &opts) };
        // SAFETY: as above; the log is NUL-terminated.
        let log = unsafe { result::get_program_log(prog) }.map_err(|e| CompileError(format!("{e:?}")))?;
        // SAFETY: `log` holds a NUL-terminated string.
        let log = unsafe { CStr::from_ptr(log.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        compiled.map_err(|e| CompileError(format!("{e:?}\n{log}")))?;
        // SAFETY: the program compiled.
        let ptx = unsafe { result::get_ptx(prog) }.map_err(|e| CompileError(format!("{e:?}")))?;
        let ptx = ptx.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        let cubin = if arch.starts_with("sm_") {
            cubin(prog)?
        } else {
            Vec::new()
        };
        Ok(Compiled { ptx, cubin, log })
    })();
    // SAFETY: `prog` is not used after this.
    unsafe { result::destroy_program(prog) }.map_err(|e| CompileError(format!("{e:?}")))?;
    out
}

/// The SASS image of `source` for `arch`, compiled once per process: optimizers of the same
/// rule and storage types (a test suite, a run with several models) share one NVRTC compile.
pub fn cubin_cached(source: &str, arch: &str) -> Result<Arc<Vec<u8>>, CompileError> {
    type Cache = Mutex<HashMap<(String, String), Arc<Vec<u8>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let key = (source.to_string(), arch.to_string());
    if let Some(hit) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return Ok(hit.clone());
    }
    let cubin = Arc::new(compile(source, arch, false)?.cubin);
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, cubin.clone());
    Ok(cubin)
}

fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, CompileError> {
    let mut size = 0usize;
    // SAFETY: `prog` compiled for a real architecture; `size` is a valid out pointer.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| CompileError(format!("{e:?}")))?;
    let mut image = vec![0u8; size];
    // SAFETY: `image` holds `size` bytes.
    unsafe { sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut c_char) }
        .result()
        .map_err(|e| CompileError(format!("{e:?}")))?;
    Ok(image)
}

/// Resources of one kernel, from ptxas' `-v` lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel's name.
    pub name: String,
    /// Registers per thread.
    pub registers: u32,
    /// Spill stores + spill loads, bytes.
    pub spill_bytes: u32,
}

/// Parses ptxas' `-v` log: `Compiling entry function 'X'`, then `N bytes spill stores, M bytes
/// spill loads` and `Used R registers`.
pub fn parse_ptxas_log(log: &str) -> Vec<KernelResources> {
    let mut out: Vec<KernelResources> = Vec::new();
    for line in log.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(KernelResources {
                name,
                registers: 0,
                spill_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            let words: Vec<&str> = line.split([' ', ',']).filter(|w| !w.is_empty()).collect();
            for (i, w) in words.iter().enumerate() {
                let number = || i.checked_sub(1).and_then(|j| words[j].parse::<u32>().ok());
                match *w {
                    "registers" => k.registers = number().unwrap_or(k.registers),
                    "spill" => {
                        k.spill_bytes += i
                            .checked_sub(2)
                            .and_then(|j| words[j].parse::<u32>().ok())
                            .unwrap_or(0)
                    }
                    _ => {}
                }
            }
        }
    }
    out
}
