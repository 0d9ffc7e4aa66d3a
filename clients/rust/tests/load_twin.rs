//! The twin inside the crate: `load_twin` against a plain server (no module), servers holding an
//! older, newer or unversioned twin, and every primary of a 3-primary cluster (from a
//! `ClusterClient` and from a `redis::Client` of one node); the warning for an outdated twin,
//! once; the connect error naming the loader on a server with neither the module nor the twin.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::sync::{Arc, Mutex};

use harness::{Cluster, Options, Server};
use redis_throttle_client::twin::{Found, TWIN_LIBRARY, TWIN_VERSION, TwinAction, TwinNode};
use redis_throttle_client::{Backend, Error, LoadOptions, Policy, Throttle, TwinError, load_twin, load_twin_with};

/// What the crate's library's cl_version answers once loaded (None for a library from before cl_version).
fn stated() -> Option<String> {
    TWIN_LIBRARY.contains("cl_version").then(|| TWIN_VERSION.to_string())
}

/// A library `throttle` that only states `version` (None: one without cl_version, as twins before it).
fn fake(version: Option<&str>) -> String {
    match version {
        None => "#!lua name=throttle\nredis.register_function('cl_dummy', function() return 1 end)\n".into(),
        Some(v) => format!(
            "#!lua name=throttle\nredis.register_function{{function_name='cl_version', callback=function() return '{v}' end, flags={{'no-writes'}}}}\n"
        ),
    }
}

fn plain() -> Server {
    Server::with(Options::default().without_module())
}

fn function_load(server: &Server, code: &str) {
    let _: String = redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(code).query(&mut server.client()).unwrap();
}

fn stated_version(server: &Server) -> String {
    redis::cmd("FCALL_RO").arg("cl_version").arg(0).query(&mut server.client()).unwrap()
}

