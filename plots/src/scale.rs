//! The cost at scale as a chart: CL.THROTTLE on random keys among 1,000 / 100,000 / 1,000,000
//! live limiters, warm and after `DEBUG RELOAD`, as a multiple of the floor module on as many
//! keys, in instructions (callgrind, whole commands) and in time. The figures come from
//! `bench/scale.sh` (`make plots-perf` runs it with `SCALE_RESULTS=docs/src/img/scale.tsv`):
//! `# key: value` header lines, then `keys state dbsize floor_dbsize module_ir floor_ir
//! module_usec floor_usec` lines, tab-separated.

use plotters::prelude::*;

use crate::draw::{ADMITTED, GREY, LINE, Provenance, frame, with_comment};
use crate::perf::{bar_axes, thousands};

pub struct Row {
    pub keys: u64,
    pub state: String,
    pub dbsize: u64,
    pub floor_dbsize: u64,
    pub module_ir: f64,
    pub floor_ir: f64,
    pub module_usec: f64,
    pub floor_usec: f64,
}

pub struct Table {
    pub header: Vec<(String, String)>,
    pub rows: Vec<Row>,
}

pub fn parse(text: &str) -> Result<Table, String> {
    let mut header = Vec::new();
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            if let Some((k, v)) = rest.split_once(':') {
                header.push((k.trim().to_string(), v.trim().to_string()));
            }
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        let [keys, state, dbsize, floor_dbsize, module_ir, floor_ir, module_usec, floor_usec] = f[..] else {
            continue;
        };
        let int = |s: &str| s.parse::<u64>().map_err(|e| format!("{line:?}: {e}"));
        let num = |s: &str| s.parse::<f64>().map_err(|e| format!("{line:?}: {e}"));
        rows.push(Row {
            keys: int(keys)?,
            state: state.to_string(),
            dbsize: int(dbsize)?,
            floor_dbsize: int(floor_dbsize)?,
            module_ir: num(module_ir)?,
            floor_ir: num(floor_ir)?,
            module_usec: num(module_usec)?,
            floor_usec: num(floor_usec)?,
        });
    }
    if rows.is_empty() {
        return Err("no rows".into());
    }
    Ok(Table { header, rows })
}

impl Table {
    pub fn get(&self, key: &str) -> String {
        self.header.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).unwrap_or_default()
    }
}

impl Row {
    fn label(&self) -> String {
        format!("{} keys, {}", thousands(self.keys as f64), self.state)
    }
    fn x_ir(&self) -> f64 {
        self.module_ir / self.floor_ir
    }
    fn x_time(&self) -> f64 {
        self.module_usec / self.floor_usec
    }
}

