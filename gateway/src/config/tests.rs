//! The configuration as upstream's own tests pin it (basic matching, overrides, wildcards,
//! shared thresholds, detailed metrics, every error text), rewritten, plus our algorithms.

use super::*;

const BASIC: &str = r#"
domain: test-domain
descriptors:
  - key: key1
    value: value1
    descriptors:
      - key: subkey1
        rate_limit: { unit: second, requests_per_unit: 5 }
      - key: subkey1
        value: subvalue1
        rate_limit: { unit: second, requests_per_unit: 10 }
  - key: key2
    rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: key2
    value: value2
    rate_limit: { unit: minute, requests_per_unit: 30 }
  - key: key2
    value: value3
  - key: key3
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: key4
    rate_limit: { name: key4_rate_limit, unit: day, requests_per_unit: 1 }
  - key: key5
    value: value5
    rate_limit: { unit: day, requests_per_unit: 15 }
    descriptors:
      - key: subkey5
        value: subvalue5
        rate_limit: { unit: day, requests_per_unit: 25 }
  - key: key6
    rate_limit: { unlimited: true }
  - key: key7
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 70 }
"#;

fn load_one(name: &str, yaml: &str) -> Result<RateLimitConfig, ConfigError> {
    load(&[(name.to_string(), yaml.to_string())], &Stats::new(), false)
}

fn limit_of(c: &RateLimitConfig, stats: &Stats, domain: &str, pairs: &[(&str, &str)]) -> Option<Matched> {
    let entries: Vec<Entry<'_>> = pairs.iter().map(|(k, v)| Entry { key: k, value: v }).collect();
    c.get_limit(stats, domain, &entries)
}

#[test]
fn basic_matching_is_upstream_s() {
    let stats = Stats::new();
    let c = load(&[("basic".into(), BASIC.into())], &stats, false).unwrap();
    assert!(!c.is_empty());
    assert!(limit_of(&c, &stats, "foo_domain", &[]).is_none());
    assert_eq!(stats.counter("ratelimit.service.rate_limit.foo_domain.domain_not_found").get(), 1);
    assert!(limit_of(&c, &stats, "test-domain", &[]).is_none());
    assert_eq!(stats.counter("ratelimit.service.rate_limit.test-domain.domain_not_found").get(), 0);
    // No limit at these levels, or a request deeper than the tree.
    assert!(limit_of(&c, &stats, "test-domain", &[("key1", "something")]).is_none());
    assert!(limit_of(&c, &stats, "test-domain", &[("key1", "value1")]).is_none());
    assert!(limit_of(&c, &stats, "test-domain", &[("key2", "value2"), ("subkey", "subvalue")]).is_none());
    assert!(limit_of(&c, &stats, "test-domain", &[("key5", "value5"), ("subkey5", "subvalue")]).is_none());

    let l = limit_of(&c, &stats, "test-domain", &[("key1", "value1"), ("subkey1", "something")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.unit), (5, Some(Unit::Second)));
    assert_eq!(l.full_key, "test-domain.key1_value1.subkey1");
    let l = limit_of(&c, &stats, "test-domain", &[("key1", "value1"), ("subkey1", "subvalue1")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.full_key.as_str()), (10, "test-domain.key1_value1.subkey1_subvalue1"));
    let l = limit_of(&c, &stats, "test-domain", &[("key2", "something")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.unit, l.full_key.as_str()), (20, Some(Unit::Minute), "test-domain.key2"));
    let l = limit_of(&c, &stats, "test-domain", &[("key2", "value2")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.full_key.as_str()), (30, "test-domain.key2_value2"));
    // A value listed without a limit lets everything through.
    assert!(limit_of(&c, &stats, "test-domain", &[("key2", "value3")]).is_none());
    let l = limit_of(&c, &stats, "test-domain", &[("key3", "foo")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.unit), (1, Some(Unit::Hour)));
    let l = limit_of(&c, &stats, "test-domain", &[("key4", "foo")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.unit, l.name.as_str()), (1, Some(Unit::Day), "key4_rate_limit"));
    let l = limit_of(&c, &stats, "test-domain", &[("key6", "foo")]).unwrap().limit;
    assert!(l.unlimited && l.policy.is_none());
    // detailed_metric: the value joins the stats key.
    let l = limit_of(&c, &stats, "test-domain", &[("key7", "unspecified_value")]).unwrap().limit;
    assert_eq!((l.requests_per_unit, l.full_key.as_str()), (70, "test-domain.key7_unspecified_value"));
    l.stats.total_hits.inc(1);
    let l = limit_of(&c, &stats, "test-domain", &[("key7", "another_value")]).unwrap().limit;
    assert_eq!(l.full_key, "test-domain.key7_another_value");
    assert_eq!(stats.snapshot()["ratelimit.service.rate_limit.test-domain.key7_unspecified_value.total_hits"], 1);
    assert_eq!(stats.snapshot()["ratelimit.service.rate_limit.test-domain.key7_another_value.total_hits"], 0);
    // Stats are shared by the limit's key, across lookups.
    let a = limit_of(&c, &stats, "test-domain", &[("key3", "a")]).unwrap().limit;
    a.stats.over_limit.inc(1);
    assert_eq!(limit_of(&c, &stats, "test-domain", &[("key3", "b")]).unwrap().limit.stats.over_limit.get(), 1);
    // The dump lists every limit.
    let dump = c.dump();
    assert!(
        dump.contains(
            "test-domain.key1_value1.subkey1: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n"
        ),
        "{dump}"
    );
}

