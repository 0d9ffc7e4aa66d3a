//! The HTTP layer in front of a tonic gRPC server (the hand-written service of examples/grpc),
//! called by a tonic client over HTTP/2 on loopback, deciding on a real redis-server with the
//! module: admitted calls carry the rate-limit fields in their metadata; a call past the limit
//! ends with `RESOURCE_EXHAUSTED` (not the `UNAVAILABLE` a gRPC client makes of an HTTP 429),
//! `retry-after` as the reply implies, and never reaches the method; with the server gone and
//! the failure policy refusing, `UNAVAILABLE`.

#[path = "../examples/grpc/greeter.rs"]
mod greeter;
#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::sync::atomic::Ordering;
use std::time::Duration;

use greeter::{Greeter, HelloRequest, SAY_HELLO, say_hello};
use harness::Server;
use http::HeaderName;
use redis_throttle_client::http::{Key, Limit, RateLimit};
use redis_throttle_client::{Config, Policy, Throttle};
use tonic::Code;
use tonic::metadata::MetadataMap;
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

fn hello(api_key: &str) -> tonic::Request<HelloRequest> {
    let mut request = tonic::Request::new(HelloRequest { name: "world".into() });
    request.metadata_mut().insert("x-api-key", api_key.parse().unwrap());
    request
}

fn get<'m>(metadata: &'m MetadataMap, name: &str) -> &'m str {
    metadata.get(name).map_or("", |v| v.to_str().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_past_its_limit_ends_with_resource_exhausted_and_retry_after() {
    let server = Server::start();
    let throttle =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let limits = RateLimit::new(throttle).route(
        SAY_HELLO,
        [Limit::rate("per-key", Policy::parse("1/h burst 3").unwrap())
            .key(Key::header(HeaderName::from_static("x-api-key")))],
    );
    let greeter = Greeter::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serve = tonic::transport::Server::builder()
        .layer(limits.layer().unwrap())
        .add_service(greeter.clone())
        .serve_with_incoming(TcpIncoming::from(listener));
    tokio::spawn(async move { serve.await.unwrap() });
    let channel = Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap();

    // Three admitted (a burst of 3), each with the numbers of its reply: GCRA at 1/h,
    // after i units the limiter is full again in i hours (less the milliseconds since the
    // first: rounded up, exactly i hours).
    for i in 1..=3u64 {
        let reply = say_hello(channel.clone(), hello("acme")).await.unwrap_or_else(|s| panic!("call {i}: {s:?}"));
        assert_eq!(reply.get_ref().message, "hello, world");
        let m = reply.metadata();
        assert_eq!(get(m, "ratelimit-policy"), r#""per-key";q=3;w=10800"#);
        assert_eq!(get(m, "ratelimit"), format!(r#""per-key";r={};t={}"#, 3 - i, i * 3600), "call {i}");
        assert_eq!((get(m, "x-ratelimit-limit"), get(m, "x-ratelimit-remaining")), ("3", &*(3 - i).to_string()));
        assert_eq!(get(m, "retry-after"), "");
    }

    // The fourth: RESOURCE_EXHAUSTED, come back in one emission interval (an hour, rounded up).
    let status = say_hello(channel.clone(), hello("acme")).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(status.message(), "quota exceeded: per-key");
    let m = status.metadata();
    assert_eq!(get(m, "retry-after"), "3600");
    assert_eq!(get(m, "grpc-retry-pushback-ms"), "3600000");
    assert_eq!(get(m, "ratelimit"), r#""per-key";r=0;t=10800"#);
    assert_eq!(get(m, "x-ratelimit-remaining"), "0");
    assert_eq!(greeter.served.load(Ordering::SeqCst), 3, "the refused call never reached the method");

    // Another key is counted apart; the Redis key is the limit's name and the metadata value.
    let reply = say_hello(channel.clone(), hello("globex")).await.unwrap();
    assert_eq!(get(reply.metadata(), "ratelimit"), r#""per-key";r=2;t=3600"#);
    assert_eq!(redis::cmd("EXISTS").arg("rl:per-key:acme").query::<i64>(&mut server.client()).unwrap(), 1);

    // The server gone, the failure policy (FailClosed) refuses: UNAVAILABLE, with a retry-after.
    drop(server);
    let status = say_hello(channel.clone(), hello("initech")).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(get(status.metadata(), "retry-after").parse::<u64>().unwrap() >= 1, "{status:?}");
    assert_eq!(get(status.metadata(), "ratelimit"), "", "no numbers the server did not give");
    assert_eq!(greeter.served.load(Ordering::SeqCst), 4);
}
