//! `CONFIG_TYPE=GRPC_XDS_SOTW`: upstream's xDS client. An ADS stream
//! (`AggregatedDiscoveryService/StreamAggregatedResources`, State of the World) asks for every
//! `ratelimit.config.ratelimit.v3.RateLimitConfig` resource; each response is one whole
//! configuration (one resource per domain), turned into the documents the file loader reads and
//! checked by the same validator ([`crate::config::build`]). A configuration that loads is
//! ACKed (`version_info` its version); one that fails is NACKed (`error_detail`, `version_info`
//! still the last accepted) and the one in force stays. While the server is unreachable the
//! configuration in force stays too: the client dials every `CONNECT_RETRY_INTERVAL` and, after
//! a stream breaks, waits `XDS_CLIENT_BACKOFF_*` first, as upstream does.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value as ProtoValue, value::Kind};
use envoy_types::pb::google::rpc::Status;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use prost::Message;
use serde_norway::{Mapping, Value};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::settings::XdsSettings;

/// The resource type the client asks for.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// gRPC's default limit on a received message, which `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES` replaces.
const DEFAULT_MAX_MSG: usize = 4 * 1024 * 1024;

/// A resource as the document the file loader would have read: upstream's
/// `ConfigXdsProtoToYaml` (every field, `unit` by its enum name, so an unset unit is `UNKNOWN`
/// and fails as a file's unknown unit fails).
pub fn document(config: &RateLimitConfig) -> Value {
    let mut m = Mapping::new();
    m.insert("domain".into(), config.domain.clone().into());
    m.insert("descriptors".into(), Value::Sequence(config.descriptors.iter().map(descriptor).collect()));
    Value::Mapping(m)
}

fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut m = Mapping::new();
    m.insert("key".into(), d.key.clone().into());
    m.insert("value".into(), d.value.clone().into());
    if let Some(p) = &d.rate_limit {
        m.insert("rate_limit".into(), policy(p));
    }
    m.insert("descriptors".into(), Value::Sequence(d.descriptors.iter().map(descriptor).collect()));
    m.insert("shadow_mode".into(), d.shadow_mode.into());
    m.insert("detailed_metric".into(), d.detailed_metric.into());
    m.insert("quota_mode".into(), d.quota_mode.into());
    if let Some(s) = &d.metadata {
        m.insert("metadata".into(), structure(s));
    }
    Value::Mapping(m)
}

fn policy(p: &RateLimitPolicy) -> Value {
    let mut m = Mapping::new();
    // Go's enum String(): the name, or the number for a value the enum does not have.
    let unit = RateLimitUnit::try_from(p.unit).map_or_else(|_| p.unit.to_string(), |u| u.as_str_name().to_string());
    m.insert("unit".into(), unit.into());
    m.insert("requests_per_unit".into(), u64::from(p.requests_per_unit).into());
    m.insert("unlimited".into(), p.unlimited.into());
    m.insert("name".into(), p.name.clone().into());
    let replaces = p
        .replaces
        .iter()
        .map(|r| {
            let mut m = Mapping::new();
            m.insert("name".into(), r.name.clone().into());
            Value::Mapping(m)
        })
        .collect();
    m.insert("replaces".into(), Value::Sequence(replaces));
    Value::Mapping(m)
}

fn structure(s: &Struct) -> Value {
    Value::Mapping(s.fields.iter().map(|(k, v)| (Value::from(k.clone()), proto_value(v))).collect())
}

fn proto_value(v: &ProtoValue) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => (*n).into(),
        Some(Kind::StringValue(s)) => s.clone().into(),
        Some(Kind::BoolValue(b)) => (*b).into(),
        Some(Kind::StructValue(s)) => structure(s),
        Some(Kind::ListValue(l)) => Value::Sequence(l.values.iter().map(proto_value).collect()),
    }
}

/// A response's resources as named documents (named by the resource's `name`, else its domain),
/// or why one cannot be decoded.
pub fn documents(response: &DiscoveryResponse) -> Result<Vec<(String, Value)>, String> {
    response
        .resources
        .iter()
        .map(|any| {
            if any.type_url != TYPE_URL {
                return Err(format!("unexpected resource type '{}' (expected {TYPE_URL})", any.type_url));
            }
            let config = RateLimitConfig::decode(any.value.as_slice())
                .map_err(|e| format!("cannot decode a RateLimitConfig resource: {e}"))?;
            let name = if config.name.is_empty() { config.domain.clone() } else { config.name.clone() };
            Ok((name, document(&config)))
        })
        .collect()
}

