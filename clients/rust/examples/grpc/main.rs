//! A tonic gRPC server behind the rate-limit layer, without protoc (see `greeter.rs`):
//!
//! - every method: `per-peer`, 20 per second, by the peer's IP address (tonic's
//!   `TcpConnectInfo`, through `Key::from_fn`);
//! - `/demo.Greeter/SayHello`: also `per-key`, 5 per second with bursts of 5, by the
//!   `x-api-key` metadata, decided with `per-peer` in one CL.ALL.
//!
//! A refused call ends with `RESOURCE_EXHAUSTED` (a trailers-only gRPC status), `retry-after`
//! and the rate-limit fields in its metadata. The example sends a burst of 7 calls to itself,
//! prints each outcome, and keeps serving:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-throttle-client --example grpc`
//! (ADDR sets the address to listen on, 127.0.0.1:50051 by default).

mod greeter;

use greeter::{Greeter, HelloRequest, SAY_HELLO, say_hello};
use http::HeaderName;
use redis_throttle_client::http::{Key, Limit, RateLimit};
use redis_throttle_client::{Policy, Throttle};
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::{Channel, Server};

fn field<'m>(metadata: &'m tonic::metadata::MetadataMap, name: &str) -> &'m str {
    metadata.get(name).and_then(|v| v.to_str().ok()).unwrap_or("-")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    let throttle = Throttle::connect(&url).await?;

    let peer =
        Key::from_fn(|request| request.extensions.get::<TcpConnectInfo>()?.remote_addr().map(|a| a.ip().to_string()));
    let api_key = Key::header(HeaderName::from_static("x-api-key"));
    let limits = RateLimit::new(throttle)
        .limit(Limit::rate("per-peer", Policy::parse("20/s")?).key(peer))
        .route(SAY_HELLO, [Limit::rate("per-key", Policy::parse("5/s")?).key(api_key)]);

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let local = listener.local_addr()?;
    println!("serving demo.Greeter on http://{local}");
    // The one line: the layer around every service of the server.
    let server = Server::builder()
        .layer(limits.layer()?)
        .add_service(Greeter::default())
        .serve_with_incoming(TcpIncoming::from(listener));
    let server = tokio::spawn(server);

    let channel = Channel::from_shared(format!("http://{local}"))?.connect().await?;
    for i in 1..=7 {
        let mut request = tonic::Request::new(HelloRequest { name: "world".into() });
        request.metadata_mut().insert("x-api-key", "demo-key".parse()?);
        match say_hello(channel.clone(), request).await {
            Ok(reply) => {
                println!("{i}  OK {:?}  ratelimit: {}", reply.get_ref().message, field(reply.metadata(), "ratelimit"))
            }
            Err(status) => println!(
                "{i}  {:?} {:?}  retry-after: {}  ratelimit: {}",
                status.code(),
                status.message(),
                field(status.metadata(), "retry-after"),
                field(status.metadata(), "ratelimit")
            ),
        }
    }
    server.await??;
    Ok(())
}
