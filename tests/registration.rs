//! How the commands present themselves to Redis: flags, key specs (so `COMMAND GETKEYS`,
//! Cluster routing and ACL key patterns work), documentation and ACL categories.
//!
//! skip twin: how the module registers its commands (flags, key specs, COMMAND DOCS, ACL
//! categories); the twin's are FUNCTION flags, tested in tests/twin.rs.
//! skip containers: needs a cluster (COMMAND GETKEYS, key specs across nodes).

mod harness;

use harness::{Cluster, Server, error_of, throttle};
use redis::Value;

const COMMANDS: &[(&str, &str)] = &[
    ("cl.throttle", "CL.THROTTLE {key} 1 1 60"),
    ("cl.window", "CL.WINDOW {key} 5 60 PRECISION 10"),
    ("cl.bucket", "CL.BUCKET {key} 5 1 60"),
    ("cl.counter", "CL.COUNTER {key} 5 60 MS"),
    ("cl.quota", "CL.QUOTA {key} 5 PER MONTH TZ Europe/Berlin MS"),
];

#[test]
fn command_info_flags_arity_and_keys() {
    let server = Server::start();
    let mut c = server.client();
    for (name, example) in COMMANDS {
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND").arg("INFO").arg(*name).query(&mut c).unwrap();
        let info = &info[0];
        let flags: Vec<String> = redis::FromRedisValue::from_redis_value(info[2].clone()).unwrap();
        for flag in ["write", "denyoom", "fast"] {
            assert!(flags.iter().any(|f| f == flag), "{name} lacks flag {flag}: {flags:?}");
        }
        let positions: Vec<i64> =
            info[3..6].iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect();
        assert_eq!(positions, vec![1, 1, 1], "{name}: the key is argument 1");

        let words: Vec<String> = example.replace("{key}", "some:key").split_whitespace().map(String::from).collect();
        let keys: Vec<String> = redis::cmd("COMMAND").arg("GETKEYS").arg(&words).query(&mut c).unwrap();
        assert_eq!(keys, vec!["some:key"], "{name}");
    }
}

#[test]
fn command_docs_describe_each_command() {
    let server = Server::start();
    let mut c = server.client();
    for (name, _) in COMMANDS {
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(*name).query(&mut c).unwrap();
        let text = format!("{docs:?}");
        for field in ["summary", "since", "complexity", "arguments", "key", "module", "throttle"] {
            assert!(text.contains(field), "COMMAND DOCS {name} lacks {field}: {text}");
        }
    }
}

#[test]
fn acl_key_patterns_and_categories_apply() {
    let server = Server::start();
    let mut c = server.client();
    let _: () = redis::cmd("ACL").arg(&["SETUSER", "limited", "on", ">pw", "~rl:*", "+@all"]).query(&mut c).unwrap();
    // Redis 7.2+ applies the module's ACL categories; 7.0 has no API for them, so there a
    // command rule is the way to take the limiters away from a user.
    let categories = server.version() >= (7, 2, 0);
    let rule = if categories { "-@write" } else { "-cl.throttle" }; // 7.0: the rule names the command
    let _: () = redis::cmd("ACL").arg(&["SETUSER", "reader", "on", ">pw", "~*", "+@all", rule]).query(&mut c).unwrap();

    let mut limited = server.client();
    let _: () = redis::cmd("AUTH").arg("limited").arg("pw").query(&mut limited).unwrap();
    assert_eq!(throttle(&mut limited, "CL.THROTTLE rl:user 1 1 60")[0], 0);
    let denied = error_of(&mut limited, &[b"CL.THROTTLE", b"other:user", b"1", b"1", b"60"]);
    assert!(denied.starts_with("NOPERM"), "a key outside ~rl:* is refused: {denied}");

    let mut reader = server.client();
    let _: () = redis::cmd("AUTH").arg("reader").arg("pw").query(&mut reader).unwrap();
    let denied = error_of(&mut reader, &[b"CL.THROTTLE", b"rl:user", b"1", b"1", b"60"]);
    assert!(denied.starts_with("NOPERM"), "a user with {rule} cannot run a limiter: {denied}");
    if categories {
        // Proved by effect: Valkey 8.0 applies module commands' categories but leaves them out
        // of `ACL CAT fast`'s listing.
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "slowonly", "on", ">pw", "~*", "+@all", "-@fast"])
            .query(&mut c)
            .unwrap();
        let mut slow = server.client();
        let _: () = redis::cmd("AUTH").arg("slowonly").arg("pw").query(&mut slow).unwrap();
        for (name, example) in COMMANDS {
            let words = example.replace("{key}", "rl:fast");
            let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
            let denied = error_of(&mut slow, &args);
            assert!(denied.starts_with("NOPERM"), "{name} is in @fast: a user with -@fast is refused it: {denied}");
        }
    }
    let exists: i64 = redis::cmd("EXISTS").arg("other:user").query(&mut c).unwrap();
    assert_eq!(exists, 0);
}

