//! The client on a 3-primary cluster: every call goes to its key's primary (no MOVED in steady
//! state, counted by each node's INFO errorstats), CL.ALL to its first key's (redis-rs would
//! route it by `numkeys`), and keys of one CL.ALL call in different slots are refused before
//! anything is sent.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use harness::Cluster;
use redis_throttle_client::{Backend, Config, Error, Policy, Source, Throttle, Verdict};

/// MOVED and ASK errors the node has replied (INFO errorstats).
fn redirects(node: &harness::Server) -> u64 {
    let info: String = redis::cmd("INFO").arg("errorstats").query(&mut node.client()).unwrap();
    info.lines()
        .filter(|l| l.starts_with("errorstat_MOVED:") || l.starts_with("errorstat_ASK:"))
        .filter_map(|l| l.split("count=").nth(1))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_go_to_their_keys_primary() {
    let cluster = Cluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls()).unwrap().get_async_connection().await.unwrap();
    let mut raw = conn.clone();
    let client = Throttle::from_cluster(conn, Config::default()).await.unwrap();
    assert_eq!(client.backend(), Backend::Module);
    let before: u64 = cluster.nodes.iter().map(redirects).sum();

    let policy = Policy::parse("3/m").unwrap();
    for i in 0..300 {
        let d = client.check(&policy, format!("user{i}")).await.unwrap();
        assert_eq!((d.verdict, d.source), (Verdict::Allowed, Source::Server));
    }
    // Every node served some: the keys spread over the slots.
    assert!(cluster.nodes.iter().all(|n| n.command_calls("cl.throttle") > 0));

    let (a, b) = (Policy::parse("10/s").unwrap(), Policy::parse("100/h window").unwrap());
    for i in 0..100 {
        let (s, h) = (format!("rl:{{user{i}}}:s"), format!("rl:{{user{i}}}:h"));
        let d = client.check_all(&[(&a, s.as_bytes(), 1), (&b, h.as_bytes(), 1)]).await.unwrap();
        assert_eq!((d.verdict, d.each.len()), (Verdict::Allowed, 2));
    }
    let after: u64 = cluster.nodes.iter().map(redirects).sum();
    assert_eq!(after, before, "no MOVED or ASK in steady state");

    // The count would see misrouting: redis-rs alone routes CL.ALL by `numkeys` ("2"), so most
    // of these land on another node first and are redirected.
    for i in 0..20 {
        let (s, h) = (format!("rl:{{user{i}}}:s"), format!("rl:{{user{i}}}:h"));
        let cmd = redis::cmd("CL.ALL")
            .arg(2)
            .arg(&s)
            .arg(&h)
            .arg(&["THROTTLE", "9", "10", "1", "COUNTER", "5", "60"][..])
            .clone();
        let _: redis::RedisResult<redis::Value> = cmd.query_async(&mut raw).await;
    }
    assert!(cluster.nodes.iter().map(redirects).sum::<u64>() > after, "unrouted CL.ALL calls are redirected");

    // Keys in different slots: refused before sending, with the hash-tag advice.
    let sent: u64 = cluster.nodes.iter().map(|n| n.command_calls("cl.all")).sum();
    match client.check_all(&[(&a, b"user1", 1), (&b, b"user2", 1)]).await {
        Err(e @ Error::CrossSlot { .. }) => assert!(e.to_string().contains("hash tag"), "{e}"),
        other => panic!("expected CrossSlot, got {other:?}"),
    }
    assert_eq!(cluster.nodes.iter().map(|n| n.command_calls("cl.all")).sum::<u64>(), sent, "nothing was sent");
}