#[test]
fn domains_merge_only_when_asked() {
    let a = (
        "a".to_string(),
        "domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
            .to_string(),
    );
    let b = (
        "b".to_string(),
        "domain: d\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
            .to_string(),
    );
    let stats = Stats::new();
    assert_eq!(load(&[a.clone(), b.clone()], &stats, false).unwrap_err().0, "b: duplicate domain 'd' in config file");
    let c = load(&[a.clone(), b], &stats, true).unwrap();
    assert_eq!(limit_of(&c, &stats, "d", &[("k1", "v1")]).unwrap().limit.requests_per_unit, 10);
    assert_eq!(limit_of(&c, &stats, "d", &[("k2", "v2")]).unwrap().limit.requests_per_unit, 20);
    assert_eq!(load(&[a.clone(), a], &stats, true).unwrap_err().0, "a: duplicate descriptor composite key 'd.k1_v1'");
}

#[test]
fn errors_are_upstream_s_texts() {
    let cases: &[(&str, &str)] = &[
        ("descriptors:\n", "config file cannot have empty domain"),
        ("domain: d\ndescriptors:\n  - value: v\n", "descriptor has empty key"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
            "duplicate descriptor composite key 'd.k_v'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 5}\n",
            "invalid rate limit unit 'foo'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 5}\n",
            "invalid rate limit unit 'unknown'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: self}], unit: second, requests_per_unit: 5}\n",
            "replaces should not contain name of same descriptor",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: }], unit: second, requests_per_unit: 5}\n",
            "should not have an empty replaces entry",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day, requests_per_unit: 5}\n",
            "config error, unknown key 'ratelimit'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n",
            "config error, unknown key 'requestsperunit'",
        ),
        ("0.25: d\ndescriptors:\n  - key: k\n", "config error, key is not of type string: 0.25"),
        ("domain: d\ndescriptors:\n  - a\n  - b\n", "config error, yaml file contains list of type other than map: a"),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n",
            "should not specify rate limit unit when unlimited",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n    rate_limit: {unit: day, requests_per_unit: 25}\n",
            "share_threshold can only be used with wildcard values (containing '*'), but found key 'k'",
        ),
        (
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 2.5}\n",
            "error checking config",
        ),
    ];
    for (yaml, want) in cases {
        let e = load_one("file.yaml", yaml).unwrap_err();
        assert_eq!(e.0, format!("file.yaml: {want}"), "{yaml}");
    }
    // upstream's bad_yaml.yaml: `yaml: line 2:` as go-yaml says it (its words may differ after).
    let bad = load_one("bad_yaml.yaml", "'''\n").unwrap_err();
    assert!(bad.0.starts_with("bad_yaml.yaml: error loading config file: yaml: line 2: "), "{bad}");
    let negative =
        load_one("neg", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: -1}\n")
            .unwrap_err();
    assert!(negative.0.starts_with("neg: error loading config file: requests_per_unit"), "{negative}");
}

