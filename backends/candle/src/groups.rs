//! Parameter groups: which variables are decayed, and what each group changes of the rule's
//! hyper-parameters.

use candle_core::Result;

use crate::error::bail;
use homeadam_core::Group;

/// Whether a variable is exempt from weight decay: biases and normalisation parameters, as is
/// usual for AdamW-style training (decaying a norm's scale or a bias only shifts the function).
///
/// The rule, on the variable's name split at `.` and `/`: exempt when the last component ends
/// in `bias`, or any component starts with `bn` or `ln` or contains `norm` (case-insensitive:
/// `bn1.weight`, `ln_f.weight`, `layer_norm.weight`, `LayerNorm.gamma`); and every variable of
/// rank ≤ 1 (biases and norm scales of models with unhelpful names, e.g. the names
/// `candle_nn::Optimizer::new` has to invent).
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

/// What a parameter group changes, as PyTorch's per-group options: η times `lr_scale`, and
/// the group's own λ, ε, β1, β2 where set (`None`: the config's). The decay exemptions
/// ([`is_no_decay`]) hold inside every group: an exempt variable has λ = 0 whatever its group.
///
/// ```
/// use homeadam_candle::GroupSettings;
///
/// // The head at a tenth of η and without weight decay; everything else as configured.
/// let head = GroupSettings {
///     lr_scale: 0.1,
///     weight_decay: Some(0.0),
///     ..GroupSettings::DEFAULT
/// };
/// # assert_eq!(head.eps, None);
/// ```
///
/// β2 (and SWATS's ε) must be one value for the whole model where v̂ is compared across
/// variables (global and per-layer HomeAdam(W), a calibrated τ, SWATS): a group that sets it
/// there is refused (see [`homeadam_core::Group`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GroupSettings {
    /// Multiplies η (finite, ≥ 0).
    pub lr_scale: f64,
    /// λ in place of the config's.
    pub weight_decay: Option<f64>,
    /// ε in place of the config's.
    pub eps: Option<f64>,
    /// β1 in place of the config's.
    pub beta1: Option<f64>,
    /// β2 in place of the config's.
    pub beta2: Option<f64>,
}

impl GroupSettings {
    /// η and every hyper-parameter as configured.
    pub const DEFAULT: GroupSettings = GroupSettings {
        lr_scale: 1.0,
        weight_decay: None,
        eps: None,
        beta1: None,
        beta2: None,
    };
}

impl GroupSettings {
    /// The core group of these settings, decayed or not.
    pub(crate) fn to_group(self, decay: bool) -> Group {
        Group {
            lr_scale: self.lr_scale,
            decay,
            weight_decay: self.weight_decay,
            eps: self.eps,
            beta1: self.beta1,
            beta2: self.beta2,
        }
    }
}

/// The hyper-parameters a group may set, by name, with its values (`None`: the config's).
pub(crate) fn overrides(g: Group) -> [(&'static str, Option<f64>); 4] {
    [
        ("weight_decay", g.weight_decay),
        ("eps", g.eps),
        ("beta1", g.beta1),
        ("beta2", g.beta2),
    ]
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings::DEFAULT
    }
}

/// Refuses a group whose `lr_scale` is not finite and ≥ 0, and a prefix given twice (the
/// second would never match); the other settings are checked against the rule when the
/// variables are placed.
pub(crate) fn check_groups(groups: &[(String, GroupSettings)]) -> Result<()> {
    for (k, (prefix, g)) in groups.iter().enumerate() {
        if groups[..k].iter().any(|(earlier, _)| earlier == prefix) {
            bail!("homeadam: group {prefix:?} is given twice");
        }
        let m = g.lr_scale;
        if !(m.is_finite() && m >= 0.0) {
            bail!("homeadam: group {prefix:?}: lr_scale = {m}, expected a finite value >= 0");
        }
    }
    Ok(())
}

/// The core parameter group of a variable: `settings`, and decay unless [`is_no_decay`]
/// exempts it (and `decay_all` is off).
pub(crate) fn group(name: &str, rank: usize, decay_all: bool, settings: GroupSettings) -> Group {
    settings.to_group(decay_all || !is_no_decay(name, rank))
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
    fn settings_make_the_group() {
        let head = GroupSettings {
            lr_scale: 10.0,
            eps: Some(1e-4),
            ..GroupSettings::DEFAULT
        };
        let g = group("head.weight", 2, false, head);
        assert_eq!(
            (g.lr_scale, g.decay, g.eps, g.beta1),
            (10.0, true, Some(1e-4), None)
        );
        assert!(!group("head.bias", 1, false, head).decay);
        assert!(group("head.bias", 1, true, head).decay);
        assert_eq!(
            group("x.weight", 2, false, GroupSettings::DEFAULT),
            Group::DEFAULT
        );
        assert!(check_groups(&[("x".into(), head)]).is_ok());
        for bad in [f64::NAN, -1.0] {
            let g = GroupSettings {
                lr_scale: bad,
                ..GroupSettings::DEFAULT
            };
            assert!(check_groups(&[("x".into(), g)]).is_err());
        }
    }
}
