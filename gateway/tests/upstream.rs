//! envoyproxy/ratelimit's own cases, ported as data and assertions of ours and run against the
//! built service on Redis with the module, through gRPC: `testBasicBaseConfig` in its variants
//! (plain, `CACHE_KEY_PREFIX`, stop-increment, local cache, local cache with stop-increment,
//! `RUNTIME_WATCH_ROOT=false`), `TestConfigLimitOverride`, upstream's counting of `hits_addend`
//! (15, 15, 5 against 20 an hour), and the variables upstream's manifests spell out.

#[path = "../../tests/harness/mod.rs"]
mod harness;
mod rls;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use harness::Server;
use rls::{Client, Rls, descriptor, host_port, runtime};

/// Upstream's integration configuration, as our own data: `basic` and `another`, each limit twice
/// (`key` and `key_local`, the names its local-cache runs use).
const BASIC: &str = "domain: basic\ndescriptors:\n  - {key: key1, rate_limit: {unit: second, requests_per_unit: 50}}\n  - {key: key1_local, rate_limit: {unit: second, requests_per_unit: 50}}\n  - {key: one_per_minute, rate_limit: {unit: minute, requests_per_unit: 1}}\n";
const ANOTHER: &str = "domain: another\ndescriptors:\n  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}\n  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 10}}\n  - {key: key2_local, rate_limit: {unit: minute, requests_per_unit: 20}}\n  - {key: key3_local, rate_limit: {unit: hour, requests_per_unit: 10}}\n  - {key: key4, rate_limit: {unit: day, requests_per_unit: 20}}\n  - {key: key4_local, rate_limit: {unit: day, requests_per_unit: 20}}\n";
/// Upstream's `basic_config.yaml` (the part `TestConfigLimitOverride` reads), and ours for
/// hits_addend.
const TEST_DOMAIN: &str = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - {key: subkey1, rate_limit: {unit: second, requests_per_unit: 5}}\n      - {key: subkey1, value: subvalue1, rate_limit: {unit: second, requests_per_unit: 10}}\n  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}\n";
const ADDEND: &str = "domain: addend\ndescriptors:\n  - {key: fixed, rate_limit: {unit: hour, requests_per_unit: 20}}\n  - {key: per_descriptor, rate_limit: {unit: hour, requests_per_unit: 20}}\n  - {key: sliding, rate_limit: {unit: hour, requests_per_unit: 20, algorithm: sliding_window}}\n  - {key: gcra, rate_limit: {unit: hour, requests_per_unit: 20, algorithm: gcra}}\n";

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Waits, if needed, so that the next `seconds` stay inside one window of `unit` seconds.
async fn inside_one(unit: u64, seconds: u64) {
    let into = now_s() % unit;
    if into + seconds >= unit {
        tokio::time::sleep(Duration::from_millis((unit - into) * 1000 + 200)).await;
    }
}

fn ask(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest { domain: domain.into(), descriptors, hits_addend: hits }
}

/// Upstream's expected status: code, limit, remaining; the reset as the response had it.
fn expect(code: Code, rpu: u32, unit: RateLimitUnit, remaining: u32, got: &DescriptorStatus) -> DescriptorStatus {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit;
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit { name: String::new(), requests_per_unit: rpu, unit: unit as i32 }),
        limit_remaining: remaining,
        duration_until_reset: got.duration_until_reset,
        quota: None,
    }
}

async fn call(c: &mut Client, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r).await.unwrap().into_inner()
}

