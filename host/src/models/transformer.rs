//! A Transformer-encoder language model (WikiText-2 / WikiText-103), after pytorch/examples'
//! `word_language_model` `TransformerModel`.
//!
//! Architecture: token embedding `[vocab, d_model]` scaled by `√d_model`, plus sinusoidal
//! positional encoding (`PE[pos, 2i] = sin(pos / 10000^(2i/d))`, `PE[pos, 2i+1] = cos(…)`),
//! dropout; then `layers` encoder layers, each PyTorch's `nn.TransformerEncoderLayer` default
//! (post-norm, ReLU):
//!
//! ```text
//! x = norm1(x + dropout(self_attn(x, causal mask)))
//! x = norm2(x + dropout(linear2(dropout(relu(linear1(x))))))
//! ```
//!
//! where `self_attn` is multi-head scaled dot-product attention with dropout on the attention
//! weights and a causal mask (`-∞` above the diagonal, so position `t` sees positions `≤ t`);
//! finally `Linear(d_model → vocab)` gives the logits. Like the example, there is no final
//! LayerNorm. The model returns logits (the example returns `log_softmax` of them; the runner's
//! cross-entropy applies it).
//!
//! Initialisation follows the example and PyTorch's modules: embedding and output weight uniform
//! in `±0.1`, output bias 0; attention `in_proj_weight` Xavier-uniform (bound
//! `√(6 / (d + 3d))`) with bias 0, `out_proj` weight `nn.Linear` default with bias 0; feed-forward
//! linears `nn.Linear` default (uniform in `±1/√fan_in`); LayerNorm weight 1 and bias 0.
//!
//! The embedding, linear layers, layer norm, the attention's heads and causal softmax and ReLU
//! are the host's ops ([`super::embedding`], [`super::linear`], [`super::layer_norm`],
//! [`super::heads`], [`super::softmax`], [`super::relu`]): candle's composed ops on the CPU, one
//! op each on CUDA. Dropout masks come from the model's own [`Rng`], exposed by
//! [`Model::rng`] / [`Model::set_rng`], and are computed where the activations live
//! ([`super::dropout`]); the positional encoding and the causal mask are built once per sequence
//! length and device.
//!
//! Variables: `encoder.weight`, `layers.{l}.self_attn.in_proj_{weight,bias}`,
//! `layers.{l}.self_attn.out_proj.{weight,bias}`, `layers.{l}.linear{1,2}.{weight,bias}`,
//! `layers.{l}.norm{1,2}.{weight,bias}`, `decoder.{weight,bias}`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use anyhow::{anyhow, ensure, Result};
use candle_core::{DType, Device, DeviceLocation, Tensor, Var};

use super::dropout::dropout;
use super::embedding::embedding;
use super::heads::{merge_heads, to_heads};
use super::layers::{Init, LayerNorm, Linear, ParamBuilder, Params};
use super::relu::relu;
use super::softmax::causal_softmax;
use super::Model;
use crate::rng::Rng;

/// The language model's sizes and dropout rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransformerConfig {
    /// Vocabulary size (token ids are `0..vocab`).
    pub vocab: usize,
    /// Embedding and model width.
    pub d_model: usize,
    /// Attention heads per layer (must divide `d_model`).
    pub heads: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Feed-forward hidden width.
    pub d_ff: usize,
    /// Dropout probability, used throughout (embedding, attention weights, sublayers, FFN).
    pub dropout: f32,
}

impl TransformerConfig {
    /// The paper's WikiText-2 model: 8 layers, d_model 768, 8 heads, FFN 1024, dropout 0.1.
    pub fn wikitext2(vocab: usize) -> Self {
        TransformerConfig {
            vocab,
            d_model: 768,
            heads: 8,
            layers: 8,
            d_ff: 1024,
            dropout: 0.1,
        }
    }

    /// The paper's WikiText-103 model: 24 layers, d_model 768, 8 heads, FFN 2048, dropout 0.15.
    pub fn wikitext103(vocab: usize) -> Self {
        TransformerConfig {
            layers: 24,
            d_ff: 2048,
            dropout: 0.15,
            ..Self::wikitext2(vocab)
        }
    }

    /// A small model for CPU tests and the offline quick run: d_model 64, 4 heads, 2 layers,
    /// FFN 128, dropout 0.1.
    pub fn tiny(vocab: usize) -> Self {
        TransformerConfig {
            vocab,
            d_model: 64,
            heads: 4,
            layers: 2,
            d_ff: 128,
            dropout: 0.1,
        }
    }

