//! The Functions twin this crate carries (the repository's `functions/throttle.lua`, compiled in
//! with `include_str!`) and its loader: [`load_twin`] loads it with `FUNCTION LOAD REPLACE` on a
//! standalone server or on every primary of a cluster, reports the version found and loaded on
//! each, and refuses to replace a newer twin unless [`LoadOptions::force`] is set.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Mutex, OnceLock};

use redis::aio::MultiplexedConnection;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionAddr, ConnectionInfo, RedisError, Value};

/// The Functions library `throttle`, as `functions/throttle.lua` holds it.
pub const TWIN_LIBRARY: &str = include_str!("../../../functions/throttle.lua");

/// The version of the twin this crate carries: the crate's (one version for everything).
pub const TWIN_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The twin a primary held before loading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No library `throttle`.
    Nothing,
    /// A library `throttle` without `cl_version`: older than any twin that states its version.
    Unversioned,
    /// The version its `cl_version` states.
    Version(String),
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Nothing => f.write_str("no library"),
            Found::Unversioned => f.write_str("unversioned"),
            Found::Version(v) => f.write_str(v),
        }
    }
}

/// What the loader did on one primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TwinAction {
    /// No library `throttle` was there.
    Loaded,
    /// An older twin (or one stating no version) was replaced.
    Upgraded,
    /// The same version with other code (a development build) was replaced.
    Replaced,
    /// The very same library was there: nothing was sent.
    Unchanged,
    /// A newer twin was replaced, because [`LoadOptions::force`] was set.
    Downgraded,
}

/// One primary's part of a [`TwinReport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwinNode {
    /// `host:port` (the socket's path for a Unix socket).
    pub node: String,
    pub before: Found,
    /// The version the server states now (`FCALL_RO cl_version 0`); `None` only for a library
    /// that states none.
    pub after: Option<String>,
    pub action: TwinAction,
}

/// What [`load_twin`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwinReport {
    /// The version of the twin this crate carries.
    pub version: &'static str,
    /// One entry per primary.
    pub nodes: Vec<TwinNode>,
}

/// How [`load_twin_with`] loads.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoadOptions {
    /// Replace a twin newer than this crate's (a downgrade); refused without it.
    pub force: bool,
}

/// Why the twin was not loaded (everywhere).
#[derive(Debug)]
pub enum TwinError {
    /// A primary holds a newer twin (node, its version): nothing was loaded anywhere.
    Downgrade { nodes: Vec<(String, String)>, version: &'static str },
    /// The server is a replica: the twin is loaded on its primary.
    Replica(String),
    /// A command failed on a node (`loaded`: the nodes where the twin was already loaded).
    Redis { node: String, error: RedisError, loaded: Vec<String> },
}

impl fmt::Display for TwinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TwinError::Downgrade { nodes, version } => {
                f.write_str("refusing to downgrade the Functions twin: ")?;
                for (i, (node, found)) in nodes.iter().enumerate() {
                    let sep = if i > 0 { "; " } else { "" };
                    match compare_versions(found, version) {
                        Some(_) => write!(f, "{sep}{node} has the twin {found}, newer than this crate's {version}")?,
                        None => write!(
                            f,
                            "{sep}{node} states the version {found:?}, which cannot be compared with {version}"
                        )?,
                    }
                }
                f.write_str(". Nothing was loaded. Load this crate's twin anyway with LoadOptions { force: true }")
            }
            TwinError::Replica(node) => {
                write!(f, "{node} is a replica: load the twin on its primary (replicas receive it from there)")
            }
            TwinError::Redis { node, error, loaded } => {
                write!(f, "{node}: {error}")?;
                if !loaded.is_empty() {
                    write!(f, " (already loaded on {}; loading again is safe)", loaded.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for TwinError {}

/// The servers [`load_twin`] takes: a [`redis::Client`] (its server, or every primary when it
/// is a node of a cluster) or a [`ClusterClient`] (every primary).
pub enum TwinTarget<'a> {
    Client(&'a redis::Client),
    Cluster(&'a ClusterClient),
}

impl<'a> From<&'a redis::Client> for TwinTarget<'a> {
    fn from(c: &'a redis::Client) -> Self {
        TwinTarget::Client(c)
    }
}

impl<'a> From<&'a ClusterClient> for TwinTarget<'a> {
    fn from(c: &'a ClusterClient) -> Self {
        TwinTarget::Cluster(c)
    }
}

/// Loads this crate's Functions twin (library `throttle`): on the client's server, or on every
/// primary of a cluster. Refuses a downgrade ([`TwinError::Downgrade`], nothing loaded
/// anywhere); loading the same library again sends nothing.
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let report = redis_throttle_client::load_twin(&client).await?;
/// for node in &report.nodes {
///     println!("{}: {:?} {:?}", node.node, node.action, node.after);
/// }
/// # Ok(()) }
/// ```
pub async fn load_twin<'a>(target: impl Into<TwinTarget<'a>>) -> Result<TwinReport, TwinError> {
    load_twin_with(target, LoadOptions::default()).await
}

/// [`load_twin`] with options (`force`: replace a newer twin).
pub async fn load_twin_with<'a>(
    target: impl Into<TwinTarget<'a>>,
    options: LoadOptions,
) -> Result<TwinReport, TwinError> {
    let nodes = match target.into() {
        TwinTarget::Cluster(cluster) => cluster_nodes(cluster).await?,
        TwinTarget::Client(client) => {
            let name = address(client.get_connection_info()).1;
            let fail = |error| TwinError::Redis { node: name.clone(), error, loaded: Vec::new() };
            let conn = client.get_multiplexed_async_connection().await.map_err(fail)?;
            let info: String = redis::cmd("INFO").query_async(&mut conn.clone()).await.map_err(fail)?;
            if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
                let cluster = ClusterClient::new(vec![client.get_connection_info().clone()]).map_err(fail)?;
                cluster_nodes(&cluster).await?
            } else if info.lines().any(|l| l.trim() == "role:slave") {
                return Err(TwinError::Replica(name));
            } else {
                vec![Node { name, conn: NodeConn::Plain(conn) }]
            }
        }
    };
    load_on(&nodes, options.force).await
}

