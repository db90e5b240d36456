//! `--device`: where the runner's models, minibatches, losses and metrics live.
//!
//! `cpu`, `cuda` (CUDA device 0) or `cuda:N`. CUDA needs a `homeadam` built with the `cuda`
//! feature; without it, `--device cuda` is an error that says how to build one.

use std::fmt;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use candle_core::{Device, DeviceLocation};

use crate::cuda_libraries::{CudaLibrary, CUDA_LIBRARIES};

/// A parsed `--device` value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceSpec {
    /// The CPU.
    #[default]
    Cpu,
    /// The CUDA device of this ordinal.
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            _ => match s.strip_prefix("cuda:") {
                // `usize::from_str` also takes a leading `+`: only digits name a device.
                Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => n
                    .parse()
                    .map(DeviceSpec::Cuda)
                    .map_err(|_| format!("{s:?}: CUDA device number out of range")),
                Some(_) => Err(format!(
                    "{s:?}: a CUDA device is `cuda` or `cuda:N` with N its number (e.g. cuda:0)"
                )),
                None => Err(format!("unknown device {s:?} (known: cpu, cuda, cuda:N)")),
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// The candle device: an error if this build has no CUDA support, or the CUDA device
    /// cannot be opened (no such device, no driver).
    pub fn open(self) -> Result<Device> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(_) if !cfg!(feature = "cuda") => bail!(
                "--device {self}: this homeadam was built without the `cuda` feature and trains on \
                 the CPU only; build one that trains on CUDA with \
                 `cargo build --release -p homeadam-host --features cuda` (needs a CUDA toolkit), or \
                 with `cargo xtask build-cuda` on a machine without one"
            ),
            DeviceSpec::Cuda(n) => {
                let missing = missing_libraries();
                if !missing.is_empty() {
                    bail!("--device {self}: {}", missing_message(&missing));
                }
                let device = Device::new_cuda(n)
                    .with_context(|| format!("--device {self}: cannot open CUDA device {n}"))?;
                #[cfg(feature = "cuda")]
                if let Device::Cuda(cuda) = &device {
                    retain_freed_memory(cuda)
                        .with_context(|| format!("--device {self}: cannot configure its memory pool"))?;
                    untrack_streams(cuda);
                }
                Ok(device)
            }
        }
    }
}

/// Keeps the memory that candle frees on `cuda` in the allocator's pool for its next
/// allocations, as PyTorch's caching allocator does: the process holds its peak until it exits.
///
/// candle allocates through CUDA's stream-ordered allocator, whose pool hands every unused byte
/// back to the driver at each synchronization (a release threshold of 0 bytes). A training step
/// frees its activations and gradients and then synchronizes (to read the optimizer's status,
/// to time a phase), so with that default every step would map its memory afresh, on the
/// host's critical path. A release threshold of `u64::MAX` keeps it.
#[cfg(feature = "cuda")]
fn retain_freed_memory(cuda: &candle_core::CudaDevice) -> Result<()> {
    use cudarc::driver::{result, sys};
    let context = cuda.cuda_stream().context().clone();
    if !context.has_async_alloc() {
        // cudarc then allocates with `cuMemAlloc`, which has no pool.
        return Ok(());
    }
    let mut threshold = u64::MAX;
    // SAFETY: the device is cudarc's own (so a valid `CUdevice`), its current pool is the one
    // `cuMemAllocAsync` draws from, and the release threshold is a `u64` by CUDA's definition.
    unsafe {
        let pool = result::device::get_mem_pool(context.cu_device())?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )?;
    }
    Ok(())
}

/// Stops cudarc from creating two events with every buffer that candle allocates on `cuda`
/// (and destroying them with it): four driver calls per tensor on the host's critical path, for
/// events that are never recorded.
///
/// cudarc records a buffer's events only to order its uses across the streams that it creates
/// itself (`CudaContext::new_stream`), once there are any. A run has none: candle's device runs
/// on one stream, and so do cuBLAS, cuDNN and our kernels, which candle hands that stream.
#[cfg(feature = "cuda")]
fn untrack_streams(cuda: &candle_core::CudaDevice) {
    // SAFETY: nothing in a run creates a second stream on this context (see above), so no
    // buffer is used on two streams, which is what the events would have ordered.
    unsafe { cuda.disable_event_tracking() };
}

/// Whether this binary binds the CUDA libraries of [`CUDA_LIBRARIES`] lazily: `cargo xtask
/// build-cuda` sets the variable when it builds. A build against a local toolkit links that
/// toolkit's libraries (another CUDA version's sonames, maybe), which the loader has opened
/// before `main`; only the driver is then worth checking.
const LAZY_LIBRARIES: bool = option_env!("HOMEADAM_LAZY_CUDA_LIBRARIES").is_some();

/// The CUDA libraries that do not load here (each is opened and left open: CUDA needs it next).
fn missing_libraries() -> Vec<&'static CudaLibrary> {
    CUDA_LIBRARIES
        .iter()
        .filter(|lib| LAZY_LIBRARIES || lib.link == "cuda")
        .filter(|lib| {
            let name = std::ffi::CString::new(lib.soname).expect("a soname without NUL");
            // SAFETY: `name` is a NUL-terminated string; loading a CUDA library runs no code
            // that depends on this process's state.
            unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL) }.is_null()
        })
        .collect()
}

