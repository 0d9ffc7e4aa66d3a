//! Upstream's statistics, by upstream's names: `ratelimit.service.rate_limit.DOMAIN.KEY.STAT`
//! (`total_hits`, `over_limit`, `near_limit`, `within_limit`, `shadow_mode`,
//! `over_limit_with_local_cache`), `ratelimit.service.config_load_success` / `_error`,
//! `ratelimit.service.call.should_rate_limit.redis_error` / `service_error`,
//! `ratelimit.service.global_shadow_mode`, `ratelimit_server.ShouldRateLimit.total_requests` and
//! `.response_time`. Counters live for the process (a reload keeps them, as gostats' do); they
//! are flushed to statsd (`USE_STATSD`), served to Prometheus (`USE_PROMETHEUS`, named by
//! upstream's default mapping or `PROMETHEUS_MAPPER_YAML`'s, [`crate::mapper`]) and listed on the
//! debug port's `/stats`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::mapper::{Mapped, Mapper, MetricType, ObserverType};

/// A monotonic counter.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn inc(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// One limit's counters.
#[derive(Debug, Default)]
pub struct LimitStats {
    pub total_hits: Counter,
    pub over_limit: Counter,
    pub near_limit: Counter,
    pub over_limit_with_local_cache: Counter,
    pub within_limit: Counter,
    pub shadow_mode: Counter,
}

/// The most `response_time` samples kept for statsd between two flushes; past it, the ones kept
/// are sent with their sampling rate (`|@rate`), as statsd defines it.
const MAX_SAMPLES: usize = 1 << 16;

/// Upstream's `ratelimit_server.ShouldRateLimit.response_time` timer: whole milliseconds per gRPC
/// call (gostats' `AddValue`), sent to statsd one sample a line (`name:ms|ms`) and served to
/// Prometheus as the mapping says (a histogram of seconds by default).
#[derive(Debug, Default)]
pub struct Timer {
    pub count: Counter,
    pub sum_ms: Counter,
    /// How many calls took each whole number of milliseconds: any mapping's buckets, scale or
    /// quantiles are computed from it.
    by_ms: Mutex<BTreeMap<u64, u64>>,
    /// Samples for statsd since its last flush (kept only while statsd is on), and how many
    /// there were.
    keep: AtomicBool,
    pending: Mutex<(Vec<u64>, u64)>,
}

impl Timer {
    pub fn record(&self, elapsed: Duration) {
        let ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        self.count.inc(1);
        self.sum_ms.inc(ms);
        *self.by_ms.lock().unwrap_or_else(|e| e.into_inner()).entry(ms).or_default() += 1;
        if self.keep.load(Ordering::Relaxed) {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            p.1 += 1;
            if p.0.len() < MAX_SAMPLES {
                p.0.push(ms);
            }
        }
    }

    /// The samples since the last call and their sampling rate.
    fn take(&self) -> (Vec<u64>, f64) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (samples, seen) = std::mem::take(&mut *p);
        let rate = if seen == 0 { 1.0 } else { samples.len() as f64 / seen as f64 };
        (samples, rate)
    }
}

/// A value set, not added up (statsd `|g`, a Prometheus gauge).
#[derive(Debug, Default)]
pub struct Gauge(AtomicU64);

