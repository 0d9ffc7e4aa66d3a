//! The pictures, drawn with plotters' SVG backend (text is SVG `<text>`: no fonts needed).

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::scenarios::{
    ALGORITHMS, AlgorithmsRun, HOUR_MS, LLM_LIMITERS, LLM_SPIKE, LlmCall, PACE_COUNT, PACE_PERIOD_MS, Slot, llm_command,
};

pub const ADMITTED: RGBColor = RGBColor(44, 160, 44);
pub const DENIED: RGBColor = RGBColor(214, 39, 40);
pub const LINE: RGBColor = RGBColor(31, 119, 180);
pub const GREY: RGBColor = RGBColor(120, 120, 120);
pub const SHADE: RGBColor = RGBColor(236, 236, 236);
/// One colour per CL.ALL limiter (and its denials).
pub const LIMITER: [RGBColor; 3] = [RGBColor(255, 127, 14), RGBColor(148, 103, 189), RGBColor(140, 86, 75)];
pub const WORKER: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// Where a picture came from: printed under it and kept as a comment in the file.
pub struct Provenance {
    pub command: String,
    pub server: String,
    pub date: String,
}

impl Provenance {
    pub fn line(&self) -> String {
        format!("made by `{}` against {}, {}", self.command, self.server, self.date)
    }
}

/// Puts `<!-- provenance -->` right after the `<svg …>` tag.
pub fn with_comment(svg: String, prov: &Provenance, extra: &str) -> String {
    let comment = format!("\n<!-- {}. {} -->", prov.line().replace("--", "-"), extra.replace("--", "-"));
    match svg.find("<svg").and_then(|i| svg[i..].find('>').map(|j| i + j + 1)) {
        Some(at) => format!("{}{}{}", &svg[..at], comment, &svg[at..]),
        None => svg,
    }
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel of a picture: its caption, margins and label areas (`y_area` pixels for the y labels).
pub fn panel<'a, 'b>(
    area: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: impl AsRef<str>,
    x: std::ops::Range<f64>,
    y: std::ops::Range<f64>,
    y_area: u32,
) -> Result<Chart<'a, 'b>, Box<dyn std::error::Error>> {
    Ok(ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin_left(12)
        .margin_right(20)
        .margin_top(4)
        .x_label_area_size(36)
        .y_label_area_size(y_area)
        .build_cartesian_2d(x, y)?)
}

/// The legend of a panel's labelled series.
pub fn legend<'a, 'b: 'a>(
    chart: &mut Chart<'a, 'b>,
    position: SeriesLabelPosition,
) -> Result<(), Box<dyn std::error::Error>> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.9))
        .border_style(GREY)
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}

/// Title (and subtitle) on top, provenance at the bottom; returns the area between.
pub fn frame<'a>(
    root: &DrawingArea<SVGBackend<'a>, Shift>,
    title: &str,
    subtitle: &str,
    prov: &Provenance,
) -> Result<DrawingArea<SVGBackend<'a>, Shift>, Box<dyn std::error::Error>> {
    root.fill(&WHITE)?;
    let (_, h) = root.dim_in_pixel();
    let lines: Vec<&str> = subtitle.lines().collect();
    let head = 44 + 18 * lines.len() as u32;
    let (top, rest) = root.split_vertically(head);
    let (body, bottom) = rest.split_vertically(h - head - 24);
    top.draw(&Text::new(title.to_string(), (12, 8), ("sans-serif", 22).into_font().style(FontStyle::Bold)))?;
    for (i, line) in lines.iter().enumerate() {
        top.draw(&Text::new(line.to_string(), (12, 38 + 18 * i as i32), ("sans-serif", 14).into_font().color(&GREY)))?;
    }
    bottom.draw(&Text::new(prov.line(), (12, 4), ("sans-serif", 12).into_font().color(&GREY)))?;
    Ok(body)
}

// ---------------------------------------------------------------------------------------------

