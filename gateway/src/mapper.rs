//! statsd_exporter's metric mapping, which upstream's Prometheus sink runs in-process: its
//! embedded default (`src/stats/prom/default_mapper.yaml`) or the file `PROMETHEUS_MAPPER_YAML`
//! names (Envoy Gateway mounts its own). A stat's statsd name becomes a Prometheus name and
//! labels as statsd_exporter would map it: glob mappings first (`*` matches within one
//! dot-separated part), then `match_type: regex` ones, each in file order; `$1`/`${1}` expand in
//! the name and labels; `match_metric_type`, `action: drop`, `observer_type`/`timer_type`
//! (histogram or summary, summary by default), `buckets`, `quantiles` and `scale` are honoured.
//! An unmatched name keeps its text with every character outside `[a-zA-Z0-9_:]` as `_`.

use regex::Regex;
use serde_norway::Value;

/// Upstream's default mapping (envoyproxy/ratelimit `src/stats/prom/default_mapper.yaml`).
const UPSTREAM_DEFAULT: &str = include_str!("mapper_default.yaml");

/// Prometheus' default histogram buckets (statsd_exporter's default).
const DEFAULT_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// statsd_exporter's default summary quantiles.
const DEFAULT_QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// What a statsd event is, for `match_metric_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
    Observer,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserverType {
    Histogram,
    Summary,
}

#[derive(Debug, Clone)]
enum Matcher {
    /// The pattern's dot-separated parts.
    Glob(Vec<String>),
    Regex(Regex),
}

#[derive(Debug, Clone)]
struct Mapping {
    matcher: Matcher,
    name: String,
    labels: Vec<(String, String)>,
    metric_type: Option<MetricType>,
    drop: bool,
    observer: ObserverType,
    buckets: Vec<f64>,
    quantiles: Vec<f64>,
    scale: f64,
}

/// A stat's Prometheus name and labels (sorted by name), and how an observation is exported.
#[derive(Debug, Clone, PartialEq)]
pub struct Mapped {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub observer: ObserverType,
    pub buckets: Vec<f64>,
    pub quantiles: Vec<f64>,
    pub scale: f64,
}

/// A mapping file, parsed.
#[derive(Debug, Clone, Default)]
pub struct Mapper {
    globs: Vec<Mapping>,
    regexes: Vec<Mapping>,
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn numbers(v: Option<&Value>, what: &str) -> Result<Option<Vec<f64>>, String> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|i| match i {
                Value::Number(n) => n.as_f64().ok_or_else(|| format!("{what}: {n} is not a number")),
                // `quantiles: [{quantile: 0.5, error: 0.05}]`
                Value::Mapping(m) => m
                    .get("quantile")
                    .and_then(Value::as_f64)
                    .ok_or_else(|| format!("{what}: an entry without a quantile")),
                other => Err(format!("{what}: {other:?} is not a number")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        Some(other) => Err(format!("{what} must be a list, got {other:?}")),
    }
}

fn observer_type(v: Option<&Value>) -> Result<Option<ObserverType>, String> {
    match v.and_then(text).as_deref() {
        None | Some("") | Some("default") => Ok(None),
        Some("histogram") => Ok(Some(ObserverType::Histogram)),
        Some("summary") => Ok(Some(ObserverType::Summary)),
        Some(other) => Err(format!("invalid observer type '{other}': histogram or summary")),
    }
}

/// The defaults section, or a mapping's own settings over them.
#[derive(Clone)]
struct Options {
    observer: Option<ObserverType>,
    match_type: String,
    buckets: Option<Vec<f64>>,
    quantiles: Option<Vec<f64>>,
}

impl Options {
    fn read(m: &serde_norway::Mapping, over: &Options) -> Result<Options, String> {
        let nested = |section: &str, key: &str| m.get(section).and_then(|s| s.get(key));
        let observer = observer_type(m.get("observer_type").or_else(|| m.get("timer_type")))?.or(over.observer);
        let buckets = numbers(m.get("buckets").or_else(|| nested("histogram_options", "buckets")), "buckets")?
            .or_else(|| over.buckets.clone());
        let quantiles = numbers(m.get("quantiles").or_else(|| nested("summary_options", "quantiles")), "quantiles")?
            .or_else(|| over.quantiles.clone());
        let match_type = m.get("match_type").and_then(text).unwrap_or_else(|| over.match_type.clone());
        Ok(Options { observer, match_type, buckets, quantiles })
    }
}

impl Mapper {
    /// Upstream's default mapping; `response_time_as_ms` drops its `scale: 0.001` as upstream
    /// does for `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`.
    pub fn upstream_default(response_time_as_ms: bool) -> Mapper {
        let yaml = if response_time_as_ms {
            UPSTREAM_DEFAULT.replacen("    scale: 0.001\n", "", 1)
        } else {
            UPSTREAM_DEFAULT.to_string()
        };
        Mapper::parse(&yaml).unwrap_or_default()
    }

