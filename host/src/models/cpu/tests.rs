//! The CPU ops against candle's composition of the same function in f64 (the exact values, up
//! to f32's rounding: relative differences `|a − b|/(1 + |b|)` below 1e-4, as the GPU tests hold
//! CUDA's ops to), on odd shapes; and a training step's bits for 1, 2 and 4 threads.

use candle_core::{DType, Device, Tensor, Var};

use crate::models::channel_bias::{channel_bias, channel_bias_relu};
use crate::models::conv2d::conv2d;
use crate::models::relu::{relu, relu_of_sum};
use crate::models::{
    param_grads, Model, ResNet, ResNetConfig, ResNetStem, TransformerConfig, TransformerLm, Vgg, VggConfig,
    VggVariant,
};
use crate::rng::Rng;

fn normal_var(seed: u64, dims: &[usize], scale: f32) -> Var {
    let mut r = Rng::new(seed);
    let n = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|_| r.normal() * scale).collect();
    Var::from_vec(values, dims, &Device::Cpu).unwrap()
}

/// `[1, 2, …, n] / n` in `y`'s shape and dtype: a loss weight that differs for every output.
fn ramp(y: &Tensor) -> Tensor {
    let n = y.elem_count();
    let steps = Tensor::arange(1u32, n as u32 + 1, y.device()).unwrap();
    let steps = steps.to_dtype(y.dtype()).unwrap().reshape(y.dims()).unwrap();
    (steps / n as f64).unwrap()
}

fn max_relative_difference(a: &Tensor, b: &Tensor) -> f32 {
    let a: Vec<f32> = a.flatten_all().unwrap().to_vec1().unwrap();
    let b: Vec<f32> = b.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / (1.0 + y.abs()))
        .fold(0.0, f32::max)
}

/// `f` in f32 (the ops) and in f64 (candle's composition, through `reference` where the op's
/// own function has no f64 path), backward from `Σ y ⊙ ramp(y)`: the output and every input's
/// gradient within 1e-4.
fn same_as_f64(
    what: &str,
    inputs: &[Var],
    f: impl Fn(&[Var]) -> Tensor,
    reference: impl Fn(&[Var]) -> Tensor,
) {
    let run = |vars: &[Var], f: &dyn Fn(&[Var]) -> Tensor| {
        let y = f(vars);
        let grads = param_grads::backward(&y.mul(&ramp(&y)).unwrap().sum_all().unwrap()).unwrap();
        let as_f32 = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
        let mut outputs = vec![as_f32(&y)];
        for v in vars {
            let g = grads
                .get(v)
                .unwrap_or_else(|| panic!("{what}: an input without a gradient"));
            outputs.push(as_f32(g));
        }
        outputs
    };
    let wide: Vec<Var> = inputs
        .iter()
        .map(|v| Var::from_tensor(&v.as_tensor().to_dtype(DType::F64).unwrap()).unwrap())
        .collect();
    let ours = run(inputs, &f);
    let exact = run(&wide, &reference);
    for (k, (a, b)) in ours.iter().zip(&exact).enumerate() {
        let d = max_relative_difference(a, b);
        assert!(d < 1e-4, "{what}: output {k} differs from f64 by {d}");
    }
}

#[test]
fn convolutions_and_both_gradients_equal_candles_in_f64() {
    // VGG's 3×3, ResNet's 7×7/2 stem and 1×1/2 shortcut, batch 1, channels that fill no
    // vector, a 1×1 output, a kernel as large as the padded input, oblong images and kernels.
    // (Candle's reference gradient has the wrong shape where a stride leaves input rows over.)
    for (x, w, stride, padding) in [
        ([4, 3, 16, 16], [8, 3, 3, 3], 1, 1),
        ([2, 16, 8, 8], [4, 16, 5, 5], 1, 2),
        ([1, 4, 6, 6], [6, 4, 3, 3], 1, 0),
        ([2, 3, 32, 32], [5, 3, 7, 7], 2, 3),
        ([2, 8, 9, 9], [16, 8, 1, 1], 2, 0),
        ([3, 5, 11, 7], [6, 5, 3, 3], 2, 1),
        ([1, 7, 3, 3], [3, 7, 3, 3], 1, 0),
        ([1, 1, 1, 1], [1, 1, 3, 3], 1, 1),
        ([2, 3, 5, 9], [2, 3, 2, 4], 1, 1),
    ] {
        let inputs = [normal_var(1, &x, 1.0), normal_var(2, &w, 0.3)];
        let conv = |v: &[Var]| conv2d(v[0].as_tensor(), v[1].as_tensor(), stride, padding).unwrap();
        same_as_f64(
            &format!("conv {x:?} ⋆ {w:?} /{stride} pad {padding}"),
            &inputs,
            conv,
            conv,
        );
    }
}