#[test]
fn our_options_are_checked_where_they_apply() {
    let yaml = |rl: &str| format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{{rl}}}\n");
    for (rl, want) in [
        ("unit: minute, requests_per_unit: 5, algorithm: leaky", "invalid algorithm 'leaky' for 'd.k'"),
        ("unit: minute, requests_per_unit: 5, burst: 3", "'burst' applies to algorithm gcra or token_bucket only"),
        (
            "unit: minute, requests_per_unit: 5, algorithm: gcra, time_zone: UTC",
            "'time_zone' applies to algorithm calendar only",
        ),
        ("unit: second, requests_per_unit: 5, algorithm: calendar", "a calendar limit counts per minute"),
        (
            "unit: day, requests_per_unit: 5, algorithm: calendar, time_zone: Mars/Olympus",
            "invalid rate limit for 'd.k'",
        ),
        (
            "unit: minute, requests_per_unit: 5, algorithm: gcra, precision: 1s",
            "'precision' applies to algorithm sliding_window only",
        ),
        ("unit: minute, requests_per_unit: 5, algorithm: sliding_window, precision: fast", "invalid precision 'fast'"),
    ] {
        let e = load_one("f", &yaml(rl)).unwrap_err();
        assert!(e.0.contains(want), "{rl}: {e}");
    }
    // Our keys beside the limit instead of inside it would run the limit as a fixed window.
    for (misplaced, word) in [
        (
            "  - key: k\n    algorithm: sliding_window\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
            "algorithm",
        ),
        ("  - key: k\n    burst: 3\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", "burst"),
        ("  - key: k\n    descriptors:\n      - {key: j, precision: 1s}\n", "precision"),
        ("  - key: k\n    time_zone: UTC\n", "time_zone"),
    ] {
        let e = load_one("f.yaml", &format!("domain: d\ndescriptors:\n{misplaced}")).unwrap_err();
        assert_eq!(
            e.0,
            format!(
                "f.yaml: config error, '{word}' is valid only inside rate_limit (where it says how the limit counts)"
            )
        );
    }
    let e = load_one("f.yaml", "domain: d\nalgorithm: gcra\n").unwrap_err();
    assert!(e.0.contains("'algorithm' is valid only inside rate_limit"), "{e}");
    let c = load_one(
        "f",
        "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra, burst: 2}}\n  - {key: b, rate_limit: {unit: hour, requests_per_unit: 1000000, algorithm: sliding_window}}\n  - {key: c, rate_limit: {unit: month, requests_per_unit: 100, algorithm: calendar, time_zone: Europe/Berlin}}\n  - {key: e, rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 40}}\n  - {key: z, rate_limit: {unit: second, requests_per_unit: 0}}\n",
    )
    .unwrap();
    let stats = Stats::new();
    let policy = |k: &str| limit_of(&c, &stats, "d", &[(k, "x")]).unwrap().limit.policy.map(|p| p.to_string());
    assert_eq!(policy("a").unwrap(), Policy::parse("5/m burst 2").unwrap().to_string());
    assert_eq!(policy("b").unwrap(), Policy::parse("1000000/h window precision 36s").unwrap().to_string());
    assert_eq!(policy("c").unwrap(), Policy::parse("100/month quota tz Europe/Berlin").unwrap().to_string());
    assert_eq!(policy("e").unwrap(), Policy::parse("10/s bucket burst 40").unwrap().to_string());
    assert_eq!(policy("z"), None);
}