    /// A statsd_exporter mapping file.
    pub fn parse(yaml: &str) -> Result<Mapper, String> {
        let root: Value = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        let empty = serde_norway::Mapping::new();
        let root = match &root {
            Value::Mapping(m) => m,
            Value::Null => &empty,
            other => return Err(format!("the mapping file must be a map, got {other:?}")),
        };
        let base = Options { observer: None, match_type: "glob".into(), buckets: None, quantiles: None };
        let defaults = match root.get("defaults") {
            Some(Value::Mapping(d)) => Options::read(d, &base)?,
            _ => base,
        };
        let mut mapper = Mapper::default();
        let list = match root.get("mappings") {
            None | Some(Value::Null) => return Ok(mapper),
            Some(Value::Sequence(l)) => l,
            Some(other) => return Err(format!("mappings must be a list, got {other:?}")),
        };
        for (i, item) in list.iter().enumerate() {
            let Value::Mapping(m) = item else { return Err(format!("mapping {i}: not a map")) };
            let mapping = Mapping::read(m, &defaults).map_err(|e| format!("mapping {i}: {e}"))?;
            match mapping.matcher {
                Matcher::Glob(_) => mapper.globs.push(mapping),
                Matcher::Regex(_) => mapper.regexes.push(mapping),
            }
        }
        Ok(mapper)
    }

    /// How `metric` is exported; `None` when a mapping drops it.
    pub fn map(&self, metric: &str, kind: MetricType) -> Option<Mapped> {
        let applies = |m: &&Mapping| m.metric_type.is_none_or(|t| t == kind);
        for m in self.globs.iter().filter(applies) {
            let Matcher::Glob(parts) = &m.matcher else { continue };
            if let Some(captures) = glob(parts, metric) {
                return m.mapped(|template| expand_glob(template, &captures));
            }
        }
        for m in self.regexes.iter().filter(applies) {
            let Matcher::Regex(re) = &m.matcher else { continue };
            if let Some(c) = re.captures(metric) {
                return m.mapped(|template| {
                    let mut out = String::new();
                    c.expand(template, &mut out);
                    out
                });
            }
        }
        Some(Mapped {
            name: escape(metric),
            labels: Vec::new(),
            observer: ObserverType::Summary,
            buckets: DEFAULT_BUCKETS.to_vec(),
            quantiles: DEFAULT_QUANTILES.to_vec(),
            scale: 1.0,
        })
    }
}

impl Mapping {
    /// One entry of `mappings`, over the file's `defaults`.
    fn read(m: &serde_norway::Mapping, defaults: &Options) -> Result<Mapping, String> {
        let options = Options::read(m, defaults)?;
        let pattern = m.get("match").and_then(text).ok_or("no match")?;
        let drop = m.get("action").and_then(text).is_some_and(|a| a == "drop");
        let name = m.get("name").and_then(text).unwrap_or_default();
        if name.is_empty() && !drop {
            return Err("metric mapping didn't set a metric name".into());
        }
        let labels = match m.get("labels") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Mapping(l)) => {
                let mut labels: Vec<(String, String)> =
                    l.iter().filter_map(|(k, v)| Some((text(k)?, text(v)?))).collect();
                labels.sort();
                labels
            }
            Some(other) => return Err(format!("labels must be a map, got {other:?}")),
        };
        let metric_type = match m.get("match_metric_type").and_then(text).as_deref() {
            None | Some("") => None,
            Some("counter") => Some(MetricType::Counter),
            Some("gauge") => Some(MetricType::Gauge),
            Some("observer") | Some("timer") => Some(MetricType::Observer),
            Some(other) => return Err(format!("invalid match_metric_type '{other}'")),
        };
        let matcher = match options.match_type.as_str() {
            "glob" | "" => Matcher::Glob(pattern.split('.').map(str::to_string).collect()),
            "regex" => Matcher::Regex(Regex::new(&pattern).map_err(|e| e.to_string())?),
            other => return Err(format!("invalid match_type '{other}': glob or regex")),
        };
        Ok(Mapping {
            matcher,
            name,
            labels,
            metric_type,
            drop,
            observer: options.observer.unwrap_or(ObserverType::Summary),
            buckets: options.buckets.unwrap_or_else(|| DEFAULT_BUCKETS.to_vec()),
            quantiles: options.quantiles.unwrap_or_else(|| DEFAULT_QUANTILES.to_vec()),
            scale: m.get("scale").and_then(Value::as_f64).unwrap_or(1.0),
        })
    }

    fn mapped(&self, expand: impl Fn(&str) -> String) -> Option<Mapped> {
        if self.drop {
            return None;
        }
        Some(Mapped {
            name: escape(&expand(&self.name)),
            labels: self.labels.iter().map(|(k, v)| (k.clone(), expand(v))).collect(),
            observer: self.observer,
            buckets: self.buckets.clone(),
            quantiles: self.quantiles.clone(),
            scale: self.scale,
        })
    }
}

