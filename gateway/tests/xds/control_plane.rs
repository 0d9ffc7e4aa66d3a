//! A control plane of our own for the tests: an ADS server (State of the World) serving
//! `RateLimitConfig` snapshots, as Envoy Gateway's does: one resource per domain, a response to
//! a new stream unless it already holds the version, a push on every new snapshot; TLS 1.3 only
//! with a client certificate and ALPN `h2` required (or plain text). It records every request (ACKs and
//! NACKs) and the stream's metadata, and counts refused TLS handshakes.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use tokio::sync::watch;
use tokio_stream::Stream;

pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A resource as the server sends it.
pub fn resource(config: &RateLimitConfig) -> Any {
    Any { type_url: TYPE_URL.into(), value: config.encode_to_vec() }
}

/// A version and its resources.
type Snapshot = Option<(String, Vec<Any>)>;

#[derive(Default)]
struct Log {
    requests: Vec<DiscoveryRequest>,
    headers: Vec<tonic::metadata::MetadataMap>,
}

struct State {
    snapshot: watch::Sender<Snapshot>,
    /// Turned true by [`ControlPlane::stop`]: every open stream ends.
    stopped: watch::Sender<bool>,
    log: Mutex<Log>,
    nonce: AtomicU64,
}

/// The server's certificate and key, and the CA client certificates must chain to.
pub struct Tls {
    pub cert: rustls::pki_types::CertificateDer<'static>,
    pub key: rustls::pki_types::PrivateKeyDer<'static>,
    /// The CA a client certificate must chain to.
    pub client_ca: rustls::pki_types::CertificateDer<'static>,
}

pub struct ControlPlane {
    pub port: u16,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
    /// The TLS accept loop (which owns the listener), when serving TLS.
    accept: Option<tokio::task::JoinHandle<()>>,
    pub refused_handshakes: Arc<AtomicU64>,
}

impl ControlPlane {
    /// Listens on 127.0.0.1:`port` (0: any) with `snapshot` in place.
    pub async fn start(port: u16, tls: Option<&Tls>, snapshot: Snapshot) -> ControlPlane {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await.expect("bind the control plane");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            snapshot: watch::channel(snapshot).0,
            stopped: watch::channel(false).0,
            log: Mutex::new(Log::default()),
            nonce: AtomicU64::new(0),
        });
        let refused_handshakes = Arc::new(AtomicU64::new(0));
        let service = AggregatedDiscoveryServiceServer::new(Ads(state.clone()));
        let router = tonic::transport::Server::builder().add_service(service);
        let mut accept = None;
        let server = match tls {
            None => tokio::spawn(async move {
                let _ = router.serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)).await;
            }),
            Some(tls) => {
                let acceptor = acceptor(tls);
                let (tx, rx) = tokio::sync::mpsc::channel::<Result<_, std::io::Error>>(16);
                let refused = refused_handshakes.clone();
                accept = Some(tokio::spawn(async move {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else { return };
                        let (acceptor, tx, refused) = (acceptor.clone(), tx.clone(), refused.clone());
                        tokio::spawn(async move {
                            match acceptor.accept(tcp).await {
                                // ALPN h2 required, as gRPC-Go servers (Envoy Gateway's) require it.
                                Ok(stream) if stream.get_ref().1.alpn_protocol() == Some(b"h2") => {
                                    let _ = tx.send(Ok(stream)).await;
                                }
                                _ => {
                                    refused.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        });
                    }
                }));
                tokio::spawn(async move {
                    let _ = router.serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx)).await;
                })
            }
        };
        ControlPlane { port, state, server, accept, refused_handshakes }
    }

    /// A new snapshot, pushed to every stream.
    pub fn set(&self, version: &str, resources: Vec<Any>) {
        self.state.snapshot.send_replace(Some((version.to_string(), resources)));
    }

    pub fn requests(&self) -> Vec<DiscoveryRequest> {
        self.state.log.lock().unwrap().requests.clone()
    }

    pub fn headers(&self) -> Vec<tonic::metadata::MetadataMap> {
        self.state.log.lock().unwrap().headers.clone()
    }

    /// The first request `f` accepts, waited for up to 20 s.
    pub async fn wait_request(&self, what: &str, mut f: impl FnMut(&DiscoveryRequest) -> bool) -> DiscoveryRequest {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(r) = self.requests().into_iter().find(|r| f(r)) {
                return r;
            }
            assert!(Instant::now() < deadline, "the control plane never saw {what}: {:#?}", self.requests());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for the ACK of `version`.
    pub async fn acked(&self, version: &str) -> DiscoveryRequest {
        self.wait_request(&format!("the ACK of version {version}"), |r| {
            r.version_info == version && r.error_detail.is_none() && !r.response_nonce.is_empty()
        })
        .await
    }

    /// Stops listening and ends every open stream (a restart is a new [`ControlPlane::start`] on
    /// the same port).
    pub async fn stop(self) {
        self.state.stopped.send_replace(true);
        self.server.abort();
        let _ = self.server.await;
        if let Some(a) = self.accept {
            a.abort();
            let _ = a.await;
        }
    }
}