struct Node {
    name: String,
    conn: NodeConn,
}

enum NodeConn {
    Plain(MultiplexedConnection),
    Cluster { conn: ClusterConnection, host: String, port: u16 },
}

impl Node {
    async fn send(&self, cmd: Cmd) -> redis::RedisResult<Value> {
        match &self.conn {
            NodeConn::Plain(c) => cmd.query_async(&mut c.clone()).await,
            NodeConn::Cluster { conn, host, port } => {
                let route =
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: host.clone(), port: *port });
                conn.clone().route_command(cmd, route).await
            }
        }
    }

    fn fail(&self, error: RedisError, loaded: &[TwinNode]) -> TwinError {
        let loaded = loaded.iter().filter(|n| n.action != TwinAction::Unchanged).map(|n| n.node.clone()).collect();
        TwinError::Redis { node: self.name.clone(), error, loaded }
    }
}

/// Every primary the cluster client knows, by the address it reaches it at.
async fn cluster_nodes(cluster: &ClusterClient) -> Result<Vec<Node>, TwinError> {
    let fail = |error| TwinError::Redis { node: "the cluster".into(), error, loaded: Vec::new() };
    let conn = cluster.get_async_connection().await.map_err(fail)?;
    let route = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None::<ResponsePolicy>));
    let reply = conn.clone().route_command(redis::cmd("PING").clone(), route).await.map_err(fail)?;
    let Value::Map(replies) = reply else {
        return Err(fail(RedisError::from((
            redis::ErrorKind::Client,
            "unexpected reply to PING on every primary",
            format!("{reply:?}"),
        ))));
    };
    let mut nodes = Vec::new();
    for (address, _) in replies {
        let address = text(&address).unwrap_or_default();
        let Some((host, port)) =
            address.rsplit_once(':').and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        else {
            return Err(fail(RedisError::from((
                redis::ErrorKind::Client,
                "a primary's address is not host:port",
                address,
            ))));
        };
        nodes.push(Node { name: address.clone(), conn: NodeConn::Cluster { conn: conn.clone(), host, port } });
    }
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(nodes)
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// The fields of a RESP2 array of pairs or a RESP3 map.
fn fields(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| match p {
                [k, v] => Some((text(k)?, v)),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs.iter().filter_map(|(k, v)| Some((text(k)?, v))).collect(),
        _ => Vec::new(),
    }
}

