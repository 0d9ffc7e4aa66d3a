//! `ShouldRateLimit` at a fixed clock, on the client crate's in-memory backend (the module's
//! exact decisions): upstream's integration expectations (`testBasicBaseConfig`: unknown domain,
//! one limit, 25 hits against 20/min, two descriptors with one over, the reset counting down),
//! rewritten as our own, and what we add (a fixed window counts every hit as upstream's does,
//! our algorithms what they admit, all or nothing,
//! hits_addend, refunds, shadow and quota modes, replaces, the block list, headers, metadata,
//! the other algorithms).

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{Entry, RateLimitOverride};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use redis_throttle_client::{Config, ManualClock, Throttle};
use redis_throttle_rls::config;
use redis_throttle_rls::service::{Options, Service};
use redis_throttle_rls::stats::Stats;

const BASIC: &str = "domain: basic\ndescriptors:\n  - key: key1\n    rate_limit: {unit: second, requests_per_unit: 50}\n  - key: one_per_minute\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
const ANOTHER: &str = "domain: another\ndescriptors:\n  - key: key2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n  - key: key3\n    rate_limit: {unit: hour, requests_per_unit: 10}\n  - key: key4\n    rate_limit: {unit: day, requests_per_unit: 20}\n";

/// 2026-11-28T12:00:07.250Z: seven seconds into a minute.
const START_MS: i64 = 1_795_867_207_250;

struct Fixture {
    service: Service,
    clock: ManualClock,
}

fn fixture(documents: &[&str], options: Options) -> Fixture {
    let clock = ManualClock::at_unix_ms(START_MS);
    let throttle = Throttle::in_memory(clock.clone(), Config::default());
    let stats = Arc::new(Stats::new());
    let service = Service::new(options, stats.clone(), throttle, Arc::new(clock.clone()));
    let docs: Vec<(String, String)> =
        documents.iter().enumerate().map(|(i, d)| (format!("config.doc{i}"), d.to_string())).collect();
    service.set_config(config::load(&docs, &stats, false).unwrap());
    Fixture { service, clock }
}

fn descriptor(pairs: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: pairs.iter().map(|(k, v)| Entry { key: k.to_string(), value: v.to_string() }).collect(),
        ..Default::default()
    }
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest { domain: domain.into(), descriptors, hits_addend: hits }
}

impl Fixture {
    async fn ask(&self, r: &RateLimitRequest) -> RateLimitResponse {
        self.service.should_rate_limit(r).await.unwrap()
    }
    async fn one(&self, domain: &str, pairs: &[(&str, &str)]) -> RateLimitResponse {
        self.ask(&request(domain, vec![descriptor(pairs)], 1)).await
    }
    fn stat(&self, name: &str) -> u64 {
        self.service.stats.snapshot().get(name).copied().unwrap_or(0)
    }
    fn now_s(&self) -> i64 {
        use redis_throttle_client::Clock;
        self.clock.now().as_nanos() / 1_000_000_000
    }
}

fn status(code: Code, rpu: u32, unit: config::Unit, remaining: u32, reset_s: i64) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit {
            name: String::new(),
            requests_per_unit: rpu,
            unit: unit.proto(),
        }),
        limit_remaining: remaining,
        duration_until_reset: Some(envoy_types::pb::google::protobuf::Duration { seconds: reset_s, nanos: 0 }),
        quota: None,
    }
}

