//! `CONFIG_TYPE=GRPC_XDS_SOTW`, as Envoy Gateway deploys the service: the built binary on Redis
//! with the module, configured by a control plane of our own (`xds/control_plane.rs`: ADS State
//! of the World, TLS 1.3 with a client certificate required). Versions ACKed and enforced,
//! applied live, NACKed with the old configuration kept, the control plane restarted;
//! `FORCE_START_WITHOUT_INITIAL_CONFIG` both ways; a wrong CA or server name refused; Envoy
//! Gateway's whole default environment (TLS on the gRPC listener, Prometheus through its mapping
//! file) behind a real Envoy whose limits change over xDS mid-traffic. One Redis for the file.

#[path = "xds/control_plane.rs"]
mod control_plane;
#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use control_plane::{ControlPlane, Tls, resource};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use rls::{EnvoyProcess, Rls, Starting, descriptor, host_port, request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The one Redis (with the module) every test here shares, each on its own domain; stopped when
/// the test binary exits.
fn redis() -> String {
    static SERVER: OnceLock<Mutex<Option<harness::Server>>> = OnceLock::new();
    extern "C" fn stop() {
        if let Some(m) = SERVER.get() {
            drop(m.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
    }
    let m = SERVER.get_or_init(|| {
        // SAFETY: registers a plain function run at exit; it only drops the server (kills it).
        unsafe { libc::atexit(stop) };
        Mutex::new(Some(harness::Server::start()))
    });
    host_port(&m.lock().unwrap().as_ref().expect("the shared Redis").url())
}

/// A CA, a certificate it signs for `localhost` (server and client use alike, as Envoy Gateway's
/// one certificate is), and a second CA that signs nothing here.
struct Certs {
    dir: PathBuf,
    ca: rcgen::Certificate,
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    pub ca_file: String,
    pub cert_file: String,
    pub key_file: String,
    pub other_ca_file: String,
}

impl Certs {
    fn new(name: &str) -> Certs {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        // Names of their own: a leaf named as its issuer reads as self-signed to BoringSSL (Envoy).
        let authority = |cn: &str| {
            let key = KeyPair::generate().unwrap();
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.distinguished_name.push(DnType::CommonName, cn);
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            (cert, key)
        };
        let (ca, ca_key) = authority("test CA");
        let (other, _) = authority("another CA");
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, "localhost");
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let dir = std::env::temp_dir().join(format!("rls-xds-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let write = |file: &str, pem: String| {
            let p = dir.join(file);
            std::fs::write(&p, pem).unwrap();
            p.to_string_lossy().into_owned()
        };
        Certs {
            ca_file: write("ca.crt", ca.pem()),
            cert_file: write("tls.crt", cert.pem()),
            key_file: write("tls.key", key.serialize_pem()),
            other_ca_file: write("other-ca.crt", other.pem()),
            dir,
            ca,
            cert,
            key,
        }
    }

    /// The control plane's TLS: this certificate, client certificates from this CA.
    fn tls(&self) -> Tls {
        Tls {
            cert: self.cert.der().clone(),
            key: rustls::pki_types::PrivateKeyDer::Pkcs8(self.key.serialize_der().into()),
            client_ca: self.ca.der().clone(),
        }
    }

    fn client_tls(&self, with_identity: bool) -> tonic::transport::ClientTlsConfig {
        let mut t = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(self.ca.pem()))
            .domain_name("localhost");
        if with_identity {
            t = t.identity(tonic::transport::Identity::from_pem(self.cert.pem(), self.key.serialize_pem()));
        }
        t
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One domain: `user` limited to `n` per `unit`.
fn config(domain: &str, n: u32, unit: RateLimitUnit) -> RateLimitConfig {
    RateLimitConfig {
        name: domain.into(),
        domain: domain.into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy { unit: unit as i32, requests_per_unit: n, ..Default::default() }),
            ..Default::default()
        }],
    }
}

/// The xDS client's variables for a control plane on `port` (quick retries for the tests).
fn xds_env(port: u16, certs: Option<&Certs>) -> Vec<(String, String)> {
    let mut env = vec![
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
        ("CONFIG_GRPC_XDS_SERVER_URL", format!("localhost:{port}")),
        ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit".into()),
        ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "100ms".into()),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "100ms".into()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "400ms".into()),
    ];
    if let Some(c) = certs {
        env.extend([
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true".to_string()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", c.cert_file.clone()),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", c.key_file.clone()),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", c.ca_file.clone()),
        ]);
    }
    env.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

