//! Parameter groups: which variables are decayed and their learning-rate multipliers.

use candle_core::{bail, Result};
use homeadam_core::Group;

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
fn lr_multiplier(name: &str, rules: &[(String, f64)]) -> f64 {
    rules
        .iter()
        .find(|(prefix, _)| name.starts_with(prefix.as_str()))
        .map_or(1.0, |&(_, m)| m)
}

/// Refuses a multiplier that is not finite and ≥ 0.
pub(crate) fn check_multipliers(rules: &[(String, f64)]) -> Result<()> {
    for (prefix, m) in rules {
        if !(m.is_finite() && *m >= 0.0) {
            bail!("homeadam: lr multiplier {m} for {prefix:?}: expected a finite value >= 0");
        }
    }
    Ok(())
}

/// The core parameter group of a variable: its learning-rate multiplier, and decay unless
/// [`is_no_decay`] exempts it (and `decay_all` is off).
pub(crate) fn group(name: &str, rank: usize, decay_all: bool, rules: &[(String, f64)]) -> Group {
    Group {
        lr_scale: lr_multiplier(name, rules),
        decay: decay_all || !is_no_decay(name, rank),
    }
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
        let g = group("head.weight", 2, false, &rules);
        assert_eq!((g.lr_scale, g.decay), (10.0, true));
        assert!(!group("head.bias", 1, false, &rules).decay);
        assert!(group("head.bias", 1, true, &rules).decay);
        assert!(check_multipliers(&rules).is_ok());
        assert!(check_multipliers(&[("x".into(), f64::NAN)]).is_err());
        assert!(check_multipliers(&[("x".into(), -1.0)]).is_err());
    }
}
