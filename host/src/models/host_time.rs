//! The CPU's time inside the models' own CUDA ops, by op and phase of the step, for
//! `homeadam bench-train`.
//!
//! A step whose GPU timeline is longer than its kernels is bound by the host: the GPU waits
//! while the CPU prepares the next launch. Whether that time goes to our ops (cuDNN's calls,
//! descriptor and workspace handling, launches) or to candle's (its graph, the zeros and sums of
//! its gradient store, allocations) decides what to make faster; a phase's host time minus its
//! ops' time is candle's share. Recording is off unless [`start`] turned it on for this thread,
//! and then a [`span`] costs a thread-local lookup and two clock reads.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Calls and host seconds of one op in one phase, over the recorded steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OpTime {
    /// The step's phase the calls were made in (`forward`, `backward`, …).
    pub phase: &'static str,
    /// The op's name (the candle op's, with the pass where one op makes several).
    pub op: &'static str,
    /// Calls over the recorded steps.
    pub calls: u64,
    /// Seconds on the CPU inside those calls.
    pub seconds: f64,
}

/// What this thread is recording.
struct Recording {
    phase: &'static str,
    /// The phases in the order they were first set.
    order: Vec<&'static str>,
    ops: BTreeMap<(&'static str, &'static str), (u64, Duration)>,
}

thread_local! {
    static RECORDING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Starts recording on this thread, in `phase`, forgetting anything recorded before.
pub fn start(phase: &'static str) {
    RECORDING.with(|r| {
        *r.borrow_mut() = Some(Recording {
            phase,
            order: vec![phase],
            ops: BTreeMap::new(),
        })
    });
}

/// Attributes the spans that follow to `phase` (nothing when not recording).
pub fn set_phase(phase: &'static str) {
    RECORDING.with(|r| {
        if let Some(rec) = r.borrow_mut().as_mut() {
            rec.phase = phase;
            if !rec.order.contains(&phase) {
                rec.order.push(phase);
            }
        }
    });
}

/// Stops recording and returns what was recorded, by phase in the order the phases were first
/// set and then by op name.
pub fn finish() -> Vec<OpTime> {
    let Some(rec) = RECORDING.with(|r| r.borrow_mut().take()) else {
        return Vec::new();
    };
    let mut times: Vec<OpTime> = rec
        .ops
        .into_iter()
        .map(|((phase, op), (calls, time))| OpTime {
            phase,
            op,
            calls,
            seconds: time.as_secs_f64(),
        })
        .collect();
    times.sort_by_key(|t| rec.order.iter().position(|&p| p == t.phase));
    times
}

/// The time from here to the guard's drop, added to `op` in the current phase when recording.
pub fn span(op: &'static str) -> Span {
    let recording = RECORDING.with(|r| r.borrow().is_some());
    Span {
        op,
        start: recording.then(Instant::now),
    }
}

/// An op's call being timed (see [`span`]).
pub struct Span {
    op: &'static str,
    start: Option<Instant>,
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(start) = self.start else { return };
        let elapsed = start.elapsed();
        RECORDING.with(|r| {
            if let Some(rec) = r.borrow_mut().as_mut() {
                let entry = rec.ops.entry((rec.phase, self.op)).or_default();
                entry.0 += 1;
                entry.1 += elapsed;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_count_only_while_recording_and_by_phase() {
        drop(span("before"));
        start("forward");
        drop(span("b"));
        drop(span("a"));
        drop(span("b"));
        set_phase("backward");
        {
            let _s = span("a");
            std::thread::sleep(Duration::from_millis(2));
        }
        let times = finish();
        let brief: Vec<_> = times.iter().map(|t| (t.phase, t.op, t.calls)).collect();
        assert_eq!(
            brief,
            [("forward", "a", 1), ("forward", "b", 2), ("backward", "a", 1)]
        );
        assert!(times[2].seconds >= 0.002, "{times:?}");
        drop(span("after"));
        assert!(finish().is_empty());
    }

    #[test]
    fn a_span_open_when_recording_stops_is_dropped_quietly() {
        start("forward");
        let s = span("open");
        assert!(finish().is_empty());
        drop(s);
        assert!(finish().is_empty());
    }
}
