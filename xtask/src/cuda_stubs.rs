//! Link-only stubs of the CUDA libraries for `cargo xtask build-cuda` ([`crate::build_cuda`]):
//! the driver (libcuda, not on PyPI), cuBLAS, cuBLASLt, cuRAND and NVRTC, whose code the link
//! does not need (their wheels are 570 MB). Each exports every function cudarc's bindings
//! declare, under the real library's soname and symbol version, so the binary records the same
//! needs as one linked against the real libraries.

use std::path::Path;

use crate::build_cuda::fail;
use crate::run;

/// A link-only library: `lib{link}.so` with soname `soname`, exporting the functions of
/// cudarc's `src/{module}/sys/mod.rs`.
pub(crate) struct Stub {
    link: &'static str,
    pub(crate) soname: &'static str,
    module: &'static str,
    /// Whether the real library puts its symbols under a version named after its soname (the
    /// CUDA 13 libraries do). The driver's are left unversioned: an unversioned reference binds
    /// to the driver's symbol whether or not it has a version.
    versioned: bool,
}

/// The sonames are those of the driver and of the CUDA 13.0 wheels (nvidia-cublas 13.0.2.14,
/// nvidia-curand 10.4.0.35, nvidia-cuda-nvrtc 13.0.88), as PyTorch's `nvidia/cu13/lib` holds them.
pub(crate) const STUBS: &[Stub] = &[
    Stub {
        link: "cuda",
        soname: "libcuda.so.1",
        module: "driver",
        versioned: false,
    },
    Stub {
        link: "cublas",
        soname: "libcublas.so.13",
        module: "cublas",
        versioned: true,
    },
    Stub {
        link: "cublasLt",
        soname: "libcublasLt.so.13",
        module: "cublaslt",
        versioned: true,
    },
    Stub {
        link: "curand",
        soname: "libcurand.so.10",
        module: "curand",
        versioned: true,
    },
    Stub {
        link: "nvrtc",
        soname: "libnvrtc.so.13",
        module: "nvrtc",
        versioned: true,
    },
];

/// The names of the functions in the `extern "C"` blocks of a cudarc `sys/mod.rs` (every CUDA
/// version's: a superset does no harm to a link).
fn declared_functions(source: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut in_extern = false;
    for line in source.lines().map(str::trim) {
        if line == "extern \"C\" {" {
            in_extern = true;
        } else if line == "}" {
            in_extern = false;
        } else if let Some(rest) = line.strip_prefix("fn ").filter(|_| in_extern) {
            if let Some((name, _)) = rest.split_once('(') {
                names.push(name);
            }
        }
    }
    names.sort_unstable();
    names.dedup();
    names
}

/// Compiles `lib{link}.so` into `dir`: one empty function per declared name, for the linker only
/// (the loader looks for the soname, e.g. `libcuda.so.1`, which no file here is named).
pub(crate) fn build(stub: &Stub, dir: &Path, cudarc: &Path) {
    let bindings = cudarc.join("src").join(stub.module).join("sys/mod.rs");
    let source = std::fs::read_to_string(&bindings)
        .unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", bindings.display())));
    let names = declared_functions(&source);
    if names.is_empty() {
        fail(&format!("no functions in {}", bindings.display()));
    }
    let c: String = names.iter().map(|n| format!("void {n}(void) {{}}\n")).collect();
    let c_file = dir.join(format!("{}.c", stub.link));
    std::fs::write(&c_file, c).unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", c_file.display())));
    let out = dir.join(format!("lib{}.so", stub.link));
    let mut args = vec![
        "-shared".to_string(),
        "-fPIC".into(),
        format!("-Wl,-soname,{}", stub.soname),
        "-o".into(),
        out.to_string_lossy().into_owned(),
        c_file.to_string_lossy().into_owned(),
    ];
    if stub.versioned {
        let script = dir.join(format!("{}.map", stub.link));
        std::fs::write(&script, format!("{} {{ global: *; }};\n", stub.soname))
            .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", script.display())));
        args.push(format!("-Wl,--version-script,{}", script.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run(
        &format!("stub {} ({} functions)", stub.soname, names.len()),
        "cc",
        &args,
    );
}