    fn validate(&self) -> Result<()> {
        ensure!(
            self.vocab > 0 && self.layers > 0 && self.d_ff > 0 && self.heads > 0,
            "transformer: sizes must be positive: {self:?}"
        );
        ensure!(
            self.d_model > 0 && self.d_model.is_multiple_of(2) && self.d_model.is_multiple_of(self.heads),
            "transformer: d_model must be even and divisible by heads: {self:?}"
        );
        ensure!(
            (0.0..1.0).contains(&self.dropout),
            "transformer: dropout must be in [0, 1): {self:?}"
        );
        Ok(())
    }
}

struct EncoderLayer {
    in_proj: Linear,
    out_proj: Linear,
    linear1: Linear,
    linear2: Linear,
    norm1: LayerNorm,
    norm2: LayerNorm,
}

impl EncoderLayer {
    fn new(p: &mut ParamBuilder, name: &str, c: &TransformerConfig) -> Result<Self> {
        let d = c.d_model;
        // nn.MultiheadAttention: one packed [3d, d] projection, Xavier-uniform, zero bias.
        let xavier = Init::Uniform((6.0 / (d + 3 * d) as f32).sqrt());
        let zero = Some(Init::Const(0.0));
        let attn = format!("{name}.self_attn");
        let in_proj = Linear::new(p, &format!("{attn}.in_proj"), d, 3 * d, xavier, zero)?;
        // Named `in_proj_weight` / `in_proj_bias` in PyTorch; ours end in `.weight` / `.bias`
        // like every other layer, which keeps the parameter-group rule (`…bias`) intact.
        let out_proj = Linear::new(p, &format!("{attn}.out_proj"), d, d, Init::torch_default(d), zero)?;
        Ok(EncoderLayer {
            in_proj,
            out_proj,
            linear1: Linear::torch(p, &format!("{name}.linear1"), d, c.d_ff)?,
            linear2: Linear::torch(p, &format!("{name}.linear2"), c.d_ff, d)?,
            norm1: LayerNorm::new(p, &format!("{name}.norm1"), d)?,
            norm2: LayerNorm::new(p, &format!("{name}.norm2"), d)?,
        })
    }

    /// `x`: `[batch, seq, d]`; `mask`: `[seq, seq]` additive causal mask; `rng`: `Some` in
    /// training (dropout on), `None` in evaluation.
    fn forward(
        &self,
        x: &Tensor,
        mask: &Tensor,
        c: &TransformerConfig,
        rng: &mut Option<MutexGuard<'_, Rng>>,
    ) -> Result<Tensor> {
        let d = x.dim(2)?;
        let h = c.heads;
        let dh = d / h;
        let qkv = self.in_proj.forward(x)?;
        let (q, k, v) = (
            to_heads(&qkv, 3, 0, h)?,
            to_heads(&qkv, 3, 1, h)?,
            to_heads(&qkv, 3, 2, h)?,
        );
        let scores = q.matmul(&k.t()?)?;
        let weights = maybe_dropout(causal_softmax(&scores, (dh as f64).sqrt(), mask)?, c, rng)?;
        let attn = merge_heads(&weights.matmul(&v)?)?;
        let attn = maybe_dropout(self.out_proj.forward(&attn)?, c, rng)?;
        let x = self.norm1.forward(&(x + attn)?)?;
        let ff = maybe_dropout(relu(&self.linear1.forward(&x)?)?, c, rng)?;
        let ff = maybe_dropout(self.linear2.forward(&ff)?, c, rng)?;
        self.norm2.forward(&(x + ff)?)
    }
}

/// Dropout in training (`rng` present), identity in evaluation.
fn maybe_dropout(x: Tensor, c: &TransformerConfig, rng: &mut Option<MutexGuard<'_, Rng>>) -> Result<Tensor> {
    match rng {
        Some(r) => dropout(&x, c.dropout, r),
        None => Ok(x),
    }
}

/// The language model. Input `[batch, seq]` u32 token ids; output logits `[batch, seq, vocab]`.
pub struct TransformerLm {
    config: TransformerConfig,
    embedding: Var,
    layers: Vec<EncoderLayer>,
    decoder: Linear,
    params: Params,
    // A Mutex (not a Cell) keeps the model Sync; forward holds it for the whole pass so that
    // masks are drawn in one fixed order.
    rng: Mutex<Rng>,
    /// The positional encoding and causal mask of each (sequence length, device), built once.
    tables: Mutex<HashMap<(usize, DeviceLocation), Tables>>,
}

/// The `[seq, d]` positional encoding and the `[seq, seq]` causal mask of one sequence length.
#[derive(Clone)]
struct Tables {
    encoding: Tensor,
    mask: Tensor,
}