pub fn algorithms(run: &AlgorithmsRun, prov: &Provenance) -> Result<String, Box<dyn std::error::Error>> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 1180)).into_drawing_area();
        let body = frame(
            &root,
            "One arrival pattern through the four algorithms (each: 10 per second)",
            "85 requests: a burst of 20 at once, 20/s for 3 s, a pause, 5/s. Each dot is one call: where it left the limiter (remaining); green admitted, red denied.",
            prov,
        )?;
        // The legend has a strip of its own above the panels: inside a panel it would cover
        // calls (their remaining spans the whole height at some time in every panel).
        let (key, body) = body.split_vertically(26);
        key_strip(&key)?;
        let panels = body.split_evenly((4, 1));
        let end_s = run.end_ms / 1000.0;
        for (i, (area, alg)) in panels.iter().zip(ALGORITHMS.iter()).enumerate() {
            let calls = &run.calls[i];
            let admitted = calls.iter().filter(|c| c.reply[0] == 0).count();
            let denied = calls.len() - admitted;
            let caption = format!(
                "{} key {}  ({}): {} admitted, {} denied",
                alg.name,
                alg.args.join(" "),
                alg.about,
                admitted,
                denied
            );
            let mut chart = panel(area, caption, -0.05..end_s, -0.8f64..12.0, 52)?;
            chart
                .configure_mesh()
                .light_line_style(WHITE)
                .x_desc("time since the first request (s)")
                .y_desc("remaining")
                .y_labels(7)
                .x_label_formatter(&|x| format!("{x:.1}"))
                .y_label_formatter(&|y| format!("{y:.0}"))
                .axis_desc_style(("sans-serif", 13))
                .draw()?;
            chart.draw_series(run.phases.iter().enumerate().map(|(k, p)| {
                let fill = if k % 2 == 0 { SHADE.filled() } else { WHITE.filled() };
                Rectangle::new([(p.from_ms / 1000.0, -0.8), (p.to_ms / 1000.0, 12.0)], fill)
            }))?;
            for p in &run.phases {
                chart.draw_series(std::iter::once(Text::new(
                    p.label.to_string(),
                    (p.from_ms / 1000.0 + 0.03, 11.6),
                    ("sans-serif", 12).into_font().color(&GREY),
                )))?;
            }
            // Consecutive calls joined, not across a gap (a limiter refills between calls).
            chart.draw_series(calls.windows(2).filter(|w| w[1].t_ms - w[0].t_ms <= 150.0).map(|w| {
                PathElement::new(
                    vec![(w[0].t_ms / 1000.0, w[0].reply[2] as f64), (w[1].t_ms / 1000.0, w[1].reply[2] as f64)],
                    LINE.mix(0.5).stroke_width(1),
                )
            }))?;
            chart.draw_series(
                calls
                    .iter()
                    .filter(|c| c.reply[0] == 0)
                    .map(|c| Circle::new((c.t_ms / 1000.0, c.reply[2] as f64), 3, ADMITTED.filled())),
            )?;
            chart.draw_series(
                calls
                    .iter()
                    .filter(|c| c.reply[0] != 0)
                    .map(|c| Cross::new((c.t_ms / 1000.0, c.reply[2] as f64), 4, DENIED.stroke_width(2))),
            )?;
        }
        root.present()?;
    }
    Ok(with_comment(svg, prov, "Calls timed by the client: each arrival pipelines the four commands on four keys"))
}

/// The algorithms picture's legend, in its own strip (the same marks as the panels).
fn key_strip(area: &DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), Box<dyn std::error::Error>> {
    let font = ("sans-serif", 13).into_font();
    let (mut x, y) = (80, 13);
    area.draw(&PathElement::new(vec![(x, y), (x + 18, y)], LINE.stroke_width(2)))?;
    area.draw(&Text::new("remaining after each call", (x + 24, y - 7), font.clone()))?;
    x += 220;
    area.draw(&Circle::new((x + 9, y), 4, ADMITTED.filled()))?;
    area.draw(&Text::new("admitted", (x + 24, y - 7), font.clone()))?;
    x += 110;
    area.draw(&Cross::new((x + 9, y), 4, DENIED.stroke_width(2)))?;
    area.draw(&Text::new("denied", (x + 24, y - 7), font))?;
    Ok(())
}

