//! Leases and reservations against the module. Leases: a dropped guard releases, one leaked by
//! a holder that dies frees at its lease, a renewing one survives 10× its lease, and 32 concurrent tasks never
//! hold more than the limit. Reservations: the server's own count never exceeds the limit while
//! 64 tasks spend them, and unused units go back.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use harness::Server;
use redis_throttle_client::{Config, Policy, Throttle};

fn holders(server: &Server, key: &str) -> i64 {
    let now: i64 = harness::server_ms(&mut server.client());
    redis::cmd("ZCOUNT").arg(key).arg(format!("({now}")).arg("+inf").query(&mut server.client()).unwrap()
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    for _ in 0..200 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn join_all(mut tasks: tokio::task::JoinSet<()>) {
    while let Some(r) = tasks.join_next().await {
        r.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_guards_release_renew_and_expire() {
    let server = Server::start();
    let config = Config { deadline: Duration::from_secs(2), ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();

    // Dropped: released.
    let lease = client.acquire("jobs", 1, Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(holders(&server, "jobs"), 1);
    assert!(client.acquire("jobs", 1, Duration::from_secs(60)).await.unwrap().is_err(), "the only slot is held");
    drop(lease);
    wait_for("the dropped lease's release", || holders(&server, "jobs") == 0).await;
    // Released explicitly.
    let lease = client.acquire("jobs", 1, Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(lease.release().await.unwrap());

    // Renewing: survives ten times its lease.
    let lease = client.acquire("long", 1, Duration::from_millis(150)).await.unwrap().unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert_eq!(holders(&server, "long"), 1, "renewed in the background");
        assert!(client.acquire("long", 1, Duration::from_millis(150)).await.unwrap().is_err());
        assert!(!lease.is_lost());
    }
    drop(lease);
    wait_for("the renewed lease's release", || holders(&server, "long") == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holder_frees_its_slot_at_its_lease() {
    let server = Server::start();
    let client = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() }).await.unwrap();
    // A holder that takes a slot, leaks the guard and dies: its runtime (and so its renewal
    // task) goes away without a release.
    {
        let url = server.url();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async {
                let other = Throttle::connect(&url).await.unwrap();
                let lease = other.acquire("crash", 1, Duration::from_millis(300)).await.unwrap().unwrap();
                std::mem::forget(lease);
            });
        })
        .join()
        .unwrap();
    }
    assert_eq!(holders(&server, "crash"), 1);
    let start = std::time::Instant::now();
    loop {
        if client.acquire("crash", 1, Duration::from_secs(5)).await.unwrap().is_ok() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(2), "the leaked lease never freed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(start.elapsed() <= Duration::from_millis(400), "freed at its lease, after {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_the_limit() {
    let server = Server::start();
    let client = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() }).await.unwrap();
    let (held, most, acquired) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..32 {
        let (client, held, most, acquired) = (client.clone(), held.clone(), most.clone(), acquired.clone());
        tasks.spawn(async move {
            for _ in 0..15 {
                if let Ok(lease) = client.acquire("pool", 4, Duration::from_secs(5)).await.unwrap() {
                    let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    acquired.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    held.fetch_sub(1, Ordering::SeqCst);
                    lease.release().await.unwrap();
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        });
    }
    join_all(tasks).await;
    assert!(most.load(Ordering::SeqCst) <= 4, "{} holders at once", most.load(Ordering::SeqCst));
    assert!(acquired.load(Ordering::SeqCst) >= 20, "the slots were used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_never_admit_more_than_the_server_granted() {
    let server = Server::start();
    let client = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() }).await.unwrap();
    let policy = Policy::parse("1000/h counter").unwrap();
    let admitted = Arc::new(AtomicI64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..64 {
        let (client, admitted) = (client.clone(), admitted.clone());
        tasks.spawn(async move {
            for _ in 0..5 {
                let Ok(reservation) = client.reserve(&policy, "hot", 10, Duration::from_secs(5)).await.unwrap() else { continue };
                // Spend some of it (task-dependent), leave the rest to go back on drop.
                for _ in 0..(3 + t % 8) {
                    if reservation.take() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
    }
    join_all(tasks).await;
    let count = || -> i64 { redis::cmd("GET").arg("hot").query::<Option<i64>>(&mut server.client()).unwrap().unwrap_or(0) };
    // Unused units go back: the server's count settles at what was spent.
    let spent = admitted.load(Ordering::SeqCst);
    wait_for("unused units to go back", || count() == spent).await;
    assert!(spent <= 1000 && spent > 0, "{spent}");

    // A reservation that expires returns what is left.
    let r = client.reserve(&policy, "exp", 10, Duration::from_millis(100)).await.unwrap().unwrap();
    assert!(r.take());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!r.take(), "expired");
    wait_for("the expired reservation's refund", || redis::cmd("GET").arg("exp").query::<Option<i64>>(&mut server.client()).unwrap() == Some(1)).await;
    drop(r);
    // And a limit the reservations cannot overrun: 64 tasks on a limit of 100.
    let small = Policy::parse("100/h counter").unwrap();
    let admitted = Arc::new(AtomicI64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (client, admitted) = (client.clone(), admitted.clone());
        tasks.spawn(async move {
            for _ in 0..4 {
                if let Ok(r) = client.reserve(&small, "tight", 7, Duration::from_secs(5)).await.unwrap() {
                    while r.take() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        });
    }
    join_all(tasks).await;
    let server_count: i64 = redis::cmd("GET").arg("tight").query(&mut server.client()).unwrap();
    assert!(server_count <= 100, "{server_count}");
    assert_eq!(admitted.load(Ordering::SeqCst), server_count, "every unit admitted was granted by the server");
}
