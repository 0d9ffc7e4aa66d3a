//! A late refund never over-admits (issue 27, item 1), against real servers (the module and the
//! Functions twin): a reservation takes a whole window and spends nothing; 1.1 s later another
//! client checks 150 times; the reservation is dropped (its refund sent); the other client
//! checks 150 more. With an unbounded refund the window admitted 200 (GCRA 208-225); every
//! refund the client sends is bounded (`HELD`), so it admits what the limit allows. An immediate
//! refund still gives the units back.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::time::Duration;

use harness::twin::{self, Form};
use harness::{Options, Server};
use redis_throttle_client::{Policy, Throttle};

fn twin_server() -> Server {
    let server = Server::with(Options::default().without_module());
    twin::load(&mut server.client(), Form::Library, &twin::shipped(Form::Library));
    server
}

async fn admitted(client: &Throttle, policy: &Policy, key: &str, n: usize) -> i64 {
    let mut count = 0;
    for _ in 0..n {
        if client.check(policy, key).await.unwrap().allowed() {
            count += 1;
        }
    }
    count
}

/// The attack on one policy: what the other client is admitted in total.
async fn attack(client: &Throttle, spec: &str, key: &str) -> i64 {
    let policy = Policy::parse(spec).unwrap();
    let reservation = client.reserve(&policy, key, 100, Duration::from_secs(3)).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let before = admitted(client, &policy, key, 150).await;
    reservation.finish().await;
    let after = admitted(client, &policy, key, 150).await;
    before + after
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_refund_never_over_admits_on_the_module_and_the_twin() {
    let (module, twin) = (Server::start(), twin_server());
    for server in [&module, &twin] {
        let client = Throttle::connect(&server.url()).await.unwrap();
        // (limit, the most the other client may be admitted in the ~0.1 s the attack lasts)
        for (spec, most) in
            [("100/s counter", 100), ("100/s window", 100), ("100/s burst 100", 115), ("100/s bucket burst 100", 115)]
        {
            let got = attack(&client, spec, spec).await;
            assert!(got <= most, "{spec} on {}: {got} admitted after a late refund (at most {most})", server.url());
            assert!(got >= 90, "{spec}: {got}: the limiter must still admit what it has regained");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immediate_refund_gives_the_units_back() {
    let (module, twin) = (Server::start(), twin_server());
    for server in [&module, &twin] {
        let client = Throttle::connect(&server.url()).await.unwrap();
        for spec in ["100/s counter", "100/s window", "100/m burst 100", "100/s bucket burst 100", "100/day quota"] {
            let policy = Policy::parse(spec).unwrap();
            let reservation = client.reserve(&policy, spec, 100, Duration::from_secs(3)).await.unwrap().unwrap();
            assert!(!client.check(&policy, spec).await.unwrap().allowed(), "{spec}: the reservation holds the limit");
            reservation.finish().await;
            let after = admitted(&client, &policy, spec, 100).await;
            assert!(after >= 99, "{spec} on {}: {after} admitted after an immediate refund", server.url());
        }
    }
}

/// Several rate limits taken at once (`CL.ALL`, as the HTTP layer takes a route's): each key's
/// bound is read in the same `MULTI`/`EXEC`; a refund at once gives every unit back, one after
/// the window closed gives nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_all_held_bounds_each_refund() {
    let (module, twin) = (Server::start(), twin_server());
    for server in [&module, &twin] {
        let client = Throttle::connect(&server.url()).await.unwrap();
        let (counter, gcra) = (Policy::parse("10/s counter").unwrap(), Policy::parse("10/s burst 10").unwrap());
        let calls = [(&counter, &b"{u}:c"[..], 10), (&gcra, &b"{u}:t"[..], 10)];
        let (d, held) = client.check_all_held(&calls).await.unwrap();
        assert!(d.allowed());
        assert!(held.iter().all(Option::is_some), "{held:?}");
        for ((policy, key, n), held) in calls.iter().zip(&held) {
            let back = client.refund_held(policy, key, *n, held.unwrap()).await.unwrap();
            assert!(back.remaining >= 9, "{policy} on {}: {back:?}", server.url());
        }
        // (GCRA's immediate refund gives back all but what rounding to the millisecond loses.)
        let calls = [(&counter, &b"{u}:c"[..], 5), (&gcra, &b"{u}:t"[..], 5)];
        let (d, held) = client.check_all_held(&calls).await.unwrap();
        assert!(d.allowed() && held.iter().all(Option::is_some), "{d:?} {held:?}");
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        for (policy, key, _) in &calls {
            assert_eq!(admitted(&client, policy, std::str::from_utf8(key).unwrap(), 10).await, 10);
        }
        for ((policy, key, n), held) in calls.iter().zip(&held) {
            client.refund_held(policy, key, *n, held.unwrap()).await.unwrap();
            assert!(
                !client.check(policy, key).await.unwrap().allowed(),
                "{policy} on {}: a late refund gave units back",
                server.url()
            );
        }
    }
}

/// The expiry task's refund is bounded too: a reservation of a whole `50/s` window expiring
/// after the window closed gives nothing back (its unbounded refund let 92-100 in one window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_reservation_gives_back_nothing_regained() {
    let (module, twin) = (Server::start(), twin_server());
    for server in [&module, &twin] {
        let client = Throttle::connect(&server.url()).await.unwrap();
        for spec in ["50/s counter", "50/s window", "50/s burst 50"] {
            let policy = Policy::parse(spec).unwrap();
            let reservation = client.reserve(&policy, spec, 50, Duration::from_millis(1_200)).await.unwrap().unwrap();
            tokio::time::sleep(Duration::from_millis(1_050)).await;
            let before = admitted(&client, &policy, spec, 100).await;
            // The expiry task sends its refund at 1.2 s, within the other client's window.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let after = admitted(&client, &policy, spec, 100).await;
            drop(reservation);
            let most = if spec.contains("burst") { 50 + 25 } else { 50 };
            assert!(
                before + after <= most,
                "{spec} on {}: {before} + {after} admitted around an expired reservation's refund",
                server.url()
            );
        }
    }
}
