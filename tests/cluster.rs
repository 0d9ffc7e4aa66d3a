//! CL.ALL and CL.EACH in a Redis Cluster: keys sharing a hash tag work through a cluster client library
//! (the `redis` crate's cluster client) and `redis-cli -c`; keys in different slots get the
//! server's own CROSSSLOT; the key spec names every key.
//!
//! skip twin: the module's commands through a cluster client and redis-cli -c (tests/twin.rs
//! runs the twin on a cluster).
//! skip containers: needs a cluster.

mod harness;

use std::process::Command;

use harness::{Cluster, cli_command};

#[test]
fn hash_tagged_limiters_work_through_cluster_clients_and_cross_slot_is_refused() {
    let cluster = Cluster::start(3, 0);
    let mut c = cluster.client();
    // The redis crate routes a command it does not know by its first argument (here `numkeys`);
    // a node that does not own the keys' slot answers MOVED, which the client follows.
    let mut nodes = std::collections::BTreeSet::new();
    for user in 0..30 {
        let (s, h) = (format!("rl:{{u{user}}}:s"), format!("rl:{{u{user}}}:h"));
        let reply: Vec<i64> = redis::cmd("CL.ALL")
            .arg(2)
            .arg(&s)
            .arg(&h)
            .arg(&["THROTTLE", "9", "10", "60", "WINDOW", "1000", "3600"])
            .query(&mut c)
            .unwrap_or_else(|e| panic!("user {user}: {e}"));
        assert_eq!(reply, vec![0, 10, 9, -1, 6, 1], "user {user}");
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(&s).query(&mut c).unwrap();
        let owner = cluster.nodes.iter().find(|n| {
            let count: i64 = redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot).query(&mut n.client()).unwrap();
            count == 2
        });
        nodes.insert(owner.expect("both keys on the slot's owner").port);
    }
    assert_eq!(nodes.len(), 3, "the users' limiters landed on every shard");

    // redis-cli -c follows the redirect too.
    let node = &cluster.nodes[0];
    let out = Command::new(cli_command())
        .args([
            "-c",
            "-p",
            &node.port.to_string(),
            "CL.ALL",
            "2",
            "rl:{u7}:s",
            "rl:{u7}:h",
            "THROTTLE",
            "9",
            "10",
            "60",
            "WINDOW",
            "1000",
            "3600",
        ])
        .output()
        .expect("run redis-cli -c");
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<i64> = text.split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!((&numbers[..4], numbers[5]), (&[0, 10, 8, -1][..], 1), "redis-cli -c: {text}");
    assert!((11..=12).contains(&numbers[4]), "two slots of 6 s taken: {text}");

    // Keys in different slots: the server's own CROSSSLOT, from the owner of the first key.
    let err = redis::cmd("CL.ALL")
        .arg(&["2", "rl:{a}:s", "rl:{b}:s", "COUNTER", "5", "60", "COUNTER", "5", "60"])
        .query::<Vec<i64>>(&mut c)
        .unwrap_err();
    assert!(err.to_string().to_uppercase().contains("CROSSSLOT"), "{err}");
    for n in &cluster.nodes {
        let keys: Vec<String> = redis::cmd("KEYS").arg("rl:{a}*").query(&mut n.client()).unwrap();
        assert!(keys.is_empty(), "a refused call wrote nothing");
    }

    // The key spec names every key, so the server (and ACL, and routing) sees all of them.
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&[
            "GETKEYS", "CL.ALL", "3", "x{t}", "y{t}", "z{t}", "COUNTER", "1", "1", "WINDOW", "1", "1", "BUCKET", "1",
            "1", "1",
        ])
        .query(&mut node.client())
        .unwrap();
    assert_eq!(keys, ["x{t}", "y{t}", "z{t}"]);

    // CL.EACH, CL.ALL's grammar with independent limiters: one command per hash slot, routed
    // as CL.ALL is; each limiter admitted or denied on its own; CROSSSLOT across slots.
    for user in 0..10 {
        let (s, d) = (format!("each:{{u{user}}}:s"), format!("each:{{u{user}}}:d"));
        let replies: Vec<Vec<i64>> = redis::cmd("CL.EACH")
            .arg(2)
            .arg(&s)
            .arg(&d)
            .arg(&["THROTTLE", "9", "10", "60", "COUNTER", "1", "60", "QUANTITY", "2"])
            .query(&mut c)
            .unwrap_or_else(|e| panic!("user {user}: {e}"));
        assert_eq!(replies, vec![vec![0, 10, 9, -1, 6], vec![1, 1, 1, -1, 0]], "user {user}");
    }
    let err = redis::cmd("CL.EACH")
        .arg(&["2", "each:{a}:s", "each:{b}:s", "COUNTER", "5", "60", "COUNTER", "5", "60"])
        .query::<Vec<Vec<i64>>>(&mut c)
        .unwrap_err();
    assert!(err.to_string().to_uppercase().contains("CROSSSLOT"), "{err}");
    for n in &cluster.nodes {
        let keys: Vec<String> = redis::cmd("KEYS").arg("each:{a}*").query(&mut n.client()).unwrap();
        assert!(keys.is_empty(), "a refused call wrote nothing");
    }
    let keys: Vec<String> = redis::cmd("COMMAND")
        .arg(&["GETKEYS", "CL.EACH", "2", "x{t}", "y{t}", "COUNTER", "1", "1", "THROTTLE", "1", "1", "1"])
        .query(&mut node.client())
        .unwrap();
    assert_eq!(keys, ["x{t}", "y{t}"]);
}

