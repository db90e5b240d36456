//! On a GPU (a Jetson, or any CUDA device with mapped host memory): the state in mapped memory
//! evolves exactly as the core's, and checkpoints read from it are the core's bytes. Skipped
//! with a message when no CUDA driver is present.

use cudarc::driver::{CudaContext, DevicePtr};
use homeadam_core::{f16, Config, Optimizer, Rule, SliceSink, Switch, Tensor, TensorAux, TensorState};
use homeadam_jetson::{preferred_dtypes, JetsonOptimizer, JetsonTensor};

#[test]
fn mapped_state_matches_the_core_and_checkpoints_without_copies() {
    // SAFETY: probing for the library has no preconditions.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("SKIPPED jetson gpu: no CUDA driver (libcuda) on this machine");
        return;
    }
    let ctx = CudaContext::new(0).expect("device");
    let stream = ctx.default_stream();
    let dtypes = preferred_dtypes((7, 2)); // f16 θ and g, f32 state: the Xavier setting
    let config = Config {
        tau: 1e-9,
        ..Config::new(Rule::HomeAdamW(Switch::Global))
    };
    let n = 40_000;
    let mut param: Vec<f16> = (0..n).map(|i| f16::from_f32((i as f32 * 0.37).sin())).collect();
    let grad: Vec<f16> = (0..n)
        .map(|i| f16::from_f32((i as f32 * 0.11).cos() * 1e-3))
        .collect();
    let bits = |x: &[f16]| x.iter().map(|v| v.to_bits()).collect::<Vec<u16>>();
    let d_param = stream.clone_htod(&bits(&param)).expect("upload");
    let d_grad = stream.clone_htod(&bits(&grad)).expect("upload");
    let tensor = JetsonTensor::new(d_param.device_ptr(&stream).0, d_grad.device_ptr(&stream).0, n);
    // SAFETY: the buffers outlive the optimizer and have n elements.
    let mut jetson =
        unsafe { JetsonOptimizer::new(config, dtypes, &[tensor], stream.clone()) }.expect("optimizer");
    let mut core = Optimizer::new(config).expect("config");
    let mut state = vec![0f32; config.state_slots() * n];
    let mut aux = TensorAux::default();
    for _ in 0..5 {
        let expected = core
            .step_reference(&mut [Tensor::new(&mut param, &grad, &mut state, &mut aux)], 1.0)
            .expect("core");
        let got = jetson.step(1.0).expect("step");
        assert_eq!(expected.rho.map(f32::to_bits), got.rho.map(f32::to_bits));
        assert_eq!(expected.home_elements, got.home_elements);
        let device: Vec<u16> = stream.clone_dtoh(&d_param).expect("download");
        assert_eq!(device, bits(&param));
    }
    let saved = jetson.save_state().expect("save");
    let mut buf = vec![0u8; core.state_bytes([n], homeadam_core::Dtype::F32)];
    let mut sink = SliceSink::new(&mut buf);
    let views = [TensorState {
        numel: n,
        state: &state,
        aux: &aux,
    }];
    core.save_state(&views, &mut sink).expect("core save");
    assert_eq!(saved, buf);
    jetson.load_state(&saved).expect("load");
    assert_eq!(jetson.save_state().expect("save"), saved);
}
