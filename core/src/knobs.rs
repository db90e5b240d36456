//! The knob table: one line per hyper-parameter of [`crate::Config`], the one place its facts
//! are written. `knob_table!(gen)` hands the lines to the generator `gen`: in
//! [`crate::config`] the config's fields, their defaults, their range checks, the listing of
//! knobs ([`crate::Config::knobs`]), the JSON keys ([`crate::Config::JSON_KEYS`]) and the
//! per-step copies; in [`crate::scalars`] the fields of [`crate::scalars::StepScalars`] that
//! hold them; in [`crate::rules::spec`] the knobs the rules' hooks read. The items a line
//! names are those in scope where it is generated.
//!
//! A line reads `field: type = default, valid …, knob(…)…, json …, step|rule|config;`:
//! - the default, where `d` is the rule's [`crate::rules::spec::Defaults`];
//! - `valid`: `-` (any value), `(range text, test)` on the value (finite, then the test), with
//!   `if reads` to check it only where the rule reads it, or `[f]`, a check of its own;
//! - each `knob(name, kind, reads, hint)` a knob [`crate::Config::knobs`] lists (none for the
//!   settings that are no hyper-parameter): `real`, `flag`, `count` or `(get, set)`, whether
//!   the rule reads it ([`crate::config`]'s `read`) and why not where it does not;
//! - `json`: the key of a JSON config that sets it alone, or `-` where a key sets more than one
//!   (`betas`) or sets it in another form (`tau`, `home_lr`): the replay crate writes those;
//! - `step`: the step copies it, as `f32`, into a [`crate::scalars::StepScalars`] field of the
//!   same name (its per-step scalar); `rule`: the step hands it to the rule's per-step hook
//!   ([`crate::rules::spec::RuleKnobs`]), which derives the rule's scalars from it; `config`: it
//!   stays in the config.
//!
//! Lines keep the order of [`crate::Config::knobs`], which a saved state records.