/// The library `throttle` in a `FUNCTION LIST … WITHCODE` reply: its code and function names.
fn find_library(reply: &Value) -> Option<(Option<String>, Vec<String>)> {
    let Value::Array(libraries) = reply else { return None };
    libraries.iter().find_map(|lib| {
        let f = fields(lib);
        let get = |name: &str| f.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        if get("library_name").and_then(text).as_deref() != Some("throttle") {
            return None;
        }
        let functions = match get("functions") {
            Some(Value::Array(fns)) => fns
                .iter()
                .filter_map(|f| fields(f).into_iter().find(|(k, _)| k == "name").and_then(|(_, v)| text(v)))
                .collect(),
            _ => Vec::new(),
        };
        Some((get("library_code").and_then(text), functions))
    })
}

fn version_cmd() -> Cmd {
    redis::cmd("FCALL_RO").arg("cl_version").arg(0).clone()
}

enum Plan {
    Do(TwinAction),
    Refuse(String),
}

fn plan(before: &Found, code: Option<&str>, force: bool) -> Plan {
    if code == Some(TWIN_LIBRARY) {
        return Plan::Do(TwinAction::Unchanged);
    }
    let found = match before {
        Found::Nothing => return Plan::Do(TwinAction::Loaded),
        Found::Unversioned => return Plan::Do(TwinAction::Upgraded),
        Found::Version(v) => v,
    };
    match compare_versions(found, TWIN_VERSION) {
        Some(std::cmp::Ordering::Less) => Plan::Do(TwinAction::Upgraded),
        Some(std::cmp::Ordering::Equal) => Plan::Do(TwinAction::Replaced),
        None if force => Plan::Do(TwinAction::Replaced),
        Some(std::cmp::Ordering::Greater) if force => Plan::Do(TwinAction::Downgraded),
        _ => Plan::Refuse(found.clone()),
    }
}

async fn load_on(nodes: &[Node], force: bool) -> Result<TwinReport, TwinError> {
    let mut found = Vec::with_capacity(nodes.len());
    for node in nodes {
        let libraries = node
            .send(redis::cmd("FUNCTION").arg("LIST").arg("LIBRARYNAME").arg("throttle").arg("WITHCODE").clone())
            .await
            .map_err(|e| node.fail(e, &[]))?;
        let (before, code) = match find_library(&libraries) {
            None => (Found::Nothing, None),
            Some((code, functions)) if functions.iter().any(|f| f == "cl_version") => {
                let v = node.send(version_cmd()).await.map_err(|e| node.fail(e, &[]))?;
                (text(&v).map_or(Found::Unversioned, Found::Version), code)
            }
            Some((code, _)) => (Found::Unversioned, code),
        };
        found.push((before, code));
    }
    let plans: Vec<Plan> = found.iter().map(|(before, code)| plan(before, code.as_deref(), force)).collect();
    let refused: Vec<(String, String)> = nodes
        .iter()
        .zip(&plans)
        .filter_map(|(n, p)| match p {
            Plan::Refuse(v) => Some((n.name.clone(), v.clone())),
            Plan::Do(_) => None,
        })
        .collect();
    if !refused.is_empty() {
        return Err(TwinError::Downgrade { nodes: refused, version: TWIN_VERSION });
    }
    let mut report = Vec::with_capacity(nodes.len());
    for ((node, (before, _)), plan) in nodes.iter().zip(found).zip(plans) {
        let Plan::Do(action) = plan else { unreachable!("refusals returned above") };
        let after = if action == TwinAction::Unchanged {
            match &before {
                Found::Version(v) => Some(v.clone()),
                _ => None,
            }
        } else {
            node.send(redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(TWIN_LIBRARY).clone())
                .await
                .map_err(|e| node.fail(e, &report))?;
            // A library without cl_version (built before it existed) states none.
            node.send(version_cmd()).await.ok().as_ref().and_then(text)
        };
        report.push(TwinNode { node: node.name.clone(), before, after, action });
    }
    Ok(TwinReport { version: TWIN_VERSION, nodes: report })
}