#[test]
fn batches_split_into_tasks_as_in_one() {
    // 36 × 256 unfolded values an image: tasks of eight images and one of three, and partial
    // sums of the filter gradient over the same. 0.32 Mi values an image: a task per image.
    for (x, w) in [([11, 4, 16, 16], [4, 4, 3, 3]), ([3, 16, 48, 48], [8, 16, 3, 3])] {
        let inputs = [normal_var(3, &x, 1.0), normal_var(4, &w, 0.1)];
        let conv = |v: &[Var]| conv2d(v[0].as_tensor(), v[1].as_tensor(), 1, 1).unwrap();
        same_as_f64(&format!("conv of {x:?} in tasks"), &inputs, conv, conv);
    }
}

#[test]
fn biases_and_relus_equal_candles_in_f64() {
    for dims in [[2, 3, 5, 7], [1, 1, 1, 1], [3, 17, 4, 4]] {
        let inputs = [normal_var(5, &dims, 2.0), normal_var(6, &[dims[1]], 2.0)];
        let plain = |v: &[Var]| channel_bias(v[0].as_tensor(), v[1].as_tensor()).unwrap();
        same_as_f64(&format!("bias {dims:?}"), &inputs, plain, plain);
        let fused = |v: &[Var]| channel_bias_relu(v[0].as_tensor(), v[1].as_tensor()).unwrap();
        same_as_f64(&format!("bias + relu {dims:?}"), &inputs, fused, fused);
        let one = |v: &[Var]| relu(v[0].as_tensor()).unwrap();
        same_as_f64(&format!("relu {dims:?}"), &inputs[..1], one, one);
        let pair = [normal_var(7, &dims, 1.0), normal_var(8, &dims, 1.0)];
        let sum = |v: &[Var]| relu_of_sum(v[0].as_tensor(), v[1].as_tensor()).unwrap();
        same_as_f64(&format!("relu of a sum {dims:?}"), &pair, sum, sum);
    }
}

/// Training-mode batch norm composed of candle's ops (any dtype), with its running statistics'
/// new values.
fn batch_norm_composed(x: &Tensor, w: &Tensor, b: &Tensor, relu: bool) -> (Tensor, Tensor, Tensor) {
    let c = w.elem_count();
    let count = (x.elem_count() / c) as f64;
    let mean = x.mean_keepdim((0, 2, 3)).unwrap();
    let centred = x.broadcast_sub(&mean).unwrap();
    let var = centred.sqr().unwrap().mean_keepdim((0, 2, 3)).unwrap();
    let normed = centred
        .broadcast_div(&(&var + 1e-5).unwrap().sqrt().unwrap())
        .unwrap();
    let shape = (1, c, 1, 1);
    let y = normed
        .broadcast_mul(&w.reshape(shape).unwrap())
        .unwrap()
        .broadcast_add(&b.reshape(shape).unwrap())
        .unwrap();
    let y = if relu { y.relu().unwrap() } else { y };
    let running_mean = (mean.flatten_all().unwrap() * 0.1).unwrap();
    let running_var = ((var.flatten_all().unwrap() * (0.1 * count / (count - 1.0))).unwrap() + 0.9).unwrap();
    (y, running_mean, running_var)
}