macro_rules! knob_table {
    ($generate:ident) => {
        $generate! {
            defaults d;
            /// η, the learning rate (≥ 0). The srf and HomeAdam rules step by η · m̂ / (v̂ + ε), at
            /// most η / (2√ε) per element: Adam's η is far too large for them with a small ε (see
            /// "Choosing hyper-parameters" on the crate's front page).
            lr: f64 = d.lr, valid (UP_TO_LARGEST, scale), knob ("lr", real, always, ""), json "lr", config;
            /// β1 ∈ [0, 1).
            beta1: f64 = 0.9, valid (UNIT, unit), knob ("beta1", real, read::<{ reads::BETA1 }>, "the rule keeps no first moment with β1 (SGD's momentum is μ)"), json -, step;
            /// β2 ∈ [0, 1).
            beta2: f64 = d.beta2, valid (UNIT, unit), knob ("beta2", real, read::<{ reads::BETA2 }>, "the rule keeps no moment with β2"), json -, step;
            /// ε ≥ 0. For the srf and HomeAdam rules it bounds the step: η / (2√ε) at |g| = √ε.
            eps: f64 = d.eps, valid (EPS_RANGE, eps), knob ("eps", real, read::<{ reads::EPS }>, "the rule divides by no second moment"), json "eps", step;
            /// λ ≥ 0: coupled L2 for SGD, Adam, MIAdam (and SWATS / AdaBelief unless decoupled);
            /// decoupled for AdamW, AdamW-srf, HomeAdamW.
            weight_decay: f64 = d.weight_decay, valid (UP_TO_LARGEST, scale), knob ("weight_decay", real, decays, "λ = 0 by definition (Alg. 1/2); use the W variant for weight decay"), json "weight_decay", step;
            /// τ > 0, the HomeAdam threshold: the home (SGDM) step where v̂ < τ — on ρ = min v̂ over
            /// the model (global), over a tensor (per layer), or per element. ρ is 0 whenever an
            /// element has never had a non-zero gradient, which sends the global rule home at every
            /// step.
            tau: f64 = 1e-12, valid ("a finite value in (0, 1e6]", positive, if read::<{ reads::HOME }>), knob ("tau", real, read::<{ reads::HOME }>, TAU_HINT), json -, step;
            /// Global and per-layer HomeAdam(W): the elements ρ is taken over ([`RhoOver::All`], the
            /// paper, by default).
            rho_over: RhoOver = RhoOver::All, valid -, knob ("rho_over", (|c| Knob::Choice(c.rho_over.name()), |c, k| c.rho_over = k.choice(RhoOver::from_name).unwrap_or(c.rho_over)), read::<{ reads::RHO_OVER }>, "ρ decides the global and per-layer HomeAdam(W) rules only"), json "rho_over", config;
            /// HomeAdam(W): τ set from a histogram of the decision values instead of `tau`, so that
            /// about a share q of decisions goes home ([`crate::calibration`]); `None`: τ = `tau`.
            tau_calibration: Option<TauCalibration> = None, valid [check_calibration], knob ("tau.home_share", (|c| Knob::Real(c.tau_calibration.map_or(0.0, |t| t.home_share)), |c, k| c.tau_calibration = calibration(c, Some(k.real()), None)), read::<{ reads::HOME }>, TAU_HINT), knob ("tau.every", (|c| Knob::Count(c.tau_calibration.map_or(0, |t| t.every as u64)), |c, k| c.tau_calibration = calibration(c, None, Some(k.count()))), read::<{ reads::HOME }>, TAU_HINT), json -, config;
            /// HomeAdam(W): η_h / η, the home branch's learning rate relative to η (1: the paper).
            /// The home step is θ(1 − ηλ) − η_h m̂: with one η the branches differ by 1 / (v̂ + ε),
            /// 10³–10⁶ in practice. A ratio, so that schedules and group scales move η_h with η.
            home_lr_scale: f64 = 1.0, valid (UP_TO_LARGEST, scale, if read::<{ reads::HOME }>), knob ("home_lr_scale", real, read::<{ reads::HOME }>, "the home branch is HomeAdam(W)'s"), json -, rule;
            /// μ, SGD momentum.
            momentum: f64 = 0.0, valid (UP_TO_LARGEST, scale), knob ("momentum", real, read::<{ reads::MOMENTUM }>, "momentum is SGD's (Adam-like rules use beta1)"), json "momentum", config;
            /// SGD dampening ∈ [0, 1].
            dampening: f64 = 0.0, valid ("a finite value in [0, 1]", closed_unit), knob ("dampening", real, read::<{ reads::MOMENTUM }>, "dampening is SGD's"), json "dampening", config;
            /// Nesterov momentum (SGD, and SWATS's SGD phase).
            nesterov: bool = false, valid -, knob ("nesterov", flag, read::<{ reads::NESTEROV }>, "Nesterov momentum is SGD's and SWATS's"), json "nesterov", config;
            /// AdaBelief / SWATS: decoupled weight decay.
            weight_decouple: bool = d.weight_decouple, valid -, knob ("weight_decouple", flag, decouple_choice, "the rule fixes how λ applies (the W variants decouple it)"), json "weight_decouple", config;
            /// AdaBelief / SWATS with `weight_decouple`: θ ← θ(1 − λ) instead of θ(1 − ηλ).
            fixed_decay: bool = false, valid -, knob ("fixed_decay", flag, |c| decouple_choice(c) && c.weight_decouple, "fixed_decay applies to AdaBelief / SWATS with weight_decouple"), json "fixed_decay", config;
            /// AdaBelief: RAdam's rectification.
            rectify: bool = true, valid -, knob ("rectify", flag, read::<{ reads::ADABELIEF }>, "rectification is AdaBelief's"), json "rectify", rule;
            /// AdaBelief: AMSGrad's running max of s.
            amsgrad: bool = false, valid -, knob ("amsgrad", flag, read::<{ reads::ADABELIEF }>, "AMSGrad is offered for AdaBelief only"), json "amsgrad", config;
            /// MIAdam: κ, the multiple-integration rate.
            kappa: f64 = 0.0, valid (UP_TO_LARGEST, scale), knob ("kappa", real, read::<{ reads::MIADAM }>, "κ is MIAdam's"), json "kappa", step;
            /// MIAdam: steps t ≤ switch_step use the integrated update.
            switch_step: u64 = 0, valid -, knob ("switch_step", count, read::<{ reads::MIADAM }>, "the switch step is MIAdam's"), json "switch_step", rule;
            /// How parameter stores round.
            rounding: Rounding = Rounding::Nearest, valid -, knob ("rounding", (|c| Knob::Choice(rounding_name(c.rounding)), |c, k| c.rounding = rounding(k)), always, ""), json -, config;
            /// Seed of stochastic rounding.
            seed: u64 = 0, valid -, knob ("seed", count, always, ""), json -, config;
            /// Allow f16 storage for the second moment (refused by default, DESIGN §3).
            allow_f16_state: bool = false, valid -, json -, config;
            /// What a non-finite gradient does.
            finite_check: FiniteCheck = FiniteCheck::SkipStep, valid -, json -, config;
        }
    };
}
pub(crate) use knob_table;