/// What the client needs from its owner: load a response's documents into the service; `Err`
/// (the reason) NACKs them.
pub trait Apply: Send + 'static {
    fn apply(&mut self, documents: Vec<(String, Value)>) -> Result<(), String>;
}

impl<F: FnMut(Vec<(String, Value)>) -> Result<(), String> + Send + 'static> Apply for F {
    fn apply(&mut self, documents: Vec<(String, Value)>) -> Result<(), String> {
        self(documents)
    }
}

/// Runs the client for ever: dial, stream, apply, reconnect.
pub async fn run(s: XdsSettings, mut apply: impl Apply) {
    tracing::info!("Starting xDS client connection for rate limit configurations");
    let mut random = Random::seeded();
    let mut backoff = Backoff { attempt: 0.0 };
    // The version last ACKed: sent again on a new stream, so a server that still has it does not
    // resend it (the configuration in force is that version).
    let mut accepted = String::new();
    loop {
        let channel = loop {
            tracing::info!("Dialing xDS Management Server: '{}'", s.server_url);
            match connect(&s).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::error!("Error initializing gRPC connection to xDS Management Server: {e}");
                    // grpc_retry's BackoffLinearWithJitter(interval, 0.5).
                    let jitter = 1.0 + 0.5 * (random.unit() * 2.0 - 1.0);
                    let interval = s.connect_retry_interval;
                    let wait = Duration::try_from_secs_f64(interval.as_secs_f64() * jitter).unwrap_or(interval);
                    tokio::time::sleep(wait).await;
                }
            }
        };
        tracing::info!("Connection to xDS Management Server is successful");
        if let Err(e) = stream(&s, channel, &mut apply, &mut accepted).await {
            tracing::error!("Failed to receive configuration from xDS Management Server: {e}");
        }
        let wait = backoff.next(&s, &mut random);
        tracing::debug!("Sleeping for {wait:?} using exponential backoff");
        tokio::time::sleep(wait).await;
    }
}

/// The channel to the server, with TLS as the settings say (certificates read at every dial,
/// so rotated files are picked up).
async fn connect(s: &XdsSettings) -> Result<Channel, String> {
    let target = s.server_url.trim().trim_start_matches("dns:///");
    let target = target.split_once("://").map_or(target, |(_, rest)| rest);
    let scheme = if s.use_tls { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{target}"))
        .map_err(|e| format!("CONFIG_GRPC_XDS_SERVER_URL '{}': {e}", s.server_url))?
        .connect_timeout(Duration::from_secs(10))
        // TCP keepalive finds a server gone without a word; no HTTP/2 pings, as upstream sends
        // none: gRPC-Go servers (Envoy Gateway's) close a connection pinged more often than
        // every 5 minutes (`too_many_pings`).
        .tcp_keepalive(Some(Duration::from_secs(60)));
    if s.use_tls {
        let read = |p: &str| std::fs::read(p).map_err(|e| format!("cannot read {p}: {e}"));
        let mut tls = ClientTlsConfig::new();
        tls = if s.server_tls_cacert.is_empty() {
            tls.with_webpki_roots()
        } else {
            tls.ca_certificate(Certificate::from_pem(read(&s.server_tls_cacert)?))
        };
        if !s.client_tls_cert.is_empty() {
            tls = tls.identity(Identity::from_pem(read(&s.client_tls_cert)?, read(&s.client_tls_key)?));
        }
        if !s.server_tls_san.is_empty() {
            tracing::info!("ServerName used for xDS Management Service hostname verification is {}", s.server_tls_san);
            tls = tls.domain_name(s.server_tls_san.clone());
        }
        endpoint = endpoint.tls_config(tls).map_err(|e| format!("CONFIG_GRPC_XDS_SERVER TLS: {e}"))?;
    }
    endpoint.connect().await.map_err(|e| {
        // The transport error's sources say what failed (refused, certificate, name).
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        text
    })
}

fn node(s: &XdsSettings) -> Node {
    let fields = s
        .node_metadata
        .iter()
        .map(|(k, v)| (k.clone(), ProtoValue { kind: Some(Kind::StringValue(v.clone())) }))
        .collect();
    Node { id: s.node_id.clone(), metadata: Some(Struct { fields }), ..Node::default() }
}

/// One stream: the first request, then a response applied and answered (ACK or NACK) at a time,
/// until the stream ends or fails.
async fn stream(
    s: &XdsSettings,
    channel: Channel,
    apply: &mut impl Apply,
    accepted: &mut String,
) -> Result<(), String> {
    let max = if s.max_msg_size == 0 { DEFAULT_MAX_MSG } else { s.max_msg_size };
    if s.max_msg_size != 0 {
        tracing::info!("Setting xDS gRPC max receive message size to {max} bytes");
    }
    let mut client = AggregatedDiscoveryServiceClient::new(channel).max_decoding_message_size(max);
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let request = |version: &str, nonce: &str, error: Option<String>| DiscoveryRequest {
        version_info: version.to_string(),
        node: Some(node(s)),
        type_url: TYPE_URL.to_string(),
        response_nonce: nonce.to_string(),
        error_detail: error.map(|message| Status { code: tonic::Code::Internal as i32, message, details: vec![] }),
        ..DiscoveryRequest::default()
    };
    tx.send(request(accepted, "", None)).await.map_err(|e| e.to_string())?;
    let mut call = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    for (k, v) in &s.additional_headers {
        // Checked by the settings.
        if let (Ok(k), Ok(v)) = (k.parse::<tonic::metadata::MetadataKey<_>>(), v.parse()) {
            call.metadata_mut().insert(k, v);
        }
    }
    let mut responses = client.stream_aggregated_resources(call).await.map_err(|e| e.to_string())?.into_inner();
    loop {
        let response = match responses.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Err("the server ended the stream".into()),
            Err(e) => return Err(e.to_string()),
        };
        tracing::trace!(?response, "Response received from xDS Management Server");
        if response.type_url != TYPE_URL {
            tracing::warn!("xDS: ignoring a response of type '{}' (not asked for)", response.type_url);
            continue;
        }
        let outcome = documents(&response).and_then(|docs| apply.apply(docs));
        let reply = match outcome {
            Ok(()) => {
                tracing::info!("xDS: ACK of version '{}': in force", response.version_info);
                accepted.clone_from(&response.version_info);
                request(accepted, &response.nonce, None)
            }
            Err(e) => {
                tracing::error!("xDS: NACK of version '{}': {e}", response.version_info);
                request(accepted, &response.nonce, Some(e))
            }
        };
        tx.send(reply).await.map_err(|e| e.to_string())?;
    }
}

