//! `cargo xtask build-cuda`: the CUDA host (`homeadam-host --features cuda`) built on a machine
//! with neither a GPU nor a CUDA toolkit; the binary's absolute path is the last line of stdout.
//!
//! 1. The CUDA 13.0 compiler from PyPI into `target/cuda-toolkit`, whose `nvidia/cu13` is a
//!    toolkit tree (`bin`, `include`, `lib`, `nvvm`). The wheels are pinned: unpinned, pip mixes
//!    in newer parts whose PTX a CUDA 13.0 driver rejects.
//! 2. Lazy bindings in its `lib/stubs` of the libraries the GPU machine provides
//!    ([`cuda_stubs`]), and the wheel's static CUDA runtime for `-lcudart` (candle's kernel
//!    library calls runtime internals that cudarc does not bind): the binary needs none of them
//!    to start.
//! 3. `cargo build --release -p homeadam-host --features cuda` in `target/cuda/sm_XX`: candle's
//!    cudarc binds CUDA 13.0 and links these libraries, the workspace's loads NVRTC 12.9 at run
//!    time (homeadam-cuda's tests), and one build takes one cudarc; its own target dir also keeps
//!    the workspace's build lock free. `cargo xtask test` lints, builds and links there in one
//!    pass ([`check`]).
//!
//! `CUDA_COMPUTE_CAP` (default 89, the RTX 4090; 90 for H100/H200) picks the architecture of
//! candle's kernels. Steps 1 and 2 are skipped when done. The binary runs every CPU command
//! anywhere; on CUDA it needs the driver's libcuda.so.1 and the CUDA 13 libraries on the loader
//! path (README, "Training on a GPU").

use std::path::{Path, PathBuf};
use std::process::{exit, Command};

use crate::wheels::NVCC_WHEELS;
use crate::{cache, cuda_stubs, run, stage_retrying, stages};

/// The CUDA version of cudarc's bindings, as `CUDARC_CUDA_VERSION` spells it: the wheels' 13.0.
const CUDARC_CUDA_VERSION: &str = "13000";

/// The 8-bit AdamW that `cuda-bench` times beside its q8 rows (`benches/torch_adamw_cuda.py`).
const BITSANDBYTES: &str = "bitsandbytes==0.50.2";

/// Packs bitsandbytes' wheel (`argv[1]`) into a tar.xz (`argv[2]`) of its Python sources and the one
/// native library for CUDA 13 (a later 13.x runtime loads it too), a tenth of the wheel's size.
const PACK_BITSANDBYTES: &str = r#"
import io, sys, tarfile, zipfile
native = ("libbitsandbytes_cuda130.so",)
with zipfile.ZipFile(sys.argv[1]) as z, tarfile.open(sys.argv[2], "w:xz") as t:
    for m in z.infolist():
        if m.is_dir() or (m.filename.endswith(".so") and m.filename.rsplit("/", 1)[-1] not in native):
            continue
        data = z.read(m)
        info = tarfile.TarInfo(m.filename)
        info.size, info.mode = len(data), 0o644
        t.addfile(info, io.BytesIO(data))
"#;

/// The architecture of candle's kernels when `CUDA_COMPUTE_CAP` is not set (RTX 4090).
const DEFAULT_COMPUTE_CAP: &str = "89";

pub(crate) fn fail(message: &str) -> ! {
    eprintln!("xtask: build-cuda: {message}");
    exit(1)
}

/// Which build of the CUDA host a stage makes.
#[derive(Clone, Copy, PartialEq)]
enum Build {
    /// What runs on a GPU (`build-cuda`, `gpu-bundle`): candle's kernels as nvcc optimizes them.
    Gpu,
    /// `cargo xtask test`'s lint-and-link lane, whose binary never runs device code: nvcc's
    /// device optimization at level 1 ([`LINT_NVCC_FLAGS`]), in a target directory of its own
    /// so that its kernels never reach a [`Build::Gpu`] binary.
    Lint,
}

/// nvcc's device optimization for [`Build::Lint`]: about half of nvcc's time on candle's
/// kernels, which a cold run of `cargo xtask test` spends beside the main lane's build.
const LINT_NVCC_FLAGS: &str = "-Xcicc -O1 -Xptxas -O1";

