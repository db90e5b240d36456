//! The update rules, one module each, with its formula in the paper's symbols (θ parameters,
//! g the unscaled gradient, η the learning rate, λ the weight decay, m / v the first and
//! second moments, bc_i = 1 − β_i^t, m̂ = m / bc1, v̂ = v / bc2). These pages document the
//! math; a rule is chosen with [`Rule`] and configured with [`crate::Config`].
//!
//! Each module declares its rules' [`Spec`]s (state slots, ρ's slot, how λ applies, the knobs
//! read, the defaults, the element kernels run) and their element functions. Two tables in this
//! file hold the rest: the rule table gives each [`Rule`] its single-rule marker ([`only`]),
//! config name, checkpoint code and spec; the kernel table gives each [`ElementKernel`] its
//! name, its C twin and its type. Everything else is derived from there, the dispatch of every
//! step and the CUDA kernel list included. Adding a rule: docs/DESIGN.md, "Adding a rule".
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

use crate::kernel::{Apply, Kernel, Options};
use crate::scalars::StepScalars;
use only::RuleSet;

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

/// The rule table: each line a [`Rule`], the name of its single-rule marker in [`only`], its
/// config name, its code in the state byte format (fixed forever, whatever the order of the
/// lines: a checkpoint names its rule by this number) and its [`Spec`]. `rule_table!(gen)`
/// hands the lines to the generator `gen`: here [`ALL_RULES`], [`Rule::name`], [`Rule::code`],
/// [`Rule::spec`] and [`Rule::index`]; in [`only`] the markers.
macro_rules! rule_table {
    ($generate:ident) => {
        $generate! {
            [Rule::Sgd] Sgd "sgd", 1, sgd::SPEC;
            [Rule::Adam] Adam "adam", 3, adam::ADAM;
            [Rule::AdamW] AdamW "adamw", 4, adam::ADAMW;
            [Rule::AdamSrf] AdamSrf "adam-srf", 5, srf::ADAM_SRF;
            [Rule::AdamWSrf] AdamWSrf "adamw-srf", 6, srf::ADAMW_SRF;
            [Rule::HomeAdam(Switch::Global)] HomeAdamGlobal "homeadam", 7, homeadam::spec(Switch::Global, false);
            [Rule::HomeAdamW(Switch::Global)] HomeAdamWGlobal "homeadamw", 8, homeadam::spec(Switch::Global, true);
            [Rule::HomeAdam(Switch::Layer)] HomeAdamLayer "homeadam-layer", 9, homeadam::spec(Switch::Layer, false);
            [Rule::HomeAdamW(Switch::Layer)] HomeAdamWLayer "homeadamw-layer", 10, homeadam::spec(Switch::Layer, true);
            [Rule::HomeAdam(Switch::Element)] HomeAdamElement "homeadam-ew", 11, homeadam::spec(Switch::Element, false);
            [Rule::HomeAdamW(Switch::Element)] HomeAdamWElement "homeadamw-ew", 12, homeadam::spec(Switch::Element, true);
            [Rule::AdaBelief] AdaBelief "adabelief", 13, adabelief::SPEC;
            [Rule::Swats] Swats "swats", 14, swats::SPEC;
            [Rule::MiAdam] MiAdam "miadam", 15, miadam::SPEC;
            [Rule::Lion] Lion "lion", 16, lion::SPEC;
        }
    };
}
use rule_table;

const _: () = assert!(
    ALL_RULES.len() < 32 && ElementKernel::ALL.len() <= 32,
    "a rule set and a kernel set are u32 masks"
);

macro_rules! rules {
    ($([$($rule:tt)*] $marker:ident $name:literal, $code:literal, $spec:expr;)*) => {
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

            /// The rule's position in [`ALL_RULES`] (its bit in a [`only::RuleSet`]'s mask): a
            /// constant per arm, so that a set's test of a constant rule folds away.
            #[inline(always)]
            pub const fn index(self) -> u32 {
                match self {
                    $($($rule)* => {
                        const INDEX: u32 = position($code);
                        INDEX
                    })*
                }
            }
        }
    };
}
rule_table!(rules);

/// The position in [`ALL_RULES`] of the rule whose code is `code`.
const fn position(code: u8) -> u32 {
    let mut k = 0;
    while ALL_RULES[k].code() != code {
        k += 1;
    }
    k as u32
}