/// The spacing of consecutive slots: one figure when they are all the same to the microsecond
/// (a range would read "20.000-20.000 ms"), else the range.
pub fn spacing_words(min_gap: f64, max_gap: f64) -> String {
    if (max_gap - min_gap).abs() < 0.0005 {
        format!("consecutive slots exactly {min_gap:.3} ms apart")
    } else {
        format!("consecutive slots {min_gap:.3} to {max_gap:.3} ms apart")
    }
}

// ---------------------------------------------------------------------------------------------

pub fn pace(slots: &[Slot], prov: &Provenance) -> Result<String, Box<dyn std::error::Error>> {
    let spacing = f64::from(PACE_PERIOD_MS) / f64::from(PACE_COUNT);
    let gaps: Vec<f64> = slots.windows(2).map(|w| w[1].slot_ms - w[0].slot_ms).collect();
    let min_gap = gaps.iter().copied().fold(f64::INFINITY, f64::min);
    let max_gap = gaps.iter().copied().fold(0.0, f64::max);
    let end = slots.iter().map(|s| s.acted_ms.max(s.slot_ms)).fold(0.0, f64::max) + 40.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 760)).into_drawing_area();
        let body = frame(
            &root,
            &format!("CL.PACE: eight workers share one schedule of {PACE_COUNT} per second"),
            &format!(
                "Each worker: think 0-120 ms, CL.PACE api:vendor {PACE_COUNT} {PACE_PERIOD_MS} MS, sleep the wait, act. {} units; {} (the schedule: one every {spacing} ms).",
                slots.len(),
                spacing_words(min_gap, max_gap)
            ),
            prov,
        )?;
        let (upper, lower) = body.split_vertically(430);
        let mut chart = panel(
            &upper,
            "When each worker asked (hollow) and the slot it was given (filled)",
            -10.0..end,
            0.4f64..8.6,
            70,
        )?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .y_labels(8)
            .y_label_formatter(&|y| format!("worker {}", y.round() as i64))
            .x_desc("time on the server's clock (ms)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        for s in slots {
            let y = (s.worker + 1) as f64;
            let c = WORKER[s.worker % 8];
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(s.asked_ms, y), (s.slot_ms, y)],
                c.mix(0.45).stroke_width(2),
            )))?;
            chart.draw_series(std::iter::once(Circle::new((s.asked_ms, y), 3, c.stroke_width(1))))?;
            chart.draw_series(std::iter::once(Circle::new((s.slot_ms, y), 4, c.filled())))?;
        }
        let mut chart = panel(
            &lower,
            "All workers together: units asked for, and units scheduled",
            -10.0..end,
            0f64..(slots.len() as f64 * 1.08 + 1.0),
            70,
        )?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_desc("time on the server's clock (ms)")
            .y_desc("units (cumulative)")
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        let steps = |mut times: Vec<f64>| {
            times.sort_by(f64::total_cmp);
            let mut pts = vec![(0.0, 0.0)];
            for (k, t) in times.iter().enumerate() {
                pts.push((*t, k as f64));
                pts.push((*t, (k + 1) as f64));
            }
            pts
        };
        let series = [
            ("asked (the workers' demand: bunched)".to_string(), GREY, 2, slots.iter().map(|s| s.asked_ms).collect()),
            (format!("slots reserved (one every {spacing} ms)"), LINE, 2, slots.iter().map(|s| s.slot_ms).collect()),
            ("acted (after sleeping the wait)".to_string(), ADMITTED, 1, slots.iter().map(|s| s.acted_ms).collect()),
        ];
        for (label, colour, width, times) in series {
            chart
                .draw_series(LineSeries::new(steps(times), colour.stroke_width(width)))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present()?;
    }
    Ok(with_comment(svg, prov, "Times are the server's TIME, read in the same MULTI/EXEC as each CL.PACE call"))
}

// ---------------------------------------------------------------------------------------------

