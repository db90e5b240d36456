//! Lazily bound CUDA libraries for `cargo xtask build-cuda` ([`crate::build_cuda`]): the
//! driver (libcuda, not on PyPI), cuBLAS, cuBLASLt, cuRAND and NVRTC, which the binary must not
//! need in order to start (a machine without a GPU runs its CPU commands). For each, a static
//! archive `lib{link}.a` defines every function cudarc's bindings declare as a jump through a
//! table; the table's entries start at a resolver that, at a function's first call, opens the
//! real library by its soname (e.g. `libcuda.so.1`), looks the function up and writes its
//! address into the table. The link takes the archive where cudarc asks for `-l{link}`, so the
//! binary records no need of these libraries; `homeadam` checks that they load before it
//! opens a CUDA device (`homeadam_host::device`), so the resolver's own error (a message and
//! `abort`) is reached only by a library that lacks a function cudarc binds. The libraries are
//! the host's table ([`CUDA_LIBRARIES`], `host/src/cuda_libraries.rs`).
//!
//! The trampolines are x86-64 assembly: they run before the resolver knows the function's
//! signature, so the resolver saves and restores every argument register around its call.

use std::fmt::Write;
use std::path::Path;

use crate::run;

#[path = "../../host/src/cuda_libraries.rs"]
#[allow(dead_code)]
mod cuda_libraries;
pub(crate) use cuda_libraries::{CudaLibrary, CUDA_LIBRARIES};

/// The folder of cudarc's bindings of a library (`src/{module}/sys/mod.rs`).
fn cudarc_module(link: &str) -> String {
    match link {
        "cuda" => "driver".into(),
        other => other.to_lowercase(),
    }
}

/// The names of the functions in the `extern "C"` blocks of a cudarc `sys/mod.rs` (every CUDA
/// version's: a name the loaded library lacks costs nothing until it is called).
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

/// The trampolines: `name: jmp *table[k]`, the table starting at `resolve_k`, which passes k
/// to the resolver with every argument register saved (rdi, rsi, rdx, rcx, r8, r9, rax for
/// variadic calls, xmm0–7) and jumps to the address it returns.
fn assembly(link: &str, names: &[&str]) -> String {
    let table = format!("homeadam_lazy_{link}_table");
    let mut s = String::from("\t.data\n\t.p2align 3\n");
    writeln!(s, "{table}:").unwrap();
    for k in 0..names.len() {
        writeln!(s, "\t.quad .Lresolve_{k}").unwrap();
    }
    writeln!(s, "\t.globl {table}\n\t.hidden {table}\n\t.text").unwrap();
    for (k, name) in names.iter().enumerate() {
        writeln!(
            s,
            "\t.globl {name}\n\t.type {name}, @function\n{name}:\n\tjmp *{table}+{}(%rip)\n\
             .Lresolve_{k}:\n\tmovl ${k}, %r11d\n\tjmp .Lresolve",
            8 * k
        )
        .unwrap();
    }
    let saves: [(&str, &str, usize); 15] = [
        ("movq", "%rdi", 0),
        ("movq", "%rsi", 8),
        ("movq", "%rdx", 16),
        ("movq", "%rcx", 24),
        ("movq", "%r8", 32),
        ("movq", "%r9", 40),
        ("movq", "%rax", 48),
        ("movdqu", "%xmm0", 64),
        ("movdqu", "%xmm1", 80),
        ("movdqu", "%xmm2", 96),
        ("movdqu", "%xmm3", 112),
        ("movdqu", "%xmm4", 128),
        ("movdqu", "%xmm5", 144),
        ("movdqu", "%xmm6", 160),
        ("movdqu", "%xmm7", 176),
    ];
    s.push_str(".Lresolve:\n\tpushq %rbp\n\tmovq %rsp, %rbp\n\tsubq $192, %rsp\n\tandq $-16, %rsp\n");
    for (op, reg, at) in saves {
        writeln!(s, "\t{op} {reg}, {at}(%rsp)").unwrap();
    }
    writeln!(
        s,
        "\tmovl %r11d, %edi\n\tcall homeadam_lazy_{link}_resolve\n\tmovq %rax, %r11"
    )
    .unwrap();
    for (op, reg, at) in saves {
        writeln!(s, "\t{op} {at}(%rsp), {reg}").unwrap();
    }
    s.push_str("\tleave\n\tjmp *%r11\n\t.section .note.GNU-stack,\"\",@progbits\n");
    s
}

