//! The core's step over every rule × layout × finite check (`core/benches/matrix.rs`), as the
//! tables of BENCHMARKS.md's "Core step: every rule × layout": one table per instruction set,
//! each cell a step's time over the plain f32 AdamW loop's in the same run; the speed goals as
//! ratios between cells; and, named at the end, every cell slower than the table that
//! BENCHMARKS.md records by more than the run's noise.

use std::collections::BTreeMap;

use crate::run;

/// The line BENCHMARKS.md puts before the recorded table of one instruction set.
fn marker(simd: &str) -> String {
    format!("<!-- core-matrix {simd} -->")
}

/// One row of the bench's output: a rule × check × layout and its ratio in each round.
struct Measured {
    simd: String,
    rule: String,
    check: String,
    layout: String,
    rounds: Vec<f64>,
}

impl Measured {
    /// The least round: what the tables show (a busy neighbour only ever slows a round).
    fn ratio(&self) -> f64 {
        self.rounds.iter().copied().fold(f64::INFINITY, f64::min)
    }

    /// How far the rounds lie apart: the largest over the least, less one.
    fn spread(&self) -> f64 {
        let most = self.rounds.iter().copied().fold(0.0, f64::max);
        most / self.ratio() - 1.0
    }
}

fn parse(tsv: &str) -> Vec<Measured> {
    tsv.lines()
        .filter_map(|line| {
            let mut fields = line.split('\t');
            let (simd, rule, check, layout) =
                (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
            let rounds: Vec<f64> = fields.filter_map(|f| f.parse().ok()).collect();
            (!rounds.is_empty()).then(|| Measured {
                simd: simd.into(),
                rule: rule.into(),
                check: check.into(),
                layout: layout.into(),
                rounds,
            })
        })
        .collect()
}

/// The cells of one instruction set: (rule, check) → layout → ratio.
type Cells = BTreeMap<(String, String), BTreeMap<String, f64>>;

/// The recorded table of `simd` in `benchmarks` (BENCHMARKS.md), if it has one.
fn recorded(benchmarks: &str, simd: &str) -> Cells {
    let mut cells = Cells::new();
    let Some(start) = benchmarks.find(&marker(simd)) else {
        return cells;
    };
    let fields = |line: &str| -> Vec<String> {
        line.trim_matches('|')
            .split('|')
            .map(|f| f.trim().to_string())
            .collect()
    };
    let mut table = benchmarks[start..]
        .lines()
        .skip(1)
        .skip_while(|l| !l.starts_with('|'));
    // The header names the layouts after the rule and the check.
    let Some(header) = table.next() else {
        return cells;
    };
    let layouts: Vec<String> = fields(header).into_iter().skip(2).collect();
    for line in table.take_while(|l| l.starts_with('|')).skip(1) {
        let fields = fields(line);
        let [rule, check, values @ ..] = fields.as_slice() else {
            continue;
        };
        let row = cells.entry((rule.to_string(), check.to_string())).or_default();
        for (layout, value) in layouts.iter().zip(values) {
            if let Ok(v) = value.parse() {
                row.insert(layout.to_string(), v);
            }
        }
    }
    cells
}

/// The 90th percentile of the rows' spreads: the noise the regression test allows.
fn noise(rows: &[&Measured]) -> f64 {
    let mut spreads: Vec<f64> = rows.iter().map(|m| m.spread()).collect();
    spreads.sort_by(f64::total_cmp);
    spreads.get(spreads.len() * 9 / 10).copied().unwrap_or(0.0)
}

/// Runs the bench on every vector instruction set of this CPU and returns the tables, the
/// goals and the regressions against BENCHMARKS.md, as Markdown.
pub(crate) fn matrix() -> String {
    let out = crate::root().join("target/core-matrix.tsv");
    let out_arg = out.to_string_lossy().into_owned();
    let args = ["bench", "-p", "homeadam-core", "--bench", "matrix", "--"];
    run(
        "core matrix",
        "cargo",
        &[&args[..], &["--simd", "vector", "--out", &out_arg]].concat(),
    );
    let measured = parse(&std::fs::read_to_string(&out).unwrap_or_default());
    let benchmarks = std::fs::read_to_string(crate::root().join("BENCHMARKS.md")).unwrap_or_default();
    let mut simds: Vec<&str> = measured.iter().map(|m| m.simd.as_str()).collect();
    simds.dedup();
    let mut text = String::new();
    let mut regressions = Vec::new();
    for simd in simds {
        let rows: Vec<&Measured> = measured.iter().filter(|m| m.simd == simd).collect();
        let noise = noise(&rows);
        let cells = cells_of(&rows);
        text.push_str(&table(simd, &rows, &cells, noise));
        text.push_str(&goals(&cells));
        regressions.extend(slower(simd, &cells, &recorded(&benchmarks, simd), noise));
    }
    text.push_str(&match regressions.is_empty() {
        true => "\nNo cell slower than BENCHMARKS.md records by more than the noise.\n".to_string(),
        false => format!(
            "\nSlower than BENCHMARKS.md records by more than the noise:\n\n- {}\n",
            regressions.join("\n- ")
        ),
    });
    text
}

/// The measured rows as cells: each (rule, check)'s ratio per layout.
fn cells_of(rows: &[&Measured]) -> Cells {
    let mut cells = Cells::new();
    for m in rows {
        let row = cells.entry((m.rule.clone(), m.check.clone())).or_default();
        row.insert(m.layout.clone(), m.ratio());
    }
    cells
}

/// The cells of `now` slower than the same cells of `before` by more than `noise`, named.
fn slower(simd: &str, now: &Cells, before: &Cells, noise: f64) -> Vec<String> {
    let mut out = Vec::new();
    for (key @ (rule, check), row) in now {
        for (layout, &ratio) in row {
            let was = before.get(key).and_then(|r| r.get(layout));
            if let Some(&was) = was.filter(|&&was| ratio > was * (1.0 + noise)) {
                out.push(format!(
                    "{simd} {rule} {check} {layout}: {ratio:.2} (recorded {was:.2})"
                ));
            }
        }
    }
    out
}

/// The table of one instruction set, with its marker, as BENCHMARKS.md keeps it.
fn table(simd: &str, rows: &[&Measured], cells: &Cells, noise: f64) -> String {
    let rounds = rows.first().map_or(0, |m| m.rounds.len());
    // The bench's order of the layouts.
    let mut layouts: Vec<&str> = Vec::new();
    for m in rows {
        if !layouts.contains(&m.layout.as_str()) {
            layouts.push(&m.layout);
        }
    }
    let mut text = format!(
        "\n{simd}: one step over 16 M parameters (8 tensors), one thread, over the plain f32 AdamW \
         loop's time in the same run; the least of {rounds} rounds, each the median of 9 steps. \
         Noise (the 90th percentile of a row's spread between rounds): {:.0} %.\n\n{}\n",
        noise * 100.0,
        marker(simd)
    );
    text.push_str(&format!("| rule | check | {} |\n", layouts.join(" | ")));
    text.push_str(&format!("|---|---|{}\n", "---|".repeat(layouts.len())));
    for ((rule, check), row) in cells {
        let values: Vec<String> = layouts
            .iter()
            .map(|l| row.get(*l).map_or(String::new(), |v| format!("{v:.2}")))
            .collect();
        text.push_str(&format!("| {rule} | {check} | {} |\n", values.join(" | ")));
    }
    text
}

/// The speed goals of the core's step, as ratios between the cells of one table.
fn goals(cells: &Cells) -> String {
    let cell = |rule: &str, check: &str, layout: &str| {
        cells
            .get(&(rule.to_string(), check.to_string()))
            .and_then(|r| r.get(layout))
            .copied()
    };
    let mut text = String::from("\n| measure | trust | skip | goal | floor |\n|---|---|---|---|---|\n");
    let mut line = |what: &str, ratio: &dyn Fn(&str) -> Option<f64>, goal: &str, floor: &str| {
        let shown = |check| ratio(check).map_or("—".to_string(), |r| format!("{r:.2}"));
        text.push_str(&format!(
            "| {what} | {} | {} | {goal} | {floor} |\n",
            shown("trust"),
            shown("skip")
        ));
    };
    let over_adamw = |rule: &str, layout: &str, check: &str| {
        Some(cell(rule, check, layout)? / cell("adamw", check, "f32/f32/f32")?)
    };
    line(
        "HomeAdamW-ew f32 / AdamW f32",
        &|c| over_adamw("homeadamw-ew", "f32/f32/f32", c),
        "≤ 1.05",
        "1.10",
    );
    let mut rules: Vec<&str> = cells.keys().map(|(rule, _)| rule.as_str()).collect();
    rules.dedup();
    for rule in rules.iter().filter(|&&r| r != "adamw" && r != "homeadamw-ew") {
        line(
            &format!("{rule} f32 / AdamW f32"),
            &|c| over_adamw(rule, "f32/f32/f32", c),
            "≤ 1.10",
            "1.20",
        );
    }
    for rule in ["homeadamw-ew", "adamw"] {
        line(
            &format!("{rule} bf16/bf16/bf16 / AdamW f32"),
            &|c| over_adamw(rule, "bf16/bf16/bf16", c),
            "≤ 0.70",
            "0.90",
        );
    }
    for rule in ["adamw", "homeadamw-ew"] {
        line(
            &format!("{rule} q8 state / f32 state"),
            &|c| Some(cell(rule, c, "f32/f32/q8")? / cell(rule, c, "f32/f32/f32")?),
            "not above the last record",
            "",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_printed_table_reads_back_and_names_what_got_slower() {
        let tsv = "avx512\tadamw\ttrust\tf32/f32/f32\t0.950\t0.910\n\
                   avx512\tadamw\ttrust\tf32/f32/q8\t2.100\t2.200\n\
                   avx512\tlion\tskip\tbf16/bf16/bf16\t0.600\t0.660\n";
        let measured = parse(tsv);
        let rows: Vec<&Measured> = measured.iter().collect();
        let cells = cells_of(&rows);
        let text = table("avx512", &rows, &cells, noise(&rows));
        let back = recorded(&format!("# Benchmarks\n{text}\nMore text.\n"), "avx512");
        let cell = |rule: &str, check: &str, layout: &str| back[&(rule.into(), check.into())][layout];
        assert_eq!(cell("adamw", "trust", "f32/f32/f32"), 0.91);
        assert_eq!(cell("adamw", "trust", "f32/f32/q8"), 2.1);
        assert_eq!(cell("lion", "skip", "bf16/bf16/bf16"), 0.6);
        assert!(recorded(&text, "avx2").is_empty());
        assert!((noise(&rows) - 0.1).abs() < 1e-9, "{}", noise(&rows));
        let mut now = back.clone();
        let mut set = |rule: &str, check: &str, layout: &str, ratio: f64| {
            let row = now.get_mut(&(rule.into(), check.into())).unwrap();
            row.insert(layout.into(), ratio);
        };
        set("adamw", "trust", "f32/f32/f32", 1.05);
        set("lion", "skip", "bf16/bf16/bf16", 0.65);
        assert_eq!(
            slower("avx512", &now, &back, 0.1),
            ["avx512 adamw trust f32/f32/f32: 1.05 (recorded 0.91)"]
        );
    }
}
