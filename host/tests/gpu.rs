//! On a CUDA device (feature `cuda`): the host's own device code gives the CPU's bits (dropout, max
//! pooling, ReLU, the ReLU of a sum) or its values within a stated tolerance (cuDNN's convolutions
//! and batch norm, the fused loss, linear layers, layer norm, the causal softmax, whole training
//! steps), and the same bits run after run; the parameters' gradients handed past candle's store
//! equal candle's; memory freed on the device stays in the allocator's pool, and its buffers carry
//! no events; minibatches staged in page-locked memory equal direct uploads, also while the device
//! lags behind the host. Without a CUDA device the tests say so and pass.
#![cfg(feature = "cuda")]

use candle_core::{DType, Device, Tensor, Var};
use homeadam_host::data::digits::FeatureSet;
use homeadam_host::device::DeviceSpec;
use homeadam_host::models::channel_bias::{channel_bias, channel_bias_relu};
use homeadam_host::models::conv2d::conv2d;
use homeadam_host::models::cross_entropy::cross_entropy;
use homeadam_host::models::dropout::dropout;
use homeadam_host::models::embedding::embedding;
use homeadam_host::models::heads::{merge_heads, to_heads};
use homeadam_host::models::layer_norm::layer_norm;
use homeadam_host::models::linear::linear;
use homeadam_host::models::max_pool::max_pool2d;
use homeadam_host::models::relu::{relu, relu_of_sum};
use homeadam_host::models::softmax::causal_softmax;
use homeadam_host::models::{
    param_grads, Model, ResNet, ResNetConfig, ResNetStem, TransformerConfig, TransformerLm, Vgg, VggConfig,
    VggVariant,
};
use homeadam_host::rng::Rng;
use homeadam_host::train::data::{ClassificationData, LanguageData, Minibatch, TrainData};
use homeadam_host::train::prefetch::Pipeline;

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

/// The largest `|a − b| / (1 + |b|)` over two tensors of equal shape.
fn max_relative_difference(a: &Tensor, b: &Tensor) -> f32 {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f32::max)
}

#[test]
fn cudnn_convolutions_equal_the_cpus_and_repeat_their_bits() {
    let Some(gpu) = cuda() else { return };
    // VGG's 3×3, ResNet's 7×7/2 stem and 1×1/2 shortcut, an odd size with a stride; the
    // stride-1 input gradients transpose a filter into the handle's scratch, which the 5×5
    // grows and the 3×3 after it reuses.
    for (x_dims, w_dims, stride, padding) in [
        ([4, 3, 16, 16], [8, 3, 3, 3], 1, 1),
        ([2, 16, 8, 8], [4, 16, 5, 5], 1, 2),
        ([1, 4, 6, 6], [6, 4, 3, 3], 1, 0),
        ([2, 3, 32, 32], [16, 3, 7, 7], 2, 3),
        ([2, 8, 9, 9], [16, 8, 1, 1], 2, 0),
        ([3, 5, 11, 7], [6, 5, 3, 3], 2, 1),
    ] {
        let mut r = Rng::new(7);
        let n = |dims: &[usize; 4]| dims.iter().product::<usize>();
        let xs: Vec<f32> = (0..n(&x_dims)).map(|_| r.normal()).collect();
        let ws: Vec<f32> = (0..n(&w_dims)).map(|_| r.normal() * 0.2).collect();
        let mut runs = Vec::new();
        for device in [Device::Cpu, gpu.clone(), gpu.clone()] {
            let x = Var::from_vec(xs.clone(), x_dims.to_vec(), &device).unwrap();
            let w = Var::from_vec(ws.clone(), w_dims.to_vec(), &device).unwrap();
            let y = conv2d(x.as_tensor(), w.as_tensor(), stride, padding).unwrap();
            let weights = y.ones_like().unwrap().cumsum(3).unwrap();
            let grads = y.mul(&weights).unwrap().sum_all().unwrap().backward().unwrap();
            let on_cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
            runs.push([
                on_cpu(&y),
                on_cpu(grads.get(&x).unwrap()),
                on_cpu(grads.get(&w).unwrap()),
            ]);
        }
        let what = format!("x {x_dims:?}, w {w_dims:?}, stride {stride}, padding {padding}");
        for (k, name) in ["y", "dL/dx", "dL/dw"].into_iter().enumerate() {
            let d = max_relative_difference(&runs[1][k], &runs[0][k]);
            assert!(d < 1e-4, "{what}: {name} differs from the CPU's by {d}");
        }
        for (first, second) in runs[1].iter().zip(&runs[2]) {
            assert_eq!(bits(first), bits(second), "{what}: a second run differs");
        }
    }
    eprintln!("gpu: cuDNN convolutions and both gradients = the CPU's (relative 1e-4), repeatable bits");
}