fn acceptor(tls: &Tls) -> tokio_rustls::TlsAcceptor {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(tls.client_ca.clone()).unwrap();
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build().unwrap();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(vec![tls.cert.clone()], tls.key.clone_key())
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

struct Ads(Arc<State>);

type Responses = Pin<Box<dyn Stream<Item = Result<DiscoveryResponse, tonic::Status>> + Send>>;

impl Ads {
    fn response(&self, snapshot: &Snapshot) -> Option<DiscoveryResponse> {
        let (version, resources) = snapshot.as_ref()?;
        Some(DiscoveryResponse {
            version_info: version.clone(),
            resources: resources.clone(),
            type_url: TYPE_URL.into(),
            nonce: self.0.nonce.fetch_add(1, Ordering::Relaxed).to_string(),
            ..DiscoveryResponse::default()
        })
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses;
    type DeltaAggregatedResourcesStream =
        Pin<Box<dyn Stream<Item = Result<DeltaDiscoveryResponse, tonic::Status>> + Send>>;

    async fn stream_aggregated_resources(
        &self,
        request: tonic::Request<tonic::Streaming<DiscoveryRequest>>,
    ) -> Result<tonic::Response<Responses>, tonic::Status> {
        self.0.log.lock().unwrap().headers.push(request.metadata().clone());
        let mut incoming = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let me = Ads(self.0.clone());
        tokio::spawn(async move {
            let mut snapshot = me.0.snapshot.subscribe();
            let mut stopped = me.0.stopped.subscribe();
            let mut first = true;
            loop {
                tokio::select! {
                    r = incoming.message() => {
                        let Ok(Some(r)) = r else { return };
                        let held = r.version_info.clone();
                        me.0.log.lock().unwrap().requests.push(r);
                        if std::mem::take(&mut first) {
                            // A new stream: the snapshot unless the client holds its version.
                            let current = snapshot.borrow_and_update().clone();
                            if current.as_ref().is_some_and(|(v, _)| *v != held)
                                && let Some(resp) = me.response(&current)
                                && tx.send(Ok(resp)).await.is_err()
                            {
                                return;
                            }
                        }
                    }
                    changed = snapshot.changed(), if !first => {
                        if changed.is_err() {
                            return;
                        }
                        let current = snapshot.borrow_and_update().clone();
                        if let Some(resp) = me.response(&current)
                            && tx.send(Ok(resp)).await.is_err()
                        {
                            return;
                        }
                    }
                    // (the guard wait_for returns is not Send: dropped in the branch's future)
                    () = async { let _ = stopped.wait_for(|s| *s).await; } => {
                        let _ = tx.send(Err(tonic::Status::unavailable("the control plane stopped"))).await;
                        return;
                    }
                }
            }
        });
        Ok(tonic::Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))))
    }

    async fn delta_aggregated_resources(
        &self,
        _: tonic::Request<tonic::Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<tonic::Response<Self::DeltaAggregatedResourcesStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("State of the World only"))
    }
}
