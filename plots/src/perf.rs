//! The performance table as a chart: CPU per call of each command, as a multiple of the C floor
//! module measured in the same run. The figures come from `bench/run.sh` runs that
//! `scripts/plots-perf.sh` (`make plots-perf`) collected into a TSV file:
//! `# key: value` header lines, then `run<TAB>name<TAB>hot_us<TAB>rand_us<TAB>hot_rps<TAB>rand_rps`,
//! `run` being `module` (this module, the floor, SET, Lua) or `redis-cell` (redis-cell loaded
//! instead of this module, with its own floor and SET measured in that run).

use plotters::prelude::*;

use crate::draw::{ADMITTED, GREY, LINE, Provenance, frame, with_comment};

pub struct Row {
    pub run: String,
    pub name: String,
    pub hot_us: f64,
    pub rand_us: f64,
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
        if f.len() < 4 {
            continue;
        }
        let num = |s: &str| s.parse::<f64>().map_err(|e| format!("{line:?}: {e}"));
        rows.push(Row { run: f[0].into(), name: f[1].into(), hot_us: num(f[2])?, rand_us: num(f[3])? });
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
    fn floor(&self, run: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.run == run && r.name == FLOOR)
    }
}

fn colour(run: &str, name: &str) -> RGBColor {
    if run == "redis-cell" {
        RGBColor(255, 127, 14)
    } else if name.starts_with("Lua") {
        RGBColor(214, 39, 40)
    } else if name.starts_with("Twin") {
        RGBColor(148, 103, 189)
    } else if name.starts_with("CL.") {
        LINE
    } else {
        GREY
    }
}

/// Bars: hot key and random keys, each as a multiple of its run's floor.
pub fn chart(table: &Table) -> Result<String, Box<dyn std::error::Error>> {
    // Every row but the redis-cell run's own baselines (SET, the floor): those only scale it.
    let rows: Vec<&Row> = table
        .rows
        .iter()
        .filter(|r| r.run == "module" || !(r.name.starts_with("SET") || r.name == FLOOR))
        .collect();
    let ratio = |r: &Row| -> Option<(f64, f64)> { table.floor(&r.run).map(|f| (r.hot_us / f.hot_us, r.rand_us / f.rand_us)) };
    let max = rows.iter().filter_map(|r| ratio(r)).map(|(h, x)| h.max(x)).fold(1.0, f64::max);
    let n = rows.len();
    let prov = Provenance {
        command: table.get("command"),
        server: table.get("server"),
        date: table.get("date"),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 130 + 34 * n as u32)).into_drawing_area();
        let body = frame(
            &root,
            "CPU per call on the server, as a multiple of the C floor module",
            &format!(
                "{}. Each run measures SET and the floor (bench/floor.c) next to its commands; redis-cell ran on its own server (it also registers CL.THROTTLE).",
                table.get("method")
            ),
            &prov,
        )?;
        let mut chart = ChartBuilder::on(&body)
            .margin_left(12)
            .margin_right(30)
            .x_label_area_size(36)
            .y_label_area_size(230)
            .build_cartesian_2d(0f64..max * 1.3, 0f64..n as f64)?;
        let names: Vec<String> = rows
            .iter()
            .map(|r| if r.run == "redis-cell" { format!("redis-cell {}", r.name) } else { r.name.clone() })
            .collect();
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .y_labels(2 * n + 1)
            .y_label_formatter(&|y| {
                let k = y.floor() as usize;
                let frac = y - y.floor();
                if (frac - 0.5).abs() < 0.01 && k < n { names[n - 1 - k].clone() } else { String::new() }
            })
            .y_label_style(("sans-serif", 13))
            .x_desc("server CPU per call ÷ the floor's in the same run (INFO commandstats; 1.0 = the floor)")
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        for (i, r) in rows.iter().enumerate() {
            let Some((hot, rand)) = ratio(r) else { continue };
            let y = (n - 1 - i) as f64;
            let c = colour(&r.run, &r.name);
            chart.draw_series([
                Rectangle::new([(0.0, y + 0.52), (hot, y + 0.88)], c.filled()),
                Rectangle::new([(0.0, y + 0.12), (rand, y + 0.48)], c.mix(0.4).filled()),
            ])?;
            chart.draw_series([
                Text::new(format!("{:.2}x  {:.2} µs (hot key)", hot, r.hot_us), (hot + max * 0.01, y + 0.86), ("sans-serif", 11)),
                Text::new(format!("{:.2}x  {:.2} µs (random keys)", rand, r.rand_us), (rand + max * 0.01, y + 0.46), ("sans-serif", 11).into_font().color(&GREY)),
            ])?;
        }
        chart.draw_series(std::iter::once(PathElement::new(vec![(1.0, 0.0), (1.0, n as f64)], ADMITTED.stroke_width(1))))?;
        root.present()?;
    }
    Ok(with_comment(svg, &prov, "Figures: docs/src/img/performance.tsv, written by the same command"))
}