#[test]
fn batch_norm_its_gradients_and_running_statistics_equal_candles_in_f64() {
    for (dims, relu) in [
        ([4, 3, 5, 5], false),
        ([2, 5, 3, 1], true),
        ([1, 2, 4, 4], true),
        ([3, 16, 8, 8], false),
    ] {
        let c = dims[1];
        let inputs = [
            normal_var(9, &dims, 3.0),
            normal_var(10, &[c], 1.0),
            normal_var(11, &[c], 1.0),
        ];
        let stats = std::cell::RefCell::new(Vec::new());
        let ours = |v: &[Var]| {
            let running = (
                Var::zeros(c, DType::F32, &Device::Cpu).unwrap(),
                Var::ones(c, DType::F32, &Device::Cpu).unwrap(),
            );
            let y = super::batch_norm::train(
                v[0].as_tensor(),
                v[1].as_tensor(),
                v[2].as_tensor(),
                (&running.0, &running.1),
                (1e-5, 0.1),
                relu,
            )
            .unwrap();
            stats
                .borrow_mut()
                .extend([running.0.as_tensor().clone(), running.1.as_tensor().clone()]);
            y
        };
        let reference = |v: &[Var]| {
            let (y, mean, var) =
                batch_norm_composed(v[0].as_tensor(), v[1].as_tensor(), v[2].as_tensor(), relu);
            stats.borrow_mut().extend([mean, var]);
            y
        };
        same_as_f64(
            &format!("batch norm {dims:?}, relu {relu}"),
            &inputs,
            ours,
            reference,
        );
        let stats = stats.borrow();
        for (k, name) in ["mean", "variance"].into_iter().enumerate() {
            let expected = stats[2 + k].to_dtype(DType::F32).unwrap();
            let d = max_relative_difference(&stats[k], &expected);
            assert!(
                d < 1e-5,
                "batch norm {dims:?}: running {name} differs from f64 by {d}"
            );
        }
    }
}

/// A model built anew for each run.
type Build<'a> = &'a (dyn Fn() -> Box<dyn Model> + Sync);

/// The bits of every parameter's gradient after one training step of the model `build` makes
/// on input `x`, on a pool of `threads` threads.
fn gradient_bits(build: Build, x: &Tensor, threads: usize) -> Vec<Vec<u32>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let model = build();
        let logits = model.forward(x, true).unwrap();
        let classes = *logits.dims().last().unwrap();
        let logits = logits.reshape(((), classes)).unwrap();
        let rows = logits.dim(0).unwrap();
        let targets: Vec<u32> = (0..rows).map(|i| (i * 5 % classes) as u32).collect();
        let targets = Tensor::from_vec(targets, rows, &Device::Cpu).unwrap();
        let loss = candle_nn::loss::cross_entropy(&logits, &targets).unwrap();
        let grads = param_grads::backward(&loss).unwrap();
        model
            .vars()
            .iter()
            .map(|(_, v)| {
                let g: Vec<f32> = grads.get(v).unwrap().flatten_all().unwrap().to_vec1().unwrap();
                g.iter().map(|v| v.to_bits()).collect()
            })
            .collect()
    })
}

#[test]
fn a_training_step_gives_the_same_bits_for_one_two_and_four_threads() {
    let resnet = || {
        let config = ResNetConfig {
            classes: 7,
            width: 1.0 / 16.0,
            stem: ResNetStem::ImageNet,
        };
        Box::new(ResNet::new(config, 3, &Device::Cpu).unwrap()) as Box<dyn Model>
    };
    let vgg = |variant| {
        let config = VggConfig {
            classes: 7,
            width: 1.0 / 16.0,
            variant,
        };
        Box::new(Vgg::new(config, 3, &Device::Cpu).unwrap()) as Box<dyn Model>
    };
    let x = normal_var(12, &[16, 3, 32, 32], 1.0);
    let plain = || vgg(VggVariant::Plain);
    let bn = || vgg(VggVariant::Bn);
    let transformer = || {
        let config = TransformerConfig {
            vocab: 50,
            d_model: 24,
            heads: 4,
            layers: 2,
            d_ff: 40,
            dropout: 0.1,
        };
        Box::new(TransformerLm::new(config, 3, &Device::Cpu).unwrap()) as Box<dyn Model>
    };
    let tokens: Vec<u32> = (0..4 * 35).map(|i| i * 7 % 50).collect();
    let tokens = Tensor::from_vec(tokens, (4, 35), &Device::Cpu).unwrap();
    let models: [(&str, Build, &Tensor); 4] = [
        ("resnet", &resnet, x.as_tensor()),
        ("vgg", &plain, x.as_tensor()),
        ("vgg-bn", &bn, x.as_tensor()),
        ("transformer", &transformer, &tokens),
    ];
    for (name, build, input) in models {
        let one = gradient_bits(build, input, 1);
        for threads in [2, 4] {
            let other = gradient_bits(build, input, threads);
            assert!(other == one, "{name}: {threads} threads differ from one");
        }
    }
}