/// Two bars per row (instructions, time), each CL.THROTTLE's cost ÷ the floor's on as many keys.
pub fn chart(table: &Table) -> Result<String, Box<dyn std::error::Error>> {
    let rows = &table.rows;
    let n = rows.len();
    let max = rows.iter().flat_map(|r| [r.x_ir(), r.x_time()]).fold(1.2, f64::max);
    let prov = Provenance { command: table.get("command"), server: table.get("server"), date: table.get("date") };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 190 + 56 * n as u32)).into_drawing_area();
        let body = frame(
            &root,
            "CL.THROTTLE at scale, as a multiple of the C floor module on as many live keys",
            &format!(
                "Random keys among N live limiters ({}: every call admitted and written), warm and after DEBUG RELOAD;\n\
                 a module-less replica attached. Blue: instructions ({}); grey: time.\n\
                 The floor (bench/floor.c, FLOOR.TOUCH) reads, rewrites in place, sets the expiry and replicates, on its own N live keys.",
                table.get("limiter"),
                table.get("method").split(';').next().unwrap_or_default(),
            ),
            &prov,
        )?;
        let names: Vec<String> = rows.iter().map(Row::label).collect();
        let mut chart = bar_axes(
            &body,
            max * 1.45,
            &names,
            190,
            "{:.1}x",
            "CL.THROTTLE ÷ the floor on as many keys (1x = the floor; the SPEC's target: 1.1x)",
        )?;
        for (i, r) in rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            for (bar, (ratio, colour, words)) in [
                (
                    r.x_ir(),
                    LINE,
                    format!(
                        "{:.2}x instructions ({} vs {}), DBSIZE {}",
                        r.x_ir(),
                        thousands(r.module_ir),
                        thousands(r.floor_ir),
                        thousands(r.dbsize as f64)
                    ),
                ),
                (r.x_time(), GREY, format!("{:.2}x time ({:.2} vs {:.2} µs)", r.x_time(), r.module_usec, r.floor_usec)),
            ]
            .into_iter()
            .enumerate()
            {
                let top = y + 0.88 - 0.38 * bar as f64;
                chart
                    .draw_series(std::iter::once(Rectangle::new([(0.0, top - 0.34), (ratio, top)], colour.filled())))?;
                chart.draw_series(std::iter::once(Text::new(
                    words,
                    (ratio + max * 0.01, top - 0.06),
                    ("sans-serif", 12),
                )))?;
            }
        }
        for (x, style) in [(1.0, ADMITTED.stroke_width(1)), (1.1, RED.stroke_width(1))] {
            chart.draw_series(std::iter::once(PathElement::new(vec![(x, 0.0), (x, n as f64)], style)))?;
        }
        root.present()?;
    }
    Ok(with_comment(svg, &prov, "Figures: docs/src/img/scale.tsv, written by the same command"))
}

/// docs/src/performance.md's table of the same run.
pub fn page(t: &Table) -> String {
    let server = t.get("server");
    let mut s = format!(
        "One `bench/scale.sh` run ({server}, {}; `{}`, every call admitted and written; a module-less\n\
         replica attached; instructions counted by callgrind from `processCommand`, time from `INFO commandstats`):\n\n\
         | live keys | state | DBSIZE (module / floor) | instructions: CL.THROTTLE / floor | × floor | µs per call: CL.THROTTLE / floor | × floor |\n\
         |---|---|---|---|---|---|---|\n",
        t.get("date"),
        t.get("limiter"),
    );
    for r in &t.rows {
        s += &format!(
            "| {} | {} | {} / {} | {} / {} | {:.2}× | {:.2} / {:.2} | {:.2}× |\n",
            thousands(r.keys as f64),
            r.state,
            thousands(r.dbsize as f64),
            thousands(r.floor_dbsize as f64),
            thousands(r.module_ir),
            thousands(r.floor_ir),
            r.x_ir(),
            r.module_usec,
            r.floor_usec,
            r.x_time(),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::replace_block;

    /// The manual's scale table and the chart in the repository are those of the committed
    /// scale.tsv: a new `make plots-perf` rewrites both, and an edit of one by hand fails here.
    #[test]
    fn the_scale_figures_are_the_charts_run() {
        let root = crate::workspace();
        let tsv = std::fs::read_to_string(root.join("docs/src/img/scale.tsv")).unwrap();
        let table = parse(&tsv).unwrap();
        assert!(table.rows.iter().all(|r| r.dbsize >= r.keys * 9 / 10), "the keys stayed live");
        let text = std::fs::read_to_string(root.join("docs/src/performance.md")).unwrap();
        assert_eq!(
            replace_block(&text, "scale", &page(&table)).unwrap(),
            text,
            "docs/src/performance.md: the block perf:scale differs from docs/src/img/scale.tsv (run `make plots-perf`, or `cargo run -p redis-throttle-plots -- --only scale`)"
        );
        let svg = std::fs::read_to_string(root.join("docs/src/img/scale.svg")).unwrap();
        assert_eq!(svg, chart(&table).unwrap(), "scale.svg is not the chart of scale.tsv");
    }
}
