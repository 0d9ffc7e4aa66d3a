//! An axum service behind the rate-limit layer: two routes, three limits.
//!
//! - every route: `per-ip`, 10 per second with bursts of 10, by the peer's IP address;
//! - `/search`: also `per-tenant`, 10,000 per hour (sliding window), by the `X-Tenant` header,
//!   decided with `per-ip` in one CL.ALL;
//! - `/export`: also `exports`, at most 2 in flight per tenant (a lease held while the response
//!   streams).
//!
//! `make demo` runs it against a fresh server and sends a burst; by hand:
//! `REDIS_URL=redis://127.0.0.1:6379/ cargo run -p redis-throttle-client --example http`
//! (ADDR sets the address to listen on, 127.0.0.1:3000 by default).

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::HeaderName;
use redis_throttle_client::http::{Key, Limit, RateLimit};
use redis_throttle_client::{Policy, Throttle};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let throttle = Throttle::connect(&url).await?;
    let tenant = Key::header(HeaderName::from_static("x-tenant"));

    let limits = RateLimit::new(throttle)
        .limit(Limit::rate("per-ip", Policy::parse("10/s")?).key(Key::peer_ip()))
        .route("/search", [Limit::rate("per-tenant", Policy::parse("10000/h window")?).key(tenant.clone())])
        .route("/export", [Limit::concurrent("exports", 2, Duration::from_secs(30)).key(tenant)]);
    let app =
        Router::new().route("/search", get(|| async { "results\n" })).route("/export", get(|| async { "export\n" }));

    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    // The one line: the layer on every route, served with the peer's address.
    axum::serve(listener, limits.into_make_service(app)?).await?;
    Ok(())
}
