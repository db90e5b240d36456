//! NVRTC opened from the path `homeadam.torch` found, for [`CudaOptimizer::with_compiler`].
//!
//! cudarc opens NVRTC by the sonames of the one CUDA major version its bindings were built for
//! (12), while PyTorch's wheels ship the NVRTC of theirs (`nvidia/cu13/lib/libnvrtc.so.13`,
//! `nvidia/cuda_nvrtc/lib/libnvrtc.so.12`): the package opens the library PyTorch installed by
//! its path and compiles homeadam-cuda's sources with homeadam-cuda's options and headers. The
//! few NVRTC calls are made here because cudarc's bindings only call the library it found
//! itself; NVRTC's C API is the same in CUDA 12 and 13.
//!
//! [`CudaOptimizer::with_compiler`]: homeadam_cuda::CudaOptimizer::with_compiler

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use homeadam_cuda::nvrtc::{c_string, options, CompileError, ProgramText};

type Program = *mut c_void;
type Status = c_int;

/// The NVRTC calls a compile makes, from one opened library.
struct Nvrtc {
    create: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    compile: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    destroy: unsafe extern "C" fn(*mut Program) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    /// Keeps the functions above loaded.
    _library: libloading::Library,
}

impl Nvrtc {
    /// Opens `library` (a path, or a name the loader searches for).
    fn open(library: &str) -> Result<Self, String> {
        // SAFETY: opening NVRTC runs no initializer with preconditions.
        let lib = unsafe { libloading::Library::new(library) }
            .map_err(|e| format!("cannot open NVRTC ({library}): {e}"))?;
        /// # Safety
        /// `T` is the symbol's signature in nvrtc.h.
        unsafe fn symbol<T: Copy>(lib: &libloading::Library, name: &str) -> Result<T, String> {
            lib.get::<T>(name)
                .map(|s| *s)
                .map_err(|e| format!("NVRTC has no {name}: {e}"))
        }
        // SAFETY: each field's type is its function's signature in nvrtc.h.
        unsafe {
            Ok(Nvrtc {
                create: symbol(&lib, "nvrtcCreateProgram")?,
                compile: symbol(&lib, "nvrtcCompileProgram")?,
                log_size: symbol(&lib, "nvrtcGetProgramLogSize")?,
                log: symbol(&lib, "nvrtcGetProgramLog")?,
                cubin_size: symbol(&lib, "nvrtcGetCUBINSize")?,
                cubin: symbol(&lib, "nvrtcGetCUBIN")?,
                destroy: symbol(&lib, "nvrtcDestroyProgram")?,
                error_string: symbol(&lib, "nvrtcGetErrorString")?,
                _library: lib,
            })
        }
    }

    fn check(&self, status: Status, what: &str) -> Result<(), CompileError> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: NVRTC returns a static NUL-terminated string for any status.
        let text = unsafe { CStr::from_ptr((self.error_string)(status)) };
        Err(CompileError(format!("{what}: {}", text.to_string_lossy())))
    }

    /// The SASS image of `source` for `arch`, as [`homeadam_cuda::nvrtc::compile`] builds it.
    fn compile(&self, source: &str, arch: &str) -> Result<Vec<u8>, CompileError> {
        let text = ProgramText::new(source)?;
        let text_ptrs = ProgramText::pointers(&text.header_texts);
        let name_ptrs = ProgramText::pointers(&text.header_names);
        let opts = options(arch, false)
            .iter()
            .map(|o| c_string(o))
            .collect::<Result<Vec<_>, _>>()?;
        let opt_ptrs = ProgramText::pointers(&opts);
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: every pointer is a NUL-terminated string alive for the calls; the arrays hold
        // the counts passed; `prog` is destroyed once, after its last use.
        unsafe {
            self.check(
                (self.create)(
                    &mut prog,
                    text.source.as_ptr(),
                    text.file.as_ptr(),
                    text_ptrs.len() as c_int,
                    text_ptrs.as_ptr(),
                    name_ptrs.as_ptr(),
                ),
                "nvrtcCreateProgram",
            )?;
            let out = self.compile_program(prog, &opt_ptrs);
            (self.destroy)(&mut prog);
            out
        }
    }

    /// # Safety
    /// `prog` is a live program; `opts` are C strings alive for the call.
    unsafe fn compile_program(&self, prog: Program, opts: &[*const c_char]) -> Result<Vec<u8>, CompileError> {
        let compiled = (self.compile)(prog, opts.len() as c_int, opts.as_ptr());
        if compiled != 0 {
            let mut size = 0usize;
            self.check((self.log_size)(prog, &mut size), "nvrtcGetProgramLogSize")?;
            let mut log = vec![0u8; size.max(1)];
            self.check((self.log)(prog, log.as_mut_ptr().cast()), "nvrtcGetProgramLog")?;
            let log = CStr::from_bytes_until_nul(&log)
                .map_or_else(|_| String::new(), |l| l.to_string_lossy().into_owned());
            self.check(compiled, &format!("nvrtcCompileProgram\n{log}"))?;
        }
        let mut size = 0usize;
        self.check((self.cubin_size)(prog, &mut size), "nvrtcGetCUBINSize")?;
        let mut image = vec![0u8; size];
        self.check((self.cubin)(prog, image.as_mut_ptr().cast()), "nvrtcGetCUBIN")?;
        Ok(image)
    }
}