/// Builds the CUDA host and returns the binary's absolute path (`cargo xtask build-cuda` prints
/// it last).
pub(crate) fn build() -> PathBuf {
    cargo_with_toolkit(
        "CUDA host",
        &["build", "--release", "-p", "homeadam-host", "--features", "cuda"],
    );
    let binary = target_dir(Build::Gpu).join("release/homeadam");
    if !binary.is_file() {
        fail(&format!("{} was not built", binary.display()));
    }
    binary
}

/// The packages whose `cuda` features the clippy pass and the GPU test binaries select: one
/// feature set, so candle's kernels build once for both.
const CUDA_PACKAGES: &[&str] = &[
    "-p",
    "homeadam-host",
    "-p",
    "homeadam-candle",
    "--features",
    "homeadam-host/cuda,homeadam-candle/cuda",
];

/// What `cargo xtask test` runs: the code behind the `cuda` features, which the workspace's
/// clippy does not see, linted, compiled and linked in one pass ([`crate::lint`]): cargo builds
/// every target of the packages (`cargo test --no-run --all-targets`), so that the dependencies
/// and candle's kernels are built once for both. The dev profile without debug information:
/// what can rot without a GPU (lints, types, links) depends on neither, which would triple the
/// time and the size of every test binary (`build-cuda` and `gpu-bundle` build the release
/// binary); device code optimized less ([`Build::Lint`]), as the binary runs on the CPU only.
pub(crate) fn check() {
    // Dependencies unoptimized, unlike in the everyday `cargo test`: this lane builds them to
    // lint and link (and runs one short CPU command), and candle optimized takes minutes longer.
    let args = [
        &[
            "test",
            "--no-run",
            "--config",
            "profile.dev.package.\"*\".opt-level=0",
        ],
        CUDA_PACKAGES,
        &["--all-targets"],
    ]
    .concat();
    let name = "CUDA host: clippy, build and link (dev profile)";
    stage_retrying(name, &target_dir(Build::Lint), || {
        let start = std::time::Instant::now();
        let status = crate::lint::while_building(&mut toolkit_cargo(name, &args, Build::Lint))
            .env("CARGO_PROFILE_DEV_DEBUG", "0")
            .status()
            .unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}")));
        stages::record(name, start.elapsed().as_secs_f64());
        println!(
            "== xtask: {name}: {status} ({:.0} s)",
            start.elapsed().as_secs_f64()
        );
        status.success()
    });
}

/// What the CUDA build must do on a machine without a GPU (CI's): run a CPU command (the
/// digits in `quick`), and, where the driver does not load, refuse `--device cuda` with an
/// error naming it. Runs the dev binary [`check`] built.
pub(crate) fn runs_without_a_driver() {
    let name = "CUDA host: runs on the CPU without a driver";
    let start = std::time::Instant::now();
    let binary = target_dir(Build::Lint).join("debug/homeadam");
    let out = target_dir(Build::Lint).join("no-driver-quick");
    // A leftover run directory from an earlier run would be reused, not rewritten.
    if out.exists() {
        std::fs::remove_dir_all(&out).unwrap_or_else(|e| fail(&format!("{}: {e}", out.display())));
    }
    let out = out.to_string_lossy();
    let root = crate::root();
    let quick = [
        "quick",
        "--epochs",
        "1",
        "--no-lm",
        "--optimizers",
        "adamw,homeadamw-ew-q8",
        "--out",
        &out,
    ];
    let output = |args: &[&str]| {
        Command::new(&binary)
            .current_dir(&root)
            .args(args)
            .output()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", binary.display())))
    };
    let ran = output(&quick);
    if !ran.status.success() {
        fail(&format!(
            "{name}: `homeadam {}` failed:\n{}",
            quick.join(" "),
            String::from_utf8_lossy(&ran.stderr)
        ));
    }
    let driver = Command::new("ldconfig")
        .arg("-p")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libcuda.so.1"));
    if !driver {
        let refused = output(&[
            "train",
            "digits-mlp",
            "--epochs",
            "1",
            "--device",
            "cuda",
            "--out",
            &out,
        ]);
        let err = String::from_utf8_lossy(&refused.stderr);
        let named =
            err.contains("libcuda.so.1 (the NVIDIA driver)") && err.contains("install the NVIDIA driver");
        if refused.status.code() != Some(2) || !named {
            fail(&format!(
                "{name}: `--device cuda` without a driver should name libcuda.so.1 and exit 2, got {:?}:\n{err}",
                refused.status.code()
            ));
        }
    }
    stages::record(name, start.elapsed().as_secs_f64());
    println!("== xtask: {name}: ok ({:.0} s)", start.elapsed().as_secs_f64());
}

