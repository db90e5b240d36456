//! Parameter groups: which variables are decayed and their learning-rate multipliers.

/// Whether a variable is exempt from weight decay: biases and normalisation parameters, as is
/// usual for AdamW-style training (decaying a norm's scale or a bias only shifts the function).
///
/// The rule, on the variable's name split at `.` and `/`: exempt when the last component ends
/// in `bias`, or any component starts with `bn` or `ln` or contains `norm` (case-insensitive:
/// `bn1.weight`, `ln_f.weight`, `layer_norm.weight`, `LayerNorm.gamma`); and every variable of
/// rank ≤ 1 (biases and norm scales of models with unhelpful names, e.g. the names
/// [`candle_nn::Optimizer::new`] has to invent).
pub fn is_no_decay(name: &str, rank: usize) -> bool {
    if rank <= 1 {
        return true;
    }
    let lower = name.to_ascii_lowercase();
    let mut parts = lower.split(['.', '/']).filter(|p| !p.is_empty()).peekable();
    let mut exempt = false;
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        exempt |= part.starts_with("bn") || part.starts_with("ln") || part.contains("norm");
        exempt |= last && part.ends_with("bias");
    }
    exempt
}

/// The learning-rate multiplier of a variable: the first rule whose prefix starts its name,
/// else 1.
pub(crate) fn lr_multiplier(name: &str, rules: &[(String, f64)]) -> f64 {
    rules
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix.as_str()))
        .map_or(1.0, |&(_, m)| m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_rule() {
        for name in [
            "features.0.bias",
            "bn1.weight",
            "layer1.0.bn2.weight",
            "encoder.layers.3.ln1.weight",
            "ln_f.weight",
            "decoder.LayerNorm.gamma",
            "norm.weight",
            "attn/out_bias",
        ] {
            assert!(is_no_decay(name, 2), "{name}");
        }
        for name in [
            "features.0.weight",
            "fc.weight",
            "embedding.weight",
            "kernel",
            "linear.w",
        ] {
            assert!(!is_no_decay(name, 2), "{name}");
        }
        assert!(is_no_decay("fc.weight", 1));
        assert!(is_no_decay("0", 0));
    }

    #[test]
    fn multipliers() {
        let rules = vec![("head.".to_string(), 10.0), ("".to_string(), 0.5)];
        assert_eq!(lr_multiplier("head.weight", &rules), 10.0);
        assert_eq!(lr_multiplier("body.weight", &rules), 0.5);
        assert_eq!(lr_multiplier("body.weight", &[]), 1.0);
    }
}