pub fn llm(calls: &[LlmCall], prov: &Provenance) -> Result<String, Box<dyn std::error::Error>> {
    // Per hour: admitted, denied by each limiter.
    let mut per_hour = [[0u32; 4]; 24];
    for c in calls {
        let h = (c.hour.floor() as usize).min(23);
        let slot = if c.limited { c.binding.clamp(1, 3) } else { 0 };
        per_hour[h][slot] += 1;
    }
    let top = per_hour.iter().map(|h| h.iter().sum::<u32>()).max().unwrap_or(1) as f64 * 1.12;
    let admitted: u32 = per_hour.iter().map(|h| h[0]).sum();
    let tokens: u64 = calls.iter().filter(|c| !c.limited).map(|c| c.tokens).sum();
    let denied: Vec<u32> = (1..4).map(|k| per_hour.iter().map(|h| h[k]).sum()).collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 860)).into_drawing_area();
        let body = frame(
            &root,
            "CL.ALL: one day of an LLM budget, three limiters decided at once",
            &format!(
                "Each request, t being its tokens (400-1600):\n{}\nThe day is scaled: 1 hour = {HOUR_MS} ms of the run, the limiters' times too (an hour is 1000 MS, a day 24000 MS); the day starts at the first request.",
                llm_command()
            ),
            prov,
        )?;
        let (upper, lower) = body.split_vertically(390);
        let caption = format!(
            "Requests per hour: {admitted} admitted ({:.2} M tokens); denied by the request rate {}, by tokens per hour {}, by tokens per day {}",
            tokens as f64 / 1e6,
            denied[0],
            denied[1],
            denied[2]
        );
        let mut chart = panel(&upper, caption, 0f64..24.0, 0f64..top, 60)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_labels(13)
            .x_label_formatter(&|h| format!("{:02}:00", *h as i64))
            .y_desc("requests in the hour")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        let colours = [ADMITTED, LIMITER[0], LIMITER[1], LIMITER[2]];
        let names = [
            "admitted".to_string(),
            format!("denied: {}", LLM_LIMITERS[0].label),
            format!("denied: {}", LLM_LIMITERS[1].label),
            format!("denied: {}", LLM_LIMITERS[2].label),
        ];
        for (k, name) in names.iter().enumerate() {
            let colour = colours[k];
            chart
                .draw_series((0..24).map(|h| {
                    let base: u32 = per_hour[h][..k].iter().sum();
                    let x = h as f64;
                    Rectangle::new([(x + 0.1, base as f64), (x + 0.9, (base + per_hour[h][k]) as f64)], colour.filled())
                }))?
                .label(name.clone())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled()));
        }
        chart.draw_series(std::iter::once(Text::new(
            format!(
                "{} requests at once at {:02}:{:02}",
                LLM_SPIKE.1,
                LLM_SPIKE.0 as u32,
                (LLM_SPIKE.0.fract() * 60.0).round() as u32
            ),
            (LLM_SPIKE.0 - 2.9, top * 0.58),
            ("sans-serif", 12).into_font().color(&GREY),
        )))?;
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        let caption = "What each limiter had left after every request (DETAILS), as a share of its limit";
        let mut chart = panel(&lower, caption, 0f64..24.0, 0f64..105.0, 60)?;
        chart
            .configure_mesh()
            .light_line_style(WHITE)
            .x_labels(13)
            .x_label_formatter(&|h| format!("{:02}:00", *h as i64))
            .x_desc("hour of the (scaled) day")
            .y_desc("remaining (% of limit)")
            .y_label_formatter(&|y| format!("{y:.0}"))
            .axis_desc_style(("sans-serif", 13))
            .draw()?;
        for (k, lim) in LLM_LIMITERS.iter().enumerate() {
            let colour = LIMITER[k];
            chart
                .draw_series(LineSeries::new(
                    calls.iter().map(|c| (c.hour, 100.0 * c.remaining[k])),
                    if k == 0 { colour.mix(0.6).stroke_width(1) } else { colour.stroke_width(2) },
                ))?
                .label(lim.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], colour.stroke_width(2)));
        }
        legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
        root.present()?;
    }
    Ok(with_comment(
        svg,
        prov,
        "One client, one CL.ALL per request; a denial is counted against the limiter CL.ALL names as binding (its sixth integer)",
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn slot_spacing_reads_as_one_figure_when_exact() {
        assert_eq!(super::spacing_words(20.0, 20.0), "consecutive slots exactly 20.000 ms apart");
        assert_eq!(super::spacing_words(20.0, 20.0004), "consecutive slots exactly 20.000 ms apart");
        assert_eq!(super::spacing_words(20.0, 31.25), "consecutive slots 20.000 to 31.250 ms apart");
    }
}