/// `jpillora/backoff` as upstream configures it (`Min`, `Max`, `Factor`, `Jitter` from
/// `XDS_CLIENT_BACKOFF_*`): attempt n waits `min · factor^n`, jittered between that and `min`,
/// held within `[min, max]`. Upstream's factor of 0.5 keeps every wait at `min`.
struct Backoff {
    attempt: f64,
}

impl Backoff {
    fn next(&mut self, s: &XdsSettings, random: &mut Random) -> Duration {
        let min = if s.backoff_initial.is_zero() { Duration::from_millis(100) } else { s.backoff_initial };
        let max = if s.backoff_max.is_zero() { Duration::from_secs(10) } else { s.backoff_max };
        let attempt = self.attempt;
        self.attempt += 1.0;
        if min >= max {
            return max;
        }
        let factor = if s.backoff_factor <= 0.0 { 2.0 } else { s.backoff_factor };
        let minf = min.as_secs_f64();
        let mut wait = minf * factor.powf(attempt);
        if s.backoff_jitter {
            wait = random.unit() * (wait - minf) + minf;
        }
        Duration::try_from_secs_f64(wait).unwrap_or(max).clamp(min, max)
    }
}

/// A small xorshift generator for jitter (no cryptographic need).
struct Random(u64);

impl Random {
    fn seeded() -> Random {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        Random((nanos as u64 ^ u64::from(std::process::id()).rotate_left(32)) | 1)
    }

    /// A number in [0, 1).
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitReplace;

    fn settings() -> XdsSettings {
        crate::settings::Settings::from_vars(&[("CONFIG_TYPE".to_string(), "GRPC_XDS_SOTW".to_string())].into())
            .unwrap()
            .config
            .xds
            .unwrap()
    }

