//! `make plots`: drives a throwaway redis-server with the module through the manual's scenarios
//! and draws them as SVG (docs/src/img/): algorithms.svg, pace.svg, llm-budget.svg, and
//! performance.svg and scale.svg from the figures `make plots-perf` measured
//! (docs/src/img/performance.tsv, docs/src/img/scale.tsv).
//!
//! Usage: redis-throttle-plots [--out DIR] [--module PATH] [--only NAME,NAME] where the names are
//! algorithms, pace, llm-budget, performance, scale.

mod draw;
mod perf;
mod scale;
mod scenarios;
mod server;

use std::path::{Path, PathBuf};

use draw::Provenance;
use server::Server;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const ALL: [&str; 5] = ["algorithms", "pace", "llm-budget", "performance", "scale"];
/// The pictures drawn from a measured run's figures, not from a server of their own.
const MEASURED: [&str; 2] = ["performance", "scale"];

/// The civil date (UTC) of a Unix time, as YYYY-MM-DD (core's calendar arithmetic, CL.QUOTA's).
fn utc_date(unix_s: i64) -> String {
    let (y, m, d) = redis_throttle_core::calendar::civil_from_days(unix_s.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

fn write(out: &Path, name: &str, svg: &str) -> Res<()> {
    let path = out.join(name);
    std::fs::write(&path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("plots: wrote {}", path.display());
    Ok(())
}

/// Runs the named scenarios against a fresh server and writes their pictures into `out`.
pub fn run(out: &Path, module: &Path, only: &[&str]) -> Res<()> {
    std::fs::create_dir_all(out)?;
    if only.contains(&"performance") {
        let tsv = out.join("performance.tsv");
        let text =
            std::fs::read_to_string(&tsv).map_err(|e| format!("{}: {e} (run `make plots-perf`)", tsv.display()))?;
        let table = perf::parse(&text)?;
        write(out, "performance.svg", &perf::chart(&table)?)?;
        // The figures the README and the manual quote, from the same run (when the chart goes
        // to the manual's own folder).
        let manual = out.canonicalize().ok() == workspace().join("docs/src/img").canonicalize().ok();
        for (file, name, body) in perf::blocks(&table)?.into_iter().filter(|_| manual) {
            let path = workspace().join(file);
            let old = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let new = perf::replace_block(&old, name, &body).map_err(|e| format!("{}: {e}", path.display()))?;
            if new != old {
                std::fs::write(&path, new).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("plots: wrote the figures of {} (perf:{name})", path.display());
            }
        }
    }
    if only.contains(&"scale") {
        let tsv = out.join("scale.tsv");
        let text =
            std::fs::read_to_string(&tsv).map_err(|e| format!("{}: {e} (run `make plots-perf`)", tsv.display()))?;
        let table = scale::parse(&text)?;
        write(out, "scale.svg", &scale::chart(&table)?)?;
        if out.canonicalize().ok() == workspace().join("docs/src/img").canonicalize().ok() {
            let path = workspace().join("docs/src/performance.md");
            let old = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let new = perf::replace_block(&old, "scale", &scale::page(&table))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if new != old {
                std::fs::write(&path, new).map_err(|e| format!("{}: {e}", path.display()))?;
                println!("plots: wrote the figures of {} (perf:scale)", path.display());
            }
        }
    }
    if only.iter().all(|n| MEASURED.contains(n)) {
        return Ok(());
    }
    let server = Server::start(module)?;
    let mut con = server.connect()?;
    let (now, _): (i64, i64) = redis::cmd("TIME").query(&mut con)?;
    let prov = Provenance {
        command: std::env::var("PLOTS_COMMAND").unwrap_or_else(|_| "make plots".into()),
        server: format!("{} with redis-throttle", server.version()?),
        date: utc_date(now),
    };
    if only.contains(&"algorithms") {
        let run = scenarios::algorithms(&mut con)?;
        write(out, "algorithms.svg", &draw::algorithms(&run, &prov)?)?;
    }
    if only.contains(&"pace") {
        let slots = scenarios::pace(&|| server.connect(), 1000.0)?;
        write(out, "pace.svg", &draw::pace(&slots, &prov)?)?;
    }
    if only.contains(&"llm-budget") {
        let calls = scenarios::llm_day(&mut con)?;
        write(out, "llm-budget.svg", &draw::llm(&calls, &prov)?)?;
    }
    Ok(())
}

fn main() {
    let mut out = workspace().join("docs/src/img");
    let target = std::env::var("CARGO_TARGET_DIR").map_or_else(|_| workspace().join("target"), PathBuf::from);
    let mut module =
        std::env::var("THROTTLE_MODULE").map_or_else(|_| target.join("release/libredis_throttle.so"), PathBuf::from);
    let mut only: Vec<String> = ALL.iter().map(|s| s.to_string()).collect();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next()) {
            ("--out", Some(v)) => out = PathBuf::from(v),
            ("--module", Some(v)) => module = PathBuf::from(v),
            ("--only", Some(v)) => only = v.split(',').map(String::from).collect(),
            _ => {
                eprintln!("usage: redis-throttle-plots [--out DIR] [--module PATH] [--only {}]", ALL.join(","));
                std::process::exit(2);
            }
        }
    }
    if let Some(bad) = only.iter().find(|n| !ALL.contains(&n.as_str())) {
        eprintln!("plots: unknown picture {bad:?} (known: {})", ALL.join(", "));
        std::process::exit(2);
    }
    let only: Vec<&str> = only.iter().map(String::as_str).collect();
    if let Err(e) = run(&out, &module, &only) {
        eprintln!("plots: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc_dates() {
        assert_eq!(super::utc_date(0), "1970-01-01");
        assert_eq!(super::utc_date(951_782_400), "2000-02-29");
        assert_eq!(super::utc_date(1_795_478_400), "2026-11-24");
    }
}

/// `make plots` still works: the scenarios against a real server, drawn (the long day of the
/// LLM budget aside). The module is built first, as the integration tests' harness does.
#[cfg(test)]
mod real_server {
    use super::*;

    fn module() -> PathBuf {
        if let Ok(path) = std::env::var("THROTTLE_MODULE") {
            return PathBuf::from(path);
        }
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--lib", "--quiet", "-p", "redis-throttle"])
            .current_dir(workspace())
            .status()
            .expect("run cargo build for the module");
        assert!(status.success(), "building the module failed");
        std::env::var("CARGO_TARGET_DIR")
            .map_or_else(|_| workspace().join("target"), PathBuf::from)
            .join("release/libredis_throttle.so")
    }

    #[test]
    fn the_scenarios_run_and_draw() {
        let server = Server::start(&module()).expect("start redis-server with the module");
        let prov = Provenance { command: "cargo test".into(), server: server.version().unwrap(), date: utc_date(0) };
        let mut con = server.connect().unwrap();

        let run = scenarios::algorithms(&mut con).unwrap();
        for (alg, calls) in scenarios::ALGORITHMS.iter().zip(&run.calls) {
            // The burst of twenty: the first ten admitted by every algorithm, and no more than
            // ten (GCRA: plus one per 100 ms the burst took to send).
            let burst = &calls[..20];
            assert!(burst[..10].iter().all(|c| c.reply[0] == 0), "{}", alg.name);
            let took = burst[19].t_ms - burst[0].t_ms;
            let extra = if alg.name == "CL.THROTTLE" { (took / 100.0).ceil() as usize } else { 0 };
            let admitted = burst.iter().filter(|c| c.reply[0] == 0).count();
            assert!(admitted <= 10 + extra, "{}: {admitted} admitted in {took} ms", alg.name);
        }
        let svg = draw::algorithms(&run, &prov).unwrap();
        assert!(
            svg.contains("<!-- made by `cargo test` against Redis")
                || svg.contains("<!-- made by `cargo test` against Valkey")
        );

        let slots = scenarios::pace(&|| server.connect(), 300.0).unwrap();
        assert!(slots.len() >= 8, "{} slots", slots.len());
        let interval = f64::from(scenarios::PACE_PERIOD_MS) / f64::from(scenarios::PACE_COUNT);
        for w in slots.windows(2) {
            // Slots read from the TAT (µs): never closer than one interval, whatever the workers do.
            assert!(w[1].slot_ms - w[0].slot_ms > interval - 0.002, "{} then {}", w[0].slot_ms, w[1].slot_ms);
        }
        assert!(draw::pace(&slots, &prov).unwrap().contains("</svg>"));
    }
}
