//! Rule sets for a build that links only some rules' kernels (flash matters on
//! microcontrollers).
//!
//! [`crate::Optimizer::step`] dispatches on the config's [`Rule`] at run time, so it links the
//! update of every rule. [`crate::Optimizer::step_only`] (and [`crate::Optimizer::begin_only`])
//! take a [`RuleSet`] as a type: the dispatch arms of the rules outside it are removed at
//! compile time, and a config whose rule is outside it is refused with
//! [`crate::Error::RuleNotLinked`] when the step starts, before anything is read or written.
//!
//! ```
//! use homeadam_core::rules::only;
//! use homeadam_core::{Config, Error, Optimizer, Rule, Switch, Tensor, TensorAux};
//!
//! let mut opt = Optimizer::new(Config::new(Rule::HomeAdamW(Switch::Element)))?;
//! let (mut w, g, mut s, mut aux) = ([0.5f32; 4], [1e-3f32; 4], [0.0f32; 8], TensorAux::default());
//! let mut model = [Tensor::new(&mut w, &g, &mut s, &mut aux)];
//! opt.step_only::<only::HomeAdamWElement, _, _, _>(&mut model, 1.0)?; // links Alg. 3's kernel only
//! let refused = opt.step_only::<(only::AdamW, only::Sgd), _, _, _>(&mut model, 1.0);
//! assert!(matches!(refused, Err(Error::RuleNotLinked { rule: "homeadamw-ew" })));
//! # Ok::<(), Error>(())
//! ```

use crate::rules::{Rule, Switch};

/// A set of rules whose updates a build links: one of this module's markers, or a tuple of
/// them (their union). Sealed.
pub trait RuleSet: sealed::Sealed {
    /// Whether the set holds every rule (then a host build runs the updates compiled once in
    /// this crate rather than its own copy).
    const EVERY_RULE: bool;

    /// Whether a step of `rule` may run (a constant wherever `rule` is one).
    fn admits(rule: Rule) -> bool;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! markers {
    ($($(#[$doc:meta])* $name:ident => $rule:pat,)*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub enum $name {}

        impl sealed::Sealed for $name {}

        impl RuleSet for $name {
            const EVERY_RULE: bool = false;

            #[inline(always)]
            fn admits(rule: Rule) -> bool {
                matches!(rule, $rule)
            }
        }
    )*};
}

/// Every rule: what [`crate::Optimizer::step`] links.
#[derive(Clone, Copy, Debug)]
pub enum All {}

impl sealed::Sealed for All {}

impl RuleSet for All {
    const EVERY_RULE: bool = true;

    #[inline(always)]
    fn admits(_: Rule) -> bool {
        true
    }
}

markers! {
    /// `sgd` and `sgdm`.
    Sgd => Rule::Sgd,
    /// `adam`.
    Adam => Rule::Adam,
    /// `adamw`.
    AdamW => Rule::AdamW,
    /// `adam-srf`.
    AdamSrf => Rule::AdamSrf,
    /// `adamw-srf`.
    AdamWSrf => Rule::AdamWSrf,
    /// `homeadam`, `homeadam-layer` and `homeadam-ew`.
    HomeAdam => Rule::HomeAdam(_),
    /// `homeadamw`, `homeadamw-layer` and `homeadamw-ew`.
    HomeAdamW => Rule::HomeAdamW(_),
    /// `homeadam-ew` only (Alg. 3): no first pass, one kernel.
    HomeAdamElement => Rule::HomeAdam(Switch::Element),
    /// `homeadamw-ew` only (Alg. 3): no first pass, one kernel.
    HomeAdamWElement => Rule::HomeAdamW(Switch::Element),
    /// `adabelief`.
    AdaBelief => Rule::AdaBelief,
    /// `swats`.
    Swats => Rule::Swats,
    /// `miadam`.
    MiAdam => Rule::MiAdam,
    /// `lion`.
    Lion => Rule::Lion,
}

impl<A: RuleSet, B: RuleSet> sealed::Sealed for (A, B) {}

/// The union of two sets (nest tuples for more).
impl<A: RuleSet, B: RuleSet> RuleSet for (A, B) {
    const EVERY_RULE: bool = A::EVERY_RULE || B::EVERY_RULE;

    #[inline(always)]
    fn admits(rule: Rule) -> bool {
        A::admits(rule) || B::admits(rule)
    }
}