    #[test]
    fn a_resource_is_the_document_a_file_would_be() {
        let config = RateLimitConfig {
            name: "gw".into(),
            domain: "gw".into(),
            descriptors: vec![RateLimitDescriptor {
                key: "user".into(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Week as i32,
                    requests_per_unit: 3,
                    name: "weekly".into(),
                    replaces: vec![RateLimitReplace { name: "daily".into() }],
                    ..RateLimitPolicy::default()
                }),
                shadow_mode: true,
                ..RateLimitDescriptor::default()
            }],
        };
        let yaml = serde_norway::to_string(&document(&config)).unwrap();
        let expected = "domain: gw\ndescriptors:\n- key: user\n  value: ''\n  rate_limit:\n    unit: WEEK\n    requests_per_unit: 3\n    unlimited: false\n    name: weekly\n    replaces:\n    - name: daily\n  descriptors: []\n  shadow_mode: true\n  detailed_metric: false\n  quota_mode: false\n";
        assert_eq!(yaml, expected);
    }

    /// Every check of the file loader fails a resource the same way (one validator): each bad
    /// YAML document beside the resource that carries the same configuration.
    #[test]
    fn resources_fail_the_file_loader_s_checks_with_its_texts() {
        let limit = |unit: RateLimitUnit, unlimited: bool, name: &str, replaces: &[&str]| RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit: 1,
            unlimited,
            name: name.into(),
            replaces: replaces.iter().map(|r| RateLimitReplace { name: r.to_string() }).collect(),
        };
        let d = |key: &str, p: Option<RateLimitPolicy>| RateLimitDescriptor {
            key: key.into(),
            rate_limit: p,
            ..RateLimitDescriptor::default()
        };
        let c = |domain: &str, descriptors: Vec<RateLimitDescriptor>| RateLimitConfig {
            name: "doc".into(),
            domain: domain.into(),
            descriptors,
        };
        let minute = Some(limit(RateLimitUnit::Minute, false, "", &[]));
        let cases: Vec<(Vec<&str>, Vec<RateLimitConfig>, &str)> = vec![
            (vec!["domain: ''\n"], vec![c("", vec![])], "config file cannot have empty domain"),
            (vec!["domain: a\n", "domain: a\n"], vec![c("a", vec![]), c("a", vec![])], "duplicate domain 'a'"),
            (
                vec!["domain: a\ndescriptors: [{key: ''}]\n"],
                vec![c("a", vec![d("", None)])],
                "descriptor has empty key",
            ),
            (
                vec!["domain: a\ndescriptors: [{key: k}, {key: k}]\n"],
                vec![c("a", vec![d("k", minute.clone()), d("k", minute.clone())])],
                "duplicate descriptor composite key 'a.k'",
            ),
            (
                vec!["domain: a\ndescriptors: [{key: k, rate_limit: {unit: UNKNOWN, requests_per_unit: 1}}]\n"],
                vec![c("a", vec![d("k", Some(limit(RateLimitUnit::Unknown, false, "", &[])))])],
                "invalid rate limit unit 'UNKNOWN'",
            ),
            (
                vec!["domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, unlimited: true}}]\n"],
                vec![c("a", vec![d("k", Some(limit(RateLimitUnit::Second, true, "", &[])))])],
                "should not specify rate limit unit when unlimited",
            ),
            (
                vec!["domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, replaces: [{name: ''}]}}]\n"],
                vec![c("a", vec![d("k", Some(limit(RateLimitUnit::Second, false, "", &[""])))])],
                "should not have an empty replaces entry",
            ),
            (
                vec![
                    "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, name: n, replaces: [{name: n}]}}]\n",
                ],
                vec![c("a", vec![d("k", Some(limit(RateLimitUnit::Second, false, "n", &["n"])))])],
                "replaces should not contain name of same descriptor",
            ),
        ];
        let stats = crate::stats::Stats::new();
        for (yaml, resources, text) in cases {
            let docs: Vec<(String, String)> = yaml.iter().map(|y| ("doc".to_string(), y.to_string())).collect();
            let from_file = crate::config::load(&docs, &stats, false).unwrap_err().to_string();
            let from_xds =
                crate::config::build(resources.iter().map(|r| Ok(("doc".to_string(), document(r)))), &stats, false)
                    .unwrap_err()
                    .to_string();
            assert_eq!(from_xds, from_file, "{text}");
            assert!(from_xds.contains(text), "{from_xds} should say {text}");
        }
    }

    #[test]
    fn backoff_is_jpillora_s_as_upstream_configures_it() {
        let mut s = settings();
        let mut random = Random::seeded();
        // Upstream's defaults: factor 0.5, so every wait is the minimum (10 s).
        let mut b = Backoff { attempt: 0.0 };
        for _ in 0..5 {
            assert_eq!(b.next(&s, &mut random), Duration::from_secs(10));
        }
        // Factor 2 without jitter: doubling up to the maximum.
        s.backoff_factor = 2.0;
        s.backoff_jitter = false;
        s.backoff_initial = Duration::from_secs(1);
        s.backoff_max = Duration::from_secs(5);
        let mut b = Backoff { attempt: 0.0 };
        let waits: Vec<u64> = (0..5).map(|_| b.next(&s, &mut random).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 5, 5]);
        // With jitter: between the minimum and the unjittered wait.
        s.backoff_jitter = true;
        let mut b = Backoff { attempt: 3.0 };
        for _ in 0..100 {
            let w = b.next(&s, &mut random);
            assert!(w >= Duration::from_secs(1) && w <= Duration::from_secs(5), "{w:?}");
        }
    }
}