impl TransformerLm {
    /// Builds the model with every initial value drawn from `seed`; the dropout generator starts
    /// from a fork of the same seed.
    pub fn new(config: TransformerConfig, seed: u64, device: &Device) -> Result<Self> {
        config.validate()?;
        let mut p = ParamBuilder::new(seed, device);
        let d = config.d_model;
        let embedding = p.var("encoder.weight".into(), &[config.vocab, d], Init::Uniform(0.1))?;
        let layers = (0..config.layers)
            .map(|l| EncoderLayer::new(&mut p, &format!("layers.{l}"), &config))
            .collect::<Result<Vec<_>>>()?;
        let decoder = Linear::new(
            &mut p,
            "decoder",
            d,
            config.vocab,
            Init::Uniform(0.1),
            Some(Init::Const(0.0)),
        )?;
        Ok(TransformerLm {
            config,
            embedding,
            layers,
            decoder,
            params: p.finish(),
            // Stream u64::MAX is never a parameter index, so masks do not repeat any init draw.
            rng: Mutex::new(Rng::new(seed).fork(u64::MAX)),
            tables: Mutex::new(HashMap::new()),
        })
    }

    /// The sizes it was built with.
    pub fn config(&self) -> TransformerConfig {
        self.config
    }

    /// The tables of sequence length `seq` on `device`, built at its first use: a forward pass
    /// uploads nothing but its token ids.
    fn tables(&self, seq: usize, device: &Device) -> Result<Tables> {
        let mut tables = self
            .tables
            .lock()
            .map_err(|_| anyhow!("transformer: table cache poisoned by a panic"))?;
        let key = (seq, device.location());
        if let Some(t) = tables.get(&key) {
            return Ok(t.clone());
        }
        let built = Tables {
            encoding: positional_encoding(seq, self.config.d_model, device)?,
            mask: causal_mask(seq, device)?,
        };
        tables.insert(key, built.clone());
        Ok(built)
    }

    fn lock_rng(&self) -> Result<MutexGuard<'_, Rng>> {
        self.rng
            .lock()
            .map_err(|_| anyhow!("transformer: dropout generator poisoned by a panic"))
    }
}

/// The `[seq, d]` sinusoidal positional encoding.
fn positional_encoding(seq: usize, d: usize, device: &Device) -> Result<Tensor> {
    let mut pe = vec![0f32; seq * d];
    for pos in 0..seq {
        for i in 0..d / 2 {
            // Computed in f64 then rounded, so the table does not depend on f32 pow accuracy.
            let angle = pos as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
            pe[pos * d + 2 * i] = angle.sin() as f32;
            pe[pos * d + 2 * i + 1] = angle.cos() as f32;
        }
    }
    Ok(Tensor::from_vec(pe, (seq, d), device)?)
}

/// The `[seq, seq]` additive causal mask: 0 on and below the diagonal, −∞ above.
fn causal_mask(seq: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..seq * seq)
        .map(|i| if i % seq > i / seq { f32::NEG_INFINITY } else { 0.0 })
        .collect();
    Ok(Tensor::from_vec(mask, (seq, seq), device)?)
}