impl Gauge {
    pub fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }
    pub fn inc(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Called before the gauges are read (to set those measured elsewhere, such as the local
/// cache's entries).
type Refresh = Box<dyn Fn() + Send + Sync>;

/// Every counter and gauge by name.
#[derive(Default)]
pub struct Stats {
    counters: Mutex<HashMap<String, Arc<Counter>>>,
    limits: Mutex<HashMap<String, Arc<LimitStats>>>,
    gauges: Mutex<BTreeMap<String, Arc<Gauge>>>,
    refresh: Mutex<Vec<Refresh>>,
    pub response_time: Timer,
    /// How names are exported to Prometheus (upstream's default mapping until configured).
    mapper: std::sync::RwLock<Option<Arc<Mapper>>>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").field("counters", &self.snapshot()).field("gauges", &self.gauges()).finish()
    }
}

/// Upstream's `SanitizeStatName`: `:` and `|` become `_`, and so do the dots of an IPv4 address.
pub fn sanitize(name: &str) -> String {
    let replaced: String = name.chars().map(|c| if c == ':' || c == '|' { '_' } else { c }).collect();
    // Dots inside a dotted quad (1-3 digits, four times) become underscores.
    let bytes = replaced.as_bytes();
    let mut out = replaced.clone().into_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if let Some(end) = dotted_quad_at(bytes, i) {
            for b in &mut out[i..end] {
                if *b == b'.' {
                    *b = b'_';
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or(replaced)
}

/// The end of a dotted quad starting at `i` (`\d{1,3}(\.\d{1,3}){3}`, leftmost-first as a regex
/// scan finds it).
fn dotted_quad_at(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    for part in 0..4 {
        if part > 0 {
            if b.get(j) != Some(&b'.') {
                return None;
            }
            j += 1;
        }
        let start = j;
        while j < b.len() && j - start < 3 && b[j].is_ascii_digit() {
            j += 1;
        }
        if j == start {
            return None;
        }
    }
    Some(j)
}

impl Stats {
    pub fn new() -> Stats {
        Stats::default()
    }

    /// Keeps `response_time` samples for statsd (`USE_STATSD`), and names what Prometheus is
    /// served by `mapper`.
    pub fn configure(&self, statsd: bool, mapper: Mapper) {
        self.response_time.keep.store(statsd, Ordering::Relaxed);
        *self.mapper.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(mapper));
    }

    fn mapper(&self) -> Arc<Mapper> {
        let configured = self.mapper.read().unwrap_or_else(|e| e.into_inner()).clone();
        configured.unwrap_or_else(|| Arc::new(Mapper::upstream_default(false)))
    }

    /// The counter named `name` (created at zero).
    pub fn counter(&self, name: &str) -> Arc<Counter> {
        let mut map = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(name.to_string()).or_default().clone()
    }

    /// The gauge named `name` (created at zero).
    pub fn gauge(&self, name: &str) -> Arc<Gauge> {
        let mut map = self.gauges.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(name.to_string()).or_default().clone()
    }

    /// Runs `f` before every reading of the gauges.
    pub fn on_refresh(&self, f: impl Fn() + Send + Sync + 'static) {
        self.refresh.lock().unwrap_or_else(|e| e.into_inner()).push(Box::new(f));
    }

    /// Every gauge's value by name, sorted (refreshed first).
    pub fn gauges(&self) -> BTreeMap<String, u64> {
        for f in self.refresh.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            f();
        }
        self.gauges.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(k, g)| (k.clone(), g.get())).collect()
    }

    /// The counters of the limit whose stats key is `key` (`domain.key_value…`).
    pub fn limit(&self, key: &str) -> Arc<LimitStats> {
        let mut map = self.limits.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(sanitize(key)).or_default().clone()
    }

    /// Every counter's value by its full name, sorted.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (name, c) in self.counters.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            out.insert(name.clone(), c.get());
        }
        for (key, l) in self.limits.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (stat, c) in [
                ("total_hits", &l.total_hits),
                ("over_limit", &l.over_limit),
                ("near_limit", &l.near_limit),
                ("over_limit_with_local_cache", &l.over_limit_with_local_cache),
                ("within_limit", &l.within_limit),
                ("shadow_mode", &l.shadow_mode),
            ] {
                out.insert(format!("ratelimit.service.rate_limit.{key}.{stat}"), c.get());
            }
        }
        out
    }

    /// `/stats`: one `name: value` line per counter, and the timer's count and sum.
    pub fn text(&self) -> String {
        let mut all = self.snapshot();
        all.extend(self.gauges());
        all.insert("ratelimit_server.ShouldRateLimit.response_time.count".into(), self.response_time.count.get());
        all.insert("ratelimit_server.ShouldRateLimit.response_time.sum_ms".into(), self.response_time.sum_ms.get());
        all.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
    }

    /// The Prometheus exposition, names and labels mapped as statsd_exporter maps them (series
    /// mapped alike add up, as its counters do).
    pub fn prometheus(&self) -> String {
        let mapper = self.mapper();
        let mut families: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for (name, value) in self.snapshot() {
            let Some(m) = mapper.map(&name, MetricType::Counter) else { continue };
            *families.entry(m.name).or_default().entry(label_text(&m.labels, None)).or_default() += value;
        }
        let mut out = String::new();
        for (family, samples) in families {
            out.push_str(&format!("# TYPE {family} counter\n"));
            for (labels, value) in samples {
                out.push_str(&format!("{family}{labels} {value}\n"));
            }
        }
        let mut gauges: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        for (name, value) in self.gauges() {
            let Some(m) = mapper.map(&name, MetricType::Gauge) else { continue };
            *gauges.entry(m.name).or_default().entry(label_text(&m.labels, None)).or_default() += value;
        }
        for (family, samples) in gauges {
            out.push_str(&format!("# TYPE {family} gauge\n"));
            for (labels, value) in samples {
                out.push_str(&format!("{family}{labels} {value}\n"));
            }
        }
        if let Some(m) = mapper.map("ratelimit_server.ShouldRateLimit.response_time", MetricType::Observer) {
            self.response_time.render(&m, &mut out);
        }
        out
    }
}

