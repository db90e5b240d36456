//! Compiles every kernel with NVRTC to PTX and SASS for sm_72, sm_87, sm_89 and sm_90, failing on
//! any error or register spill, and prints the register counts. Needs no GPU: only libnvrtc
//! (`cargo xtask test` installs NVRTC 12.9 from PyPI and sets `HOMEADAM_NVRTC_LIB` and
//! `LD_LIBRARY_PATH`). Skipped, with a message, when `HOMEADAM_NVRTC_LIB` is not set.
//!
//! The host's own kernels (`host/kernels/*.cu`, each after `reduce.cuh`, compiled by NVRTC when it
//! trains on a GPU) are compiled here too, because this test has NVRTC in CI and the host's tests do not.

use homeadam_core::rules::ElementKernel;
use homeadam_cuda::kernels::{self, ARCHS};
use homeadam_cuda::nvrtc;

#[test]
fn every_kernel_compiles_for_every_arch_without_spills() {
    let Ok(dir) = std::env::var("HOMEADAM_NVRTC_LIB") else {
        eprintln!("SKIPPED compile_kernels: HOMEADAM_NVRTC_LIB is not set (`cargo xtask test` sets it)");
        return;
    };
    // SAFETY: probing for the library has no preconditions.
    assert!(
        unsafe { cudarc::nvrtc::sys::is_culib_present() },
        "HOMEADAM_NVRTC_LIB={dir} but libnvrtc cannot be loaded: is LD_LIBRARY_PATH set to it?"
    );
    let names = kernels::all_kernel_names();
    let source = kernels::INSTANTIATIONS;
    println!("{} kernels per architecture", names.len());
    // One NVRTC program per architecture, compiled on its own thread; a compile for `sm_XX`
    // yields both the PTX and the SASS.
    let reports: Vec<String> = std::thread::scope(|scope| {
        let jobs: Vec<_> = ARCHS
            .iter()
            .map(|&arch| scope.spawn(|| check_arch(source, arch, &names)))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    for r in reports {
        print!("{r}");
    }
}

#[test]
fn the_hosts_kernels_compile_for_every_arch_without_spills() {
    if std::env::var("HOMEADAM_NVRTC_LIB").is_err() {
        eprintln!("SKIPPED compile_kernels: HOMEADAM_NVRTC_LIB is not set (`cargo xtask test` sets it)");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../host/kernels");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no kernels in {}", dir.display());
    // The host's compilation puts the shared reductions before every kernel source.
    let header = std::fs::read_to_string(dir.join("reduce.cuh")).expect("host/kernels/reduce.cuh");
    for file in files {
        let source = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let source = format!("{header}{source}");
        let names: Vec<&str> = source
            .split("extern \"C\" __global__ void ")
            .skip(1)
            .filter_map(|rest| rest.split('(').next())
            .collect();
        assert!(!names.is_empty(), "{}: no kernels", file.display());
        for arch in ARCHS {
            let out = nvrtc::compile(&source, arch, true)
                .unwrap_or_else(|e| panic!("{} {arch}: {e}", file.display()));
            let ptx = String::from_utf8_lossy(&out.ptx);
            let resources = nvrtc::parse_ptxas_log(&out.log);
            for name in &names {
                assert!(
                    ptx.contains(&format!(".entry {name}(")),
                    "{arch}: {name} missing from the PTX"
                );
                let r = resources
                    .iter()
                    .find(|r| r.name == *name)
                    .unwrap_or_else(|| panic!("{arch}: no ptxas info for {name}\n{}", out.log));
                assert_eq!(r.spill_bytes, 0, "{arch}: {name} spills {} bytes", r.spill_bytes);
            }
        }
        println!(
            "{}: {} kernels compile for {} without spills",
            file.file_name().unwrap_or_default().to_string_lossy(),
            names.len(),
            ARCHS.join(", ")
        );
    }
}

/// Compiles `source` for `arch`, checks every kernel is there (and no other) without spills,
/// and returns the register report.
fn check_arch(source: &str, arch: &str, names: &[String]) -> String {
    let out = nvrtc::compile(source, arch, true).unwrap_or_else(|e| panic!("{arch}: {e}"));
    assert!(out.cubin.starts_with(b"\x7fELF"), "{arch}: no cubin");
    let ptx_text = String::from_utf8_lossy(&out.ptx);
    assert_eq!(
        ptx_text.matches(".entry ").count(),
        names.len(),
        "{arch}: the PTX's kernels are not kernels::all_kernel_names()"
    );
    let resources = nvrtc::parse_ptxas_log(&out.log);
    for name in names {
        assert!(
            ptx_text.contains(&format!(".entry {name}(")),
            "{arch}: {name} missing from the PTX"
        );
        let r = resources
            .iter()
            .find(|r| &r.name == name)
            .unwrap_or_else(|| panic!("{arch}: no ptxas info for {name}\n{}", out.log));
        assert_eq!(r.spill_bytes, 0, "{arch}: {name} spills {} bytes", r.spill_bytes);
    }
    let regs: Vec<u32> = resources.iter().map(|r| r.registers).collect();
    let max = resources.iter().max_by_key(|r| r.registers).expect("kernels");
    let mut report = format!(
        "{arch}: {} kernels, registers min {} max {} ({}), spills 0, cubin {} KiB, PTX {} KiB\n",
        resources.len(),
        regs.iter().min().expect("kernels"),
        max.registers,
        max.name,
        out.cubin.len() / 1024,
        out.ptx.len() / 1024
    );
    for kernel in ElementKernel::ALL {
        let rule = kernel.name();
        let of_rule: Vec<u32> = resources
            .iter()
            .filter(|r| {
                r.name
                    .strip_prefix(rule)
                    .is_some_and(|t| t.starts_with("_f") || t.starts_with("_b"))
            })
            .map(|r| r.registers)
            .collect();
        report.push_str(&format!(
            "  {arch} {rule:<18} registers {}..{}\n",
            of_rule.iter().min().expect("kernels"),
            of_rule.iter().max().expect("kernels")
        ));
    }
    report
}

#[test]
fn the_runtime_source_of_one_model_compiles() {
    if std::env::var("HOMEADAM_NVRTC_LIB").is_err() {
        eprintln!("SKIPPED compile_kernels (model source): HOMEADAM_NVRTC_LIB is not set");
        return;
    }
    use homeadam_core::Dtype::{BF16, F16, F32, Q8};
    for (update, p, g, s) in [
        (&[ElementKernel::HomeAdam][..], BF16, BF16, F32),
        (&[ElementKernel::AdamW], F16, F32, BF16),
        (&[ElementKernel::Sgd], F32, F32, F32),
        (
            &[ElementKernel::SwatsAdam, ElementKernel::SwatsSgd],
            BF16,
            F16,
            F32,
        ),
        (&[ElementKernel::HomeAdam], BF16, BF16, Q8),
        (&[ElementKernel::SwatsAdam, ElementKernel::SwatsSgd], F32, F32, Q8),
    ] {
        let source = kernels::model_source(update, p, g, s);
        let out = nvrtc::compile(&source, "sm_87", false).unwrap_or_else(|e| panic!("{update:?}: {e}"));
        let ptx = String::from_utf8_lossy(&out.ptx);
        let mut names: Vec<String> = update.iter().map(|&k| kernels::kernel_name(k, p, g, s)).collect();
        names.extend([
            "ha_reset".into(),
            format!("ha_check_{}", g.name()),
            format!("ha_home_pre_{}_{}", g.name(), s.name()),
            format!("ha_home_hist_{}_{}", g.name(), s.name()),
            format!("ha_grad_sq_{}", g.name()),
        ]);
        for name in names {
            assert!(ptx.contains(&format!(".entry {name}(")), "{name} missing");
        }
        // The global rule's bound: state of one element per parameter only.
        let bound = format!(".entry ha_home_bound_{}_{}(", g.name(), s.name());
        assert_eq!(ptx.contains(&bound), s.is_element(), "{bound}");
    }
}