/// The texts each `*` of the pattern matched, when the metric matches it part for part.
fn glob(parts: &[String], metric: &str) -> Option<Vec<String>> {
    let names: Vec<&str> = metric.split('.').collect();
    if names.len() != parts.len() {
        return None;
    }
    let mut captures = Vec::new();
    for (pattern, name) in parts.iter().zip(names) {
        part(pattern, name, &mut captures)?;
    }
    Some(captures)
}

/// One part: literal text and `*`s (each matching any text), captures appended.
fn part(pattern: &str, name: &str, captures: &mut Vec<String>) -> Option<()> {
    let Some((head, rest)) = pattern.split_once('*') else {
        return (pattern == name).then_some(());
    };
    let tail = name.strip_prefix(head)?;
    // The shortest match for this `*` that lets the rest match (the leftmost expansion).
    for end in (0..=tail.len()).filter(|&e| tail.is_char_boundary(e)) {
        let mut inner = Vec::new();
        if part(rest, &tail[end..], &mut inner).is_some() {
            captures.push(tail[..end].to_string());
            captures.extend(inner);
            return Some(());
        }
    }
    None
}

fn expand_glob(template: &str, captures: &[String]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (digits, skip) = if let Some(inner) = after.strip_prefix('{') {
            let end = inner.find('}').unwrap_or(inner.len());
            (&inner[..end], end + 2)
        } else {
            let end = after.find(|c: char| !c.is_ascii_digit()).unwrap_or(after.len());
            (&after[..end], end)
        };
        match digits.parse::<usize>() {
            Ok(n) if n >= 1 => out.push_str(captures.get(n - 1).map_or("", String::as_str)),
            _ => out.push_str(&rest[i..i + 1 + skip]),
        }
        rest = &rest[(i + 1 + skip).min(rest.len())..];
    }
    out.push_str(rest);
    out
}

