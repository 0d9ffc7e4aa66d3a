//! The performance table as a chart: CPU per call of each command as instructions (callgrind,
//! exact whatever the machine's load), as a multiple of the C floor module's. The figures come
//! from `make plots-perf` (scripts/plots-perf.sh), in docs/src/img/performance.tsv:
//! `# key: value` header lines, then `run<TAB>name<TAB>instructions` lines, `run` being `module`
//! (this module, SET, the floor, a Lua GCRA script) or `redis-cell` (redis-cell loaded instead of
//! this module, with SET and the floor counted again in that run).

use plotters::prelude::*;

use crate::draw::{ADMITTED, GREY, LINE, Provenance, frame, with_comment};

pub struct Row {
    pub run: String,
    pub name: String,
    pub instructions: f64,
}

pub struct Table {
    pub header: Vec<(String, String)>,
    pub rows: Vec<Row>,
}

pub const FLOOR: &str = "module floor (floor.c)";

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
        if let [run, name, instructions] = f[..] {
            let instructions = instructions.parse::<f64>().map_err(|e| format!("{line:?}: {e}"))?;
            rows.push(Row { run: run.into(), name: name.into(), instructions });
        }
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
    fn floor(&self, run: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.run == run && r.name == FLOOR).map(|r| r.instructions)
    }
}

fn colour(run: &str, name: &str) -> RGBColor {
    if run == "redis-cell" {
        RGBColor(255, 127, 14)
    } else if name.starts_with("Lua") {
        RGBColor(214, 39, 40)
    } else if name.starts_with("CL.") {
        LINE
    } else {
        GREY
    }
}

/// One bar per command: its instructions per call ÷ the floor's in the same run.
pub fn chart(table: &Table) -> Result<String, Box<dyn std::error::Error>> {
    let rows: Vec<(&Row, f64)> = chart_rows(table)
        .iter()
        .filter_map(|(run, name)| table.rows.iter().find(|r| &r.run == run && &r.name == name))
        .filter_map(|r| table.floor(&r.run).map(|f| (r, r.instructions / f)))
        .collect();
    let max = rows.iter().map(|(_, x)| *x).fold(1.0, f64::max);
    let n = rows.len();
    let prov = Provenance { command: table.get("command"), server: table.get("server"), date: table.get("date") };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 150 + 40 * n as u32)).into_drawing_area();
        let body = frame(
            &root,
            "CPU per call: instructions, as a multiple of the C floor module",
            &format!(
                "{}.\nThe floor (bench/floor.c): read a key, rewrite it in place, set its absolute expiry, replicate once, reply five integers. redis-cell ran\non its own server (it registers CL.THROTTLE too); every run counts SET and the floor again.",
                table.get("method")
            ),
            &prov,
        )?;
        let names: Vec<String> = rows
            .iter()
            .map(|(r, _)| if r.run == "redis-cell" { format!("redis-cell {}", r.name) } else { r.name.clone() })
            .collect();
        let mut chart = bar_axes(
            &body,
            max * 1.35,
            &names,
            200,
            "{:.0}x",
            "instructions per call ÷ the floor's (callgrind, the server's call() only; 1x = the floor)",
        )?;
        for (i, (r, ratio)) in rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let c = colour(&r.run, &r.name);
            chart.draw_series(std::iter::once(Rectangle::new([(0.0, y + 0.2), (*ratio, y + 0.8)], c.filled())))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{ratio:.2}x  ({:.0} instructions)", r.instructions),
                (ratio + max * 0.01, y + 0.62),
                ("sans-serif", 12),
            )))?;
        }
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(1.0, 0.0), (1.0, n as f64)],
            ADMITTED.stroke_width(1),
        )))?;
        root.present()?;
    }
    Ok(with_comment(svg, &prov, "Figures: docs/src/img/performance.tsv, written by the same command"))
}

/// Axes for horizontal bars, one row per name (top to bottom), x from 0 to `x_max` labelled as
/// multiples (`x_format`: "{:.0}x" or "{:.1}x").
pub fn bar_axes<'a, 'b>(
    body: &'b DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    x_max: f64,
    names: &[String],
    y_area: u32,
    x_format: &str,
    x_desc: &str,
) -> Result<
    ChartContext<
        'b,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
    >,
    Box<dyn std::error::Error>,