/// A training step's logits and the gradients of the mean of their squares with respect to
/// `vars`, by name.
fn logits_and_gradients(logits: Tensor, vars: Vec<(String, Var)>) -> Vec<(String, Tensor)> {
    let grads = logits.sqr().unwrap().mean_all().unwrap().backward().unwrap();
    let mut named = vec![("logits".to_string(), logits)];
    for (name, var) in vars {
        named.push((format!("d/d {name}"), grads.get(&var).unwrap().clone()));
    }
    named
}

/// Asserts that a training step of `model` on the GPU gave the CPU's tensors (relative 1e-3).
fn assert_step_agrees(model: &str, cpu: &[(String, Tensor)], gpu: &[(String, Tensor)]) {
    for ((name, cpu), (_, gpu)) in cpu.iter().zip(gpu) {
        let d = max_relative_difference(&gpu.to_device(&Device::Cpu).unwrap(), cpu);
        assert!(d < 1e-3, "{model}: {name}: the GPU differs from the CPU by {d}");
    }
    eprintln!(
        "gpu: a {model} training step ({} tensors) = the CPU's (relative 1e-3)",
        cpu.len()
    );
}

#[test]
fn a_resnet_step_on_the_device_equals_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // Every layer kind of the CNNs: 7×7/2 and 3×3 convolutions with and without stride, 1×1/2
    // shortcuts, batch norm in training (its running statistics too), pooling.
    let config = ResNetConfig {
        classes: 10,
        width: 1.0 / 16.0,
        stem: ResNetStem::ImageNet,
    };
    let mut r = Rng::new(11);
    let images: Vec<f32> = (0..4 * 3 * 32 * 32).map(|_| r.normal()).collect();
    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu] {
        let model = ResNet::new(config, 3, &device).unwrap();
        let x = Tensor::from_vec(images.clone(), (4, 3, 32, 32), &device).unwrap();
        let mut named = logits_and_gradients(model.forward(&x, true).unwrap(), model.vars());
        for (name, buffer) in model.buffers() {
            named.push((name, buffer.as_tensor().clone()));
        }
        runs.push(named);
    }
    assert_step_agrees("ResNet", &runs[0], &runs[1]);
}

#[test]
fn the_fused_cross_entropy_equals_candles_on_the_cpu_and_repeats_its_bits() {
    let Some(gpu) = cuda() else { return };
    // The Transformer's vocabulary, CIFAR-10's and Tiny-ImageNet's classes, a row shorter
    // than a warp.
    for (rows, classes) in [(70, 33_278), (64, 10), (5, 200), (3, 7)] {
        let mut r = Rng::new(rows as u64);
        let logits: Vec<f32> = (0..rows * classes).map(|_| 3.0 * r.normal()).collect();
        let target: Vec<u32> = (0..rows).map(|i| ((i * 7919) % classes) as u32).collect();
        let mut runs = Vec::new();
        for device in [Device::Cpu, gpu.clone(), gpu.clone()] {
            let x = Var::from_vec(logits.clone(), (rows, classes), &device).unwrap();
            let t = Tensor::from_vec(target.clone(), rows, &device).unwrap();
            let loss = cross_entropy(x.as_tensor(), &t).unwrap();
            let grads = (&loss * 3.0).unwrap().backward().unwrap();
            let on_cpu = |t: &Tensor| t.to_device(&Device::Cpu).unwrap();
            runs.push([on_cpu(&loss), on_cpu(grads.get(&x).unwrap())]);
        }
        for (k, name) in ["loss", "dL/dx"].into_iter().enumerate() {
            let d = max_relative_difference(&runs[1][k], &runs[0][k]);
            assert!(
                d < 1e-5,
                "{rows} × {classes}: {name} differs from the CPU's by {d}"
            );
        }
        for (first, second) in runs[1].iter().zip(&runs[2]) {
            assert_eq!(
                bits(first),
                bits(second),
                "{rows} × {classes}: a second run differs"
            );
        }
    }
    eprintln!("gpu: the fused cross-entropy and its gradient = the CPU's (relative 1e-5), repeatable bits");
}