/// Semantic-version order of two versions, or `None` when either is not one.
pub fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering;
    fn parse(v: &str) -> Option<([u64; 3], Option<&str>)> {
        let v = v.trim().trim_start_matches('v');
        let v = v.split_once('+').map_or(v, |(v, _)| v);
        let (core, pre) = v.split_once('-').map_or((v, None), |(c, p)| (c, Some(p)));
        let mut parts = core.split('.');
        let mut n = [0u64; 3];
        for slot in &mut n {
            let p = parts.next()?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            *slot = p.parse().ok()?;
        }
        if parts.next().is_some() || pre.is_some_and(|p| p.is_empty()) {
            return None;
        }
        Some((n, pre))
    }
    let ((x, p), (y, q)) = (parse(a)?, parse(b)?);
    Some(x.cmp(&y).then_with(|| match (p, q) {
        (None, None) => Ordering::Equal,
        (None, Some(_)) => Ordering::Greater, // a release follows its pre-releases
        (Some(_), None) => Ordering::Less,
        (Some(p), Some(q)) => {
            let (mut ps, mut qs) = (p.split('.'), q.split('.'));
            loop {
                match (ps.next(), qs.next()) {
                    (None, None) => return Ordering::Equal,
                    (None, Some(_)) => return Ordering::Less,
                    (Some(_), None) => return Ordering::Greater,
                    (Some(u), Some(v)) => {
                        let order = match (u.parse::<u64>(), v.parse::<u64>()) {
                            (Ok(m), Ok(n)) => m.cmp(&n),
                            (Ok(_), Err(_)) => Ordering::Less,
                            (Err(_), Ok(_)) => Ordering::Greater,
                            (Err(_), Err(_)) => u.cmp(v),
                        };
                        if order != Ordering::Equal {
                            return order;
                        }
                    }
                }
            }
        }
    }))
}

// ---- what the client says about a server's twin

/// (a URL without its password, `host:port`) of a connection.
fn address(info: &ConnectionInfo) -> (String, String) {
    let settings = info.redis_settings();
    let auth = match (settings.username(), settings.password()) {
        (Some(user), _) if user != "default" => format!("{user}:PASSWORD@"),
        (_, Some(_)) => ":PASSWORD@".to_string(),
        _ => String::new(),
    };
    let bracket = |h: &str| if h.contains(':') { format!("[{h}]") } else { h.to_string() };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => {
            (format!("redis://{auth}{}:{port}", bracket(host)), format!("{}:{port}", bracket(host)))
        }
        ConnectionAddr::TcpTls { host, port, .. } => {
            (format!("rediss://{auth}{}:{port}", bracket(host)), format!("{}:{port}", bracket(host)))
        }
        ConnectionAddr::Unix(path) => (format!("unix://{}", path.display()), path.display().to_string()),
        _ => ("redis://HOST:PORT".into(), "the server".into()),
    }
}

/// The error text for a server with neither the module nor the twin, naming the loader for
/// `info`'s server (a placeholder address when the client was given a connection).
pub(crate) fn missing_library(info: Option<&ConnectionInfo>) -> String {
    let url = info.map_or_else(|| "redis://HOST:PORT".to_string(), |i| address(i).0);
    format!(
        "the server has neither the redis-throttle module (COMMAND INFO cl.throttle is empty) nor its Functions library `throttle` (FUNCTION LIST): \
         load the twin this crate carries with `redis_throttle_client::load_twin(&redis::Client::open(\"{url}\")?).await` \
         (from a shell: `npx redis-throttle-js twin load {url}`, `python -m redis_throttle twin load {url}`, \
         or in a checkout `redis-cli -u {url} -x FUNCTION LOAD REPLACE < functions/throttle.lua`), \
         or the module (redis-server --loadmodule /path/to/libredis_throttle.so)"
    )
}

