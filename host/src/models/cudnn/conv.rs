//! The three cuDNN calls behind [`Conv`]: the descriptors and algorithms of each geometry
//! built once and kept with the stream's handle.

use std::ffi::{c_int, c_void};

use candle_core::{CudaStorage, Layout, Shape};
use cudarc::cudnn::sys;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, DeviceRepr};

use super::{check, int, scalar, view, with_handle, CandleResult, Handle, ONE, ZERO};
use crate::models::conv_geometry::{Conv, Geometry, Pass};

/// The descriptors of one geometry (f32, NCHW), destroyed with it.
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    /// For a flipped geometry, the filter it is called with (`[out, in, k, k]` of the
    /// convolution whose input gradient it computes) read as `wᵀ` (`[in, out, k, k]`, strided),
    /// and `wᵀ` packed: `cudnnTransformTensor` copies one into the other.
    transpose: Option<(sys::cudnnTensorDescriptor_t, sys::cudnnTensorDescriptor_t)>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or a descriptor created by `Descriptors::new` and
        // destroyed nowhere else.
        unsafe {
            if !self.x.is_null() {
                sys::cudnnDestroyTensorDescriptor(self.x);
            }
            if !self.y.is_null() {
                sys::cudnnDestroyTensorDescriptor(self.y);
            }
            if !self.w.is_null() {
                sys::cudnnDestroyFilterDescriptor(self.w);
            }
            if !self.conv.is_null() {
                sys::cudnnDestroyConvolutionDescriptor(self.conv);
            }
            if let Some((strided, packed)) = self.transpose {
                for d in [strided, packed].into_iter().filter(|d| !d.is_null()) {
                    sys::cudnnDestroyTensorDescriptor(d);
                }
            }
        }
    }
}

impl Descriptors {
    fn new(g: &Geometry) -> CandleResult<Descriptors> {
        use sys::cudnnDataType_t::CUDNN_DATA_FLOAT as F32;
        use sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW as NCHW;
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            transpose: None,
        };
        let [n, c, h, w] = g.input.map(int);
        let [k, kc, kh, kw] = g.filter.map(int);
        let (k, kc, kh, kw) = (k?, kc?, kh?, kw?);
        let [yn, yc, yh, yw] = g.output().map(int);
        let (pad, stride) = (int(g.padding)?, int(g.stride)?);
        // SAFETY: each descriptor is created before it is set; the out-pointers are fields of `d`.
        unsafe {
            check(sys::cudnnCreateTensorDescriptor(&mut d.x), "create x")?;
            check(
                sys::cudnnSetTensor4dDescriptor(d.x, NCHW, F32, n?, c?, h?, w?),
                "x",
            )?;
            check(sys::cudnnCreateFilterDescriptor(&mut d.w), "create w")?;
            check(
                sys::cudnnSetFilter4dDescriptor(d.w, F32, NCHW, k, kc, kh, kw),
                "w",
            )?;
            check(sys::cudnnCreateTensorDescriptor(&mut d.y), "create y")?;
            check(
                sys::cudnnSetTensor4dDescriptor(d.y, NCHW, F32, yn?, yc?, yh?, yw?),
                "y",
            )?;
            check(sys::cudnnCreateConvolutionDescriptor(&mut d.conv), "create conv")?;
            check(
                sys::cudnnSetConvolution2dDescriptor(
                    d.conv,
                    pad,
                    pad,
                    stride,
                    stride,
                    1,
                    1,
                    if g.flipped {
                        sys::cudnnConvolutionMode_t::CUDNN_CONVOLUTION
                    } else {
                        sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION
                    },
                    F32,
                ),
                "conv",
            )?;
            check(
                sys::cudnnSetConvolutionMathType(d.conv, sys::cudnnMathType_t::CUDNN_FMA_MATH),
                "FMA math",
            )?;
            let mut dims = [0 as c_int; 4];
            let [a, b, e, f] = &mut dims;
            check(
                sys::cudnnGetConvolution2dForwardOutputDim(d.conv, d.x, d.w, a, b, e, f),
                "output dims",
            )?;
            if dims.map(|v| v as usize) != g.output() {
                candle_core::bail!("cuDNN: output dims {dims:?} for {g:?}, expected {:?}", g.output());
            }
            if g.flipped {
                let (strided, packed) = d.transpose.insert((std::ptr::null_mut(), std::ptr::null_mut()));
                check(sys::cudnnCreateTensorDescriptor(strided), "create strided wᵀ")?;
                check(
                    sys::cudnnSetTensor4dDescriptorEx(
                        *strided,
                        F32,
                        k,
                        kc,
                        kh,
                        kw,
                        kh * kw,
                        k * kh * kw,
                        kw,
                        1,
                    ),
                    "strided wᵀ",
                )?;
                check(sys::cudnnCreateTensorDescriptor(packed), "create wᵀ")?;
                check(
                    sys::cudnnSetTensor4dDescriptor(*packed, NCHW, F32, k, kc, kh, kw),
                    "wᵀ",
                )?;
            }
        }
        Ok(d)
    }
}