/// `CUDA_COMPUTE_CAP`, or [`DEFAULT_COMPUTE_CAP`].
fn compute_cap() -> String {
    std::env::var("CUDA_COMPUTE_CAP").unwrap_or_else(|_| DEFAULT_COMPUTE_CAP.into())
}

/// The target dir of the CUDA builds, one per compute capability (switching rebuilds candle's
/// kernels and all that depends on them) and [`Build`].
fn target_dir(build: Build) -> PathBuf {
    let lint = if build == Build::Lint { "-lint" } else { "" };
    cache::build_root()
        .join("cuda")
        .join(format!("sm_{}{lint}", compute_cap()))
}

/// The variables cudarc's build reads for a toolkit's root, besides `CUDA_HOME`.
const OTHER_ROOT_VARS: &[&str] = &["CUDA_PATH", "CUDA_ROOT", "CUDA_TOOLKIT_ROOT_DIR", "CUDNN_LIB"];

/// `cargo ARGS` in [`target_dir`] with the toolkit (installed first) and no other.
fn toolkit_cargo(name: &str, args: &[&str], build: Build) -> Command {
    let root = crate::root();
    let prefix = cache::build_root().join("cuda-toolkit");
    let cuda = prefix.join("nvidia/cu13");
    install(&prefix, &cuda, &cudarc_source(&root));

    let compute_cap = compute_cap();
    let path = match std::env::var_os("PATH") {
        Some(old) => {
            let dirs = std::iter::once(cuda.join("bin")).chain(std::env::split_paths(&old));
            std::env::join_paths(dirs).unwrap_or_else(|e| fail(&format!("PATH: {e}")))
        }
        None => cuda.join("bin").into_os_string(),
    };
    let mut cargo = Command::new("cargo");
    cargo
        .current_dir(&root)
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir(build))
        .env("PATH", path)
        // cudarc's link search (`lib`, `lib/stubs`) and cudaforge's nvcc.
        .env("CUDA_HOME", &cuda)
        .env("NVCC", cuda.join("bin/nvcc"))
        .env("CUDARC_CUDA_VERSION", CUDARC_CUDA_VERSION)
        .env("CUDA_COMPUTE_CAP", &compute_cap)
        // The host's `--device` check: the libraries of `cuda_stubs` are bound lazily.
        .env("HOMEADAM_LAZY_CUDA_LIBRARIES", "1");
    for var in OTHER_ROOT_VARS {
        cargo.env_remove(var);
    }
    // nvcc reads its extra flags from the environment, whichever crate's build calls it.
    match build {
        Build::Lint => cargo.env("NVCC_APPEND_FLAGS", LINT_NVCC_FLAGS),
        Build::Gpu => cargo.env_remove("NVCC_APPEND_FLAGS"),
    };
    println!(
        "\n== xtask: {name}: CUDA_COMPUTE_CAP={compute_cap} CARGO_TARGET_DIR={} cargo {}",
        target_dir(build).display(),
        args.join(" ")
    );
    cargo
}

/// Runs `cargo ARGS` as [`toolkit_cargo`] sets it up; exits on failure.
fn cargo_with_toolkit(name: &str, args: &[&str]) {
    let start = std::time::Instant::now();
    let status = toolkit_cargo(name, args, Build::Gpu)
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}")));
    if !status.success() {
        fail(&format!("{name} failed ({status})"));
    }
    println!("== xtask: {name} ok ({:.0} s)", start.elapsed().as_secs_f64());
}

