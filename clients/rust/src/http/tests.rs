use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};

use super::*;
use crate::{ManualClock, Policy, Throttle};

/// A route that answers 200.
#[derive(Clone)]
struct Ok200;

impl tower_service::Service<Request<()>> for Ok200 {
    type Response = Response<String>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Response<String>, std::convert::Infallible>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Ok(Response::new("ok".into())))
    }
}

async fn call(layer: &RateLimitLayer, headers: &[(&'static str, &'static str)]) -> Response<LimitedBody<String>> {
    use tower_layer::Layer as _;
    use tower_service::Service as _;
    let mut request = Request::get("/").body(()).unwrap();
    for (k, v) in headers {
        request.headers_mut().insert(*k, HeaderValue::from_static(v));
    }
    layer.layer(Ok200).call(request).await.unwrap()
}

fn throttle() -> Throttle {
    Throttle::in_memory(ManualClock::at_unix_ms(1_000_000_000_000), crate::Config::default())
}

#[tokio::test]
async fn keyless_requests_custom_refusals_and_jitter() {
    let key = Key::header(HeaderName::from_static("x-key"));
    let limit = Limit::rate("tight", Policy::parse("1/h").unwrap()).key(key);
    // Keyless requests refused when asked.
    let layer = RateLimit::new(throttle()).limit(limit.clone()).missing_key(MissingKey::Refuse).layer().unwrap();
    let r = call(&layer, &[]).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(call(&layer, &[("x-key", "a")]).await.status(), 200);

    // A custom refusal keeps Retry-After (with jitter: 3600 to 3610 s) and the fields.
    let layer = RateLimit::new(throttle())
        .limit(limit)
        .retry_jitter(Duration::from_secs(10))
        .respond_with(|refusal| {
            let mut r = Response::new(Bytes::from(format!("slow down: {}", refusal.violated.join(","))));
            *r.status_mut() = StatusCode::IM_A_TEAPOT;
            r
        })
        .layer()
        .unwrap();
    assert_eq!(call(&layer, &[("x-key", "a")]).await.status(), 200);
    let r = call(&layer, &[("x-key", "a")]).await;
    assert_eq!(r.status(), 418);
    let retry: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((3600..=3610).contains(&retry), "{retry}");
    assert_eq!(r.headers()["ratelimit"], "\"tight\";r=0;t=3600");
    if let LimitedBody::Full { data } = r.into_body() {
        assert_eq!(data.unwrap(), "slow down: tight");
    }
}

#[tokio::test]
async fn grpc_calls_are_refused_with_a_grpc_status() {
    let limit = Limit::rate("per-key", Policy::parse("1/h").unwrap()).key(Key::route());
    let layer = RateLimit::new(throttle()).limit(limit).layer().unwrap();
    let grpc = [("content-type", "application/grpc")];
    assert_eq!(call(&layer, &grpc).await.status(), 200);
    let r = call(&layer, &grpc).await;
    assert_eq!(
        (r.status(), &r.headers()["grpc-status"], &r.headers()["content-type"]),
        (StatusCode::OK, &HeaderValue::from_static("8"), &HeaderValue::from_static("application/grpc"))
    );
    assert_eq!(
        (&r.headers()["retry-after"], &r.headers()["ratelimit"]),
        (&HeaderValue::from_static("3600"), &HeaderValue::from_static("\"per-key\";r=0;t=3600"))
    );
    // The same limit refuses a plain HTTP request with a problem document.
    let r = call(&layer, &[]).await;
    assert_eq!(
        (r.status(), &r.headers()["content-type"]),
        (StatusCode::TOO_MANY_REQUESTS, &HeaderValue::from_static("application/problem+json"))
    );
}

#[test]
fn configurations_that_cannot_work_do_not_build() {
    let limit = Limit::rate("a", Policy::parse("1/s").unwrap()).key(Key::route());
    let build = |r: RateLimit| r.layer().err();
    assert_eq!(
        build(RateLimit::new(throttle()).limit(limit.clone()).headers(Headers::DRAFT_6 | Headers::DRAFT_11)),
        Some(ConfigError::Headers)
    );
    assert_eq!(
        build(RateLimit::new(throttle()).limit(Limit::rate("a b", Policy::parse("1/s").unwrap()))),
        Some(ConfigError::Name("a b".into()))
    );
    let other = Limit::rate("a", Policy::parse("2/s").unwrap()).key(Key::route());
    assert_eq!(
        build(RateLimit::new(throttle()).limit(limit.clone()).route("/x", [other])),
        Some(ConfigError::Name("a".into())),
        "one name, two limits"
    );
    assert_eq!(
        build(RateLimit::new(throttle()).limit(limit.clone()).route("/x", [limit.clone()])),
        None,
        "the same limit on two routes"
    );
    assert!(matches!(
        build(
            RateLimit::new(throttle())
                .limit(Limit::rate("a", Policy::parse("1/s").unwrap()).key(Key::forwarded_for(0)))
        ),
        Some(ConfigError::NoTrustedProxy(_))
    ));
    assert!(matches!(
        build(RateLimit::new(throttle()).limit(Limit::concurrent("c", 1, Duration::from_secs(1)).key(Key::route()))),
        Some(ConfigError::LeasesNeedTheModule(_))
    ));
}