#[test]
fn pace_and_leases_route_to_the_owner_of_their_key() {
    let cluster = Cluster::start(3, 0);
    let mut c = cluster.client();
    let mut nodes = std::collections::BTreeSet::new();
    for tenant in 0..30 {
        let (pacer, pool) = (format!("pace:t{tenant}"), format!("exports:t{tenant}"));
        let paced: Vec<i64> = redis::cmd("CL.PACE").arg(&pacer).arg(&["10", "1"]).query(&mut c).unwrap();
        assert_eq!(paced, [0, 0, 1, -1, 1], "{pacer}");
        let acquired: Vec<i64> =
            redis::cmd("CL.ACQUIRE").arg(&pool).arg(&["20", "300", "job-1"]).query(&mut c).unwrap();
        assert_eq!(acquired, [0, 20, 19, -1, 300], "{pool}");
        let released: i64 = redis::cmd("CL.RELEASE").arg(&pool).arg("job-1").query(&mut c).unwrap();
        assert_eq!(released, 1);
        let owner = cluster.nodes.iter().position(|n| {
            let exists: i64 = redis::cmd("EXISTS").arg(&pacer).query(&mut n.client()).unwrap_or(0);
            exists == 1
        });
        nodes.insert(owner.expect("the pacer's key is on its slot's owner"));
    }
    assert_eq!(nodes.len(), 3, "the keys landed on every shard");
    // BLOCK through `redis-cli -c`, which follows the redirect to the owner and waits there.
    let _: Vec<i64> =
        redis::cmd("CL.PACE").arg(&["pace:t7", "10", "1000", "MS", "QUANTITY", "5"]).query(&mut c).unwrap();
    let node = &cluster.nodes[0];
    let started = std::time::Instant::now();
    let out = Command::new(cli_command())
        .args(["-c", "-p", &node.port.to_string(), "CL.PACE", "pace:t7", "10", "1000", "MS", "BLOCK"])
        .output()
        .expect("run redis-cli -c");
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<i64> = text.split_whitespace().map(|n| n.parse().unwrap()).collect();
    // Released at its slot: its own slot under way, the schedule idle when it ends.
    assert_eq!(numbers[..4], [0, 0, 1, -1], "{text}");
    assert!((1..=100).contains(&numbers[4]), "{text}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(400),
        "it waited for its slot: {:?}",
        started.elapsed()
    );
}