#[tokio::test]
async fn upstream_basic_cases() {
    let f = fixture(&[BASIC, ANOTHER], Options::default());
    // A domain nobody configured: OK, no limit.
    let r = f.one("foo", &[("hello", "world")]).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses, vec![DescriptorStatus { code: Code::Ok as i32, ..Default::default() }]);
    assert_eq!(f.stat("ratelimit.service.rate_limit.foo.domain_not_found"), 1);

    let r = f.one("basic", &[("key1", "foo")]).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses, vec![status(Code::Ok, 50, config::Unit::Second, 49, 1)]);
    assert_eq!(f.stat("ratelimit.service.rate_limit.basic.key1.total_hits"), 1);

    // 25 hits against 20 a minute: 20 admitted, then over, counted as upstream counts.
    let reset = 60 - f.now_s() % 60;
    for i in 0..25u32 {
        let r = f.one("another", &[("key2", "7331")]).await;
        let (code, remaining) = if i >= 20 { (Code::OverLimit, 0) } else { (Code::Ok, 20 - (i + 1)) };
        assert_eq!(r.overall_code, code as i32, "hit {i}");
        assert_eq!(r.statuses, vec![status(code, 20, config::Unit::Minute, remaining, reset)], "hit {i}");
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.total_hits"), u64::from(i + 1));
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.over_limit"), u64::from(i.saturating_sub(19)));
    }
    assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.within_limit"), 20);
    assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.near_limit"), 4);

    // Two descriptors, the second over from its 11th hit: the first keeps counting (upstream's
    // default, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false).
    let hour_reset = 3600 - f.now_s() % 3600;
    for i in 0..15u32 {
        let r =
            f.ask(&request("another", vec![descriptor(&[("key2", "4242")]), descriptor(&[("key3", "4242")])], 1)).await;
        let code = if i >= 10 { Code::OverLimit } else { Code::Ok };
        assert_eq!(r.overall_code, code as i32, "hit {i}");
        assert_eq!(
            r.statuses,
            vec![
                status(Code::Ok, 20, config::Unit::Minute, 20 - (i + 1), reset),
                status(code, 10, config::Unit::Hour, if i >= 10 { 0 } else { 10 - (i + 1) }, hour_reset)
            ],
            "hit {i}"
        );
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.total_hits"), u64::from(i + 26));
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key2.over_limit"), 5);
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key3.total_hits"), u64::from(i + 1));
        assert_eq!(f.stat("ratelimit.service.rate_limit.another.key3.over_limit"), u64::from(i.saturating_sub(9)));
    }

    // The reset counts down with the clock.
    let first = f.one("another", &[("key4", "durTest")]).await.statuses[0].duration_until_reset.unwrap().seconds;
    f.clock.advance(Duration::from_secs(2));
    let second = f.one("another", &[("key4", "durTest")]).await.statuses[0].duration_until_reset.unwrap().seconds;
    assert_eq!(second, first - 2);
}

#[tokio::test]
async fn all_or_nothing_charges_nothing_when_one_descriptor_refuses() {
    let f = fixture(&[ANOTHER], Options { all_or_nothing: true, ..Options::default() });
    for i in 0..15u32 {
        let r = f.ask(&request("another", vec![descriptor(&[("key2", "1")]), descriptor(&[("key3", "1")])], 1)).await;
        let over = i >= 10;
        assert_eq!(r.overall_code, if over { Code::OverLimit } else { Code::Ok } as i32, "hit {i}");
        // Upstream's expectation for this mode: the first stays at 10 once the second refuses.
        assert_eq!(r.statuses[0].limit_remaining, if over { 10 } else { 20 - (i + 1) }, "hit {i}");
        assert_eq!(r.statuses[0].code, Code::Ok as i32);
        assert_eq!(r.statuses[1].code, if over { Code::OverLimit } else { Code::Ok } as i32);
    }
    // Nothing was charged to key2 by the refused requests: 10 more are admitted alone.
    for i in 0..10u32 {
        let r = f.one("another", &[("key2", "1")]).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 9 - i));
    }
    assert_eq!(f.one("another", &[("key2", "1")]).await.overall_code, Code::OverLimit as i32);
}

