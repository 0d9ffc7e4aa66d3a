//! Decisions are counted through the `metrics` facade: allowed, denied, deny-cache hits,
//! degraded, and the server's latency, as a recorder installed by the application sees them;
//! every server call runs in a `tracing` span naming its command and outcome.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::Server;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use redis_throttle_client::{BreakerConfig, Config, FailurePolicy, Policy, Throttle};

#[derive(Default)]
struct Counts(Mutex<BTreeMap<String, Arc<Count>>>);

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, n: u64) {
        self.0.fetch_add(n, Ordering::SeqCst);
    }
    fn absolute(&self, n: u64) {
        self.0.store(n, Ordering::SeqCst);
    }
}

impl HistogramFn for Count {
    fn record(&self, _: f64) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Counts {
    fn slot(&self, key: &Key) -> Arc<Count> {
        self.0.lock().unwrap().entry(key.name().to_string()).or_default().clone()
    }
    fn get(&self, name: &str) -> u64 {
        self.0.lock().unwrap().get(name).map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
}

impl Recorder for &'static Counts {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.slot(key))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.slot(key))
    }
}

/// A `tracing` subscriber keeping each span's name and fields (`name command=… outcome=…`).
#[derive(Default)]
struct Spans(Mutex<Vec<(String, BTreeMap<String, String>)>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

impl tracing::Subscriber for &'static Spans {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        let mut spans = self.0.lock().unwrap();
        spans.push((span.metadata().name().to_string(), fields));
        tracing::span::Id::from_u64(spans.len() as u64)
    }
    fn record(&self, id: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut spans = self.0.lock().unwrap();
        if let Some((_, fields)) = spans.get_mut(id.into_u64() as usize - 1) {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, _: &tracing::Event<'_>) {}
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

impl Spans {
    /// The calls' spans, as `command outcome`.
    fn calls(&self) -> Vec<String> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(name, _)| name == "redis_throttle.call")
            .map(|(_, f)| format!("{} {}", f["command"], f.get("outcome").map_or("-", String::as_str)))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_are_counted() {
    let counts: &'static Counts = Box::leak(Box::default());
    metrics::set_global_recorder(counts).unwrap();
    let spans: &'static Spans = Box::leak(Box::default());
    tracing::subscriber::set_global_default(spans).unwrap();
    let mut server = Server::start();
    let config = Config {
        deadline: Duration::from_millis(50),
        failure: FailurePolicy::FailOpen,
        breaker: BreakerConfig { failures: 100, ..BreakerConfig::default() },
        ..Config::default()
    };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let policy = Policy::parse("2/m counter").unwrap();
    for _ in 0..5 {
        client.check(&policy, "k").await.unwrap();
    }
    assert_eq!(counts.get("throttle_client_allowed_total"), 2);
    assert_eq!(counts.get("throttle_client_denied_total"), 3);
    assert_eq!(counts.get("throttle_client_deny_cache_hits_total"), 2);
    assert_eq!(counts.get("throttle_client_server_latency_seconds"), 3, "one per server reply");
    server.kill();
    let d = client.check(&policy, "other").await.unwrap();
    assert!(d.is_degraded() && d.allowed());
    assert_eq!(counts.get("throttle_client_degraded_total"), 1);
    assert_eq!(counts.get("throttle_client_allowed_total"), 3);
    // A span per server call (none for the deny cache's answers), with its outcome.
    let calls = spans.calls();
    assert_eq!(calls[..3], ["cl.counter ok", "cl.counter ok", "cl.counter ok"], "{calls:?}");
    assert!(matches!(calls[3].as_str(), "cl.counter connection" | "cl.counter timeout"), "{calls:?}");
    assert_eq!(calls.len(), 4, "{calls:?}");
}
