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

use crate::rules::{rule_table, Rule, Switch, ALL_RULES};

/// A set of rules whose updates a build links: one of this module's markers, or a tuple of
/// them (their union). Sealed.
pub trait RuleSet: sealed::Sealed {
    /// The rules, bit [`Rule::index`] for each.
    const RULES: u32;

    /// Whether the set holds every rule (then a host build runs the updates compiled once in
    /// this crate rather than its own copy).
    const EVERY_RULE: bool = Self::RULES == (1 << ALL_RULES.len()) - 1;

    /// The element kernels the rules run ([`crate::rules::ElementKernel::bit`]).
    const KERNELS: u32 = kernels_of(Self::RULES);

    /// Whether a rule of the set switches to a second phase ([`crate::rules::spec::PhaseSwitch`]).
    const PHASE_SWITCH: bool = switches(Self::RULES);

    /// Whether a step of `rule` may run (a constant wherever `rule` is one).
    #[inline(always)]
    fn admits(rule: Rule) -> bool {
        Self::RULES >> rule.index() & 1 == 1
    }
}

const fn kernels_of(rules: u32) -> u32 {
    let (mut mask, mut k) = (0, 0);
    while k < ALL_RULES.len() {
        if rules >> k & 1 == 1 {
            mask |= ALL_RULES[k].spec().kernels.mask();
        }
        k += 1;
    }
    mask
}

const fn switches(rules: u32) -> bool {
    let mut k = 0;
    while k < ALL_RULES.len() {
        if rules >> k & 1 == 1 && ALL_RULES[k].spec().phase_switch().is_some() {
            return true;
        }
        k += 1;
    }
    false
}

mod sealed {
    pub trait Sealed {}
}

/// Every rule: what [`crate::Optimizer::step`] links.
#[derive(Clone, Copy, Debug)]
pub enum All {}

impl sealed::Sealed for All {}

impl RuleSet for All {
    const RULES: u32 = (1 << ALL_RULES.len()) - 1;
}

macro_rules! markers {
    ($([$($rule:tt)*] $marker:ident $name:literal, $code:literal, $spec:expr;)*) => {$(
        #[doc = concat!("`", $name, "` only.")]
        #[derive(Clone, Copy, Debug)]
        pub enum $marker {}

        impl sealed::Sealed for $marker {}

        impl RuleSet for $marker {
            const RULES: u32 = 1 << $($rule)*.index();
        }
    )*};
}
rule_table!(markers);

/// `homeadam`, `homeadam-layer` and `homeadam-ew`.
pub type HomeAdam = (HomeAdamGlobal, (HomeAdamLayer, HomeAdamElement));

/// `homeadamw`, `homeadamw-layer` and `homeadamw-ew`.
pub type HomeAdamW = (HomeAdamWGlobal, (HomeAdamWLayer, HomeAdamWElement));

impl<A: RuleSet, B: RuleSet> sealed::Sealed for (A, B) {}

/// The union of two sets (nest tuples for more).
impl<A: RuleSet, B: RuleSet> RuleSet for (A, B) {
    const RULES: u32 = A::RULES | B::RULES;
}