#[test]
fn runs_on_a_redis_cluster_through_a_cluster_client() {
    let cluster = Cluster::start(3, 0);
    let mut c = cluster.client();
    let mut seen_nodes = std::collections::BTreeSet::new();
    for i in 0..60 {
        let key = format!("user:{i}");
        let reply: Vec<i64> = redis::cmd("CL.THROTTLE").arg(&key).arg(2).arg(1).arg(60).query(&mut c).unwrap();
        assert_eq!(reply, vec![0, 3, 2, -1, 60], "{key}");
        let slot: i64 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&key).query(&mut c).unwrap();
        for node in &cluster.nodes {
            let n: i64 = redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot).query(&mut node.client()).unwrap();
            if n > 0 {
                seen_nodes.insert(node.port);
            }
        }
    }
    assert_eq!(seen_nodes.len(), 3, "the limiters landed on every shard, each on its key's own node");
    let again: Vec<i64> = redis::cmd("CL.THROTTLE").arg("user:7").arg(2).arg(1).arg(60).query(&mut c).unwrap();
    assert_eq!(again[..3], [0, 3, 1]);
}

#[test]
fn pace_and_lease_commands_present_themselves() {
    let server = Server::start();
    let mut c = server.client();
    // CL.PACE may block (BLOCK): flagged `blocking` and not `fast`, like XREAD and BLPOP.
    for (name, example, flags, not) in [
        ("cl.pace", "CL.PACE {key} 100 1 MAXWAIT 2 QUANTITY 3 MS BLOCK", &["write", "denyoom", "blocking"][..], "fast"),
        ("cl.acquire", "CL.ACQUIRE {key} 20 300 job-123 MS", &["write", "denyoom", "fast"][..], "blocking"),
        ("cl.release", "CL.RELEASE {key} job-123", &["write", "fast"][..], "denyoom"),
    ] {
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND").arg("INFO").arg(name).query(&mut c).unwrap();
        let info = &info[0];
        let got: Vec<String> = redis::FromRedisValue::from_redis_value(info[2].clone()).unwrap();
        for flag in flags {
            assert!(got.iter().any(|f| f == flag), "{name} lacks flag {flag}: {got:?}");
        }
        assert!(!got.iter().any(|f| f == not), "{name} is not {not}: {got:?}");
        let positions: Vec<i64> =
            info[3..6].iter().map(|v| redis::FromRedisValue::from_redis_value(v.clone()).unwrap()).collect();
        assert_eq!(positions, vec![1, 1, 1], "{name}: the key is argument 1");
        let words: Vec<String> = example.replace("{key}", "some:key").split_whitespace().map(String::from).collect();
        let keys: Vec<String> = redis::cmd("COMMAND").arg("GETKEYS").arg(&words).query(&mut c).unwrap();
        assert_eq!(keys, vec!["some:key"], "{name}");
        let docs: Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut c).unwrap();
        let text = format!("{docs:?}");
        for field in ["summary", "since", "complexity", "arguments", "key", "throttle"] {
            assert!(text.contains(field), "COMMAND DOCS {name} lacks {field}: {text}");
        }
    }
    let arity = |name: &str| -> i64 {
        let info: Vec<Vec<Value>> = redis::cmd("COMMAND").arg("INFO").arg(name).query(&mut server.client()).unwrap();
        redis::FromRedisValue::from_redis_value(info[0][1].clone()).unwrap()
    };
    assert_eq!((arity("cl.pace"), arity("cl.acquire"), arity("cl.release")), (-4, -5, 3));
}