#[test]
fn layer_norm_and_the_causal_softmax_equal_candles_in_f64() {
    use crate::models::layer_norm::layer_norm;
    use crate::models::softmax::causal_softmax;
    // One row, rows the tasks do not divide, a width that fills no vector.
    for dims in [vec![1, 1, 5], vec![3, 35, 24], vec![2, 7, 200]] {
        let d = dims[2];
        let inputs = [
            normal_var(13, &dims, 2.0),
            normal_var(14, &[d], 1.0),
            normal_var(15, &[d], 1.0),
        ];
        let norm =
            |v: &[Var]| layer_norm(v[0].as_tensor(), v[1].as_tensor(), v[2].as_tensor(), 1e-5).unwrap();
        same_as_f64(&format!("layer norm {dims:?}"), &inputs, norm, norm);
    }
    for (dims, divisor) in [([1, 1, 1, 1], 1.0), ([2, 3, 35, 35], 8.0), ([1, 2, 9, 9], 2.5)] {
        let t = dims[3];
        let mask: Vec<f32> = (0..t * t)
            .map(|i| if i % t > i / t { f32::NEG_INFINITY } else { 0.0 })
            .collect();
        let mask = Tensor::from_vec(mask, (t, t), &Device::Cpu).unwrap();
        let softmax = |v: &[Var]| {
            let mask = mask.to_dtype(v[0].dtype()).unwrap();
            causal_softmax(v[0].as_tensor(), divisor, &mask).unwrap()
        };
        same_as_f64(
            &format!("causal softmax {dims:?}"),
            &[normal_var(16, &dims, 4.0)],
            softmax,
            softmax,
        );
    }
}

#[test]
fn linear_layers_and_their_three_gradients_equal_candles_in_f64() {
    use crate::models::linear::linear;
    // One row, rows the tasks do not divide, widths that fill no vector, a vocabulary-sized layer.
    for (x_dims, out) in [
        (vec![1, 1], 3),
        (vec![3, 5, 7], 4),
        (vec![2, 35, 24], 50),
        (vec![70, 16], 2000),
    ] {
        let inp = *x_dims.last().unwrap();
        let inputs = [
            normal_var(17, &x_dims, 1.0),
            normal_var(18, &[out, inp], 0.3),
            normal_var(19, &[out], 1.0),
        ];
        let affine = |v: &[Var]| linear(v[0].as_tensor(), v[1].as_tensor(), Some(v[2].as_tensor())).unwrap();
        same_as_f64(&format!("linear {x_dims:?} → {out}"), &inputs, affine, affine);
    }
}

#[test]
fn the_cross_entropy_and_its_gradient_equal_candles_in_f64_and_refuse_a_bad_class() {
    use crate::models::cross_entropy::cross_entropy;
    for (rows, classes) in [(1, 1), (3, 7), (70, 2000)] {
        let targets: Vec<u32> = (0..rows).map(|r| (r * 13 % classes) as u32).collect();
        let targets = Tensor::from_vec(targets, rows, &Device::Cpu).unwrap();
        let loss = |v: &[Var]| cross_entropy(v[0].as_tensor(), &targets).unwrap();
        same_as_f64(
            &format!("cross-entropy {rows} × {classes}"),
            &[normal_var(20, &[rows, classes], 3.0)],
            loss,
            loss,
        );
    }
    let logits = Tensor::zeros((2, 3), DType::F32, &Device::Cpu).unwrap();
    let bad = Tensor::new(&[0u32, 3], &Device::Cpu).unwrap();
    let err = cross_entropy(&logits, &bad).unwrap_err().to_string();
    assert!(err.contains("class id 3 outside [0, 3)"), "{err}");
}

#[test]
fn the_embedding_and_its_gradient_equal_candles_in_f64_and_refuse_a_bad_id() {
    use crate::models::embedding::embedding;
    for (vocab, d, tokens) in [(1, 1, 1), (70, 5, 200), (33, 64, 7)] {
        let ids: Vec<u32> = (0..tokens).map(|i| (i * 29 % vocab) as u32).collect();
        let ids = Tensor::from_vec(ids, tokens, &Device::Cpu).unwrap();
        let lookup = |v: &[Var]| embedding(v[0].as_tensor(), &ids).unwrap();
        same_as_f64(
            &format!("embedding {vocab} × {d}, {tokens} tokens"),
            &[normal_var(21, &[vocab, d], 1.0)],
            lookup,
            lookup,
        );
    }
    let table = Tensor::zeros((3, 2), DType::F32, &Device::Cpu).unwrap();
    let bad = Tensor::new(&[0u32, 3], &Device::Cpu).unwrap();
    let err = embedding(&table, &bad).unwrap_err().to_string();
    assert!(err.contains("token id 3 outside [0, 3)"), "{err}");
}