#[test]
fn max_pooling_on_the_device_gives_the_cpus_bits() {
    let Some(gpu) = cuda() else { return };
    // ResNet's stem pool and VGG's; values on a coarse grid so that windows hold ties.
    for (dims, k, s, p) in [
        ([2, 3, 17, 16], 3, 2, 1),
        ([4, 5, 8, 8], 2, 2, 0),
        ([1, 2, 9, 7], 3, 1, 1),
    ] {
        let n: usize = dims.iter().product();
        let mut r = Rng::new(n as u64);
        let values: Vec<f32> = (0..n).map(|_| (r.normal() * 2.0).round()).collect();
        let mut runs = Vec::new();
        for device in [Device::Cpu, gpu.clone()] {
            let x = Var::from_vec(values.clone(), dims.to_vec(), &device).unwrap();
            let y = max_pool2d(x.as_tensor(), k, s, p).unwrap();
            let weights = y.ones_like().unwrap().cumsum(3).unwrap();
            let grads = y.mul(&weights).unwrap().sum_all().unwrap().backward().unwrap();
            runs.push((bits(&y), bits(grads.get(&x).unwrap())));
        }
        assert!(
            runs[0] == runs[1],
            "{dims:?}, {k}×{k}/{s}, padding {p}: the GPU differs from the CPU"
        );
    }
    eprintln!("gpu: max pooling and its gradient bit-identical to the CPU");
}

/// Normal values of the given dims on `device`, as a variable.
fn normal_var(seed: u64, dims: &[usize], scale: f32, device: &Device) -> Var {
    let mut r = Rng::new(seed);
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|_| r.normal() * scale).collect();
    Var::from_vec(values, dims, device).unwrap()
}

/// `(1, 2, …, n) / n` in the shape of `y`, on its device.
fn ramp(y: &Tensor) -> Tensor {
    let n = y.elem_count();
    let steps = Tensor::arange(1u32, n as u32 + 1, y.device()).unwrap();
    let steps = steps.to_dtype(y.dtype()).unwrap().reshape(y.dims()).unwrap();
    (steps / n as f64).unwrap()
}

/// Runs `f` on the CPU in f64 and twice on the GPU in f32 over variables made by `inputs`,
/// backward from `Σ y ⊙ ramp(y)` (so that every output's gradient differs), and checks that the
/// GPU's output and input gradients are within `tolerance` of the CPU's (relative: the f64 run
/// stands for the exact values, so the tolerance is the GPU's f32 rounding alone) and repeat
/// their bits.
fn same_as_the_cpu(
    what: &str,
    gpu: &Device,
    tolerance: f32,
    inputs: impl Fn(&Device) -> Vec<Var>,
    f: impl Fn(&[Var]) -> Tensor,
) {
    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu.clone(), gpu.clone()] {
        let mut vars = inputs(&device);
        if device.is_cpu() {
            vars = vars
                .iter()
                .map(|v| Var::from_tensor(&v.as_tensor().to_dtype(DType::F64).unwrap()).unwrap())
                .collect();
        }
        let y = f(&vars);
        let grads = y.mul(&ramp(&y)).unwrap().sum_all().unwrap().backward().unwrap();
        let as_f32 = |t: &Tensor| t.to_device(&Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
        let mut outputs = vec![as_f32(&y)];
        for v in &vars {
            outputs.push(as_f32(grads.get(v).unwrap()));
        }
        runs.push(outputs);
    }
    for (k, (cpu, device)) in runs[0].iter().zip(&runs[1]).enumerate() {
        let name = if k == 0 {
            "y".to_string()
        } else {
            format!("dL/d input {}", k - 1)
        };
        let d = max_relative_difference(device, cpu);
        assert!(d < tolerance, "{what}: {name} differs from the CPU's by {d}");
    }
    for (first, second) in runs[1].iter().zip(&runs[2]) {
        assert_eq!(bits(first), bits(second), "{what}: a second run differs");
    }
}