#[tokio::test]
async fn every_fixed_window_hit_counts_as_upstream_s_and_our_algorithms_count_what_they_admit() {
    // Upstream #185: 10 an hour, 50 calls, then the limit raised to 20. A fixed window counts
    // every hit, refused or not (upstream's meaning): its counter is at 50 and refuses until the
    // hour ends. A sliding window counts what it admitted: 10, and 10 more pass.
    let config = |n: u32| {
        format!(
            "domain: d\ndescriptors:\n  - {{key: user, rate_limit: {{unit: hour, requests_per_unit: {n}}}}}\n  - {{key: rolling, rate_limit: {{unit: hour, requests_per_unit: {n}, algorithm: sliding_window}}}}\n"
        )
    };
    let f = fixture(&[&config(10)], Options::default());
    for key in ["user", "rolling"] {
        let mut admitted = 0;
        for _ in 0..50 {
            if f.one("d", &[(key, "u1")]).await.overall_code == Code::Ok as i32 {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 10, "{key}");
    }
    f.service.set_config(config::load(&[("d.yaml".into(), config(20))], &f.service.stats, false).unwrap());
    let r = f.one("d", &[("user", "u1")]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::OverLimit as i32, 0), "51 counted of 20");
    let r = f.one("d", &[("rolling", "u1")]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 9));
}

#[tokio::test]
async fn windows_are_epoch_aligned_and_the_next_one_starts_fresh() {
    let f = fixture(&[BASIC], Options::default());
    assert_eq!(f.one("basic", &[("one_per_minute", "a")]).await.overall_code, Code::Ok as i32);
    let over = f.one("basic", &[("one_per_minute", "a")]).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
    let left = over.statuses[0].duration_until_reset.unwrap().seconds;
    assert_eq!(left, 60 - f.now_s() % 60);
    // One second before the minute's end: still over; at the boundary: a new window.
    f.clock.advance(Duration::from_secs(u64::try_from(left - 1).unwrap()));
    assert_eq!(f.one("basic", &[("one_per_minute", "a")]).await.overall_code, Code::OverLimit as i32);
    f.clock.advance(Duration::from_secs(1));
    let r = f.one("basic", &[("one_per_minute", "a")]).await;
    assert_eq!((r.overall_code, r.statuses[0].duration_until_reset.unwrap().seconds), (Code::Ok as i32, 60));
}

#[tokio::test]
async fn hits_addend_peeks_and_refunds() {
    let f = fixture(&[ANOTHER], Options::default());
    // The request's hits_addend counts 5 for each descriptor.
    let r = f.ask(&request("another", vec![descriptor(&[("key2", "h")])], 5)).await;
    assert_eq!(r.statuses[0].limit_remaining, 15);
    // A descriptor's own hits_addend wins, 0 included: a peek, nothing taken.
    let mut peek = descriptor(&[("key2", "h")]);
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let r = f.ask(&request("another", vec![peek.clone()], 7)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 15));
    // is_negative_hits gives units back (upstream ignores it).
    let mut refund = descriptor(&[("key2", "h")]);
    refund.hits_addend = Some(UInt64Value { value: 3 });
    refund.is_negative_hits = true;
    let r = f.ask(&request("another", vec![refund], 1)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::Ok as i32, 18), "{r:?}");
    // More than remains is over, and counted (upstream's meaning: 2 + 19 of 20): a peek, then,
    // finds the window over its limit.
    let r = f.ask(&request("another", vec![descriptor(&[("key2", "h")])], 19)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let r = f.ask(&request("another", vec![peek], 1)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::OverLimit as i32, 0));
}

const MODES: &str = r#"
domain: m
descriptors:
  - key: shadow
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: quota2
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: blocked
    rate_limit: { unit: second, requests_per_unit: 0 }
  - key: free
    rate_limit: { unlimited: true }
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        rate_limit: { name: specific_limit, unit: minute, requests_per_unit: 5 }
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        rate_limit: { replaces: [ { name: specific_limit } ], unit: minute, requests_per_unit: 10 }
"#;