> {
    let n = names.len();
    let mut chart = ChartBuilder::on(body)
        .margin_left(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(y_area)
        .build_cartesian_2d(0f64..x_max, 0f64..n as f64)?;
    let one_decimal = x_format.contains(".1");
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .disable_y_mesh()
        .y_labels(2 * n + 1)
        .y_label_formatter(&|y| {
            let k = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 0.01 && k < n { names[n - 1 - k].clone() } else { String::new() }
        })
        .y_label_style(("sans-serif", 13))
        .x_label_formatter(&|x| if one_decimal { format!("{x:.1}x") } else { format!("{x:.0}x") })
        .x_desc(x_desc)
        .axis_desc_style(("sans-serif", 13))
        .draw()?;
    Ok(chart)
}

// ---------------------------------------------------------------------------------------------
// The figures the manual and the README quote, written from the same table as the chart (so the
// picture and the text are one run): each between `<!-- perf:NAME …-->` and `<!-- end perf:NAME -->`.

/// Scenario names of bench/instructions.sh that the text quotes.
pub const WHOLE_FLOOR: &str = "module floor (whole)";
pub const RANDOM_KEYS: &str = "CL.THROTTLE, 100k limiters (whole)";
pub const RANDOM_RELOADED: &str = "CL.THROTTLE, 100k reloaded (whole)";

/// `12345.0` as `12,345`.
pub fn thousands(n: f64) -> String {
    let digits = format!("{:.0}", n.round());
    let (sign, digits) = digits.strip_prefix('-').map_or(("", digits.as_str()), |d| ("-", d));
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    format!("{sign}{out}")
}

impl Table {
    fn ir(&self, run: &str, name: &str) -> Result<f64, String> {
        self.rows
            .iter()
            .find(|r| r.run == run && r.name == name)
            .map(|r| r.instructions)
            .ok_or_else(|| format!("performance.tsv has no {run} row {name:?} (run `make plots-perf`)"))
    }
    /// `name`'s instructions ÷ its run's floor, as `1.09×`.
    fn times(&self, run: &str, name: &str, base: &str) -> Result<String, String> {
        Ok(format!("{:.2}×", self.ir(run, name)? / self.ir(run, base)?))
    }
    fn x_floor(&self, name: &str) -> Result<String, String> {
        self.times("module", name, FLOOR)
    }
    /// The server and date line of the run, for the text.
    fn run_words(&self) -> String {
        let server = self.get("server");
        let server = server.split(" with ").next().unwrap_or(&server).to_string();
        format!("{server}, {}", self.get("date"))
    }
}

/// The README's sentence of figures.
fn readme(t: &Table) -> Result<String, String> {
    Ok(format!(
        "In instructions per call (callgrind, a hot key; one `make plots-perf` run: {}):\nCL.THROTTLE {} that floor, CL.BUCKET {}, CL.COUNTER {}, CL.QUOTA {}, CL.WINDOW {} (it replicates two\ncommands); random keys among 100,000 limiters {}, and {} after `DEBUG RELOAD`.\nredis-cell's CL.THROTTLE costs {} the floor, a plain Lua GCRA script {}.\n",
        t.run_words(),
        t.x_floor("CL.THROTTLE")?,
        t.x_floor("CL.BUCKET")?,
        t.x_floor("CL.COUNTER")?,
        t.x_floor("CL.QUOTA")?,
        t.x_floor("CL.WINDOW limit 100")?,
        t.times("module", RANDOM_KEYS, WHOLE_FLOOR)?,
        t.times("module", RANDOM_RELOADED, WHOLE_FLOOR)?,
        t.times("redis-cell", "CL.THROTTLE", FLOOR)?,
        t.x_floor("Lua GCRA (EVALSHA)")?,
    ))
}

/// docs/src/performance.md: the instruction tables.
fn performance_page(t: &Table) -> Result<String, String> {
    let set = "SET PX (baseline)";
    let mut s = format!(
        "Instructions: one `make plots-perf` run ({}; floor {}, SET PX {} instructions a call):\n\n\
         | command (hot key) | instructions per call | × floor | × SET PX | target (× floor, SPEC) |\n|---|---|---|---|---|\n",
        t.run_words(),
        thousands(t.ir("module", FLOOR)?),
        thousands(t.ir("module", set)?),
    );
    let rows: [(&str, &str, &str); 8] = [
        ("CL.THROTTLE", "CL.THROTTLE", "≤ 1.1×"),
        ("CL.BUCKET", "CL.BUCKET", "≤ 1.15×"),
        ("CL.COUNTER", "CL.COUNTER", "≤ 1.15×"),
        ("CL.QUOTA (`PER MONTH`)", "CL.QUOTA", "≤ 1.2×"),
        ("CL.QUOTA (`PER MONTH TZ Europe/Berlin ANCHOR …`)", "CL.QUOTA zone + anchor", "≤ 1.2×"),
        ("CL.WINDOW, limit 100", "CL.WINDOW limit 100", "≤ 1.5×"),
        ("CL.PACE", "CL.PACE", "—"),
        ("a Lua GCRA script (`EVALSHA`, its nested GET/TIME/SET included), for reference", "Lua GCRA (EVALSHA)", "—"),
    ];
    for (label, name, target) in rows {
        s += &format!(
            "| {label} | {} | {} | {} | {target} |\n",
            thousands(t.ir("module", name)?),
            t.x_floor(name)?,
            t.times("module", name, set)?
        );
    }
    s += &format!(
        "| CL.THROTTLE denied (events off / `Ed`) | {} / {} | {} / {} | | — |\n",
        thousands(t.ir("module", "CL.THROTTLE denied")?),
        thousands(t.ir("module", "CL.THROTTLE denied, events")?),
        t.x_floor("CL.THROTTLE denied")?,
        t.x_floor("CL.THROTTLE denied, events")?,
    );
    s += &format!(
        "| redis-cell's CL.THROTTLE (on a server of its own; floor {} there) | {} | {} | {} | CL.THROTTLE ≤ 0.5× this: {:.2}× |\n",
        thousands(t.ir("redis-cell", FLOOR)?),
        thousands(t.ir("redis-cell", "CL.THROTTLE")?),
        t.times("redis-cell", "CL.THROTTLE", FLOOR)?,
        t.times("redis-cell", "CL.THROTTLE", set)?,
        t.ir("module", "CL.THROTTLE")? / t.ir("redis-cell", "CL.THROTTLE")?,
    );
    s += &format!(
        "| CL.THROTTLE on random keys among 100,000 live limiters (counted from `processCommand`, against the floor on a hot key counted so: {}; [At scale](#at-scale) compares with the floor on as many keys) | {} | {} | | — |\n",
        thousands(t.ir("module", WHOLE_FLOOR)?),
        thousands(t.ir("module", RANDOM_KEYS)?),
        t.times("module", RANDOM_KEYS, WHOLE_FLOOR)?,
    );
    s += &format!(
        "| the same after `DEBUG RELOAD` (every value compact) | {} | {} | | — |\n",
        thousands(t.ir("module", RANDOM_RELOADED)?),
        t.times("module", RANDOM_RELOADED, WHOLE_FLOOR)?,
    );
    s += "\n| CL.ALL with N limiters (CL.THROTTLE specs, one user's keys) | instructions | vs N single calls + one floor | target |\n|---|---|---|---|\n";
    let single = t.ir("module", "CL.THROTTLE")?;
    let floor = t.ir("module", FLOOR)?;
    for n in [1u32, 3, 8] {
        let name = if n == 1 { "CL.ALL 1 limiter".to_string() } else { format!("CL.ALL {n} limiters") };
        let ir = t.ir("module", &name)?;
        s += &format!("| {n} | {} | {:.2}× | ≤ 1× |\n", thousands(ir), ir / (f64::from(n) * single + floor));
    }
    Ok(s)
}

/// docs/src/pictures.md: the chart's figures under it.
fn pictures_page(t: &Table) -> Result<String, String> {
    let version = t.get("server");
    let cell = version.split("(redis-cell ").nth(1).and_then(|v| v.split(' ').next()).unwrap_or("?");
    let mut s = format!(
        "CPU per call as instructions counted by callgrind (`bench/instructions.sh`: the server's `call()`\n\
         only, a hot key, every call admitted and written), so the figures do not depend on the\n\
         machine's speed (runs of one build differ by up to about 2% on a loaded machine); each bar is a\n\
         multiple of the floor module (`bench/floor.c`, {} instructions) counted in the same run\n\
         (one `make plots-perf` run: {}).\n\
         redis-cell ({cell}, built from source) registers `CL.THROTTLE` too, so it ran on a server of its\n\
         own, with SET and the floor counted again there ({}). The figures\n\
         (`docs/src/img/performance.tsv`, written by `make plots-perf` with\n\
         `REDIS_CELL_SRC=<a checkout of brandur/redis-cell>`, or `REDIS_CELL=<its built .so>` inside that checkout):\n\n\
         | command | instructions per call | × floor |\n|---|---|---|\n",
        thousands(t.ir("module", FLOOR)?),
        t.run_words(),
        thousands(t.ir("redis-cell", FLOOR)?),
    );
    for (run, name) in chart_rows(t) {
        let label = match (run.as_str(), name.as_str()) {
            ("redis-cell", n) => format!("redis-cell {n}"),
            (_, "SET PX (baseline)") => "SET PX".into(),
            (_, "Lua GCRA (EVALSHA)") => "a Lua GCRA script (`EVALSHA`, its `redis.call`s included)".into(),
            (_, "CL.QUOTA") => "CL.QUOTA `PER MONTH`".into(),
            (_, "CL.QUOTA zone + anchor") => "CL.QUOTA `PER MONTH TZ Europe/Berlin ANCHOR …`".into(),
            (_, "CL.ALL 3 limiters") => "CL.ALL, 3 THROTTLE limiters".into(),
            (_, "CL.WINDOW limit 100") => "CL.WINDOW, limit 100".into(),
            (_, n) => n.into(),
        };
        s += &format!("| {label} | {} | {} |\n", thousands(t.ir(&run, &name)?), t.times(&run, &name, FLOOR)?);
    }
    let thr = t.ir("module", "CL.THROTTLE")?;
    s += &format!(
        "\n`CL.THROTTLE` costs {:.2}× redis-cell's instructions for the same reply and stored state (the\n\
         SPEC asks for at most 0.5×), and {:.2}× the Lua script's.\n",
        thr / t.ir("redis-cell", "CL.THROTTLE")?,
        thr / t.ir("module", "Lua GCRA (EVALSHA)")?,
    );
    Ok(s)
}

/// The rows the chart draws, in its order: every row but the redis-cell run's own baselines
/// (SET, the floor: those only scale it) and the scenarios counted from `processCommand`.
pub fn chart_rows(t: &Table) -> Vec<(String, String)> {
    let mut rows: Vec<&Row> = t
        .rows
        .iter()
        .filter(|r| r.run == "module" || !(r.name.starts_with("SET") || r.name == FLOOR))
        .filter(|r| {
            !r.name.contains("(whole)")
                && !r.name.contains("denied")
                && !r.name.starts_with("CL.ALL 1 ")
                && !r.name.starts_with("CL.ALL 8 ")
        })
        .filter(|r| t.floor(&r.run).is_some())
        .collect();
    // The baselines, then CL.THROTTLE next to what it replaces (redis-cell, a Lua script), then
    // the other commands as measured.
    let rank = |r: &Row| match (r.run.as_str(), r.name.as_str()) {
        (_, n) if n.starts_with("SET") => 0,
        (_, FLOOR) => 1,
        ("module", "CL.THROTTLE") => 2,
        ("redis-cell", _) => 3,
        (_, n) if n.starts_with("Lua") => 4,
        _ => 5,
    };
    rows.sort_by_key(|r| rank(r));
    rows.into_iter().map(|r| (r.run.clone(), r.name.clone())).collect()
}

/// Each generated block: the file (from the workspace root), its name, its text.
pub fn blocks(t: &Table) -> Result<Vec<(&'static str, &'static str, String)>, String> {
    Ok(vec![
        ("README.md", "readme", readme(t)?),
        ("docs/src/performance.md", "instructions", performance_page(t)?),
        ("docs/src/pictures.md", "chart", pictures_page(t)?),
    ])
}

fn markers(name: &str) -> (String, String) {
    // The scale table's figures come from a file of their own (bench/scale.sh's).
    let tsv = if name == "scale" { "scale.tsv" } else { "performance.tsv" };
    (
        format!("<!-- perf:{name}: written by `make plots-perf` from docs/src/img/{tsv}; do not edit -->\n"),
        format!("<!-- end perf:{name} -->"),
    )
}

/// `text` with the block `name` replaced by `body`.
pub fn replace_block(text: &str, name: &str, body: &str) -> Result<String, String> {
    let (begin, end) = markers(name);
    let i = text.find(&begin).ok_or_else(|| format!("no {begin:?}"))? + begin.len();
    let j = i + text[i..].find(&end).ok_or_else(|| format!("no {end:?}"))?;
    Ok(format!("{}{}{}", &text[..i], body, &text[j..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(7102.0), "7,102");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }

    /// The README's and the manual's figures are those of the committed performance.tsv, the run
    /// the chart is drawn from: a new `make plots-perf` rewrites all of them, and an edit of one
    /// by hand fails here.
    #[test]
    fn the_quoted_figures_are_the_charts_run() {
        let root = crate::workspace();
        let tsv = std::fs::read_to_string(root.join("docs/src/img/performance.tsv")).unwrap();
        let table = parse(&tsv).unwrap();
        for (file, name, body) in blocks(&table).unwrap() {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            assert_eq!(
                replace_block(&text, name, &body).unwrap(),
                text,
                "{file}: the block perf:{name} differs from docs/src/img/performance.tsv (run `make plots-perf`, or `cargo run -p redis-throttle-plots -- --only performance`)"
            );
        }
        // The chart in the repository is drawn from that file too.
        let svg = std::fs::read_to_string(root.join("docs/src/img/performance.svg")).unwrap();
        assert_eq!(svg, chart(&table).unwrap(), "performance.svg is not the chart of performance.tsv");
    }
}
