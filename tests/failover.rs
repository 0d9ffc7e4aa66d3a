//! A 3-master, 3-replica cluster with the module on every node: limiters filled on every
//! shard keep their state when a master is killed and its replica takes over, and commands
//! keep working through a cluster client.
//!
//! skip containers: needs a cluster whose masters it kills.

mod harness;

use harness::{Cluster, retry, wait_until};
use std::collections::BTreeMap;
use std::time::Duration;

/// Every kind of limiter, used up to its limit (5) in one call, with long periods.
const KINDS: &[(&str, &str)] = &[
    ("t", "CL.THROTTLE {key} 4 1 600"),
    ("w", "CL.WINDOW {key} 5 600"),
    ("p", "CL.WINDOW {key} 5 600 PRECISION 60"),
    ("b", "CL.BUCKET {key} 5 1 600"),
    ("c", "CL.COUNTER {key} 5 600"),
];
const USERS: usize = 30;

fn key(user: usize, kind: &str) -> String {
    format!("{{user:{user}}}:{kind}")
}

fn call(
    c: &mut redis::cluster::ClusterConnection,
    template: &str,
    key: &str,
    quantity: i64,
) -> redis::RedisResult<Vec<i64>> {
    let words = format!("{} {quantity}", template.replace("{key}", key));
    let args: Vec<&[u8]> = words.split_whitespace().map(str::as_bytes).collect();
    harness::command(&args).query(c)
}

#[test]
fn a_killed_masters_limiters_keep_their_state_on_its_replica() {
    let mut cluster = Cluster::start(3, 1);
    let mut c = cluster.client();
    for user in 0..USERS {
        for (kind, template) in KINDS {
            assert_eq!(call(&mut c, template, &key(user, kind), 5).unwrap()[..3], [0, 5, 0], "{template}");
        }
    }
    // Every master's writes reached its replica before the kill.
    let masters: Vec<usize> = (0..cluster.nodes.len()).filter(|&i| cluster.nodes[i].is_master()).collect();
    assert_eq!(masters.len(), 3);
    for &m in &masters {
        let replica = cluster.index_of(cluster.replicas_of(m)[0]);
        cluster.nodes[m].wait_replicated(&cluster.nodes[replica]);
    }
    // The limiters the victim holds: value and absolute expiry.
    let victim = masters[0];
    let mut v = cluster.nodes[victim].client();
    let before: BTreeMap<Vec<u8>, (Vec<u8>, i64)> =
        harness::snapshot(&mut v).into_iter().map(|(k, val, at)| (k, (val, at))).collect();
    assert!(before.len() >= 5, "the victim holds limiters: {}", before.len());
    let replica = cluster.index_of(cluster.replicas_of(victim)[0]);

    cluster.nodes[victim].kill();
    let t0 = std::time::Instant::now();
    wait_until("the replica to take over", Duration::from_secs(30), || {
        let info: String =
            redis::cmd("CLUSTER").arg("INFO").query(&mut cluster.nodes[replica].client()).unwrap_or_default();
        cluster.nodes[replica].is_master() && info.contains("cluster_state:ok")
    });
    // Every survivor agrees: the victim failed and its replica serves its slots.
    let (victim_port, replica_port) = (cluster.nodes[victim].port, cluster.nodes[replica].port);
    wait_until("every node to see the new master", Duration::from_secs(30), || {
        cluster.nodes.iter().filter(|n| n.port != victim_port).all(|n| {
            let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut n.client()).unwrap_or_default();
            let line = |port: u16| nodes.lines().find(|l| l.contains(&format!(":{port}@"))).unwrap_or("").to_string();
            line(victim_port).contains(",fail") || line(victim_port).contains(" fail")
        }) && cluster.nodes.iter().filter(|n| n.port != victim_port).all(|n| {
            let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut n.client()).unwrap_or_default();
            nodes.lines().any(|l| l.contains(&format!(":{replica_port}@")) && l.contains("master"))
        })
    });
    eprintln!("failover took {:.1} s", t0.elapsed().as_secs_f64());
    let after: BTreeMap<Vec<u8>, (Vec<u8>, i64)> = harness::snapshot(&mut cluster.nodes[replica].client())
        .into_iter()
        .map(|(k, val, at)| (k, (val, at)))
        .collect();
    assert_eq!(after, before, "the promoted replica holds the victim's limiters byte for byte, with their expiries");

    // Through a fresh cluster client (the topology changed): every user at their limit on
    // every shard stays limited, and new limiters work.
    // A client that fails is re-created from the survivors (its slot map may predate the
    // failover).
    let mut c = None;
    let mut run = |template: &str, k: &str| {
        retry(k, Duration::from_secs(30), || {
            let conn = match c.as_mut() {
                Some(conn) => conn,
                None => c.insert(cluster.live_client()?),
            };
            call(conn, template, k, 1).inspect_err(|_| c = None)
        })
    };
    for user in 0..USERS {
        for (kind, template) in KINDS {
            let k = key(user, kind);
            assert_eq!(run(template, &k)[..3], [1, 5, 0], "{k} stays limited after the failover");
        }
    }
    for user in 0..USERS {
        assert_eq!(run(KINDS[0].1, &format!("new:{user}"))[..3], [0, 5, 4], "a new limiter");
    }
    eprintln!(
        "{} limiters of the killed master kept their state; {} limiters stayed limited",
        before.len(),
        USERS * KINDS.len()
    );
}