/// The element kernels: each line a kernel's id, its name (the CUDA kernels are instantiated
/// as `{name}_{θ}_{g}_{state}`), its C twin in `backends/cuda/kernels/homeadam_math.h` (taking
/// `(scalars, flags, branch, θ, g, state)`), and its type in the core, constructed by
/// [`Kernel::new`], or the function that picks among its types. A rule runs one or two of them
/// ([`Spec::kernels`]). Generates [`ElementKernel`] and the dispatch that runs one
/// ([`with_kernel`]).
macro_rules! kernel_table {
    ($($(#[$doc:meta])* $id:ident $name:literal $c:literal $kernel:ty $(=> $module:ident::$runner:ident)?;)*) => {
        /// An element kernel ([`crate::rules`]'s kernel table): the core's `element` function
        /// and its C twin.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ElementKernel {
            $($(#[$doc])* $id,)*
        }

        impl ElementKernel {
            /// Every element kernel; the position is the id.
            pub const ALL: [ElementKernel; [$($name),*].len()] = [$(ElementKernel::$id),*];

            /// The name, e.g. `"adabelief_amsgrad"`.
            pub const fn name(self) -> &'static str {
                match self {
                    $(ElementKernel::$id => $name,)*
                }
            }

            /// The C function of `homeadam_math.h` that computes the same element.
            pub const fn c_function(self) -> &'static str {
                match self {
                    $(ElementKernel::$id => $c,)*
                }
            }

            /// State slots per element.
            pub const fn slots(self) -> usize {
                match self {
                    $(ElementKernel::$id => <$kernel as Kernel>::SLOTS,)*
                }
            }

            /// The slot whose minimum over the elements divided by bc2 is reported as ρ.
            pub const fn rho_slot(self) -> Option<usize> {
                match self {
                    $(ElementKernel::$id => <$kernel as Kernel>::RHO_SLOT,)*
                }
            }
        }

        /// Applies `a` to the kernel `id` of a step with scalars `s`, if `F` holds a rule that
        /// runs it (each arm's guard is a constant, so the kernels of the rules outside `F`
        /// are not compiled); `decision` is the HomeAdam branch ([`homeadam::by_branch`]).
        #[inline(always)]
        pub(crate) fn with_kernel<F: RuleSet, A: Apply>(
            id: ElementKernel,
            s: &StepScalars,
            o: Options,
            decision: u8,
            a: A,
        ) -> Option<A::Out> {
            match id {
                $(ElementKernel::$id if F::KERNELS & ElementKernel::$id.bit() != 0 => {
                    kernel_table!(@run a, s, o, decision, F, $kernel $(, $module::$runner)?)
                })*
                _ => None,
            }
        }
    };
    (@run $a:ident, $s:ident, $o:ident, $d:ident, $f:ident, $kernel:ty) => {
        Some($a.apply(<$kernel as Kernel>::new($s, $o)))
    };
    (@run $a:ident, $s:ident, $o:ident, $d:ident, $f:ident, $kernel:ty, $module:ident::$runner:ident) => {
        $module::$runner::<$f, _>($a, $s, $o, $d)
    };
}

kernel_table! {
    /// SGD without momentum.
    Sgd "sgd" "ha_sgd<false>" sgd::Sgd<false>;
    /// SGD with momentum μ > 0.
    Sgdm "sgdm" "ha_sgd<true>" sgd::Sgd<true>;
    /// Adam (coupled L2).
    Adam "adam" "ha_adam<false>" adam::Adam<false>;
    /// AdamW.
    AdamW "adamw" "ha_adam<true>" adam::Adam<true>;
    /// HomeAdam(W) of every switch and Adam(W)-srf: the branch is a constant of the core's
    /// kernel, a run-time argument of the C function.
    HomeAdam "homeadam" "ha_home" homeadam::Home<{ homeadam::branch::ALL_SRF }> => homeadam::by_branch;
    /// AdaBelief.
    AdaBelief "adabelief" "ha_adabelief<false>" adabelief::AdaBelief<false>;
    /// AdaBelief with AMSGrad.
    AdaBeliefAmsgrad "adabelief_amsgrad" "ha_adabelief<true>" adabelief::AdaBelief<true>;
    /// SWATS in its Adam phase.
    SwatsAdam "swats_adam" "ha_swats_adam" swats::SwatsAdam;
    /// SWATS in its SGD phase.
    SwatsSgd "swats_sgd" "ha_swats_sgd" swats::SwatsSgd;
    /// MIAdam: the phase is a constant of the core's kernel, a run-time scalar of the C function.
    MiAdam "miadam" "ha_miadam" miadam::MiAdam<true> => miadam::by_phase;
    /// Lion.
    Lion "lion" "ha_lion" lion::Lion;
}

impl ElementKernel {
    /// The kernel's bit in a mask of kernels ([`spec::Kernels::mask`]).
    pub const fn bit(self) -> u32 {
        1 << self as u32
    }

    /// The state slots holding a second moment (bit k: slot k), as the rules that run the
    /// kernel declare them.
    pub const fn second_moments(self) -> u8 {
        let mut k = 0;
        while k < ALL_RULES.len() {
            let spec = ALL_RULES[k].spec();
            if spec.kernels.mask() & self.bit() != 0 {
                return spec.second_moments & ((1u32 << self.slots()) - 1) as u8;
            }
            k += 1;
        }
        0
    }
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
    use crate::Config;

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

    #[test]
    fn every_config_runs_a_kernel_of_its_slots() {
        let mut configs: std::vec::Vec<Config> = ALL_RULES.iter().map(|&r| Config::new(r)).collect();
        configs.extend(Config::named("sgdm"));
        configs.push(Config {
            amsgrad: true,
            ..Config::new(Rule::AdaBelief)
        });
        for c in configs {
            for sgd_phase in [false, true] {
                let kernel = c.kernel(sgd_phase && c.rule == Rule::Swats);
                assert_ne!(c.rule.spec().kernels.mask() & kernel.bit(), 0, "{}", c.name());
                assert_eq!(kernel.slots(), c.state_slots(), "{}", c.name());
                if kernel != ElementKernel::SwatsSgd {
                    assert_eq!(kernel.rho_slot(), c.rho_slot(), "{}", c.name());
                }
                for k in 0..c.state_slots() {
                    let second = kernel.second_moments() >> k & 1 == 1;
                    assert_eq!(second, c.is_second_moment_slot(k), "{} slot {k}", c.name());
                }
            }
        }
    }
}