/// `cargo xtask gpu-bundle`: what `scripts/gpu-check.sh` runs on a GPU machine without Rust,
/// stripped and xz-compressed into `target/gpu-bundle` (returned; about half of gzip's size, so
/// that the bundle and the repository travel to a GPU machine within 64 MiB): the CUDA host
/// `homeadam`; the test binaries `candle-gpu` (homeadam-candle's `gpu`), `host-resume` and
/// `host-gpu` (homeadam-host's `resume` and `gpu`), built with the same features as the host so
/// that candle's kernels build once; and `cuda-gpu` and `jetson-gpu` (homeadam-cuda's and
/// homeadam-jetson's `gpu`) and `cuda-bench` (homeadam-cuda's step benchmark), which need no
/// toolkit (the driver and NVRTC are loaded at run time) and build in the workspace; and
/// `bitsandbytes.tar.xz`, the 8-bit AdamW that `cuda-bench` compares its q8 rows with (the GPU
/// machine has PyTorch but no network; the script unpacks it onto PYTHONPATH).
pub(crate) fn bundle(before: Option<&str>) -> PathBuf {
    let earlier = before.map(build_earlier);
    let host = build();
    let args = [
        &["test", "--release"],
        CUDA_PACKAGES,
        &["--test", "gpu", "--test", "resume", "--no-run"],
    ]
    .concat();
    let toolkit_tests = crate::built_tests(toolkit_cargo("GPU test binaries", &args, Build::Gpu));
    let mut workspace = Command::new("cargo");
    workspace.current_dir(crate::root()).args([
        "test",
        "--release",
        "-p",
        "homeadam-cuda",
        "-p",
        "homeadam-jetson",
        "--test",
        "gpu",
        "--no-run",
    ]);
    let workspace_tests = crate::built_tests(workspace);
    let cuda_bench = workspace_example("homeadam-cuda", "bench");
    let executable = |tests: &[crate::BuiltTest], package: &str, test: &str| -> PathBuf {
        tests
            .iter()
            .find(|t| t.package == package && t.target == test)
            .map(|t| t.executable.clone())
            .unwrap_or_else(|| fail(&format!("no test binary {package}/{test} in cargo's output")))
    };
    let dir = crate::root().join("target/gpu-bundle");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    }
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    let mut binaries = vec![
        ("homeadam", host),
        ("candle-gpu", executable(&toolkit_tests, "homeadam-candle", "gpu")),
        (
            "host-resume",
            executable(&toolkit_tests, "homeadam-host", "resume"),
        ),
        ("host-gpu", executable(&toolkit_tests, "homeadam-host", "gpu")),
        ("cuda-gpu", executable(&workspace_tests, "homeadam-cuda", "gpu")),
        (
            "jetson-gpu",
            executable(&workspace_tests, "homeadam-jetson", "gpu"),
        ),
        ("cuda-bench", cuda_bench),
    ];
    binaries.extend(earlier.map(|binary| ("homeadam-before", binary)));
    for (name, binary) in binaries {
        let copy = dir.join(name);
        std::fs::copy(&binary, &copy).unwrap_or_else(|e| fail(&format!("{}: {e}", binary.display())));
        let copy = copy.to_string_lossy();
        run(&format!("strip {name}"), "strip", &[&copy]);
        run(&format!("xz {name}"), "xz", &["-6", "-T2", &copy]);
    }
    pack_bitsandbytes(&dir);
    crate::torch_package::bundle(&dir);
    dir
}

/// The CUDA host of the commit `rev`, for `scripts/gpu-check.sh`'s rows of an earlier build
/// beside the current one: the commit's tree (`git archive`) in `target/before-src`,
/// built with the same toolkit into the same target directory, so that the dependencies both
/// commits use are built once. Returns a copy that the current build does not overwrite.
fn build_earlier(rev: &str) -> PathBuf {
    let root = crate::root();
    let src = root.join("target/before-src");
    let archive = root.join("target/before-src.tar");
    if src.exists() {
        std::fs::remove_dir_all(&src).unwrap_or_else(|e| fail(&format!("{}: {e}", src.display())));
    }
    std::fs::create_dir_all(&src).unwrap_or_else(|e| fail(&format!("{}: {e}", src.display())));
    let archive_arg = archive.to_string_lossy();
    let tree = format!("the tree of {rev}");
    let mut git = Command::new("git");
    git.current_dir(&root)
        .args(["archive", "--format=tar", "-o", &archive_arg, rev]);
    if !crate::try_command(&tree, &mut git) {
        fail(&format!("{tree}: is {rev} a commit of this repository?"));
    }
    run(&tree, "tar", &["-xf", &archive_arg, "-C", &src.to_string_lossy()]);
    let name = format!("CUDA host of {rev} (in {})", src.display());
    let args = ["build", "--release", "-p", "homeadam-host", "--features", "cuda"];
    if !crate::try_command(&name, toolkit_cargo(&name, &args, Build::Gpu).current_dir(&src)) {
        fail(&format!("{name} failed"));
    }
    let copy = root.join("target/homeadam-before");
    let built = target_dir(Build::Gpu).join("release/homeadam");
    std::fs::copy(&built, &copy).unwrap_or_else(|e| fail(&format!("{}: {e}", built.display())));
    copy
}

