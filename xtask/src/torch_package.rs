//! The PyTorch package (`backends/torch`, the Python package `homeadam`): installed into the
//! Python that has PyTorch with the README's `pip install ./backends/torch`, then its tests
//! under pytest (the bits against the core's reference, torch.optim's peers, state dicts, the
//! core's byte format, bad input, and two processes on gloo), and its types under mypy. For
//! `scripts/gpu-check.sh` ([`bundle`]), its wheel and pytest, whose CUDA tests run on the GPU.

use std::path::Path;
use std::process::Command;

use crate::{fail_exit, try_command};

/// The test runner and the type checker, pinned as PyTorch is.
const PYTEST: &str = "pytest==9.2.0";
const MYPY: &str = "mypy==2.4.1";

/// What pytest needs on Python 3.10 beside its own dependencies (pip evaluates their markers for
/// the Python it runs in, not the one it downloads for).
const PYTEST_310: [&str; 2] = ["exceptiongroup==1.3.2", "tomli==2.5.0"];

/// Repacks wheels (`argv[2:]`) into one tar.xz (`argv[1]`), which `scripts/gpu-check.sh` unpacks
/// onto PYTHONPATH as it does every Python package of the bundle.
const PACK_WHEELS: &str = r#"
import io, sys, tarfile, zipfile
with tarfile.open(sys.argv[1], "w:xz") as t:
    for wheel in sys.argv[2:]:
        with zipfile.ZipFile(wheel) as z:
            for m in z.infolist():
                if m.is_dir():
                    continue
                data = z.read(m)
                info = tarfile.TarInfo(m.filename)
                info.size, info.mode = len(data), 0o755 if m.filename.endswith(".so") else 0o644
                t.addfile(info, io.BytesIO(data))
"#;

/// The package's wheel (`homeadam.tar.xz`, with the CUDA step) and pytest (`pytest.tar.xz`,
/// for the oldest Python pytest takes) into the GPU bundle `dir`; exits on a failure.
pub(crate) fn bundle(dir: &Path) {
    let root = crate::root();
    for (name, fetch) in [
        (
            "homeadam",
            &["wheel", "--no-deps", "./backends/torch", "--wheel-dir"][..],
        ),
        (
            "pytest",
            &[
                "download",
                "--only-binary=:all:",
                "--python-version",
                "3.10",
                PYTEST,
                PYTEST_310[0],
                PYTEST_310[1],
                "--dest",
            ][..],
        ),
    ] {
        let wheels = root.join(format!("target/gpu-bundle-wheels/{name}"));
        if wheels.exists() {
            std::fs::remove_dir_all(&wheels)
                .unwrap_or_else(|e| fail_exit(&format!("{}: {e}", wheels.display()), 1));
        }
        let dest = wheels.to_string_lossy().into_owned();
        let args = [&["-m", "pip", "--quiet"][..], fetch, &[&dest]].concat();
        if !try_command(
            &format!("{name} wheels"),
            Command::new("python3").args(&args).current_dir(&root),
        ) {
            fail_exit(&format!("pip could not make the {name} wheels"), 1);
        }
        let mut pack = vec![
            "-c".to_string(),
            PACK_WHEELS.to_string(),
            dir.join(format!("{name}.tar.xz")).to_string_lossy().into_owned(),
        ];
        let found = std::fs::read_dir(&wheels)
            .unwrap_or_else(|e| fail_exit(&format!("{}: {e}", wheels.display()), 1))
            .filter_map(Result::ok)
            .map(|e| e.path().to_string_lossy().into_owned())
            .filter(|p| p.ends_with(".whl"));
        pack.extend(found);
        if !try_command(&format!("pack {name}"), Command::new("python3").args(&pack)) {
            fail_exit(&format!("packing the {name} wheels failed"), 1);
        }
    }
}

/// Installs the package into `python`'s environment and runs its tests; exits on a failure.
pub(crate) fn test(python: &Path) {
    let root = crate::root();
    // The environment is the build cache's, kept between runs: reinstall the package from
    // this tree even where its version number is the one installed.
    let install = [
        "-m",
        "pip",
        "install",
        "--quiet",
        "--force-reinstall",
        "--no-deps",
        "./backends/torch",
    ];
    let python_in = |dir: &Path, name: &str, args: &[&str]| {
        try_command(name, Command::new(python).args(args).current_dir(dir))
    };
    let tools = ["-m", "pip", "install", "--quiet", PYTEST, MYPY];
    if !python_in(&root, "torch package: pytest and mypy", &tools) {
        fail_exit(&format!("pip could not install {PYTEST} and {MYPY}"), 1);
    }
    if !python_in(&root, "torch package: install", &install) {
        fail_exit("pip install ./backends/torch failed", 1);
    }
    // The sources, with their stub of the native module, as the package's users' checkers see them.
    let sources = root.join("backends/torch/python");
    let strict = [
        "-m",
        "mypy",
        "--strict",
        "--ignore-missing-imports",
        "--cache-dir=/dev/null",
        "-p",
        "homeadam",
    ];
    if !python_in(&sources, "torch package: mypy --strict", &strict) {
        fail_exit("the torch package's types do not check", 1);
    }
    let tests = [
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "backends/torch/tests",
    ];
    if !python_in(&root, "torch package: tests", &tests) {
        fail_exit("the torch package's tests failed", 1);
    }
}