/// A candidate's fields that decide whether it may run: cuDNN reports them in the same places
/// for the three passes.
struct Candidate<A> {
    algo: A,
    ok: bool,
    deterministic: bool,
    fma: bool,
    memory: usize,
}

/// The first of cuDNN's ranked candidates that runs, is deterministic and uses no tensor-core
/// math (the descriptor's FMA math is what runs).
fn first_allowed<A: Copy + std::fmt::Debug>(
    candidates: impl IntoIterator<Item = Candidate<A>>,
    pass: Pass,
    g: &Geometry,
) -> CandleResult<(A, usize)> {
    candidates
        .into_iter()
        .find(|c| c.ok && c.deterministic && c.fma)
        .map(|c| (c.algo, c.memory))
        .ok_or_else(|| {
            candle_core::Error::Msg(format!(
                "cuDNN offers no deterministic FMA algorithm for the {pass:?} pass of {g:?}"
            ))
        })
}

macro_rules! candidates {
    ($get:ident, $perf:ty, $count:expr, $handle:expr, $a:expr, $b:expr, $conv:expr, $c:expr) => {{
        let mut perf: [$perf; $count] = std::mem::zeroed();
        let mut returned: c_int = 0;
        check(
            sys::$get(
                $handle,
                $a,
                $b,
                $conv,
                $c,
                $count as c_int,
                &mut returned,
                perf.as_mut_ptr(),
            ),
            stringify!($get),
        )?;
        perf.into_iter()
            .take(returned.max(0) as usize)
            .map(|p| Candidate {
                algo: p.algo,
                ok: p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS,
                deterministic: p.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC,
                fma: matches!(
                    p.mathType,
                    sys::cudnnMathType_t::CUDNN_FMA_MATH | sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
                ),
                memory: p.memory,
            })
            .collect::<Vec<_>>()
    }};
}

/// A geometry's descriptors and the algorithm of each pass, chosen at its first use (the
/// passes a geometry never runs are never asked for).
pub(super) struct Plan {
    d: Descriptors,
    forward: Option<(sys::cudnnConvolutionFwdAlgo_t, usize)>,
    data: Option<(sys::cudnnConvolutionBwdDataAlgo_t, usize)>,
    filter: Option<(sys::cudnnConvolutionBwdFilterAlgo_t, usize)>,
}

impl Plan {
    fn new(g: &Geometry) -> CandleResult<Plan> {
        Ok(Plan {
            d: Descriptors::new(g)?,
            forward: None,
            data: None,
            filter: None,
        })
    }

    /// Chooses the algorithm of `pass` unless chosen; returns the workspace it needs.
    fn choose(&mut self, handle: sys::cudnnHandle_t, pass: Pass, g: &Geometry) -> CandleResult<usize> {
        let d = &self.d;
        // SAFETY: the handle and descriptors are live; each array holds the count it is asked
        // to fill.
        unsafe {
            match pass {
                Pass::Forward if self.forward.is_none() => {
                    let candidates = candidates!(
                        cudnnGetConvolutionForwardAlgorithm_v7,
                        sys::cudnnConvolutionFwdAlgoPerf_t,
                        sys::cudnnConvolutionFwdAlgo_t::CUDNN_CONVOLUTION_FWD_ALGO_COUNT as usize,
                        handle,
                        d.x,
                        d.w,
                        d.conv,
                        d.y
                    );
                    self.forward = Some(first_allowed(candidates, pass, g)?);
                }
                Pass::Data if self.data.is_none() => {
                    let candidates = candidates!(
                        cudnnGetConvolutionBackwardDataAlgorithm_v7,
                        sys::cudnnConvolutionBwdDataAlgoPerf_t,
                        sys::cudnnConvolutionBwdDataAlgo_t::CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT as usize,
                        handle,
                        d.w,
                        d.y,
                        d.conv,
                        d.x
                    );
                    self.data = Some(first_allowed(candidates, pass, g)?);
                }
                Pass::Filter if self.filter.is_none() => {
                    let candidates = candidates!(
                        cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                        sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                        sys::cudnnConvolutionBwdFilterAlgo_t::CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
                            as usize,
                        handle,
                        d.x,
                        d.y,
                        d.conv,
                        d.w
                    );
                    self.filter = Some(first_allowed(candidates, pass, g)?);
                }
                _ => {}
            }
        }
        Ok(match pass {
            Pass::Forward => self.forward.map_or(0, |a| a.1),
            Pass::Data => self.data.map_or(0, |a| a.1),
            Pass::Filter => self.filter.map_or(0, |a| a.1),
        })
    }
}