#[test]
fn linear_layers_on_the_device_equal_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // The Transformer's shapes at a small batch, its decoder's width, a 2-D input.
    for (x_dims, out) in [(vec![2, 35, 64], 192), (vec![3, 5, 7], 33_278), (vec![9, 13], 1)] {
        let inp = *x_dims.last().unwrap();
        same_as_the_cpu(
            &format!("linear {x_dims:?} → {out}"),
            &gpu,
            1e-4,
            |d| {
                vec![
                    normal_var(1, &x_dims, 1.0, d),
                    normal_var(2, &[out, inp], 0.3, d),
                    normal_var(3, &[out], 1.0, d),
                ]
            },
            |v| linear(v[0].as_tensor(), v[1].as_tensor(), Some(v[2].as_tensor())).unwrap(),
        );
    }
    eprintln!(
        "gpu: linear layers and their three gradients = the CPU's in f64 (relative 1e-4), repeatable bits"
    );
}

#[test]
fn a_convolutions_bias_on_the_device_equals_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // VGG16's first layer at batch 64, an odd shape; whole values, so that some sums before a
    // ReLU are exactly zero (where its gradient passes), in f32 as in f64.
    for (dims, whole) in [
        ([64, 64, 32, 32], false),
        ([3, 5, 7, 9], false),
        ([3, 5, 7, 9], true),
    ] {
        for with_relu in [false, true] {
            same_as_the_cpu(
                &format!("channel bias {dims:?}, whole values {whole}, ReLU {with_relu}"),
                &gpu,
                1e-4,
                |dev| {
                    let vars = [
                        normal_var(9, &dims, 2.0, dev),
                        normal_var(10, &[dims[1]], 2.0, dev),
                    ];
                    vars.into_iter()
                        .map(|v| match whole {
                            true => Var::from_tensor(&v.as_tensor().round().unwrap()).unwrap(),
                            false => v,
                        })
                        .collect()
                },
                |v| match with_relu {
                    true => channel_bias_relu(v[0].as_tensor(), v[1].as_tensor()).unwrap(),
                    false => channel_bias(v[0].as_tensor(), v[1].as_tensor()).unwrap(),
                },
            );
        }
    }
    eprintln!(
        "gpu: a convolution's bias, alone and with a ReLU, and their gradients = the CPU's in f64 \
         (relative 1e-4), repeatable bits"
    );
}

#[test]
fn layer_norm_on_the_device_equals_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // The paper's width, a row shorter than a warp, one longer than a warp but not a multiple.
    for dims in [vec![4, 35, 768], vec![3, 5], vec![70, 45]] {
        let d = *dims.last().unwrap();
        same_as_the_cpu(
            &format!("layer norm {dims:?}"),
            &gpu,
            1e-4,
            |dev| {
                vec![
                    normal_var(4, &dims, 2.0, dev),
                    normal_var(5, &[d], 1.0, dev),
                    normal_var(6, &[d], 1.0, dev),
                ]
            },
            |v| layer_norm(v[0].as_tensor(), v[1].as_tensor(), v[2].as_tensor(), 1e-5).unwrap(),
        );
    }
    eprintln!("gpu: layer norm and its three gradients = the CPU's in f64 (relative 1e-4), repeatable bits");
}

#[test]
fn the_causal_softmax_on_the_device_equals_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // The Transformer's 35 positions, more positions than a warp's lanes, one position.
    for (dims, divisor) in [([2, 8, 35, 35], 8.0), ([1, 2, 70, 70], 3.0), ([2, 1, 1, 1], 1.0)] {
        let t = dims[3];
        same_as_the_cpu(
            &format!("causal softmax {dims:?}"),
            &gpu,
            1e-5,
            |dev| vec![normal_var(7, &dims, 4.0, dev)],
            |v| {
                let mask: Vec<f32> = (0..t * t)
                    .map(|i| if i % t > i / t { f32::NEG_INFINITY } else { 0.0 })
                    .collect();
                let mask = Tensor::from_vec(mask, (t, t), v[0].device()).unwrap();
                let mask = mask.to_dtype(v[0].dtype()).unwrap();
                causal_softmax(v[0].as_tensor(), divisor, &mask).unwrap()
            },
        );
    }
    eprintln!("gpu: the causal softmax and its gradient = the CPU's in f64 (relative 1e-5), repeatable bits");
}

