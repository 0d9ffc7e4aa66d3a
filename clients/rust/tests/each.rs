//! Several decisions in one call (for a gateway deciding many descriptors per request):
//! `check_each` decides each alone in one round trip per hash slot (one `CL.EACH` per slot, counted by each node's
//! commandstats), `check_all_slots` all or nothing across slots (an admitting slot's units are
//! given back when another refuses), on one server and on a 3-primary cluster.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use harness::{Cluster, Server};
use redis_throttle_client::{Config, Policy, Source, Throttle, Verdict};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decides_alone_and_all_slots_refund() {
    let server = Server::start();
    let client = Throttle::connect(&server.url()).await.unwrap();
    let (two, three) = (Policy::parse("2/m counter").unwrap(), Policy::parse("3/m window").unwrap());
    let calls = |q: i64| [(&two, b"e:a".as_slice(), q), (&three, b"e:b".as_slice(), q)];
    // Independent: the first refuses from its third call, the second keeps counting.
    for i in 0..4 {
        let d = client.check_each(&calls(1)).await.unwrap();
        assert_eq!(d[0].allowed(), i < 2, "call {i}");
        assert_eq!(d[1].allowed(), i < 3, "call {i}");
        // A denial the deny cache holds is answered without asking the server.
        assert!(d.iter().all(|d| d.source == Source::Server || (!d.allowed() && d.source == Source::DenyCache)));
    }
    // A peek takes nothing, a refund gives back.
    let peek = client.check_each(&calls(0)).await.unwrap();
    assert_eq!((peek[0].remaining, peek[1].remaining), (0, 0));
    let refund = client.check_each(&calls(-1)).await.unwrap();
    assert_eq!((refund[0].remaining, refund[1].remaining), (1, 1));

    let cluster = Cluster::start(3, 0);
    let conn = redis::cluster::ClusterClient::new(cluster.urls()).unwrap().get_async_connection().await.unwrap();
    let client = Throttle::from_cluster(conn, Config::default()).await.unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("k{i}")).collect();
    let slots: std::collections::HashSet<redis::cluster_routing::Slot> =
        keys.iter().map(|k| redis::cluster_routing::Slot::for_key(k.as_bytes())).collect();
    assert!(slots.len() > 3, "keys spread over slots");
    let one = Policy::parse("1/m counter").unwrap();
    let ten = Policy::parse("10/m counter").unwrap();
    // Each node is asked once per call of check_each, however many of its keys the call has.
    let before: u64 = cluster.nodes.iter().map(|n| n.command_calls("cl.counter")).sum();
    let calls: Vec<(&Policy, &[u8], i64)> = keys.iter().map(|k| (&ten, k.as_bytes(), 1)).collect();
    let d = client.check_each(&calls).await.unwrap();
    assert!(d.iter().all(|d| d.allowed() && d.remaining == 9));
    assert_eq!(cluster.nodes.iter().map(|n| n.command_calls("cl.counter")).sum::<u64>() - before, 12);
    // One slot's limiters are decided by CL.EACH, at most 16 a command: 20 take two.
    let tagged: Vec<String> = (0..20).map(|i| format!("{{u}}:k{i}")).collect();
    let calls: Vec<(&Policy, &[u8], i64)> = tagged.iter().map(|k| (&ten, k.as_bytes(), 1)).collect();
    let sum = |command: &str| cluster.nodes.iter().map(|n| n.command_calls(command)).sum::<u64>();
    let (each_before, counter_before) = (sum("cl.each"), sum("cl.counter"));
    let d = client.check_each(&calls).await.unwrap();
    assert!(d.iter().all(|d| d.allowed() && d.remaining == 9));
    assert_eq!((sum("cl.each") - each_before, sum("cl.counter") - counter_before), (2, 0));
    let d = client.check_each(&calls).await.unwrap();
    assert!(d.iter().all(|d| d.allowed() && d.remaining == 8), "each limiter counted once a call");

    // All or nothing across slots: "a" admits (10/m), "b" is spent (1/m) in another slot.
    let (a, b) = ("all:a", "all:b-0");
    assert_ne!(
        redis::cluster_routing::Slot::for_key(a.as_bytes()),
        redis::cluster_routing::Slot::for_key(b.as_bytes())
    );
    assert!(client.check(&one, b).await.unwrap().allowed());
    let d = client.check_all_slots(&[(&ten, a.as_bytes(), 1), (&one, b.as_bytes(), 1)]).await.unwrap();
    assert!(!d.allowed());
    assert_eq!(d.binding, 1);
    assert_eq!(d.each[0].verdict, Verdict::Allowed, "what the admitting limiter would have done");
    // Nothing stayed charged on "a": a peek sees it full.
    assert_eq!(client.peek(&ten, a).await.unwrap().remaining, 10);
    // And both admit together when both can.
    let d = client.check_all_slots(&[(&ten, a.as_bytes(), 1), (&ten, b"all:c".as_slice(), 1)]).await.unwrap();
    assert!(d.allowed() && d.each.len() == 2);
    assert_eq!(client.peek(&ten, a).await.unwrap().remaining, 9);
}
