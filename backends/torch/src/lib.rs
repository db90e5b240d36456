#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod core_optimizer;
#[cfg(feature = "cuda")]
pub mod cuda;
#[cfg(feature = "cuda")]
mod nvrtc;
mod raw;

use pyo3::prelude::*;

pub use core_optimizer::Core;
pub use raw::{check_disjoint, check_elements, check_state, state_bytes, ParamDtype, RawTensor, Visit};

/// `homeadam._native`: the core's optimizer for `homeadam.torch`, which is the package's
/// interface (it checks the tensors this module trusts).
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Core>()?;
    m.add("Q8_BLOCK_BYTES", homeadam_core::q8::BLOCK_BYTES)?;
    m.add("CUDA_BUILT", cfg!(feature = "cuda"))?;
    m.add_function(wrap_pyfunction!(core_optimizer::defaults, m)?)?;
    m.add_function(wrap_pyfunction!(core_optimizer::config_names, m)?)?;
    m.add_function(wrap_pyfunction!(core_optimizer::grad_squares, m)?)?;
    m.add_function(wrap_pyfunction!(core_optimizer::norm_of, m)?)?;
    Ok(())
}