/// The process's NVRTC: the first library a CUDA step named (later names are not opened).
fn nvrtc(library: &str) -> Result<&'static Nvrtc, CompileError> {
    static NVRTC: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    NVRTC
        .get_or_init(|| Nvrtc::open(library))
        .as_ref()
        .map_err(|e| CompileError(e.clone()))
}

/// The SASS image of `source` for `arch` from the NVRTC `library`, compiled once per process,
/// as [`homeadam_cuda::nvrtc::cubin_cached`] caches it.
pub fn cubin(library: &str, source: &str, arch: &str) -> Result<Arc<Vec<u8>>, CompileError> {
    type Cache = Mutex<HashMap<(String, String), Arc<Vec<u8>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(Cache::default);
    let key = (source.to_string(), arch.to_string());
    if let Some(hit) = cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
        return Ok(hit.clone());
    }
    let image = Arc::new(nvrtc(library)?.compile(source, arch)?);
    cache
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(key, image.clone());
    Ok(image)
}

#[cfg(test)]
mod tests {
    use homeadam_core::{Config, Dtype, Rule, Switch};
    use homeadam_cuda::nvrtc::cubin_cached;

    use super::*;

    /// The libnvrtc in `HOMEADAM_NVRTC_LIB` (a folder, as the CUDA tests are given it), if any.
    fn library() -> Option<String> {
        let dir = std::env::var("HOMEADAM_NVRTC_LIB").ok()?;
        let file = std::fs::read_dir(&dir).ok()?.filter_map(Result::ok).find(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("libnvrtc.so.") && !name.contains("builtins")
        })?;
        Some(file.path().to_string_lossy().into_owned())
    }

    /// The NVRTC opened by its path compiles a model's kernels to the bytes homeadam-cuda's
    /// compile gives (the same library loaded through cudarc, where the loader finds it).
    #[test]
    fn opened_by_path_compiles_as_homeadam_cuda() {
        let Some(library) = library() else {
            eprintln!("SKIPPED: HOMEADAM_NVRTC_LIB names no folder with libnvrtc");
            return;
        };
        let config = Config::new(Rule::HomeAdamW(Switch::Global));
        let kernel = homeadam_cuda::kernels::rule_kernel(&config, false).0;
        let source = homeadam_cuda::kernels::model_source(&[kernel], Dtype::BF16, Dtype::BF16, Dtype::F32);
        let ours = cubin(&library, &source, "sm_90").unwrap_or_else(|e| panic!("{library}: {e}"));
        assert!(ours.starts_with(b"\x7fELF"), "a cubin is an ELF image");
        // SAFETY: probing for the library has no preconditions.
        if unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            let theirs = cubin_cached(&source, "sm_90").expect("cudarc's NVRTC compiles");
            assert_eq!(ours, theirs);
        } else {
            eprintln!("cudarc's loader finds no libnvrtc: the bytes are not compared");
        }
        let error = cubin(&library, "this is not CUDA", "sm_90").expect_err("a compile error");
        assert!(error.0.contains("nvrtcCompileProgram"), "{}", error.0);
    }
}