/// Warns (`tracing`, once per process, server and version found) when the server's twin is older than
/// this crate's or states no version. `reply`: what `FCALL_RO cl_version 0` answered.
pub(crate) fn warn_if_outdated(reply: &redis::RedisResult<Value>, info: Option<&ConnectionInfo>) -> Option<String> {
    let found = match reply {
        Ok(v) => text(v).map_or(Found::Unversioned, Found::Version),
        Err(e) if e.to_string().to_ascii_lowercase().contains("function not found") => Found::Unversioned,
        Err(_) => return None, // the server cannot say (an ACL without FCALL_RO)
    };
    let older = match &found {
        Found::Version(v) => compare_versions(v, TWIN_VERSION) == Some(std::cmp::Ordering::Less),
        _ => true,
    };
    let url = info.map_or_else(|| "redis://HOST:PORT".to_string(), |i| address(i).0);
    static WARNED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    if !older
        || !WARNED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(format!("{url} {found}"))
    {
        return None;
    }
    let what = match &found {
        Found::Version(v) => format!("is {v}"),
        _ => "states no version (it predates cl_version)".to_string(),
    };
    let message = format!(
        "the server's Functions twin {what}, older than this crate's {TWIN_VERSION}: load this crate's with redis_throttle_client::load_twin (or `npx redis-throttle-js twin load {url}`)"
    );
    tracing::warn!("redis-throttle: {message}");
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Ordering::*;

    #[test]
    fn versions_order_as_semver() {
        for (a, b, o) in [
            ("0.1.0", "0.1.0", Equal),
            ("0.1.0", "0.2.0", Less),
            ("1.0.0", "0.99.99", Greater),
            ("0.10.0", "0.9.0", Greater),
            ("1.0.0-rc.1", "1.0.0", Less),
            ("1.0.0-alpha", "1.0.0-alpha.1", Less),
            ("1.0.0-alpha.beta", "1.0.0-beta", Less),
            ("1.0.0-rc.2", "1.0.0-rc.10", Less),
            ("1.0.0+build", "1.0.0", Equal),
        ] {
            assert_eq!(compare_versions(a, b), Some(o), "{a} vs {b}");
            assert_eq!(compare_versions(b, a), Some(o.reverse()), "{b} vs {a}");
        }
        for bad in ["", "1", "1.0", "1.0.0.0", "x.y.z", "1.0.0-", "01a.0.0"] {
            assert_eq!(compare_versions(bad, "1.0.0"), None, "{bad}");
        }
    }

    fn vectors() -> serde_json::Value {
        serde_json::from_str(include_str!("../../../tests/vectors/twin-loader.json")).unwrap()
    }

    /// A reply as the server sends it, from its JSON form (objects: RESP3 maps).
    fn value(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::String(s) => Value::BulkString(s.clone().into_bytes()),
            serde_json::Value::Number(n) => Value::Int(n.as_i64().unwrap()),
            serde_json::Value::Array(items) => Value::Array(items.iter().map(value).collect()),
            serde_json::Value::Object(map) => {
                Value::Map(map.iter().map(|(k, v)| (Value::BulkString(k.clone().into_bytes()), value(v))).collect())
            }
            serde_json::Value::Bool(b) => Value::Boolean(*b),
        }
    }

    /// The shared vectors (tests/vectors/twin-loader.json), as the npm and Python loaders read them.
    #[test]
    fn the_loader_follows_the_shared_vectors() {
        let vectors = vectors();
        for v in vectors["versions"].as_array().unwrap() {
            let (a, b) = (v["a"].as_str().unwrap(), v["b"].as_str().unwrap());
            let want = v["order"].as_i64().map(|o| o.cmp(&0));
            assert_eq!(compare_versions(a, b), want, "{a} ~ {b}");
        }
        for v in vectors["function_list"].as_array().unwrap() {
            let found = find_library(&value(&v["reply"]))
                .map(|(code, functions)| serde_json::json!({"code": code, "functions": functions}));
            assert_eq!(found.unwrap_or(serde_json::Value::Null), v["library"], "{}", v["reply"]);
        }
        for p in vectors["plans"].as_array().unwrap() {
            let before = match p["found"].as_str().unwrap() {
                "none" => Found::Nothing,
                "unversioned" => Found::Unversioned,
                "same" => Found::Version(TWIN_VERSION.to_string()),
                other => Found::Version(vectors["found_versions"][other].as_str().unwrap().to_string()),
            };
            let code = match (p["same_code"].as_bool().unwrap(), &before) {
                (true, _) => Some(TWIN_LIBRARY),
                (false, Found::Nothing) => None,
                (false, _) => Some("#!lua name=throttle\n-- another"),
            };
            let action = match plan(&before, code, p["force"].as_bool().unwrap()) {
                Plan::Do(action) => format!("{action:?}").to_lowercase(),
                Plan::Refuse(_) => "refused".to_string(),
            };
            assert_eq!(action, p["action"].as_str().unwrap(), "{p}");
        }
    }

    #[test]
    fn the_library_is_functions_throttle_lua_and_the_version_the_workspace_one() {
        assert!(TWIN_LIBRARY.starts_with("#!lua name=throttle"));
        let cargo = include_str!("../../../Cargo.toml");
        let workspace =
            cargo.split("[workspace.package]").nth(1).or_else(|| cargo.split("[package]").nth(1)).unwrap_or_default();
        let version = workspace.lines().find_map(|l| l.strip_prefix("version = ")).map(|v| v.trim_matches('"'));
        assert_eq!(version, Some(TWIN_VERSION), "the root Cargo.toml's version");
    }
}