fn with(env: &[(String, String)], more: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> =
        env.iter().filter(|(k, _)| !more.iter().any(|(m, _)| m == k)).cloned().collect();
    env.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    env
}

/// Starts the service (waiting until it listens unless `wait` is false) off the runtime thread.
async fn start(env: Vec<(String, String)>, wait: bool) -> Result<Rls, Starting> {
    tokio::task::spawn_blocking(move || {
        // RUNTIME_ROOT: never read over xDS, so never made.
        let dir = std::env::temp_dir().join("rls-xds-runtime-unused");
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let starting = Starting::new(&dir, &redis(), &pairs);
        if wait { Ok(starting.wait()) } else { Err(starting) }
    })
    .await
    .unwrap()
}

async fn serve(env: Vec<(String, String)>) -> Rls {
    start(env, true).await.unwrap_or_else(|_| unreachable!())
}

/// `n` calls for `user` in `domain`, one after another: the codes and the last response.
async fn calls(rls: &Rls, domain: &str, user: &str, n: usize) -> (Vec<i32>, RateLimitResponse) {
    let mut client = rls.grpc().await;
    let mut codes = Vec::new();
    let mut last = RateLimitResponse::default();
    for _ in 0..n {
        last = client
            .should_rate_limit(request(domain, vec![descriptor(&[("user", user)])]))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", rls.log()))
            .into_inner();
        codes.push(last.overall_code);
    }
    (codes, last)
}

fn admitted(codes: &[i32]) -> usize {
    codes.iter().filter(|&&c| c == Code::Ok as i32).count()
}

fn limit_of(r: &RateLimitResponse) -> u32 {
    r.statuses[0].current_limit.as_ref().map_or(0, |l| l.requests_per_unit)
}