fn libraries(server: &Server) -> usize {
    let libs: Vec<redis::Value> =
        redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("throttle").query(&mut server.client()).unwrap();
    libs.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_on_a_plain_server_reports_and_decides_and_a_second_load_sends_nothing() {
    let server = plain();
    let client = redis::Client::open(server.url()).unwrap();
    let node = format!("127.0.0.1:{}", server.port);
    let report = load_twin(&client).await.unwrap();
    assert_eq!(report.version, TWIN_VERSION);
    assert_eq!(
        report.nodes,
        vec![TwinNode { node: node.clone(), before: Found::Nothing, after: stated(), action: TwinAction::Loaded }]
    );

    let throttle = Throttle::connect(&server.url()).await.unwrap();
    assert_eq!(throttle.backend(), Backend::Twin);
    let policy = Policy::parse("2/m").unwrap();
    let mut allowed = Vec::new();
    for _ in 0..3 {
        allowed.push(throttle.check(&policy, "user").await.unwrap().allowed());
    }
    assert_eq!(allowed, [true, true, false]);

    let sent = server.command_calls("function|load");
    let again = load_twin(&client).await.unwrap();
    let before = stated().map_or(Found::Unversioned, Found::Version);
    assert_eq!(again.nodes, vec![TwinNode { node, before, after: stated(), action: TwinAction::Unchanged }]);
    assert_eq!(server.command_calls("function|load"), sent, "FUNCTION LOAD sent for the same library");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_unversioned_and_same_version_twins_are_replaced_and_a_newer_one_only_by_force() {
    let server = plain();
    let client = redis::Client::open(server.url()).unwrap();
    let actions =
        |r: redis_throttle_client::TwinReport| r.nodes.into_iter().map(|n| (n.before, n.action)).collect::<Vec<_>>();
    function_load(&server, &fake(Some("0.0.1")));
    assert_eq!(actions(load_twin(&client).await.unwrap()), [(Found::Version("0.0.1".into()), TwinAction::Upgraded)]);
    function_load(&server, &fake(None));
    assert_eq!(actions(load_twin(&client).await.unwrap()), [(Found::Unversioned, TwinAction::Upgraded)]);
    function_load(&server, &fake(Some(TWIN_VERSION)));
    assert_eq!(
        actions(load_twin(&client).await.unwrap()),
        [(Found::Version(TWIN_VERSION.into()), TwinAction::Replaced)]
    );

    function_load(&server, &fake(Some("99.1.0")));
    let err = load_twin(&client).await.unwrap_err();
    assert!(
        matches!(&err, TwinError::Downgrade { nodes, .. } if nodes == &[(format!("127.0.0.1:{}", server.port), "99.1.0".to_string())]),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("has the twin 99.1.0, newer than this crate's")
            && text.contains(TWIN_VERSION)
            && text.contains("force"),
        "{text}"
    );
    assert_eq!(stated_version(&server), "99.1.0", "the newer twin was replaced");
    let forced = load_twin_with(&client, LoadOptions { force: true }).await.unwrap();
    assert_eq!(actions(forced), [(Found::Version("99.1.0".into()), TwinAction::Downgraded)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primary_of_a_cluster_from_a_cluster_client_or_one_nodes_client() {
    let cluster = Cluster::start(3, 0);
    let mut names: Vec<String> = cluster.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
    names.sort();
    let clients = redis::cluster::ClusterClient::new(cluster.urls()).unwrap();
    let report = load_twin(&clients).await.unwrap();
    assert_eq!(report.nodes.iter().map(|n| n.node.clone()).collect::<Vec<_>>(), names);
    assert!(
        report
            .nodes
            .iter()
            .all(|n| n.action == TwinAction::Loaded && n.before == Found::Nothing && n.after == stated()),
        "{report:?}"
    );
    assert!(cluster.nodes.iter().all(|n| libraries(n) == 1));

    let one = redis::Client::open(cluster.nodes[1].url()).unwrap();
    let again = load_twin(&one).await.unwrap();
    assert_eq!(
        again.nodes.iter().map(|n| n.action).collect::<Vec<_>>(),
        [TwinAction::Unchanged; 3],
        "a node's client loads on every primary"
    );

    for n in &cluster.nodes {
        let _: String = redis::cmd("FUNCTION").arg("DELETE").arg("throttle").query(&mut n.client()).unwrap();
    }
    function_load(&cluster.nodes[2], &fake(Some("99.0.0")));
    let err = load_twin(&clients).await.unwrap_err();
    assert!(err.to_string().contains(&format!("127.0.0.1:{} has the twin 99.0.0", cluster.nodes[2].port)), "{err}");
    assert_eq!(cluster.nodes.iter().map(libraries).collect::<Vec<_>>(), [0, 0, 1], "something was loaded");
    let forced = load_twin_with(&clients, LoadOptions { force: true }).await.unwrap();
    let mut actions: Vec<TwinAction> = forced.nodes.iter().map(|n| n.action).collect();
    actions.sort_by_key(|a| format!("{a:?}"));
    assert_eq!(actions, [TwinAction::Downgraded, TwinAction::Loaded, TwinAction::Loaded]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_with_neither_names_the_loader_in_the_connect_error() {
    let server = plain();
    let Err(Error::NoLimiter(text)) = Throttle::connect(&server.url()).await else {
        panic!("connected to a server with neither")
    };
    let url = format!("redis://127.0.0.1:{}", server.port);
    assert!(text.contains("neither the redis-throttle module"), "{text}");
    assert!(
        text.contains(&format!("redis_throttle_client::load_twin(&redis::Client::open(\"{url}\")?).await")),
        "{text}"
    );
    assert!(text.contains(&format!("npx redis-throttle-js twin load {url}")), "{text}");
}

/// Counts the `tracing` warnings of this thread.
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl tracing::field::Visit for Message<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            *self.0 = format!("{value:?}");
        }
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut text = String::new();
            event.record(&mut Message(&mut text));
            self.0.lock().unwrap().push(text);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "current_thread")]
async fn an_outdated_or_unversioned_twin_is_warned_about_once_per_process_and_server() {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let _guard = tracing::subscriber::set_default(Warnings(warnings.clone()));
    let server = plain();
    function_load(&server, &fake(Some("0.0.2")));
    for _ in 0..3 {
        assert_eq!(Throttle::connect(&server.url()).await.unwrap().backend(), Backend::Twin);
    }
    let seen = warnings.lock().unwrap().clone();
    let ours: Vec<&String> = seen.iter().filter(|w| w.contains("Functions twin")).collect();
    assert_eq!(ours.len(), 1, "{seen:?}");
    assert!(
        ours[0].contains(&format!("is 0.0.2, older than this crate's {TWIN_VERSION}")) && ours[0].contains("load_twin"),
        "{}",
        ours[0]
    );
    function_load(&server, &fake(None));
    for _ in 0..2 {
        assert_eq!(Throttle::connect(&server.url()).await.unwrap().backend(), Backend::Twin);
    }
    let ours: Vec<String> = warnings.lock().unwrap().iter().filter(|w| w.contains("Functions twin")).cloned().collect();
    assert_eq!(ours.len(), 2, "{ours:?}");
    assert!(ours[1].contains("states no version"), "{}", ours[1]);
    for version in [Some(TWIN_VERSION), Some("99.0.0")] {
        function_load(&server, &fake(version));
        Throttle::connect(&server.url()).await.unwrap();
    }
    let count = warnings.lock().unwrap().iter().filter(|w| w.contains("Functions twin")).count();
    assert_eq!(count, 2, "a current or newer twin is not warned about");
}
