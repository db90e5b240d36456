//! The options of [`OptimConfig`] besides the core's hyper-parameters, as a saved state records
//! them: each by name with its value as text, compared on load, and the ones a load may adopt.

use std::fmt::Write as _;

use candle_core::Result;

use super::adapter::{OptimConfig, SkipPolicy};
use super::clip::check_max_norm;
use super::error::bail;
use super::groups::{check_groups, overrides, GroupSettings};
use super::schedule::Schedule;

/// One recorded option: its name, its value as text, and how a load adopts a saved text
/// (`None`: never adopted, as it decides the variables' groups).
struct Recorded {
    name: &'static str,
    get: fn(&OptimConfig) -> String,
    adopt: Option<fn(&mut OptimConfig, &str) -> Option<()>>,
}

/// Every option a saved state records, in the order it records them.
const RECORDED: [Recorded; 6] = [
    Recorded {
        name: "schedule",
        get: |c| c.schedule.text(),
        adopt: Some(|c, text| {
            c.schedule = Schedule::parse(text)?;
            Some(())
        }),
    },
    Recorded {
        name: "warmup",
        get: |c| c.warmup.to_string(),
        adopt: Some(|c, text| {
            c.warmup = text.parse().ok()?;
            Some(())
        }),
    },
    Recorded {
        name: "max_grad_norm",
        get: |c| c.max_grad_norm.map_or("none".into(), |n| n.to_string()),
        adopt: Some(|c, text| {
            c.max_grad_norm = match text {
                "none" => None,
                _ => Some(text.parse().ok()?),
            };
            Some(())
        }),
    },
    Recorded {
        name: "on_skip",
        get: |c| c.on_skip.name().into(),
        adopt: Some(|c, text| {
            c.on_skip = SkipPolicy::parse(text)?;
            Some(())
        }),
    },
    Recorded {
        name: "decay_all",
        get: |c| c.decay_all.to_string(),
        adopt: None,
    },
    Recorded {
        name: "groups",
        get: |c| groups_text(&c.groups),
        adopt: None,
    },
];

/// The recorded options of `config`: `(name, value)` in [`RECORDED`]'s order.
pub(crate) fn recorded(config: &OptimConfig) -> impl Iterator<Item = (&'static str, String)> + '_ {
    RECORDED.iter().map(move |r| (r.name, (r.get)(config)))
}

/// Whether a load may adopt the saved value of option `name`.
pub(crate) fn adoptable(name: &str) -> bool {
    RECORDED.iter().any(|r| r.name == name && r.adopt.is_some())
}

/// `config` with the saved text of option `name`; `None` for an option that is never adopted
/// or a text that does not parse.
pub(crate) fn adopt(config: &OptimConfig, name: &str, text: &str) -> Option<OptimConfig> {
    let set = RECORDED.iter().find(|r| r.name == name)?.adopt?;
    let mut adopted = config.clone();
    set(&mut adopted, text)?;
    Some(adopted)
}

/// Checks the options of `config` that are the adapter's own (the core checks the rest).
pub(crate) fn check(config: &OptimConfig) -> Result<()> {
    if let Err(why) = config.schedule.validate() {
        bail!("homeadam: {why}");
    }
    if let Some(c) = config.max_grad_norm {
        check_max_norm(c)?;
    }
    check_groups(&config.groups)
}

/// The groups as text: `"prefix" (lr × s, weight_decay λ, …)` each, `;`-separated; `none`.
fn groups_text(groups: &[(String, GroupSettings)]) -> String {
    if groups.is_empty() {
        return "none".into();
    }
    let mut text = String::new();
    for (k, (prefix, s)) in groups.iter().enumerate() {
        let sep = if k == 0 { "" } else { "; " };
        let _ = write!(text, "{sep}{prefix:?} (lr × {}", s.lr_scale);
        for (name, value) in overrides(s.to_group(true)) {
            if let Some(value) = value {
                let _ = write!(text, ", {name} {value}");
            }
        }
        text.push(')');
    }
    text
}
