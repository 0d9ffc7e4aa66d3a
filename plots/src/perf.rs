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
            let instructions = instructions
                .parse::<f64>()
                .map_err(|e| format!("{line:?}: {e}"))?;
            rows.push(Row {
                run: run.into(),
                name: name.into(),
                instructions,
            });
        }
    }
    if rows.is_empty() {
        return Err("no rows".into());
    }
    Ok(Table { header, rows })
}

impl Table {
    pub fn get(&self, key: &str) -> String {
        self.header
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
    fn floor(&self, run: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|r| r.run == run && r.name == FLOOR)
            .map(|r| r.instructions)
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
    // Every row but the redis-cell run's own baselines (SET, the floor): those only scale it.
    let mut rows: Vec<(&Row, f64)> = table
        .rows
        .iter()
        .filter(|r| r.run == "module" || !(r.name.starts_with("SET") || r.name == FLOOR))
        .filter_map(|r| table.floor(&r.run).map(|f| (r, r.instructions / f)))
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
    rows.sort_by_key(|(r, _)| rank(r));
    let max = rows.iter().map(|(_, x)| *x).fold(1.0, f64::max);
    let n = rows.len();
    let prov = Provenance {
        command: table.get("command"),
        server: table.get("server"),
        date: table.get("date"),
    };
    let mut svg = String::new();
    {
        let root =
            SVGBackend::with_string(&mut svg, (1000, 150 + 40 * n as u32)).into_drawing_area();
        let body = frame(
            &root,
            "CPU per call: instructions, as a multiple of the C floor module",
            &format!(
                "{}.\nThe floor (bench/floor.c): read a key, rewrite it in place, set its absolute expiry, replicate once, reply five integers. redis-cell ran\non its own server (it registers CL.THROTTLE too); every run counts SET and the floor again.",
                table.get("method")
            ),
            &prov,
        )?;
        let mut chart = ChartBuilder::on(&body)
            .margin_left(12)
            .margin_right(30)
            .x_label_area_size(40)
            .y_label_area_size(200)
            .build_cartesian_2d(0f64..max * 1.35, 0f64..n as f64)?;
        let names: Vec<String> = rows
            .iter()
            .map(|(r, _)| {
                if r.run == "redis-cell" {
                    format!("redis-cell {}", r.name)
                } else {
                    r.name.clone()
                }
            })
            .collect();
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
            .x_label_formatter(&|x| format!("{x:.0}x"))
            .x_desc("instructions per call ÷ the floor's (callgrind, the server's call() only; 1x = the floor)")
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        for (i, (r, ratio)) in rows.iter().enumerate() {
            let y = (n - 1 - i) as f64;
            let c = colour(&r.run, &r.name);
            chart.draw_series(std::iter::once(Rectangle::new(
                [(0.0, y + 0.2), (*ratio, y + 0.8)],
                c.filled(),
            )))?;
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
    Ok(with_comment(
        svg,
        &prov,
        "Figures: docs/src/img/performance.tsv, written by the same command",
    ))
}
