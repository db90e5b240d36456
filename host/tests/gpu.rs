//! On a CUDA device (feature `cuda`): the host's own device code gives the CPU's bits. Without
//! a CUDA device the tests say so and pass.
#![cfg(feature = "cuda")]

use candle_core::{Device, Tensor, Var};
use homeadam_host::models::dropout::dropout;
use homeadam_host::rng::Rng;

fn cuda() -> Option<Device> {
    match Device::new_cuda(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("gpu: skipped, no CUDA device ({e})");
            None
        }
    }
}

fn bits(t: &Tensor) -> Vec<u32> {
    let values: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
    values.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn dropout_on_the_device_draws_the_cpus_masks_and_gradients() {
    let Some(gpu) = cuda() else { return };
    let mut checked = 0;
    for (n, p) in [
        (1, 0.5),
        (7, 0.1),
        (4096, 0.1),
        (1 << 20, 0.15),
        ((1 << 20) + 3, 0.5),
    ] {
        let mut r = Rng::new(n as u64);
        let values: Vec<f32> = (0..n).map(|_| r.normal()).collect();
        let weights: Vec<f32> = (0..n).map(|_| r.normal()).collect();
        let mut outputs = Vec::new();
        for device in [Device::Cpu, gpu.clone()] {
            let x = Var::from_vec(values.clone(), n, &device).unwrap();
            let w = Tensor::from_vec(weights.clone(), n, &device).unwrap();
            let mut rng = Rng::new(42 + n as u64);
            let y = dropout(x.as_tensor(), p, &mut rng).unwrap();
            let grads = y.mul(&w).unwrap().sum_all().unwrap().backward().unwrap();
            outputs.push((bits(&y), bits(grads.get(&x).unwrap()), rng));
        }
        assert!(
            outputs[0] == outputs[1],
            "n {n}, p {p}: the GPU differs from the CPU"
        );
        checked += n;
    }
    eprintln!("gpu: dropout of {checked} elements and their gradients bit-identical to the CPU");
}