#[test]
fn attention_heads_and_embeddings_on_the_device_equal_the_cpus() {
    let Some(gpu) = cuda() else { return };
    for which in 0..3 {
        same_as_the_cpu(
            &format!("attention heads, part {which}"),
            &gpu,
            1e-7,
            |dev| vec![normal_var(11, &[2, 35, 3 * 96], 1.0, dev)],
            |v| merge_heads(&(to_heads(v[0].as_tensor(), 3, which, 8).unwrap() * 2.0).unwrap()).unwrap(),
        );
    }
    // Repeated ids (their gradient rows add up), the paper's vocabulary and width.
    for (vocab, d, n) in [(50, 64, 18), (33_278, 768, 1_120)] {
        same_as_the_cpu(
            &format!("embedding {vocab} × {d}, {n} ids"),
            &gpu,
            1e-6,
            |dev| vec![normal_var(12, &[vocab, d], 1.0, dev)],
            |v| {
                let ids: Vec<u32> = (0..n)
                    .map(|i| ((i * i * 7 + 3) % vocab.min(n / 2 + 1)) as u32)
                    .collect();
                let ids = Tensor::from_vec(ids, n, v[0].device()).unwrap();
                embedding(v[0].as_tensor(), &ids).unwrap()
            },
        );
    }
    eprintln!("gpu: attention heads and embeddings with their gradients = the CPU's in f64, repeatable bits");
}

#[test]
fn relu_on_the_device_gives_the_cpus_bits() {
    let Some(gpu) = cuda() else { return };
    // Rounded values, so that some are exactly zero (where the gradient passes, as candle's).
    let n = (1 << 20) + 3;
    let mut r = Rng::new(8);
    let values: Vec<f32> = (0..n).map(|_| (r.normal() * 2.0).round() + 0.0).collect();
    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu] {
        let x = Var::from_vec(values.clone(), n, &device).unwrap();
        let y = relu(x.as_tensor()).unwrap();
        let grads = y.mul(&ramp(&y)).unwrap().sum_all().unwrap().backward().unwrap();
        runs.push((bits(&y), bits(grads.get(&x).unwrap())));
    }
    assert!(runs[0] == runs[1], "ReLU: the GPU differs from the CPU");
    eprintln!("gpu: ReLU and its gradient bit-identical to the CPU");
}

#[test]
fn the_relu_of_a_sum_on_the_device_gives_the_cpus_bits() {
    let Some(gpu) = cuda() else { return };
    // Whole values, so that some sums are exactly zero (where the gradient passes).
    let n = (1 << 20) + 3;
    let mut r = Rng::new(9);
    let mut whole = || -> Vec<f32> { (0..n).map(|_| (r.normal() * 2.0).round() + 0.0).collect() };
    let (a_values, b_values) = (whole(), whole());
    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu] {
        let a = Var::from_vec(a_values.clone(), n, &device).unwrap();
        let b = Var::from_vec(b_values.clone(), n, &device).unwrap();
        let y = relu_of_sum(a.as_tensor(), b.as_tensor()).unwrap();
        let grads = y.mul(&ramp(&y)).unwrap().sum_all().unwrap().backward().unwrap();
        runs.push((
            bits(&y),
            bits(grads.get(&a).unwrap()),
            bits(grads.get(&b).unwrap()),
        ));
    }
    assert!(
        runs[0] == runs[1],
        "the ReLU of a sum: the GPU differs from the CPU"
    );
    eprintln!("gpu: the ReLU of a sum and both its gradients bit-identical to the CPU");
}