#[test]
fn wildcards_match_anywhere_and_keep_their_pattern_as_stats_key() {
    let yaml = r#"
domain: w
descriptors:
  - { key: wild, value: "foo*", rate_limit: { unit: minute, requests_per_unit: 20 } }
  - { key: noWild, value: foo, rate_limit: { unit: minute, requests_per_unit: 20 } }
  - { key: noVal, rate_limit: { unit: minute, requests_per_unit: 20 } }
  - { key: midWild, value: "bar*b", rate_limit: { unit: minute, requests_per_unit: 20 } }
  - { key: multiWild, value: "foo*bar*baz", rate_limit: { unit: minute, requests_per_unit: 10 } }
  - key: nestedWild
    value: val1
    descriptors:
      - { key: wild, value: "goo*", rate_limit: { unit: minute, requests_per_unit: 20 } }
"#;
    let stats = Stats::new();
    let c = load(&[("w".into(), yaml.into())], &stats, false).unwrap();
    let key = |pairs: &[(&str, &str)]| limit_of(&c, &stats, "w", pairs).map(|m| m.limit.full_key.clone());
    assert_eq!(key(&[("noVal", "x")]).as_deref(), Some("w.noVal"));
    assert_eq!(key(&[("wild", "foo1")]).as_deref(), Some("w.wild_foo*"));
    assert_eq!(key(&[("wild", "foo")]).as_deref(), Some("w.wild_foo*"));
    assert_eq!(key(&[("wild", "bar")]), None);
    assert_eq!(key(&[("noWild", "foo1")]), None);
    assert_eq!(key(&[("nestedWild", "val1"), ("wild", "goo2")]).as_deref(), Some("w.nestedWild_val1.wild_goo*"));
    assert_eq!(key(&[("midWild", "barxyzb")]).as_deref(), Some("w.midWild_bar*b"));
    assert_eq!(key(&[("midWild", "barb")]).as_deref(), Some("w.midWild_bar*b"));
    assert_eq!(key(&[("midWild", "barxyz")]), None);
    assert_eq!(key(&[("multiWild", "foo1bar2baz")]).as_deref(), Some("w.multiWild_foo*bar*baz"));
    assert_eq!(key(&[("multiWild", "foobarbaz")]).as_deref(), Some("w.multiWild_foo*bar*baz"));
    assert_eq!(key(&[("multiWild", "foobazbar")]), None);
}

#[test]
fn shared_thresholds_put_the_pattern_in_the_cache_key() {
    let yaml = r#"
domain: s
descriptors:
  - { key: files, value: "files/*", share_threshold: true, rate_limit: { unit: minute, requests_per_unit: 100 } }
  - key: route
    value: "api/*"
    share_threshold: true
    value_to_metric: true
    descriptors:
      - { key: method, rate_limit: { unit: minute, requests_per_unit: 60 } }
  - { key: file, value: test1, rate_limit: { unit: minute, requests_per_unit: 50 } }
  - { key: file, value: "test*", share_threshold: true, rate_limit: { unit: minute, requests_per_unit: 100 } }
  - { key: iso, value: "iso/*", rate_limit: { unit: minute, requests_per_unit: 10 } }
"#;
    let stats = Stats::new();
    let c = load(&[("s".into(), yaml.into())], &stats, false).unwrap();
    let m = limit_of(&c, &stats, "s", &[("files", "files/a.pdf")]).unwrap();
    assert_eq!(m.share, Some(vec![Some("files/*".to_string())]));
    assert_eq!(m.limit.full_key, "s.files_files/*");
    let m = limit_of(&c, &stats, "s", &[("route", "api/v1"), ("method", "GET")]).unwrap();
    assert_eq!(m.share, Some(vec![Some("api/*".to_string()), None]));
    assert_eq!(m.limit.full_key, "s.route_api/*.method");
    // An exact value wins over the wildcard.
    let m = limit_of(&c, &stats, "s", &[("file", "test1")]).unwrap();
    assert_eq!((m.limit.requests_per_unit, m.share.is_none()), (50, true));
    let m = limit_of(&c, &stats, "s", &[("file", "test2")]).unwrap();
    assert_eq!(m.limit.requests_per_unit, 100);
    // Without share_threshold each value counts alone.
    assert!(limit_of(&c, &stats, "s", &[("iso", "iso/a")]).unwrap().share.is_none());
}

#[test]
fn value_to_metric_puts_request_values_in_stats_keys() {
    let yaml = r#"
domain: v
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - { key: subject_id, rate_limit: { unit: minute, requests_per_unit: 60 } }
"#;
    let stats = Stats::new();
    let c = load(&[("v".into(), yaml.into())], &stats, false).unwrap();
    let m = limit_of(&c, &stats, "v", &[("route", "api"), ("http_method", "GET"), ("subject_id", "123")]).unwrap();
    assert_eq!(m.limit.full_key, "v.route_api.http_method_GET.subject_id");
}