/// `{a="x",b="y"}` (empty without labels), with `extra` (`le`, `quantile`) last.
fn label_text(labels: &[(String, String)], extra: Option<(&str, String)>) -> String {
    let mut parts: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
    if let Some((k, v)) = extra {
        parts.push(format!("{k}=\"{v}\""));
    }
    if parts.is_empty() { String::new() } else { format!("{{{}}}", parts.join(",")) }
}

impl Timer {
    /// The timer as the mapping exports it: a histogram (cumulative buckets) or a summary
    /// (quantiles over every call so far), values scaled by the mapping's `scale`.
    fn render(&self, m: &Mapped, out: &mut String) {
        let by_ms = self.by_ms.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let count: u64 = by_ms.values().sum();
        let scaled = |ms: u64| ms as f64 * m.scale;
        let sum = (by_ms.iter().map(|(&ms, &n)| scaled(ms) * n as f64).sum::<f64>() * 1e9).round() / 1e9;
        let family = &m.name;
        match m.observer {
            ObserverType::Histogram => {
                out.push_str(&format!("# TYPE {family} histogram\n"));
                for bound in &m.buckets {
                    let below: u64 = by_ms.iter().filter(|&(&ms, _)| scaled(ms) <= *bound).map(|(_, n)| n).sum();
                    let labels = label_text(&m.labels, Some(("le", bound.to_string())));
                    out.push_str(&format!("{family}_bucket{labels} {below}\n"));
                }
                let labels = label_text(&m.labels, Some(("le", "+Inf".into())));
                out.push_str(&format!("{family}_bucket{labels} {count}\n"));
            }
            ObserverType::Summary => {
                out.push_str(&format!("# TYPE {family} summary\n"));
                for q in &m.quantiles {
                    let rank = (q * count as f64).ceil().max(1.0) as u64;
                    let mut seen = 0;
                    let value = by_ms.iter().find_map(|(&ms, &n)| {
                        seen += n;
                        (seen >= rank).then(|| scaled(ms))
                    });
                    let value = value.map_or("NaN".to_string(), |v| v.to_string());
                    let labels = label_text(&m.labels, Some(("quantile", q.to_string())));
                    out.push_str(&format!("{family}{labels} {value}\n"));
                }
            }
        }
        let labels = label_text(&m.labels, None);
        out.push_str(&format!("{family}_sum{labels} {sum}\n"));
        out.push_str(&format!("{family}_count{labels} {count}\n"));
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Sends every counter's increase since the last flush to statsd over TCP (`name:delta|c`), as
/// gostats' TCP sink does, every `interval`; an unreachable statsd is retried at the next flush.
pub async fn statsd_loop(stats: Arc<Stats>, address: String, interval: std::time::Duration) {
    use tokio::io::AsyncWriteExt;
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut conn: Option<tokio::net::TcpStream> = None;
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = stats.snapshot();
        let mut lines = String::new();
        for (name, value) in &now {
            let delta = value.saturating_sub(last.get(name).copied().unwrap_or(0));
            if delta > 0 {
                lines.push_str(&format!("{name}:{delta}|c\n"));
            }
        }
        for (name, value) in stats.gauges() {
            lines.push_str(&format!("{name}:{value}|g\n"));
        }
        // The timer, one sample a line as gostats sends them (samples of a failed write are lost,
        // as a UDP statsd's would be).
        let (samples, rate) = stats.response_time.take();
        let rate = if rate < 1.0 { format!("|@{rate}") } else { String::new() };
        for ms in samples {
            lines.push_str(&format!("ratelimit_server.ShouldRateLimit.response_time:{ms}|ms{rate}\n"));
        }
        if lines.is_empty() {
            continue;
        }
        if conn.is_none() {
            match tokio::net::TcpStream::connect(&address).await {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::debug!(error = %e, %address, "statsd: cannot connect; counters are sent at the next flush");
                    continue;
                }
            }
        }
        if let Some(c) = &mut conn {
            if let Err(e) = c.write_all(lines.as_bytes()).await {
                tracing::debug!(error = %e, "statsd: write failed; reconnecting at the next flush");
                conn = None;
                continue;
            }
            last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_time_is_a_histogram_in_seconds_or_milliseconds_and_statsd_samples() {
        let stats = Stats::new();
        stats.configure(true, Mapper::upstream_default(false));
        for ms in [3, 40, 2_000] {
            stats.response_time.record(Duration::from_millis(ms));
        }
        let text = stats.prometheus();
        for line in [
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.005\"} 1",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"0.05\"} 2",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"2.5\"} 3",
            "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 3",
            "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} 2.043",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert_eq!(stats.response_time.take(), (vec![3, 40, 2_000], 1.0));
        assert_eq!(stats.response_time.take(), (vec![], 1.0));
        // PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: the same buckets, observing milliseconds.
        let ms = Stats::new();
        ms.configure(false, Mapper::upstream_default(true));
        ms.response_time.record(Duration::from_millis(3));
        assert!(
            ms.prometheus()
                .contains("ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"5\"} 1")
        );
        // Without statsd nothing is kept; past MAX_SAMPLES the rest is sampled.
        assert_eq!(ms.response_time.take(), (vec![], 1.0));
        for _ in 0..MAX_SAMPLES * 2 {
            stats.response_time.record(Duration::from_millis(1));
        }
        let (kept, rate) = stats.response_time.take();
        assert_eq!((kept.len(), rate), (MAX_SAMPLES, 0.5));
    }

    #[test]
    fn a_mapping_file_names_every_family_and_may_make_the_timer_a_summary() {
        let stats = Stats::new();
        let mapper = Mapper::parse(
            "mappings:\n- match: ratelimit_server.*.response_time\n  name: rt_ms\n  labels: {method: $1}\n- match: ratelimit.service.config_load_success\n  action: drop\n",
        )
        .unwrap();
        stats.configure(false, mapper);
        stats.counter("ratelimit.service.config_load_success").inc(1);
        stats.counter("ratelimit.service.config_load_error").inc(2);
        for ms in [1, 2, 3, 4, 100] {
            stats.response_time.record(Duration::from_millis(ms));
        }
        let text = stats.prometheus();
        for line in [
            "# TYPE ratelimit_service_config_load_error counter\nratelimit_service_config_load_error 2\n",
            "# TYPE rt_ms summary\n",
            "rt_ms{method=\"ShouldRateLimit\",quantile=\"0.5\"} 3\n",
            "rt_ms{method=\"ShouldRateLimit\",quantile=\"0.99\"} 100\n",
            "rt_ms_sum{method=\"ShouldRateLimit\"} 110\n",
            "rt_ms_count{method=\"ShouldRateLimit\"} 5\n",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("config_load_success"), "dropped: {text}");
    }

    #[test]
    fn stat_names_are_sanitized_as_upstream_does() {
        assert_eq!(sanitize("domain.remote_address_10.0.0.1"), "domain.remote_address_10_0_0_1");
        assert_eq!(sanitize("a:b|c.d"), "a_b_c.d");
        assert_eq!(sanitize("x.1.2.3"), "x.1.2.3");
    }
}