#[test]
fn a_transformer_step_on_the_device_equals_the_cpus() {
    let Some(gpu) = cuda() else { return };
    // Dropout draws the same masks on both devices, so a training step compares.
    let config = TransformerConfig::tiny(50);
    let tokens: Vec<u32> = (0..2 * 9).map(|i| (i * 7 % 50) as u32).collect();
    let mut runs = Vec::new();
    for device in [Device::Cpu, gpu] {
        let model = TransformerLm::new(config, 3, &device).unwrap();
        let x = Tensor::from_vec(tokens.clone(), (2, 9), &device).unwrap();
        runs.push(logits_and_gradients(
            model.forward(&x, true).unwrap(),
            model.vars(),
        ));
    }
    assert_step_agrees("Transformer", &runs[0], &runs[1]);
}

#[test]
fn parameter_gradients_handed_over_directly_equal_candles() {
    let Some(gpu) = cuda() else { return };
    let mut r = Rng::new(5);
    let mut images = |n: usize, side: usize| {
        let values: Vec<f32> = (0..n * 3 * side * side).map(|_| r.normal()).collect();
        Tensor::from_vec(values, (n, 3, side, side), &gpu).unwrap()
    };
    let tokens: Vec<u32> = (0..2 * 9).map(|i| (i * 7 % 50) as u32).collect();
    let models: Vec<(&str, Box<dyn Model>, Tensor)> = vec![
        (
            "VGG16",
            Box::new(
                Vgg::new(
                    VggConfig {
                        width: 1.0 / 16.0,
                        ..VggConfig::cifar10(VggVariant::Plain)
                    },
                    3,
                    &gpu,
                )
                .unwrap(),
            ),
            images(4, 32),
        ),
        (
            "ResNet34",
            Box::new(
                ResNet::new(
                    ResNetConfig {
                        classes: 10,
                        width: 1.0 / 16.0,
                        stem: ResNetStem::ImageNet,
                    },
                    3,
                    &gpu,
                )
                .unwrap(),
            ),
            images(4, 32),
        ),
        (
            "Transformer",
            Box::new(TransformerLm::new(TransformerConfig::tiny(50), 3, &gpu).unwrap()),
            Tensor::from_vec(tokens, (2, 9), &gpu).unwrap(),
        ),
    ];
    for (what, model, x) in models {
        let loss = model
            .forward(&x, true)
            .unwrap()
            .sqr()
            .unwrap()
            .mean_all()
            .unwrap();
        let candles = loss.backward().unwrap();
        let ours = param_grads::backward(&loss).unwrap();
        let values = |t: &Tensor| -> Vec<f32> { t.flatten_all().unwrap().to_vec1().unwrap() };
        for (name, var) in model.vars() {
            let expected = values(candles.get(&var).unwrap());
            let got = ours
                .get(&var)
                .unwrap_or_else(|| panic!("{what}: {name} got no gradient"));
            assert_eq!(values(got), expected, "{what}: {name}");
        }
        eprintln!(
            "gpu: {what}: the parameters' gradients handed over directly = candle's ({} tensors)",
            model.vars().len()
        );
    }
}

#[test]
fn a_runs_device_keeps_freed_memory_in_the_pool_and_creates_no_events() {
    use cudarc::driver::{result, sys};
    if cuda().is_none() {
        return;
    }
    let device = DeviceSpec::Cuda(0).open().unwrap();
    let Device::Cuda(gpu) = &device else {
        unreachable!("cuda:0 opens a CUDA device")
    };
    assert!(!gpu.is_event_tracking(), "a run's buffers carry no events");
    let context = gpu.cuda_stream().context().clone();
    if !context.has_async_alloc() {
        eprintln!("gpu: the pool test skipped, this device allocates without a pool");
        return;
    }
    // SAFETY: the device is cudarc's; both attributes are `u64`s by CUDA's definition.
    let attribute = |attribute| unsafe {
        let pool = result::device::get_mem_pool(context.cu_device()).unwrap();
        let mut value = 0u64;
        result::mem_pool::get_attribute(pool, attribute, (&mut value as *mut u64).cast()).unwrap();
        value
    };
    assert_eq!(
        attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD),
        u64::MAX
    );
    let bytes = 256u64 << 20;
    let t = Tensor::zeros(bytes as usize / 4, DType::F32, &device).unwrap();
    drop(t);
    device.synchronize().unwrap();
    let reserved = attribute(sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
    assert!(
        reserved >= bytes,
        "{reserved} bytes reserved after freeing {bytes}"
    );
    eprintln!("gpu: {reserved} bytes stay in the pool after a free and a synchronization");
}