/// statsd_exporter's `EscapeMetricName`: every character outside `[a-zA-Z0-9_:]` becomes `_`,
/// and a leading digit gets a `_` before it.
pub fn escape(name: &str) -> String {
    let mut out: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == ':' { c } else { '_' }).collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(m: &Mapped) -> Vec<(&str, &str)> {
        m.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn upstream_s_default_mapping_names_as_its_prometheus_sink_does() {
        let m = Mapper::upstream_default(false);
        // Upstream's prometheus_sink_test.go cases.
        let total = m.map("ratelimit_server.ShouldRateLimit.total_requests", MetricType::Counter).unwrap();
        assert_eq!(
            (total.name.as_str(), labels(&total)),
            ("ratelimit_service_total_requests", vec![("grpc_method", "ShouldRateLimit")])
        );
        for (metric, want) in [
            (
                "ratelimit.service.rate_limit.domain1.key1_val1.over_limit",
                vec![("domain", "domain1"), ("key1", "key1_val1")],
            ),
            (
                "ratelimit.service.rate_limit.domain1.key1_val1.key2_val2.over_limit",
                vec![("domain", "domain1"), ("key1", "key1_val1"), ("key2", "key2_val2")],
            ),
            (
                "ratelimit.service.rate_limit.domain1.key3_val3.key4_val4.key5_val5.over_limit",
                vec![("domain", "domain1"), ("key1", "key3_val3"), ("key2", "key4_val4")],
            ),
        ] {
            let got = m.map(metric, MetricType::Counter).unwrap();
            assert_eq!(
                (got.name.as_str(), labels(&got)),
                ("ratelimit_service_rate_limit_over_limit", want),
                "{metric}"
            );
        }
        let timer = m.map("ratelimit_server.ShouldRateLimit.response_time", MetricType::Observer).unwrap();
        assert_eq!(
            (timer.name.as_str(), timer.observer, timer.scale),
            ("ratelimit_service_response_time_seconds", ObserverType::Histogram, 0.001)
        );
        assert_eq!(
            m.map("ratelimit.service.config_load_success", MetricType::Counter).unwrap().name,
            "ratelimit_service_config_load_success"
        );
        let err = m.map("ratelimit.service.call.should_rate_limit.redis_error", MetricType::Counter).unwrap();
        assert_eq!(labels(&err), vec![("err_type", "redis_error")]);
        // `match_metric_type: counter`: an observer of that name is not mapped by it.
        assert_eq!(
            m.map("ratelimit.service.config_load_success", MetricType::Observer).unwrap().name,
            "ratelimit_service_config_load_success"
        );
        assert_eq!(
            m.map("ratelimit.service.call.should_rate_limit.x", MetricType::Gauge).unwrap().name,
            "ratelimit_service_call_should_rate_limit_x"
        );
        // Unmatched: escaped.
        assert_eq!(
            m.map("ratelimit.service.global_shadow_mode", MetricType::Counter).unwrap().name,
            "ratelimit_service_global_shadow_mode"
        );
        assert_eq!(
            Mapper::upstream_default(true)
                .map("ratelimit_server.ShouldRateLimit.response_time", MetricType::Observer)
                .unwrap()
                .scale,
            1.0
        );
    }

    #[test]
    fn a_mapping_file_s_globs_regexes_drops_and_defaults() {
        let m = Mapper::parse(
            r#"
defaults:
  observer_type: histogram
  buckets: [1, 10]
mappings:
  - match: "a.*.b*c.total"
    name: "a_${1}_total"
    labels: { second: "$2", first: "$1" }
  - match: "drop.*"
    action: drop
  - match: "t\\.([a-z]+)\\.(.*)"
    match_type: regex
    name: "t_$1"
    labels: { rest: "$2" }
    observer_type: summary
    quantiles: [{quantile: 0.5, error: 0.05}]
"#,
        )
        .unwrap();
        let a = m.map("a.x.bYc.total", MetricType::Counter).unwrap();
        assert_eq!((a.name.as_str(), labels(&a)), ("a_x_total", vec![("first", "x"), ("second", "Y")]));
        assert_eq!((a.observer, a.buckets.clone()), (ObserverType::Histogram, vec![1.0, 10.0]));
        assert!(m.map("drop.me", MetricType::Counter).is_none());
        let t = m.map("t.abc.d.e", MetricType::Observer).unwrap();
        assert_eq!(
            (t.name.as_str(), labels(&t), t.observer, t.quantiles.clone()),
            ("t_abc", vec![("rest", "d.e")], ObserverType::Summary, vec![0.5])
        );
        assert_eq!(m.map("a.x.total", MetricType::Counter).unwrap().name, "a_x_total", "unmatched: escaped");
        assert!(Mapper::parse("mappings: [{match: a.b}]").unwrap_err().contains("didn't set a metric name"));
        assert!(Mapper::parse("mappings: [{match: '(', match_type: regex, name: x}]").is_err());
        assert!(Mapper::parse(": :").is_err());
    }
}
