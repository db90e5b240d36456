//! The update rules, one module each, with its formula in the paper's symbols (θ parameters,
//! g the unscaled gradient, η the learning rate, λ the weight decay, m / v the first and
//! second moments, bc_i = 1 − β_i^t, m̂ = m / bc1, v̂ = v / bc2). These pages document the
//! math; a rule is chosen with [`Rule`] and configured with [`crate::Config`].
//!
//! Each module declares its rules' [`Spec`]s (state slots, ρ's slot, how λ applies, the knobs
//! read, the defaults) and their element function; the table at the bottom of this file gives
//! each [`Rule`] its config name, its checkpoint code and its spec, and everything else is
//! derived from there. Adding a rule: docs/DESIGN.md, "Adding a rule".
//!
//! | [`Rule`] | config names | module |
//! | --- | --- | --- |
//! | `Sgd` | `sgd`, `sgdm` | [`sgd`] |
//! | `Adam`, `AdamW` | `adam`, `adamw` | [`adam`] |
//! | `AdamSrf`, `AdamWSrf` (Alg. 1) | `adam-srf`, `adamw-srf` | [`srf`] |
//! | `HomeAdam(_)`, `HomeAdamW(_)` (Alg. 2, 3) | `homeadam[w]`, `-layer`, `-ew` | [`homeadam`] |
//! | `AdaBelief` | `adabelief` | [`adabelief`] |
//! | `Swats` | `swats` | [`swats`] |
//! | `MiAdam` | `miadam` | [`miadam`] |
//! | `Lion` | `lion` | [`lion`] |
//!
//! [`only`] names sets of rules for builds that link only their own kernels
//! ([`crate::Optimizer::step_only`]).
//!
//! The srf and HomeAdam rules divide by v̂ + ε, not by √v̂ + ε: see "Choosing
//! hyper-parameters" in the crate's front page before you reuse Adam's η and ε.

pub mod adabelief;
pub mod adam;
pub mod homeadam;
pub mod lion;
pub mod miadam;
pub mod only;
pub mod sgd;
pub mod spec;
pub mod srf;
pub mod swats;

pub use spec::Spec;

/// Where HomeAdam(W) decides between the srf step and the home (SGDM) step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Switch {
    /// Alg. 2: one decision for the whole model, on min v̂ over every element of every tensor.
    Global,
    /// One decision per tensor, on that tensor's min v̂.
    Layer,
    /// Alg. 3: one decision per element.
    Element,
}

/// An update rule. [`Rule::from_name`] takes the config names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Rule {
    /// `sgd`: SGD with optional momentum μ (PyTorch `SGD`); the config name `sgdm`
    /// ([`crate::Config::named`]) is this rule with μ = 0.9.
    Sgd,
    /// `adam`: Adam with coupled L2 (PyTorch `Adam`).
    Adam,
    /// `adamw`: Adam with decoupled weight decay (PyTorch `AdamW`).
    AdamW,
    /// `adam-srf`: Alg. 1 with λ = 0.
    AdamSrf,
    /// `adamw-srf`: Alg. 1.
    AdamWSrf,
    /// `homeadam`, `homeadam-layer`, `homeadam-ew`: Alg. 2 / 3 with λ = 0.
    HomeAdam(Switch),
    /// `homeadamw`, `homeadamw-layer`, `homeadamw-ew`: Alg. 2 / 3.
    HomeAdamW(Switch),
    /// `adabelief`: `adabelief-pytorch` 0.2.1.
    AdaBelief,
    /// `swats`: `pytorch-optimizer` 4.1.0 `SWATS`.
    Swats,
    /// `miadam`: the official `MIAdam1`.
    MiAdam,
    /// `lion`: `lion-pytorch` 0.2.5 (Chen et al. 2023).
    Lion,
}