/// What is missing and how to install it.
fn missing_message(missing: &[&CudaLibrary]) -> String {
    let names: Vec<String> = missing
        .iter()
        .map(|lib| format!("{} ({})", lib.soname, lib.provides))
        .collect();
    let mut fixes = Vec::new();
    if missing.iter().any(|lib| lib.link == "cuda") {
        fixes.push(
            "install the NVIDIA driver for your GPU (CUDA 13.0 or newer; `nvidia-smi` shows it)".to_string(),
        );
    }
    let mut wheels: Vec<&str> = Vec::new();
    for wheel in missing.iter().filter_map(|lib| lib.wheel) {
        if !wheels.contains(&wheel) {
            wheels.push(wheel);
        }
    }
    if !wheels.is_empty() {
        fixes.push(format!(
            "put the CUDA 13 libraries and cuDNN 9 on the loader path: a CUDA 13 toolkit's lib64 \
             with cuDNN 9, or the `nvidia/cu13/lib` and `nvidia/cudnn/lib` folders of a Python \
             environment with PyTorch for CUDA 13 (or `pip install {}`), in LD_LIBRARY_PATH",
            wheels.join(" ")
        ));
    }
    format!(
        "this machine cannot run CUDA: {} {} not load; {}",
        names.join(", "),
        if missing.len() == 1 { "does" } else { "do" },
        fixes.join("; ")
    )
}

/// The name of `device` in the `--device` syntax (`cpu`, `cuda:0`), for logs and checkpoints.
pub fn name(device: &Device) -> String {
    match device.location() {
        DeviceLocation::Cpu => DeviceSpec::Cpu.to_string(),
        DeviceLocation::Cuda { gpu_id } => DeviceSpec::Cuda(gpu_id).to_string(),
        DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_cuda_and_numbered_devices() {
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("cuda".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:0".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:1".parse(), Ok(DeviceSpec::Cuda(1)));
        assert_eq!("cuda:12".parse(), Ok(DeviceSpec::Cuda(12)));
        for spec in [DeviceSpec::Cpu, DeviceSpec::Cuda(0), DeviceSpec::Cuda(3)] {
            assert_eq!(spec.to_string().parse(), Ok(spec));
        }
    }

    #[test]
    fn bad_device_strings_are_clear_errors() {
        for bad in ["cuda:x", "cuda:", "cuda:-1", "cuda:+1", "cuda: 1", "cuda:1.0"] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(err.contains(bad) && err.contains("cuda:N"), "{bad}: {err}");
        }
        let err = "cuda:99999999999999999999999".parse::<DeviceSpec>().unwrap_err();
        assert!(err.contains("out of range"), "{err}");
        for bad in ["gpu", "", "CPU", "cuda0", "metal", " cpu"] {
            let err = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(
                err.contains("unknown device") && err.contains("cpu, cuda, cuda:N"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn the_cpu_opens_and_is_named_cpu() {
        let device = DeviceSpec::Cpu.open().unwrap();
        assert!(device.is_cpu());
        assert_eq!(name(&device), "cpu");
    }

    #[test]
    fn missing_cuda_libraries_are_named_with_their_fix() {
        let driver = &CUDA_LIBRARIES[0];
        let message = missing_message(&[driver]);
        assert!(
            message.contains("libcuda.so.1 (the NVIDIA driver) does not load"),
            "{message}"
        );
        assert!(message.contains("install the NVIDIA driver") && !message.contains("LD_LIBRARY_PATH"));
        let all: Vec<&CudaLibrary> = CUDA_LIBRARIES.iter().collect();
        let message = missing_message(&all);
        assert!(
            message.contains("libcudnn.so.9 (cuDNN 9) do not load"),
            "{message}"
        );
        assert!(
            message.contains("NVIDIA driver") && message.contains("LD_LIBRARY_PATH"),
            "{message}"
        );
        let message = missing_message(&all[1..2]);
        assert!(!message.contains("install the NVIDIA driver"), "{message}");
        let cudnn = CUDA_LIBRARIES.iter().find(|lib| lib.link == "cudnn").unwrap();
        let message = missing_message(&[cudnn]);
        assert!(
            message.contains("libcudnn.so.9 (cuDNN 9) does not load")
                && message.contains("pip install nvidia-cudnn-cu13`"),
            "{message}"
        );
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_the_feature_says_how_to_build_it() {
        for spec in [DeviceSpec::Cuda(0), DeviceSpec::Cuda(1)] {
            let err = format!("{:#}", spec.open().unwrap_err());
            assert!(err.contains(&format!("--device {spec}")), "{err}");
            assert!(
                err.contains("cargo build --release -p homeadam-host --features cuda"),
                "{err}"
            );
            assert!(err.contains("cargo xtask build-cuda"), "{err}");
        }
    }
}