#[tokio::test]
async fn shadow_quota_block_list_unlimited_and_replaces() {
    let f = fixture(&[MODES], Options::default());
    // Shadow: decided and counted, answered OK.
    f.one("m", &[("shadow", "x")]).await;
    let r = f.one("m", &[("shadow", "x")]).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (Code::Ok as i32, Code::Ok as i32));
    assert_eq!(f.stat("ratelimit.service.rate_limit.m.shadow.shadow_mode"), 1);
    assert_eq!(f.stat("ratelimit.service.rate_limit.m.shadow.over_limit"), 1);
    // Quota mode: over only when every quota descriptor is over.
    f.one("m", &[("quota", "x")]).await;
    let r = f.ask(&request("m", vec![descriptor(&[("quota", "x")]), descriptor(&[("quota2", "x")])], 1)).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (Code::Ok as i32, Code::OverLimit as i32, Code::Ok as i32)
    );
    let r = f.ask(&request("m", vec![descriptor(&[("quota", "x")]), descriptor(&[("quota2", "x")])], 1)).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    // requests_per_unit 0 blocks every hit; a peek passes.
    let r = f.one("m", &[("blocked", "1.2.3.4")]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (Code::OverLimit as i32, 0));
    // Unlimited: OK with the most remaining.
    let r = f.one("m", &[("free", "x")]).await;
    assert_eq!(
        r.statuses[0],
        DescriptorStatus { code: Code::Ok as i32, limit_remaining: u32::MAX, ..Default::default() }
    );
    // Replaces: both descriptors match, only the replacing limit counts.
    for i in 0..10u32 {
        let r = f
            .ask(&request(
                "m",
                vec![
                    descriptor(&[("key_1", "value_1"), ("user", "bk")]),
                    descriptor(&[("key_2", "value_2"), ("user", "bk")]),
                ],
                1,
            ))
            .await;
        assert_eq!(r.overall_code, Code::Ok as i32, "hit {i}");
        assert_eq!(r.statuses[0], DescriptorStatus { code: Code::Ok as i32, ..Default::default() });
        assert_eq!(r.statuses[1].limit_remaining, 9 - i);
    }
    // The replaced limit itself was never charged: alone it still has 5.
    let r = f.one("m", &[("key_1", "value_1"), ("user", "bk")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn global_shadow_and_quota_modes() {
    let f = fixture(&[BASIC], Options { global_shadow_mode: true, ..Options::default() });
    f.one("basic", &[("one_per_minute", "g")]).await;
    let r = f.one("basic", &[("one_per_minute", "g")]).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (Code::Ok as i32, Code::OverLimit as i32));
    assert_eq!(f.stat("ratelimit.service.global_shadow_mode"), 1);
    let q = fixture(&[BASIC], Options { global_quota_mode: true, ..Options::default() });
    q.one("basic", &[("one_per_minute", "g")]).await;
    let r =
        q.ask(&request("basic", vec![descriptor(&[("one_per_minute", "g")]), descriptor(&[("key1", "g")])], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
}

#[tokio::test]
async fn headers_describe_the_limit_closest_to_refusing() {
    let headers =
        Some(("RateLimit-Limit".to_string(), "RateLimit-Remaining".to_string(), "RateLimit-Reset".to_string()));
    let f = fixture(&[ANOTHER], Options { headers, ..Options::default() });
    let r = f.ask(&request("another", vec![descriptor(&[("key2", "z")]), descriptor(&[("key3", "z")])], 1)).await;
    let got: Vec<(String, String)> =
        r.response_headers_to_add.iter().map(|h| (h.key.clone(), h.value.clone())).collect();
    let reset = (3600 - f.now_s() % 3600).to_string();
    assert_eq!(
        got,
        vec![
            ("RateLimit-Limit".into(), "10".into()),
            ("RateLimit-Remaining".into(), "9".into()),
            ("RateLimit-Reset".into(), reset)
        ]
    );
}

#[tokio::test]
async fn dynamic_metadata_names_the_request_and_the_passed_limits() {
    let yaml = "domain: md\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 20}\n    metadata:\n      service: {name: s2}\n";
    let f = fixture(&[yaml], Options { dynamic_metadata: true, ..Options::default() });
    let mut d = descriptor(&[("k", "v")]);
    d.hits_addend = Some(UInt64Value { value: 2 });
    let r = f.ask(&request("md", vec![d], 3)).await;
    let json = redis_throttle_rls::json::struct_to_json(&r.dynamic_metadata.unwrap());
    assert_eq!(
        json,
        serde_json::json!({"domain": "md", "hitsAddend": 3.0, "descriptors": [{"entries": ["k=v"], "hitsAddend": 2.0}], "metadata": {"service": {"name": "s2"}}})
    );
}

#[tokio::test]
async fn envoy_overrides_count_as_fixed_windows_under_their_own_key() {
    let f = fixture(&[BASIC], Options::default());
    let mut d = descriptor(&[("key1", "value1"), ("subkey1", "something")]);
    d.limit = Some(RateLimitOverride { requests_per_unit: 2, unit: config::Unit::Minute.proto() });
    for expect in [Code::Ok, Code::Ok, Code::OverLimit] {
        let r = f.ask(&request("basic", vec![d.clone()], 1)).await;
        assert_eq!(r.overall_code, expect as i32);
    }
    assert_eq!(f.stat("ratelimit.service.rate_limit.basic.key1_value1.subkey1_something.total_hits"), 3);
}

#[tokio::test]
async fn other_algorithms_decide_as_their_commands() {
    let yaml = r#"
domain: alg
descriptors:
  - { key: gcra, rate_limit: { unit: minute, requests_per_unit: 60, algorithm: gcra, burst: 3 } }
  - { key: sliding, rate_limit: { unit: minute, requests_per_unit: 3, algorithm: sliding_window } }
  - { key: bucket, rate_limit: { unit: minute, requests_per_unit: 1, algorithm: token_bucket, burst: 2 } }
  - { key: calendar, rate_limit: { unit: day, requests_per_unit: 2, algorithm: calendar, time_zone: Europe/Berlin } }
"#;
    let f = fixture(&[yaml], Options::default());
    // GCRA: 3 at once, then one a second.
    for _ in 0..3 {
        assert_eq!(f.one("alg", &[("gcra", "u")]).await.overall_code, Code::Ok as i32);
    }
    let r = f.one("alg", &[("gcra", "u")]).await;
    assert_eq!((r.overall_code, r.statuses[0].duration_until_reset.unwrap().seconds), (Code::OverLimit as i32, 1));
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.one("alg", &[("gcra", "u")]).await.overall_code, Code::Ok as i32);
    // Sliding window: no burst at a window boundary.
    for _ in 0..3 {
        assert_eq!(f.one("alg", &[("sliding", "u")]).await.overall_code, Code::Ok as i32);
    }
    f.clock.advance(Duration::from_secs(59));
    assert_eq!(f.one("alg", &[("sliding", "u")]).await.overall_code, Code::OverLimit as i32);
    f.clock.advance(Duration::from_secs(1));
    assert_eq!(f.one("alg", &[("sliding", "u")]).await.overall_code, Code::Ok as i32);
    // Token bucket: 2 at once, one more a minute.
    for expect in [Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(f.one("alg", &[("bucket", "u")]).await.overall_code, expect as i32);
    }
    // Calendar: two per Berlin day.
    for expect in [Code::Ok, Code::Ok, Code::OverLimit] {
        assert_eq!(f.one("alg", &[("calendar", "u")]).await.overall_code, expect as i32);
    }
}

#[tokio::test]
async fn service_errors_are_upstream_s() {
    let f = fixture(&[BASIC], Options::default());
    let e = f.service.should_rate_limit(&request("", vec![descriptor(&[("a", "b")])], 1)).await.unwrap_err();
    assert_eq!(e.to_string(), "rate limit domain must not be empty");
    let e = f.service.should_rate_limit(&request("basic", vec![], 1)).await.unwrap_err();
    assert_eq!(e.to_string(), "rate limit descriptor list must not be empty");
    assert_eq!(f.stat("ratelimit.service.call.should_rate_limit.service_error"), 2);
}