async fn until(what: &str, rls: &Rls, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ok().await {
        assert!(Instant::now() < deadline, "never: {what}\n{}", rls.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_are_acked_enforced_applied_live_nacked_and_outlive_the_control_plane() {
    let certs = Certs::new("versions");
    let cp = ControlPlane::start(
        0,
        Some(&certs.tls()),
        Some(("1".into(), vec![resource(&config("v", 3, RateLimitUnit::Hour))])),
    )
    .await;
    let env = with(
        &xds_env(cp.port, Some(&certs)),
        &[
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=test,cluster=a"),
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-token:abc"),
        ],
    );
    let started = Instant::now();
    let rls = serve(env).await;
    // Version 1, ACKed by a node named as Envoy Gateway names it, with its metadata and headers.
    let ack = cp.acked("1").await;
    let node = ack.node.clone().unwrap();
    assert_eq!((node.id.as_str(), ack.type_url.as_str()), ("envoy-ratelimit", control_plane::TYPE_URL));
    let meta = node.metadata.unwrap().fields;
    assert!(format!("{:?}", meta["zone"]).contains("test") && meta.contains_key("cluster"), "{meta:?}");
    assert_eq!(cp.headers()[0].get("x-token").unwrap(), "abc");
    let (codes, last) = calls(&rls, "v", "u1", 5).await;
    assert_eq!((admitted(&codes), limit_of(&last)), (3, 3), "{codes:?}");
    eprintln!("v1 enforced {:?} after start", started.elapsed());

    // Version 2: applied live (same process, same connection).
    let mut client = rls.grpc().await;
    let pushed = Instant::now();
    cp.set("2", vec![resource(&config("v", 5, RateLimitUnit::Hour))]);
    cp.acked("2").await;
    eprintln!("v2 pushed to ACKed in {:?}", pushed.elapsed());
    let mut codes = Vec::new();
    for _ in 0..7 {
        let r = client.should_rate_limit(request("v", vec![descriptor(&[("user", "u2")])])).await.unwrap().into_inner();
        assert_eq!(limit_of(&r), 5);
        codes.push(r.overall_code);
    }
    assert_eq!(admitted(&codes), 5, "{codes:?}");

    // Invalid versions: NACKed (the last accepted version, the error), version 2 stays.
    let mut unknown_unit = config("v", 9, RateLimitUnit::Hour);
    unknown_unit.descriptors[0].rate_limit.as_mut().unwrap().unit = RateLimitUnit::Unknown as i32;
    let undecodable =
        envoy_types::pb::google::protobuf::Any { type_url: control_plane::TYPE_URL.into(), value: vec![0xff, 0xff] };
    for (version, resources, text) in [
        ("3", vec![resource(&unknown_unit)], "invalid rate limit unit 'UNKNOWN'"),
        (
            "4",
            vec![resource(&config("v", 9, RateLimitUnit::Hour)), resource(&config("v", 9, RateLimitUnit::Day))],
            "duplicate domain 'v'",
        ),
        ("5", vec![undecodable], "cannot decode"),
    ] {
        let before = cp.requests().len();
        cp.set(version, resources);
        let nack = cp
            .wait_request(&format!("the NACK of {version}"), |r| {
                r.error_detail.is_some() && r.error_detail.as_ref().unwrap().message.contains(text)
            })
            .await;
        assert_eq!(nack.version_info, "2", "a NACK names the last accepted version");
        assert!(cp.requests().len() > before);
        let r = client.should_rate_limit(request("v", vec![descriptor(&[("user", "u3")])])).await.unwrap().into_inner();
        assert_eq!(limit_of(&r), 5, "version 2 stays in force after {version}");
    }
    assert_eq!(rls.stat("ratelimit.service.config_load_error"), 2, "unknown unit and duplicate domain");
    assert_eq!(rls.stat("ratelimit.service.config_load_success"), 2);

    // The control plane goes away: version 2 stays in force; it comes back with version 6 and the
    // client reconnects on its own.
    let port = cp.port;
    cp.stop().await;
    until("the stream seen broken", &rls, async || {
        rls.log().contains("Failed to receive configuration from xDS Management Server")
    })
    .await;
    let r = client.should_rate_limit(request("v", vec![descriptor(&[("user", "u4")])])).await.unwrap().into_inner();
    assert_eq!((r.overall_code, limit_of(&r)), (Code::Ok as i32, 5));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cp = ControlPlane::start(
        port,
        Some(&certs.tls()),
        Some(("6".into(), vec![resource(&config("v", 7, RateLimitUnit::Hour))])),
    )
    .await;
    let back = cp.acked("6").await;
    let first = &cp.requests()[0];
    assert_eq!(first.version_info, "2", "a new stream says which version it holds: {first:?}");
    assert_eq!(back.node.unwrap().id, "envoy-ratelimit");
    let (codes, last) = calls(&rls, "v", "u5", 8).await;
    assert_eq!((admitted(&codes), limit_of(&last)), (7, 7), "{codes:?}");
    cp.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_start_without_initial_config_both_ways() {
    // true (Envoy Gateway's): listening and healthy at once, no limits until the first version.
    let cp = ControlPlane::start(0, None, None).await;
    let rls = serve(with(&xds_env(cp.port, None), &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")])).await;
    assert_eq!(Rls::http(&rls.http, "GET", "/healthcheck", ""), (200, "OK".to_string()));
    let e = rls.grpc().await.should_rate_limit(request("f", vec![descriptor(&[("user", "u")])])).await.unwrap_err();
    assert!(e.message().contains("no rate limit configuration loaded"), "{e:?}");
    cp.wait_request("the first request", |r| r.response_nonce.is_empty()).await;
    cp.set("1", vec![resource(&config("f", 2, RateLimitUnit::Hour))]);
    cp.acked("1").await;
    let (codes, _) = calls(&rls, "f", "u1", 3).await;
    assert_eq!(admitted(&codes), 2, "{codes:?}");

    // false (upstream's default): nothing listens until the first version arrives.
    let cp2 = ControlPlane::start(0, None, None).await;
    let starting = start(xds_env(cp2.port, None), false).await.err().unwrap();
    cp2.wait_request("the first request", |r| r.response_nonce.is_empty()).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(starting.listening("gRPC").is_none() && starting.listening("HTTP").is_none(), "{}", starting.log());
    assert!(starting.log().contains("Waiting for initial ratelimit config update event"), "{}", starting.log());
    cp2.set("1", vec![resource(&config("f2", 1, RateLimitUnit::Hour))]);
    let rls2 = tokio::task::spawn_blocking(move || starting.wait()).await.unwrap();
    let (codes, _) = calls(&rls2, "f2", "u1", 2).await;
    assert_eq!(admitted(&codes), 1, "{codes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_domain_config_and_the_largest_message_mean_what_they_mean_upstream() {
    // Two resources of one domain: NACKed by default, merged with MERGE_DOMAIN_CONFIG=true.
    let mut second = config("m", 2, RateLimitUnit::Hour);
    second.name = "m-more".into();
    second.descriptors[0].key = "team".into();
    let cp = ControlPlane::start(
        0,
        None,
        Some(("1".into(), vec![resource(&config("m", 1, RateLimitUnit::Hour)), resource(&second)])),
    )
    .await;
    let merged = serve(with(&xds_env(cp.port, None), &[("MERGE_DOMAIN_CONFIG", "true")])).await;
    let (codes, _) = calls(&merged, "m", "u", 2).await;
    assert_eq!(admitted(&codes), 1, "{codes:?}");
    let mut client = merged.grpc().await;
    let r = client.should_rate_limit(request("m", vec![descriptor(&[("team", "t")])])).await.unwrap().into_inner();
    assert_eq!(limit_of(&r), 2, "the second resource's descriptor, merged into the domain");
    let separate = serve(with(&xds_env(cp.port, None), &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")])).await;
    let nack = cp.wait_request("the NACK of a domain in two resources", |r| r.error_detail.is_some()).await;
    assert!(nack.error_detail.unwrap().message.contains("duplicate domain 'm'"));
    until("the error counted", &separate, async || separate.stat("ratelimit.service.config_load_error") == 1).await;
    // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: a larger response never arrives (the stream fails and is
    // tried again); the default takes it.
    let small = serve(with(
        &xds_env(cp.port, None),
        &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"), ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "64")],
    ))
    .await;
    until("the large response refused", &small, async || {
        small.log().matches("Failed to receive configuration from xDS Management Server").count() >= 2
    })
    .await;
    assert!(small.log().to_ascii_lowercase().contains("message length too large"), "{}", small.log());
    assert_eq!(
        small.stat("ratelimit.service.config_load_success") + small.stat("ratelimit.service.config_load_error"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_server_name_or_no_client_certificate_is_refused() {
    let certs = Certs::new("refused");
    let cp = ControlPlane::start(
        0,
        Some(&certs.tls()),
        Some(("1".into(), vec![resource(&config("w", 1, RateLimitUnit::Hour))])),
    )
    .await;
    let base = with(&xds_env(cp.port, Some(&certs)), &[("FORCE_START_WITHOUT_INITIAL_CONFIG", "true")]);
    let at_ip = format!("127.0.0.1:{}", cp.port);
    let refused: Vec<(&str, Vec<(String, String)>)> = vec![
        (
            "a CA that did not sign the server's certificate",
            with(&base, &[("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", &certs.other_ca_file)]),
        ),
        ("the URL's host not in the certificate", with(&base, &[("CONFIG_GRPC_XDS_SERVER_URL", &at_ip)])),
        (
            "another name in CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            with(&base, &[("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "xds.example")]),
        ),
        (
            "no client certificate",
            base.iter().filter(|(k, _)| !k.starts_with("CONFIG_GRPC_XDS_CLIENT_TLS")).cloned().collect(),
        ),
    ];
    let mut services = Vec::new();
    for (what, env) in refused {
        services.push((what, serve(env).await));
    }
    // The SAN names the certificate's host when the URL's host is an address: accepted.
    let accepted =
        serve(with(&base, &[("CONFIG_GRPC_XDS_SERVER_URL", &at_ip), ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "localhost")]))
            .await;
    cp.acked("1").await;
    let (codes, _) = calls(&accepted, "w", "u", 2).await;
    assert_eq!(admitted(&codes), 1);
    // Each refused one tried (and retried) and never got a configuration.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for (what, rls) in &services {
        until(&format!("{what}: a second attempt"), rls, async || {
            rls.log().matches("Dialing xDS Management Server").count() >= 2
        })
        .await;
        let e = rls.grpc().await.should_rate_limit(request("w", vec![descriptor(&[("user", "u")])])).await.unwrap_err();
        assert!(e.message().contains("no rate limit configuration loaded"), "{what}: {e:?}\n{}", rls.log());
    }
    assert_eq!(
        cp.requests().iter().filter(|r| r.response_nonce.is_empty()).count(),
        1,
        "only the accepted client reached the server: {:?}",
        cp.requests()
    );
    assert!(cp.refused_handshakes.load(std::sync::atomic::Ordering::Relaxed) >= 2);
    let logs: String = services.iter().map(|(_, r)| r.log()).collect();
    assert!(
        logs.contains("Error initializing gRPC connection to xDS Management Server")
            || logs.contains("Failed to receive configuration"),
        "{logs}"
    );
}

/// Envoy Gateway's statsd-exporter mapping (internal/infrastructure/kubernetes/ratelimit/
/// statsd_conf.yaml), mounted at PROMETHEUS_MAPPER_YAML.
const ENVOY_GATEWAY_MAPPING: &str = include_str!("xds/statsd_conf.yaml");

/// Envoy Gateway's environment as the guide shows it (docs/src/guides/gateway.md, the block after
/// `<!-- envoy gateway environment -->`, copied from its deployment), with the files where the
/// test keeps them, the control plane on `port`, the shared Redis, and port 0 for Prometheus
/// (its 19001 would collide with other tests; 8080 and 8081 are the harness's port 0 too).
fn envoy_gateway_env(certs: &Certs, port: u16, mapping: &Path) -> Vec<(String, String)> {
    let guide = std::fs::read_to_string(harness::workspace_root().join("docs/src/guides/gateway.md")).unwrap();
    let after = guide.split("<!-- envoy gateway environment").nth(1).expect("the guide's marker");
    let block = after.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).expect("the guide's block");
    let vars: Vec<serde_norway::Value> = serde_norway::from_str(block).unwrap();
    let text = |v: &serde_norway::Value, k: &str| v.get(k).and_then(serde_norway::Value::as_str).unwrap().to_string();
    let redis = redis();
    let url = format!("localhost:{port}");
    let swaps = [
        ("/certs/tls.crt", certs.cert_file.as_str()),
        ("/certs/tls.key", certs.key_file.as_str()),
        ("/certs/ca.crt", certs.ca_file.as_str()),
        ("envoy-gateway:18001", url.as_str()),
        (":19001", ":0"),
        ("/etc/statsd-exporter/conf.yaml", mapping.to_str().unwrap()),
        ("redis.redis.svc:6379", redis.as_str()),
    ];
    let mut used = [false; 7];
    let env: Vec<(String, String)> = vars
        .into_iter()
        .map(|v| {
            let (name, value) = (text(&v, "name"), text(&v, "value"));
            match swaps.iter().position(|(from, _)| *from == value) {
                Some(i) => {
                    used[i] = true;
                    (name, swaps[i].1.to_string())
                }
                None => (name, value),
            }
        })
        .collect();
    assert!(used.iter().all(|u| *u), "a value the test swaps is gone from the guide: {used:?}");
    assert_eq!(env.len(), 23, "Envoy Gateway's 23 variables");
    env
}

/// A TLS client of the service's gRPC listener.
async fn tls_client(
    rls: &Rls,
    certs: &Certs,
    with_identity: bool,
) -> Result<RateLimitServiceClient<tonic::transport::Channel>, String> {
    let port = rls.grpc.rsplit(':').next().unwrap();
    let channel = tonic::transport::Channel::from_shared(format!("https://localhost:{port}"))
        .unwrap()
        .tls_config(certs.client_tls(with_identity))
        .unwrap()
        .connect()
        .await
        .map_err(|e| format!("{e:?}"))?;
    Ok(RateLimitServiceClient::new(channel))
}

/// Envoy Gateway's rate limit configuration for one route: `tier` (a generic key per rule) and
/// the user header, an hourly and a daily rule, as its translator emits them.
fn tiers(hourly: u32, daily: u32) -> RateLimitConfig {
    let tier = |value: &str, n: u32, unit: RateLimitUnit| RateLimitDescriptor {
        key: "tier".into(),
        value: value.into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy { unit: unit as i32, requests_per_unit: n, ..Default::default() }),
            ..Default::default()
        }],
        ..Default::default()
    };
    RateLimitConfig {
        name: "eg".into(),
        domain: "eg".into(),
        descriptors: vec![tier("hourly", hourly, RateLimitUnit::Hour), tier("daily", daily, RateLimitUnit::Day)],
    }
}

/// Envoy in front of an upstream answering 200, calling the service over TLS with the
/// client certificate (as Envoy Gateway's proxies do), denying when the service fails.
fn envoy(upstream: u16, rls: &Rls, certs: &Certs) -> EnvoyProcess {
    let port = harness::free_port(false);
    let (host, rls_port) = rls.grpc.rsplit_once(':').unwrap();
    let yaml = format!(
        r#"admin: {{address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}}}
static_resources:
  listeners:
  - name: main
    address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: "/"}}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions: [{{generic_key: {{descriptor_key: tier, descriptor_value: hourly}}}}, {{request_headers: {{header_name: x-user, descriptor_key: user}}}}]
                  - actions: [{{generic_key: {{descriptor_key: tier, descriptor_value: daily}}}}, {{request_headers: {{header_name: x-user, descriptor_key: user}}}}]
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: eg
              failure_mode_deny: true
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              timeout: 5s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {{envoy_grpc: {{cluster_name: rls}}}}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
  clusters:
  - name: upstream
    type: STATIC
    load_assignment: {{cluster_name: upstream, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]}}
  - name: rls
    type: STATIC
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {{http2_protocol_options: {{}}}}
    load_assignment: {{cluster_name: rls, endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: {host}, port_value: {rls_port}}}}}}}}}]}}]}}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: localhost
        common_tls_context:
          alpn_protocols: [h2]
          tls_certificates: [{{certificate_chain: {{filename: {cert}}}, private_key: {{filename: {key}}}}}]
          validation_context:
            trusted_ca: {{filename: {ca}}}
            match_typed_subject_alt_names: [{{san_type: DNS, matcher: {{exact: localhost}}}}]