/// `buffer`, replaced by a new one of `len` elements when it holds fewer: scratch that grows to
/// the largest need.
///
/// # Safety
/// A new buffer is uninitialised: the caller must read no element it has not written.
unsafe fn scratch<'b, T: DeviceRepr>(
    buffer: &'b mut Option<CudaSlice<T>>,
    len: usize,
    dev: &candle_core::CudaDevice,
) -> CandleResult<&'b mut CudaSlice<T>> {
    if buffer.as_ref().map_or(0, CudaSlice::len) < len {
        // SAFETY: passed on to the caller.
        *buffer = Some(unsafe { dev.alloc::<T>(len)? });
    }
    Ok(buffer.as_mut().expect("allocated above"))
}

/// Runs `op` on its two contiguous f32 arguments and returns the new result and its shape.
pub(crate) fn run(
    op: &Conv,
    (a, a_layout): (&CudaStorage, &Layout),
    (b, b_layout): (&CudaStorage, &Layout),
) -> CandleResult<(CudaStorage, Shape)> {
    let dev = a.device.clone();
    let stream = dev.cuda_stream();
    let (a, b) = (view(a, a_layout)?, view(b, b_layout)?);
    let count: usize = op.result_dims().iter().product();
    // SAFETY: cuDNN writes every element (β = 0).
    let mut out = unsafe { dev.alloc::<f32>(count)? };
    with_handle(&stream, |handle| {
        let Handle {
            raw,
            plans,
            workspace,
            transposed_filter,
            ..
        } = handle;
        let plan = match plans.entry(op.geometry) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Plan::new(&op.geometry)?),
        };
        let needed = plan.choose(*raw, op.pass, &op.geometry)?.max(1);
        // SAFETY: a workspace is scratch; cuDNN reads nothing it has not written.
        let workspace = unsafe { scratch(workspace, needed, &dev)? };
        let ws_bytes = workspace.len();
        let (ws, _ws) = workspace.device_ptr_mut(&stream);
        let (pa, _pa) = a.device_ptr(&stream);
        let (pb, _pb) = b.device_ptr(&stream);
        let (py, _py) = out.device_ptr_mut(&stream);
        let (alpha, beta) = (scalar(&ONE), scalar(&ZERO));
        let ws = ws as *mut c_void;
        let (pa, mut pb, py) = (pa as *const c_void, pb as *const c_void, py as *mut c_void);
        let d = &plan.d;
        let _transposed = match d.transpose {
            Some((strided, packed)) => {
                // SAFETY: `cudnnTransformTensor` writes the scratch in full (β = 0) before the
                // convolution reads it.
                let filter = unsafe { scratch(transposed_filter, b.len(), &dev)? };
                let (pt, guard) = filter.device_ptr_mut(&stream);
                // SAFETY: `strided` reads the `[out, in, k, k]` filter of `b.len()` elements as
                // `[in, out, k, k]`; `packed` writes as many into the scratch, on the stream
                // the convolution then runs on.
                unsafe {
                    check(
                        sys::cudnnTransformTensor(*raw, alpha, strided, pb, beta, packed, pt as *mut c_void),
                        "transpose the filter",
                    )?;
                }
                pb = pt as *const c_void;
                Some(guard)
            }
            None => None,
        };
        // SAFETY: the descriptors describe the contiguous f32 buffers passed with them (the
        // geometry checked their sizes); the workspace holds at least the algorithm's need;
        // every buffer lives on the handle's stream past the call.
        unsafe {
            match op.pass {
                Pass::Forward => check(
                    sys::cudnnConvolutionForward(
                        *raw,
                        alpha,
                        d.x,
                        pa,
                        d.w,
                        pb,
                        d.conv,
                        plan.forward.expect("chosen above").0,
                        ws,
                        ws_bytes,
                        beta,
                        d.y,
                        py,
                    ),
                    "forward",
                ),
                Pass::Data => check(
                    sys::cudnnConvolutionBackwardData(
                        *raw,
                        alpha,
                        d.w,
                        pb,
                        d.y,
                        pa,
                        d.conv,
                        plan.data.expect("chosen above").0,
                        ws,
                        ws_bytes,
                        beta,
                        d.x,
                        py,
                    ),
                    "backward data",
                ),
                Pass::Filter => check(
                    sys::cudnnConvolutionBackwardFilter(
                        *raw,
                        alpha,
                        d.x,
                        pa,
                        d.y,
                        pb,
                        d.conv,
                        plan.filter.expect("chosen above").0,
                        ws,
                        ws_bytes,
                        beta,
                        d.w,
                        py,
                    ),
                    "backward filter",
                ),
            }
        }
    })?;
    let shape = Shape::from(op.result_dims().to_vec());
    Ok((CudaStorage::wrap_cuda_slice(out, dev), shape))
}