/// `testBasicBaseConfig`: what upstream asserts, for one variant of the settings.
async fn basic_base_config(rls: &Rls, local: bool, stop: bool, what: &str) {
    let mut c = rls.grpc().await;
    let k = |name: &str| if local { format!("{name}_local") } else { name.to_string() };
    let stat = |name: &str| rls.stat(name);
    let limit_stat = |key: &str, s: &str| rls.stat(&format!("ratelimit.service.rate_limit.another.{key}.{s}"));
    let gauge = |name: &str| rls.stat(&format!("ratelimit.localcache.{name}"));

    // A domain nobody configured: OK, no limit; the local cache is not even asked.
    let r = call(&mut c, ask("foo", vec![descriptor(&[(&k("hello"), "world")])], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{what}");
    assert_eq!(r.statuses, vec![DescriptorStatus { code: Code::Ok as i32, ..Default::default() }], "{what}");
    assert_eq!((gauge("hitCount"), gauge("missCount")), (0, 0), "{what}");

    let r = call(&mut c, ask("basic", vec![descriptor(&[(&k("key1"), "foo")])], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32, "{what}");
    assert_eq!(r.statuses, vec![expect(Code::Ok, 50, RateLimitUnit::Second, 49, &r.statuses[0])], "{what}");
    assert_eq!(stat(&format!("ratelimit.service.rate_limit.basic.{}.total_hits", k("key1"))), 1, "{what}");
    assert_eq!((gauge("hitCount"), gauge("missCount")), (0, u64::from(local)), "{what}");

    // 25 hits on a fresh value against 20 a minute.
    inside_one(60, 10).await;
    let value = format!("{}{}", std::process::id(), now_s());
    let key2 = k("key2");
    for i in 0..25u64 {
        let r = call(&mut c, ask("another", vec![descriptor(&[(&key2, &value)])], 1)).await;
        let (code, remaining) = if i >= 20 { (Code::OverLimit, 0) } else { (Code::Ok, 20 - (i as u32 + 1)) };
        assert_eq!(r.overall_code, code as i32, "{what} hit {i}");
        assert_eq!(r.statuses, vec![expect(code, 20, RateLimitUnit::Minute, remaining, &r.statuses[0])], "{what} {i}");
        assert_eq!(limit_stat(&key2, "total_hits"), i + 1, "{what} {i}");
        assert_eq!(limit_stat(&key2, "over_limit"), i.saturating_sub(19), "{what} {i}");
        let cached = if local { i.saturating_sub(20) } else { 0 };
        assert_eq!(limit_stat(&key2, "over_limit_with_local_cache"), cached, "{what} {i}");
        assert_eq!(gauge("hitCount"), cached, "{what} {i}");
        let missed = if !local {
            0
        } else if i < 20 {
            i + 2
        } else {
            22
        };
        assert_eq!(gauge("missCount"), missed, "{what} {i}");
    }

    // Two descriptors on fresh values: the hourly one goes over from its 11th hit.
    inside_one(60, 10).await;
    let value = format!("{value}-two");
    let key3 = k("key3");
    for i in 0..15u64 {
        let r =
            call(&mut c, ask("another", vec![descriptor(&[(&key2, &value)]), descriptor(&[(&key3, &value)])], 1)).await;
        let (mut first, mut second) = (20 - (i as u32 + 1), 10u32.saturating_sub(i as u32 + 1));
        let code = if i >= 10 { Code::OverLimit } else { Code::Ok };
        if i >= 10 {
            second = 0;
            // Stop-increment: once one key is over, the others are not counted.
            if stop {
                first = 10;
            }
        }
        assert_eq!(r.overall_code, code as i32, "{what} two {i}");
        assert_eq!(
            r.statuses,
            vec![
                expect(Code::Ok, 20, RateLimitUnit::Minute, first, &r.statuses[0]),
                expect(code, 10, RateLimitUnit::Hour, second, &r.statuses[1]),
            ],
            "{what} two {i}"
        );
        assert_eq!(limit_stat(&key2, "total_hits"), i + 26, "{what} two {i}");
        assert_eq!(limit_stat(&key2, "over_limit"), 5, "{what} two {i}");
        assert_eq!(limit_stat(&key2, "over_limit_with_local_cache"), if local { 4 } else { 0 }, "{what} two {i}");
        assert_eq!(limit_stat(&key3, "total_hits"), i + 1, "{what} two {i}");
        assert_eq!(limit_stat(&key3, "over_limit"), i.saturating_sub(9), "{what} two {i}");
        let cached3 = if local { i.saturating_sub(10) } else { 0 };
        assert_eq!(limit_stat(&key3, "over_limit_with_local_cache"), cached3, "{what} two {i}");
        if local {
            assert_eq!(gauge("hitCount"), 4 + cached3, "{what} two {i}");
            assert_eq!(gauge("missCount"), if i < 10 { i * 2 + 24 } else { i + 34 }, "{what} two {i}");
        } else {
            assert_eq!((gauge("hitCount"), gauge("missCount")), (0, 0), "{what} two {i}");
        }
    }

    if local {
        assert!(gauge("entryCount") >= 2 && gauge("averageAccessTime") > 1_700_000_000, "{what}: {:?}", rls.stats());
    }
    // The reset counts down.
    let key4 = k("key4");
    let first = call(&mut c, ask("another", vec![descriptor(&[(&key4, "durTest")])], 1)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = call(&mut c, ask("another", vec![descriptor(&[(&key4, "durTest")])], 1)).await;
    let reset = |r: &RateLimitResponse| r.statuses[0].duration_until_reset.unwrap().seconds;
    assert!(reset(&second) < reset(&first), "{what}: {first:?} then {second:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_s_basic_config_in_every_variant() {
    let server = Server::start();
    let url = host_port(&server.url());
    let dir = runtime(&[("basic.yaml", BASIC), ("another.yaml", ANOTHER)]);
    // (name, local cache, stop-increment, settings)
    type Variant = (&'static str, bool, bool, &'static [(&'static str, &'static str)]);
    let variants: [Variant; 6] = [
        ("plain", false, false, &[("RUNTIME_WATCH_ROOT", "true")]),
        ("cache key prefix", false, false, &[("RUNTIME_WATCH_ROOT", "true"), ("CACHE_KEY_PREFIX", "prefix:")]),
        (
            "stop increment",
            false,
            true,
            &[("RUNTIME_WATCH_ROOT", "true"), ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true")],
        ),
        // Upstream's test size, raised to its cache's minimum as upstream raises it.
        ("local cache", true, false, &[("RUNTIME_WATCH_ROOT", "true"), ("LOCAL_CACHE_SIZE_IN_BYTES", "1000")]),
        (
            "local cache with stop increment",
            true,
            true,
            &[
                ("RUNTIME_WATCH_ROOT", "true"),
                ("LOCAL_CACHE_SIZE_IN_BYTES", "1000"),
                ("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "true"),
            ],
        ),
        ("watch root false", false, false, &[("RUNTIME_WATCH_ROOT", "false")]),
    ];
    let mut redis = server.client();
    for (what, local, stop, env) in variants {
        let rls = Rls::start(&dir, &url, env);
        basic_base_config(&rls, local, stop, what).await;
        if what == "cache key prefix" {
            let keys: Vec<String> = redis::cmd("KEYS").arg("prefix:another_*").query(&mut redis).unwrap();
            assert!(!keys.is_empty(), "CACHE_KEY_PREFIX starts every key");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn with_override(pairs: &[(&str, &str)], rpu: u32, unit: RateLimitUnit) -> RateLimitDescriptor {
    RateLimitDescriptor {
        limit: Some(RateLimitOverride { requests_per_unit: rpu, unit: unit as i32 }),
        ..descriptor(pairs)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_s_limit_override_and_hits_addend_counting() {
    let server = Server::start();
    let url = host_port(&server.url());
    let dir = runtime(&[("test.yaml", TEST_DOMAIN), ("addend.yaml", ADDEND)]);
    // Upstream's default jitter, as its manifests spell it out: accepted.
    let rls = Rls::start(&dir, &url, &[("EXPIRATION_JITTER_MAX_SECONDS", "300")]);
    let mut c = rls.grpc().await;

    // TestConfigLimitOverride. An unknown domain: the override limits nothing.
    for _ in 0..3 {
        let r =
            call(&mut c, ask("foo_domain", vec![with_override(&[("key1", "value1")], 1, RateLimitUnit::Day)], 1)).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    assert_eq!(rls.stat("ratelimit.service.rate_limit.foo_domain.domain_not_found"), 3);
    // The override's limit, under the descriptor's stats key; another limit keeps the stats.
    let pairs = [("key1", "value1"), ("subkey1", "something")];
    let r = call(&mut c, ask("test-domain", vec![with_override(&pairs, 10, RateLimitUnit::Day)], 1)).await;
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (10, RateLimitUnit::Day as i32));
    assert_eq!(r.statuses[0].limit_remaining, 9);
    let r = call(&mut c, ask("test-domain", vec![with_override(&pairs, 42, RateLimitUnit::Hour)], 1)).await;
    let limit = r.statuses[0].current_limit.clone().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (42, RateLimitUnit::Hour as i32));
    let key = "ratelimit.service.rate_limit.test-domain.key1_value1.subkey1_something";
    assert_eq!((rls.stat(&format!("{key}.total_hits")), rls.stat(&format!("{key}.within_limit"))), (2, 2));
    let other = [("key1", "value1"), ("subkey1", "something_else")];
    call(&mut c, ask("test-domain", vec![with_override(&other, 42, RateLimitUnit::Hour)], 1)).await;
    assert_eq!(rls.stat("ratelimit.service.rate_limit.test-domain.key1_value1.subkey1_something_else.total_hits"), 1);
    assert_eq!(rls.stat(&format!("{key}.total_hits")), 2);

    // hits_addend 15, 15, 5 against 20 an hour, as upstream counts it: every hit of a fixed
    // window counted, so OK, OVER, OVER; 35 hits, 15 over, 4 near, 15 within. The request's
    // hits_addend and a descriptor's own count alike.
    inside_one(3600, 5).await;
    let value = format!("{}-{}", std::process::id(), now_s());
    for (key, own) in [("fixed", false), ("per_descriptor", true)] {
        let mut codes = Vec::new();
        for hits in [15u64, 15, 5] {
            let mut d = descriptor(&[(key, &value)]);
            let request_hits = if own {
                d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
                0
            } else {
                hits as u32
            };
            let r = call(&mut c, ask("addend", vec![d], request_hits)).await;
            codes.push(Code::try_from(r.overall_code).unwrap());
        }
        assert_eq!(codes, [Code::Ok, Code::OverLimit, Code::OverLimit], "{key}");
        let s = |name: &str| rls.stat(&format!("ratelimit.service.rate_limit.addend.{key}.{name}"));
        assert_eq!((s("total_hits"), s("over_limit"), s("near_limit"), s("within_limit")), (35, 15, 4, 15), "{key}");
    }
    // Our algorithms: a descriptor's own hits_addend is a charge (counted, refused or not), so a
    // budget runs out as on a fixed window; the request's hits_addend asks to be admitted, and a
    // refused request takes nothing (see the gateway guide).
    for algorithm in ["sliding", "gcra"] {
        let mut codes = Vec::new();
        for hits in [15u64, 15, 5] {
            let mut d = descriptor(&[(algorithm, &value)]);
            d.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
            codes.push(Code::try_from(call(&mut c, ask("addend", vec![d], 0)).await.overall_code).unwrap());
        }
        assert_eq!(codes, [Code::Ok, Code::OverLimit, Code::OverLimit], "{algorithm}: a charge counts");
        let mut codes = Vec::new();
        for hits in [15u32, 15, 5] {
            let d = descriptor(&[(algorithm, &format!("{value}-take"))]);
            codes.push(Code::try_from(call(&mut c, ask("addend", vec![d], hits)).await.overall_code).unwrap());
        }
        assert_eq!(codes, [Code::Ok, Code::OverLimit, Code::Ok], "{algorithm}: a refused take takes nothing");
    }
    // The jitter lengthens a fixed window's key, never its window: the key outlives its hour by
    // at most EXPIRATION_JITTER_MAX_SECONDS.
    let mut redis = server.client();
    let hour = now_s() / 3600 * 3600;
    let ttl: i64 = redis::cmd("TTL").arg(format!("addend_fixed_{value}_{hour}")).query(&mut redis).unwrap();
    let left = (hour + 3600 - now_s()) as i64;
    assert!(ttl >= left - 2 && ttl <= 3600 + 300, "TTL {ttl}s, the window has {left}s left");
    let _ = std::fs::remove_dir_all(&dir);
}