impl Model for TransformerLm {
    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let c = &self.config;
        ensure!(
            x.dtype() == DType::U32,
            "transformer: expected u32 token ids, got {:?}",
            x.dtype()
        );
        let (b, t) = x
            .dims2()
            .map_err(|_| anyhow!("transformer: expected [batch, seq] token ids, got {:?}", x.dims()))?;
        ensure!(b > 0 && t > 0, "transformer: empty input {:?}", x.dims());
        // Token ids are not range-checked here, which would read them back from the device at
        // every step: the data checks them on the host (`LanguageData::new`), and the CPU's
        // embedding lookup refuses an id outside the vocabulary.
        let device = x.device();
        let d = c.d_model;
        let mut rng = if train { Some(self.lock_rng()?) } else { None };
        let emb = embedding(self.embedding.as_tensor(), &x.flatten_all()?)?.reshape((b, t, d))?;
        let Tables { encoding, mask } = self.tables(t, device)?;
        let h = (emb * (d as f64).sqrt())?.broadcast_add(&encoding)?;
        let mut h = maybe_dropout(h, c, &mut rng)?;
        for layer in &self.layers {
            h = layer.forward(&h, &mask, c, &mut rng)?;
        }
        self.decoder.forward(&h)
    }

    fn vars(&self) -> Vec<(String, Var)> {
        self.params.vars.clone()
    }

    fn rng(&self) -> Option<Rng> {
        // A poisoned lock still holds a valid state: read it rather than fail a checkpoint.
        Some(*self.rng.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn set_rng(&self, rng: Rng) {
        *self.rng.lock().unwrap_or_else(|e| e.into_inner()) = rng;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::testutil::*;

    fn tiny(seed: u64) -> TransformerLm {
        TransformerLm::new(TransformerConfig::tiny(50), seed, &Device::Cpu).unwrap()
    }

    fn tokens(b: usize, t: usize, seed: u64) -> Tensor {
        labels(&[b, t], 50, seed)
    }

    fn values(y: &Tensor) -> Vec<f32> {
        y.flatten_all().unwrap().to_vec1().unwrap()
    }

    #[test]
    fn shapes_names_and_bad_input() {
        let m = tiny(0);
        let y = m.forward(&tokens(3, 9, 1), true).unwrap();
        assert_eq!(y.dims(), &[3, 9, 50]);
        assert_eq!(m.forward(&tokens(1, 1, 1), false).unwrap().dims(), &[1, 1, 50]);
        assert_eq!(m.vars().len(), 1 + 2 * 12 + 2);
        assert!(m
            .vars()
            .iter()
            .any(|(n, _)| n == "layers.1.self_attn.in_proj.bias"));
        assert!(m.vars().iter().any(|(n, _)| n == "layers.0.norm2.weight"));
        let too_big = Tensor::new(&[[1u32, 50]], &Device::Cpu).unwrap();
        assert!(m.forward(&too_big, false).is_err());
        let float = input(&[2, 3], 1);
        assert!(m.forward(&float, false).is_err());
        assert!(m.forward(&labels(&[2, 3, 4], 50, 1), false).is_err());
        assert!(m.forward(&labels(&[2, 0], 50, 1), false).is_err());
        let bad = TransformerConfig {
            heads: 3,
            ..TransformerConfig::tiny(50)
        };
        assert!(TransformerLm::new(bad, 0, &Device::Cpu).is_err());
    }

    #[test]
    fn paper_presets_parameter_counts() {
        // Embedding + decoder: 2·V·768 + V; per layer: 4·768² + 4·768 (attention)
        // + 2·768·F + F + 768 (FFN) + 4·768 (norms).
        let per_layer = |f: usize| 4 * 768 * 768 + 4 * 768 + 2 * 768 * f + f + 768 + 4 * 768;
        let vocab = 1000;
        let m = TransformerLm::new(TransformerConfig::wikitext2(vocab), 0, &Device::Cpu).unwrap();
        assert_eq!(m.param_count(), 2 * vocab * 768 + vocab + 8 * per_layer(1024));
        let c = TransformerConfig::wikitext103(vocab);
        assert_eq!((c.layers, c.d_ff, c.dropout), (24, 2048, 0.15));
    }

    #[test]
    fn causal_future_tokens_do_not_change_past_logits() {
        let m = tiny(0);
        let a = Tensor::new(&[[3u32, 7, 9, 11]], &Device::Cpu).unwrap();
        let b = Tensor::new(&[[3u32, 7, 9, 42]], &Device::Cpu).unwrap();
        let ya = m.forward(&a, false).unwrap().narrow(1, 0, 3).unwrap();
        let yb = m.forward(&b, false).unwrap().narrow(1, 0, 3).unwrap();
        assert_eq!(values(&ya), values(&yb));
        let last = |y: Tensor| values(&y.narrow(1, 3, 1).unwrap());
        assert_ne!(
            last(m.forward(&a, false).unwrap()),
            last(m.forward(&b, false).unwrap())
        );
    }

    #[test]
    fn dropout_follows_the_restorable_generator() {
        let m = tiny(0);
        let x = tokens(2, 6, 3);
        let eval = values(&m.forward(&x, false).unwrap());
        assert_eq!(eval, values(&m.forward(&x, false).unwrap()));
        let saved = m.rng().unwrap();
        let first = values(&m.forward(&x, true).unwrap());
        assert_ne!(first, eval);
        assert_ne!(m.rng().unwrap(), saved, "training must advance the generator");
        assert_ne!(first, values(&m.forward(&x, true).unwrap()));
        m.set_rng(saved);
        assert_eq!(first, values(&m.forward(&x, true).unwrap()));
    }

    #[test]
    fn gradients_training_seeding_checkpoints() {
        let x = tokens(4, 8, 2);
        let t = tokens(4, 8, 3);
        every_var_gets_a_gradient(&tiny(0), &x, &t);
        sgd_lowers_the_loss(&tiny(0), &x, &t, 0.05, 5, false);
        seeding_is_deterministic(|s| Box::new(tiny(s)));
        save_load_round_trip(&tiny(4), &tiny(5), &x);
    }
}