/// The rule table: each line a [`Rule`], its config name, its code in the state byte format
/// (fixed forever, whatever the order of the lines: a checkpoint names its rule by this
/// number) and its [`Spec`]. Generates [`ALL_RULES`], [`Rule::name`], [`Rule::code`] and
/// [`Rule::spec`].
macro_rules! table {
    ($([$($rule:tt)*] $name:literal, $code:literal, $spec:expr;)*) => {
        /// Every rule, in the order of the README's table.
        pub const ALL_RULES: [Rule; [$($code),*].len()] = [$($($rule)*),*];

        impl Rule {
            /// The config name, e.g. `"homeadamw-ew"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $($($rule)* => $name,)*
                }
            }

            /// The rule's code in the state byte format: fixed forever, whatever the order
            /// of [`ALL_RULES`] (a checkpoint names its rule by this number).
            pub const fn code(self) -> u8 {
                match self {
                    $($($rule)* => $code,)*
                }
            }

            /// What the rule declares about itself.
            pub const fn spec(self) -> &'static Spec {
                match self {
                    $($($rule)* => {
                        const SPEC: Spec = $spec;
                        &SPEC
                    })*
                }
            }
        }
    };
}

table! {
    [Rule::Sgd] "sgd", 1, sgd::SPEC;
    [Rule::Adam] "adam", 3, adam::ADAM;
    [Rule::AdamW] "adamw", 4, adam::ADAMW;
    [Rule::AdamSrf] "adam-srf", 5, srf::ADAM_SRF;
    [Rule::AdamWSrf] "adamw-srf", 6, srf::ADAMW_SRF;
    [Rule::HomeAdam(Switch::Global)] "homeadam", 7, homeadam::spec(Switch::Global, false);
    [Rule::HomeAdamW(Switch::Global)] "homeadamw", 8, homeadam::spec(Switch::Global, true);
    [Rule::HomeAdam(Switch::Layer)] "homeadam-layer", 9, homeadam::spec(Switch::Layer, false);
    [Rule::HomeAdamW(Switch::Layer)] "homeadamw-layer", 10, homeadam::spec(Switch::Layer, true);
    [Rule::HomeAdam(Switch::Element)] "homeadam-ew", 11, homeadam::spec(Switch::Element, false);
    [Rule::HomeAdamW(Switch::Element)] "homeadamw-ew", 12, homeadam::spec(Switch::Element, true);
    [Rule::AdaBelief] "adabelief", 13, adabelief::SPEC;
    [Rule::Swats] "swats", 14, swats::SPEC;
    [Rule::MiAdam] "miadam", 15, miadam::SPEC;
    [Rule::Lion] "lion", 16, lion::SPEC;
}

impl Rule {
    /// Parses a rule name (see [`crate::Config::named`] for the config names, which add
    /// `sgdm`).
    pub fn from_name(name: &str) -> Option<Self> {
        ALL_RULES.iter().copied().find(|r| r.name() == name)
    }

    /// The rule of a [`Rule::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        ALL_RULES.iter().copied().find(|r| r.code() == code)
    }

    /// The HomeAdam switch granularity, if this is a HomeAdam(W) rule.
    pub const fn switch(self) -> Option<Switch> {
        match self {
            Rule::HomeAdam(s) | Rule::HomeAdamW(s) => Some(s),
            _ => None,
        }
    }

    /// Whether the rule keeps a second moment: v, or AdaBelief's s (f16 storage is refused
    /// for it unless allowed). Not the same as reporting ρ: see [`crate::Config::rho_slot`].
    pub const fn has_second_moment(self) -> bool {
        self.spec().second_moments != 0
    }

    /// Whether λ is decoupled (θ ← θ(1 − ηλ)) rather than coupled L2 (g ← g + λθ).
    pub const fn decoupled_decay(self, weight_decouple: bool) -> bool {
        match self.spec().decay {
            spec::Decay::Decoupled => true,
            spec::Decay::Chosen => weight_decouple,
            spec::Decay::None | spec::Decay::Coupled => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_distinct_and_specs_consistent() {
        for (k, a) in ALL_RULES.iter().enumerate() {
            for b in &ALL_RULES[k + 1..] {
                assert_ne!(a.code(), b.code(), "{a:?} {b:?}");
                assert_ne!(a.name(), b.name(), "{a:?} {b:?}");
            }
            let spec = a.spec();
            assert!(spec.slots.len() <= 3, "{a:?}");
            assert!(
                spec.rho_slot.is_none_or(|s| spec.second_moments >> s & 1 == 1),
                "{a:?}"
            );
            assert_eq!(spec.second_moments >> spec.slots.len(), 0, "{a:?}");
        }
    }
}
