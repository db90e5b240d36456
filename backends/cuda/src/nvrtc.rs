//! Compiling the sources of [`crate::kernels`] with NVRTC, and reading ptxas' resource report.

use std::collections::HashMap;
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::nvrtc::{result, sys};

use crate::kernels;

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

/// `s` as a C string: an error for an interior NUL.
pub fn c_string(s: &str) -> Result<CString, CompileError> {
    CString::new(s).map_err(|e| CompileError(e.to_string()))
}

/// What `nvrtcCreateProgram` takes: the source, its file name and [`kernels::headers`] (names
/// and texts), as C strings, so that every caller of NVRTC compiles the same program.
pub struct ProgramText {
    /// The program's source.
    pub source: CString,
    /// Its file name, `homeadam.cu`.
    pub file: CString,
    /// The headers' names, in [`kernels::headers`]'s order.
    pub header_names: Vec<CString>,
    /// The headers' texts, in the same order.
    pub header_texts: Vec<CString>,
}

impl ProgramText {
    /// `source` with the kernels' headers.
    pub fn new(source: &str) -> Result<ProgramText, CompileError> {
        let headers = kernels::headers();
        let mut header_names = Vec::with_capacity(headers.len());
        let mut header_texts = Vec::with_capacity(headers.len());
        for (name, text) in &headers {
            header_names.push(c_string(name)?);
            header_texts.push(c_string(text)?);
        }
        Ok(ProgramText {
            source: c_string(source)?,
            file: c_string("homeadam.cu")?,
            header_names,
            header_texts,
        })
    }

    /// Pointers to `strings`, alive as long as they are.
    pub fn pointers(strings: &[CString]) -> Vec<*const c_char> {
        strings.iter().map(|s| s.as_ptr()).collect()
    }
}

/// Compiles `source` (e.g. [`kernels::INSTANTIATIONS`], [`kernels::model_source`]) for `arch`,
/// with [`kernels::headers`] in memory. Needs libnvrtc (found on the loader path).
pub fn compile(source: &str, arch: &str, ptxas_verbose: bool) -> Result<Compiled, CompileError> {
    let text = ProgramText::new(source)?;
    let text_ptrs = ProgramText::pointers(&text.header_texts);
    let name_ptrs = ProgramText::pointers(&text.header_names);
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: every pointer is a NUL-terminated string alive for the call; the two arrays
    // hold `text_ptrs.len()` entries each.
    unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            text.source.as_ptr(),
            text.file.as_ptr(),
            text_ptrs.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    }
    .result()
    .map_err(|e| CompileError(format!("{e:?}")))?;
    let out = compile_program(prog, arch, ptxas_verbose);
    // SAFETY: `prog` is not used after this.
    unsafe { result::destroy_program(prog) }.map_err(|e| CompileError(format!("{e:?}")))?;
    out
}

fn compile_program(
    prog: sys::nvrtcProgram,
    arch: &str,
    ptxas_verbose: bool,
) -> Result<Compiled, CompileError> {
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
                let number = |back: usize| i.checked_sub(back).and_then(|j| words[j].parse::<u32>().ok());
                match *w {
                    "registers" => k.registers = number(1).unwrap_or(k.registers),
                    "spill" => k.spill_bytes += number(2).unwrap_or(0),
                    _ => {}
                }
            }
        }
    }
    out
}