/// Downloads [`BITSANDBYTES`]' wheel and packs it into `dir/bitsandbytes.tar.xz`.
fn pack_bitsandbytes(dir: &Path) {
    let wheels = crate::root().join("target/bitsandbytes-wheel");
    let wheels_str = wheels.to_string_lossy();
    run(
        "download bitsandbytes",
        "python3",
        &[
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--dest",
            &wheels_str,
            BITSANDBYTES,
        ],
    );
    let version = BITSANDBYTES.rsplit('=').next().unwrap_or_default();
    let wheel = std::fs::read_dir(&wheels)
        .unwrap_or_else(|e| fail(&format!("{}: {e}", wheels.display())))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with(&format!("bitsandbytes-{version}-"))
            })
        })
        .unwrap_or_else(|| fail(&format!("no {BITSANDBYTES} wheel in {}", wheels.display())));
    let archive = dir.join("bitsandbytes.tar.xz");
    run(
        "pack bitsandbytes",
        "python3",
        &[
            "-c",
            PACK_BITSANDBYTES,
            &wheel.to_string_lossy(),
            &archive.to_string_lossy(),
        ],
    );
}

/// The executable of `package`'s example `name`, built in release in the workspace.
fn workspace_example(package: &str, name: &str) -> PathBuf {
    let out = Command::new("cargo")
        .current_dir(crate::root())
        .args(["build", "--release", "-p", package, "--example", name])
        .args(["--message-format", "json"])
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo: {e}")));
    if !out.status.success() {
        fail(&format!(
            "building {package}'s example {name} failed ({})",
            out.status
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == name && m["target"]["kind"][0] == "example")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| {
            fail(&format!(
                "no executable of {package}'s example {name} in cargo's output"
            ))
        })
}

/// The source folder of the cudarc that candle's `cuda` feature resolves to.
fn cudarc_source(root: &Path) -> PathBuf {
    let out = Command::new("cargo")
        .current_dir(root)
        .args(["metadata", "--format-version", "1", "--features"])
        .arg("homeadam-host/cuda")
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run cargo metadata: {e}")));
    if !out.status.success() {
        fail(&format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| fail(&format!("cargo metadata: {e}")));
    let dirs: Vec<PathBuf> = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["name"] == "cudarc")
        .filter_map(|p| p["manifest_path"].as_str())
        .filter_map(|m| Path::new(m).parent().map(Path::to_path_buf))
        .collect();
    match dirs.as_slice() {
        [dir] => dir.clone(),
        _ => fail(&format!("expected one cudarc in the build, found {dirs:?}")),
    }
}

/// Installs the wheels and the stubs into `prefix` unless its record says they are there.
fn install(prefix: &Path, cuda: &Path, cudarc: &Path) {
    let record = prefix.join("installed.txt");
    let expected = format!(
        "{}\nlazy bindings from {}: {}\nstatic cudart\n",
        NVCC_WHEELS.join("\n"),
        cudarc.display(),
        cuda_stubs::CUDA_LIBRARIES
            .iter()
            .map(|lib| lib.soname)
            .collect::<Vec<_>>()
            .join(" ")
    );
    if std::fs::read_to_string(&record).is_ok_and(|r| r == expected) {
        println!("== xtask: CUDA toolkit in {} (installed)", cuda.display());
        return;
    }
    // pip --target does not replace what an earlier, different install left.
    if prefix.exists() {
        std::fs::remove_dir_all(prefix)
            .unwrap_or_else(|e| fail(&format!("cannot remove {}: {e}", prefix.display())));
    }
    let target = prefix.to_string_lossy();
    run(
        "CUDA 13.0 compiler wheels",
        "python3",
        &[
            &[
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--target",
                &target,
            ],
            NVCC_WHEELS,
        ]
        .concat(),
    );
    let lib = cuda.join("lib");
    // What the linker takes for `-lcudart` (candle's kernel library asks for it): a script
    // naming the static runtime, which opens the driver at its first call, not at start.
    std::fs::write(lib.join("libcudart.so"), "INPUT(libcudart_static.a)\n")
        .unwrap_or_else(|e| fail(&format!("libcudart.so: {e}")));
    let stubs = lib.join("stubs");
    std::fs::create_dir_all(&stubs)
        .unwrap_or_else(|e| fail(&format!("cannot create {}: {e}", stubs.display())));
    for library in &cuda_stubs::CUDA_LIBRARIES {
        cuda_stubs::build(library, &stubs, cudarc).unwrap_or_else(|e| fail(&e));
    }
    std::fs::write(&record, expected)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", record.display())));
}