/// The resolver: opens the library once, looks function k up, writes it into the table.
fn resolver(lib: &CudaLibrary, names: &[&str]) -> String {
    let link = lib.link;
    let mut s = String::from("#include <dlfcn.h>\n#include <stdio.h>\n#include <stdlib.h>\n\n");
    writeln!(s, "extern void *homeadam_lazy_{link}_table[];\n").unwrap();
    writeln!(s, "static const char *const names[] = {{").unwrap();
    for name in names {
        writeln!(s, "    \"{name}\",").unwrap();
    }
    writeln!(
        s,
        r#"}};

__attribute__((visibility("hidden"))) void *homeadam_lazy_{link}_resolve(unsigned k) {{
    static void *library;
    void *handle = __atomic_load_n(&library, __ATOMIC_ACQUIRE);
    if (!handle) {{
        handle = dlopen("{soname}", RTLD_NOW | RTLD_GLOBAL);
        if (!handle) {{
            fprintf(stderr, "homeadam: %s called, but {soname} does not load: %s\n", names[k], dlerror());
            abort();
        }}
        __atomic_store_n(&library, handle, __ATOMIC_RELEASE);
    }}
    void *function = dlsym(handle, names[k]);
    if (!function) {{
        fprintf(stderr, "homeadam: {soname} has no function %s\n", names[k]);
        abort();
    }}
    __atomic_store_n(&homeadam_lazy_{link}_table[k], function, __ATOMIC_RELEASE);
    return function;
}}"#,
        soname = lib.soname
    )
    .unwrap();
    s
}

/// Writes `lib{link}.a` into `dir`: the trampolines of every function cudarc declares for the
/// library, and their resolver; the error says which file could not be read or written.
pub(crate) fn build(lib: &CudaLibrary, dir: &Path, cudarc: &Path) -> Result<(), String> {
    let bindings = cudarc
        .join("src")
        .join(cudarc_module(lib.link))
        .join("sys/mod.rs");
    let source =
        std::fs::read_to_string(&bindings).map_err(|e| format!("cannot read {}: {e}", bindings.display()))?;
    let names = declared_functions(&source);
    if names.is_empty() {
        return Err(format!("no functions in {}", bindings.display()));
    }
    let write = |name: String, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok::<_, String>(path.to_string_lossy().into_owned())
    };
    let link = lib.link;
    let asm = write(format!("{link}_trampolines.s"), assembly(link, &names))?;
    let c = write(format!("{link}_resolve.c"), resolver(lib, &names))?;
    let objects = [format!("{asm}.o"), format!("{c}.o")];
    for (source, object) in [&asm, &c].into_iter().zip(&objects) {
        run(
            &format!(
                "lazy {}, {} ({} functions)",
                lib.soname,
                lib.provides,
                names.len()
            ),
            "cc",
            &["-c", "-fPIC", "-O2", "-o", object, source],
        );
    }
    let archive = dir.join(format!("lib{link}.a"));
    let archive = archive.to_string_lossy();
    run(
        &format!("archive lib{link}.a"),
        "ar",
        &["rcs", &archive, &objects[0], &objects[1]],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a program calling `cos` and `ldexp` through trampolines resolved in `soname`
    /// (libm stands in for a CUDA library: the arguments in xmm0 and edi must reach it
    /// untouched) and runs it.
    fn run_through(soname: &'static str) -> std::process::Output {
        let dir = std::env::temp_dir().join(format!("homeadam-lazy-{}-{soname}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let lib = CudaLibrary {
            soname,
            link: "m",
            provides: "libm",
            wheel: None,
        };
        let names = ["cos", "ldexp"];
        std::fs::write(dir.join("t.s"), assembly(lib.link, &names)).unwrap();
        std::fs::write(dir.join("r.c"), resolver(&lib, &names)).unwrap();
        std::fs::write(
            dir.join("main.c"),
            "#include <stdio.h>\ndouble cos(double); double ldexp(double, int);\n\
             int main(void) { printf(\"%.6f %.1f %.6f\\n\", cos(0.5), ldexp(1.5, 3), cos(1.0)); return 0; }\n",
        )
        .unwrap();
        let status = std::process::Command::new("cc")
            .current_dir(&dir)
            .args([
                "-O0",
                "-fno-builtin",
                "-o",
                "main",
                "main.c",
                "t.s",
                "r.c",
                "-ldl",
            ])
            .status()
            .unwrap();
        assert!(status.success());
        let out = std::process::Command::new(dir.join("main")).output().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        out
    }

    #[test]
    fn functions_resolve_at_their_first_call_with_their_arguments_intact() {
        let out = run_through("libm.so.6");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "0.877583 12.0 0.540302\n");
    }

    #[test]
    fn a_missing_library_is_named_when_first_called() {
        let out = run_through("libhomeadam-missing.so.1");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cos called, but libhomeadam-missing.so.1 does not load"),
            "{err}"
        );
    }
}