#[test]
fn metadata_is_kept_as_json() {
    let yaml = "domain: m\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 20}\n    metadata:\n      service_with_quota:\n        name: service_2\n";
    let stats = Stats::new();
    let c = load(&[("m".into(), yaml.into())], &stats, false).unwrap();
    let m = limit_of(&c, &stats, "m", &[("k", "x")]).unwrap();
    assert_eq!(
        serde_json::Value::Object(m.limit.metadata.clone().unwrap()),
        serde_json::json!({"service_with_quota": {"name": "service_2"}})
    );
}

/// upstream's test/config error table (config_test.go's `expectConfigPanic` cases), its files
/// as our data under their names, each with upstream's exact message (a bad YAML's parser words
/// after `yaml: line N:` are ours).
#[test]
fn upstream_s_config_error_table() {
    const BASIC: &str =
        "domain: test-domain\ndescriptors:\n  - key: key2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n";
    let one = |name: &str, yaml: &str| vec![(name.to_string(), yaml.to_string())];
    // (the files, MERGE_DOMAIN_CONFIG, upstream's message)
    type Case = (Vec<(String, String)>, bool, &'static str);
    let cases: Vec<Case> = vec![
        (one("empty_domain.yaml", "descriptors:\n"), false, "empty_domain.yaml: config file cannot have empty domain"),
        (
            vec![
                ("basic_config.yaml".into(), BASIC.into()),
                ("duplicate_domain.yaml".into(), "domain: test-domain\ndescriptors:\n".into()),
            ],
            false,
            "duplicate_domain.yaml: duplicate domain 'test-domain' in config file",
        ),
        (
            one("empty_key.yaml", "domain: test-domain\ndescriptors:\n  - value: value1\n"),
            false,
            "empty_key.yaml: descriptor has empty key",
        ),
        (
            one(
                "duplicate_key.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n",
            ),
            false,
            "duplicate_key.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        (
            {
                let merge = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n";
                vec![("merge_domain_key1.yaml".into(), merge.into()), ("merge_domain_key1.yaml".into(), merge.into())]
            },
            true,
            "merge_domain_key1.yaml: duplicate descriptor composite key 'test-domain.key1_value1'",
        ),
        (
            one(
                "bad_limit_unit.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: foo, requests_per_unit: 5}\n",
            ),
            false,
            "bad_limit_unit.yaml: invalid rate limit unit 'foo'",
        ),
        (
            one(
                "replaces_self.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit: {name: self, replaces: [{name: self}], unit: second, requests_per_unit: 5}\n",
            ),
            false,
            "replaces_self.yaml: replaces should not contain name of same descriptor",
        ),
        (
            one(
                "replaces_empty.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n",
            ),
            false,
            "replaces_empty.yaml: should not have an empty replaces entry",
        ),
        (
            one(
                "misspelled_key.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit: {unit: day, requests_per_unit: 5}\n",
            ),
            false,
            "misspelled_key.yaml: config error, unknown key 'ratelimit'",
        ),
        (
            one(
                "misspelled_key2.yaml",
                "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: day, requestsperunit: 5}\n",
            ),
            false,
            "misspelled_key2.yaml: config error, unknown key 'requestsperunit'",
        ),
        (
            one(
                "non_string_key.yaml",
                "0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
            ),
            false,
            "non_string_key.yaml: config error, key is not of type string: 0.25",
        ),
        (
            one("non_map_list.yaml", "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n"),
            false,
            "non_map_list.yaml: config error, yaml file contains list of type other than map: a",
        ),
        (
            one(
                "unlimited_with_unit.yaml",
                "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n",
            ),
            false,
            "unlimited_with_unit.yaml: should not specify rate limit unit when unlimited",
        ),
    ];
    let stats = Stats::new();
    for (docs, merge, want) in cases {
        assert_eq!(load(&docs, &stats, merge).unwrap_err().0, want);
    }
    let bad = load(&[("bad_yaml.yaml".into(), "'''\n".into())], &stats, false).unwrap_err();
    assert!(bad.0.starts_with("bad_yaml.yaml: error loading config file: yaml: line 2: "), "{bad}");
}