"#,
        cert = certs.cert_file,
        key = certs.key_file,
        ca = certs.ca_file,
    );
    EnvoyProcess::start("xds-envoy", port, &yaml)
}

/// `GET /` through Envoy as `user`: the status and the `x-ratelimit-limit` header.
async fn get(port: u16, user: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(format!("GET / HTTP/1.1\r\nHost: test\r\nx-user: {user}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let limit = text
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("x-ratelimit-limit:").map(|v| v.trim().to_string()))
        .unwrap_or_default();
    (status, limit)
}

/// The limits an `x-ratelimit-limit` value names, by window: `(hourly, daily)`.
fn limits(header: &str) -> (Option<u32>, Option<u32>) {
    let mut out = (None, None);
    for part in header.split(',').map(str::trim) {
        let Some((n, w)) = part.split_once(";w=") else { continue };
        match (n.parse().ok(), w) {
            (Some(n), "3600") => out.0 = Some(n),
            (Some(n), "86400") => out.1 = Some(n),
            _ => {}
        }
    }
    out
}

/// `n` concurrent requests as `user`: how many Envoy let through, and every status.
async fn burst(port: u16, user: &str, n: usize) -> (usize, Vec<u16>) {
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let user = user.to_string();
            tokio::spawn(async move { get(port, &user).await.0 })
        })
        .collect();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    (statuses.iter().filter(|&&s| s == 200).count(), statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_gateway_s_environment_serves_envoy_and_limits_change_mid_traffic() {
    let certs = Certs::new("eg");
    let mapping = certs.dir.join("conf.yaml");
    std::fs::write(&mapping, ENVOY_GATEWAY_MAPPING).unwrap();
    let cp = ControlPlane::start(0, Some(&certs.tls()), None).await;
    let rls = serve(envoy_gateway_env(&certs, cp.port, &mapping)).await;
    assert!(rls.log().contains("GRPC_SERVER_TLS_CA_CERT="), "accepted and logged: {}", rls.log());
    // Probes: GET /healthcheck, healthy before any configuration (FORCE_START_WITHOUT_INITIAL_CONFIG).
    assert_eq!(Rls::http(&rls.http, "GET", "/healthcheck", ""), (200, "OK".to_string()));
    cp.set("1", vec![resource(&tiers(5, 50))]);
    cp.acked("1").await;

    // The gRPC listener: TLS, no client certificate asked (GRPC_SERVER_TLS_CA_CERT is not
    // upstream's), plain text refused.
    let mut client = tls_client(&rls, &certs, false).await.unwrap();
    let r = client
        .should_rate_limit(request("eg", vec![descriptor(&[("tier", "hourly"), ("user", "grpc")])]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.overall_code, limit_of(&r)), (Code::Ok as i32, 5));
    assert!(rls.grpc().await.should_rate_limit(request("eg", vec![])).await.is_err(), "plain text served");
    // Prometheus, named by the mounted mapping as statsd_exporter names them.
    let prometheus = rls.listening("Prometheus").expect("the Prometheus listener");
    let port = prometheus.rsplit(':').next().unwrap();
    let (code, metrics) = Rls::http(&format!("127.0.0.1:{port}"), "GET", "/metrics", "");
    assert_eq!(code, 200);
    for line in [
        "ratelimit_service_rate_limit_total_hits{domain=\"eg\",key1=\"tier_hourly\",key2=\"user\"} 1",
        "ratelimit_service_rate_limit_within_limit{domain=\"eg\",key1=\"tier_hourly\",key2=\"user\"} 1",
        "ratelimit_service_total_requests{grpc_method=\"ShouldRateLimit\"} 1",
        "ratelimit_service_config_load_success 1",
        "ratelimit_service_response_time_seconds_count{grpc_method=\"ShouldRateLimit\"} 1",
        // Envoy Gateway's mapping has no `scale: 0.001`: the histogram observes milliseconds, as
        // statsd_exporter observes them with it.
        "ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} missing from:\n{metrics}");
    }

    // With GRPC_CLIENT_TLS_CACERT (upstream's name), client certificates are required.
    let mtls =
        serve(with(&envoy_gateway_env(&certs, cp.port, &mapping), &[("GRPC_CLIENT_TLS_CACERT", &certs.ca_file)])).await;
    until("the second instance's configuration", &mtls, async || {
        mtls.log().contains("Successfully loaded new configuration")
    })
    .await;
    let mut with_cert = tls_client(&mtls, &certs, true).await.unwrap();
    let served =
        with_cert.should_rate_limit(request("eg", vec![descriptor(&[("tier", "daily"), ("user", "m")])])).await;
    assert!(served.is_ok(), "{served:?}");
    let refused = match tls_client(&mtls, &certs, false).await {
        Err(_) => true,
        Ok(mut c) => {
            c.should_rate_limit(request("eg", vec![descriptor(&[("tier", "daily"), ("user", "m")])])).await.is_err()
        }
    };
    assert!(refused, "a client without a certificate was served");
    drop(mtls);

    // A real Envoy in front, over TLS.
    let app = axum::Router::new().fallback(|| async { "ok" });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let envoy = envoy(upstream, &rls, &certs);
    // Version 1: exactly 5 of 20 concurrent requests.
    let (ok, statuses) = burst(envoy.port, "before", 20).await;
    assert_eq!(ok, 5, "{statuses:?}\n{}\n{}", rls.log(), envoy.log());
    assert!(statuses.iter().all(|&s| s == 200 || s == 429), "{statuses:?}");

    // Traffic of fresh users (two requests each: under every limit of both versions) while
    // version 2 replaces version 1: every request admitted, and each answered wholly by one
    // version (its hourly and daily limits from the same version).
    let seen: Arc<Mutex<Vec<(u16, String)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut traffic = Vec::new();
    for worker in 0..6 {
        let (seen, stop, port) = (seen.clone(), stop.clone(), envoy.port);
        traffic.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let user = format!("mid-{worker}-{i}");
                for _ in 0..2 {
                    let answer = get(port, &user).await;
                    seen.lock().unwrap().push(answer);
                }
                i += 1;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    cp.set("2", vec![resource(&tiers(8, 80))]);
    cp.acked("2").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in traffic {
        t.await.unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    let (mut v1, mut v2) = (0, 0);
    for (status, header) in &seen {
        assert_eq!(*status, 200, "a request failed or was refused mid-change: {header}\n{}", envoy.log());
        match limits(header) {
            (Some(5), Some(50)) => v1 += 1,
            (Some(8), Some(80)) => v2 += 1,
            other => panic!("a request answered from a half-applied configuration: {header} ({other:?})"),
        }
    }
    assert!(v1 > 0 && v2 > 0, "the change happened mid-traffic: {v1} answers by version 1, {v2} by version 2");
    eprintln!("mid-traffic: {} requests, {v1} by version 1, {v2} by version 2", seen.len());

    // Version 2: exactly 8 of 20.
    let (ok, statuses) = burst(envoy.port, "after", 20).await;
    assert_eq!(ok, 8, "{statuses:?}");
    cp.stop().await;
}