/// `n` 3×2×2 images of three classes in minibatches of 8, augmented, on `device`.
fn small_images(n: u32, device: &Device) -> ClassificationData<FeatureSet> {
    let set = || FeatureSet {
        n: n as usize,
        features: 12,
        x: (0..n * 12).map(|i| (i as f32 * 0.37).sin()).collect(),
        labels: (0..n).map(|i| i % 3).collect(),
        classes: 3,
    };
    ClassificationData::new(set(), set(), vec![3, 2, 2], 8, true, device).unwrap()
}

/// A minibatch read back: its input's bits (f32 values or token ids), the input's dims, its
/// targets and its predictions.
fn contents(mb: &Minibatch) -> (Vec<u32>, Vec<usize>, Vec<u32>, usize) {
    let x = match mb.input.dtype() {
        DType::F32 => bits(&mb.input),
        _ => mb.input.flatten_all().unwrap().to_vec1::<u32>().unwrap(),
    };
    let y: Vec<u32> = mb.target.flatten_all().unwrap().to_vec1().unwrap();
    (x, mb.input.dims().to_vec(), y, mb.predictions)
}

#[test]
fn minibatches_staged_in_page_locked_memory_equal_direct_uploads() {
    let Some(gpu) = cuda() else { return };
    // Images (f32) with a shorter last minibatch, and token windows (u32 inputs and targets);
    // three epochs of one pipeline reuse the spare buffers many times over, across epochs too.
    let images = small_images(50, &gpu);
    let tokens: Vec<u32> = (0..2000).map(|i| (i * 7 % 97) as u32).collect();
    let windows = LanguageData::new(&tokens, &tokens, 97, 4, 9, &gpu).unwrap();
    let mut checked = 0;
    for data in [&images as &dyn TrainData, &windows] {
        let count = data.train_batches();
        let pipeline = Pipeline::new(data, 5);
        for epoch in 0..3 {
            let direct: Vec<_> = (0..count)
                .map(|i| contents(&data.train_batch(5, epoch, i).unwrap()))
                .collect();
            std::thread::scope(|scope| {
                let mut prefetch = pipeline.epoch(scope, epoch, count);
                for (i, expected) in direct.iter().enumerate() {
                    assert_eq!(
                        &contents(&prefetch.batch(i).unwrap()),
                        expected,
                        "epoch {epoch}, batch {i}"
                    );
                    checked += 1;
                }
            });
        }
    }
    eprintln!("gpu: {checked} minibatches staged in page-locked memory = uploaded directly");
}

#[test]
fn staged_minibatches_are_refilled_only_after_their_copies_while_the_device_lags() {
    if cuda().is_none() {
        return;
    }
    let device = DeviceSpec::Cuda(0).open().unwrap();
    let data = small_images(200, &device);
    let count = data.train_batches();
    let direct: Vec<_> = (0..count)
        .map(|i| contents(&data.train_batch(5, 0, i).unwrap()))
        .collect();
    // Tens of milliseconds of matrix products queued ahead: every copy waits behind them while
    // the host stages the whole epoch, so a buffer refilled before its copy ran would be read
    // with a later minibatch's values.
    let square = Tensor::ones((4096, 4096), DType::F32, &device).unwrap();
    let mut lag = square.clone();
    for _ in 0..32 {
        lag = lag.matmul(&square).unwrap();
    }
    let pipeline = Pipeline::new(&data, 5);
    let uploaded: Vec<Minibatch> = std::thread::scope(|scope| {
        let mut prefetch = pipeline.epoch(scope, 0, count);
        (0..count).map(|i| prefetch.batch(i).unwrap()).collect()
    });
    for (i, (mb, expected)) in uploaded.iter().zip(&direct).enumerate() {
        assert_eq!(&contents(mb), expected, "batch {i}");
    }
    drop(lag);
    eprintln!("gpu: {count} minibatches staged behind a lagging device = uploaded directly");
}
