//! Leases and reservations against the module. Leases: a dropped guard releases, one leaked by
//! a holder that dies frees at its lease, one leaked with `mem::forget` in a live process frees
//! within `Config::lease_max_hold`, a renewing one survives 10× its lease, a guard whose renewals
//! cannot be sent knows it may have lost its slot, and 32 concurrent tasks never
//! hold more than the limit. Reservations: the server's own count never exceeds the limit while
//! 64 tasks spend them, and unused units go back.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use harness::Server;
use redis_throttle_client::{BreakerConfig, Config, Policy, Throttle};

/// Resumes a paused server even when the test fails (so its drop can stop it).
struct Resume(u32);
impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, libc::SIGCONT);
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill(2) only sends a signal to the server process this test started; it touches
    // no memory of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

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
    let client =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
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
async fn a_guard_leaked_in_a_live_process_frees_its_slot_within_the_max_hold() {
    let server = Server::start();
    let max_hold = Duration::from_millis(600);
    let lease = Duration::from_millis(150);
    let config = Config { deadline: Duration::from_secs(2), lease_max_hold: max_hold, ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let other = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
        .await
        .unwrap();

    let start = std::time::Instant::now();
    std::mem::forget(client.acquire("leaked", 1, lease).await.unwrap().unwrap());
    // Renewed past its lease while the hold lasts (the runtime, and so the task, lives on).
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(holders(&server, "leaked"), 1, "renewed within the hold");
    loop {
        if other.acquire("leaked", 1, Duration::from_secs(5)).await.unwrap().is_ok() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the leaked guard still holds its slot after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let freed = start.elapsed();
    eprintln!("the leaked guard's slot was free after {freed:?} (max hold {max_hold:?}, lease {lease:?})");
    assert!(freed >= max_hold, "{freed:?}");
    assert!(freed <= max_hold + lease + Duration::from_millis(200), "{freed:?}");

    // A guard that shows signs of life (`extend`) is renewed past the max hold.
    let held = client.acquire("extended", 1, lease).await.unwrap().unwrap();
    for _ in 0..8 {
        held.extend(Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(!held.is_lost());
    }
    assert_eq!(holders(&server, "extended"), 1, "held 1.2 s, twice the max hold");
    assert!(other.acquire("extended", 1, lease).await.unwrap().is_err());
    // Left alone, it stops being renewed and says so.
    tokio::time::sleep(Duration::from_millis(300) + lease + Duration::from_millis(100)).await;
    assert!(held.is_lost());
    assert!(other.acquire("extended", 1, lease).await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_whose_renewals_cannot_be_sent_knows_it_may_have_lost_its_slot() {
    let server = Server::start();
    // The holder's breaker opens on one failure and probes only after 10 s: its renewals are
    // not sent meanwhile.
    let config = Config {
        deadline: Duration::from_millis(30),
        breaker: BreakerConfig { failures: 1, probe_interval: Duration::from_secs(10) },
        // A renewal unanswered within its deadline is the server's failure at once.
        server_timeout: Duration::from_millis(30),
        ..Config::default()
    };
    let holder = Throttle::connect_with(&server.url(), config).await.unwrap();
    let other = Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
        .await
        .unwrap();
    let lease = Duration::from_millis(300);
    let guard = holder.acquire("solo", 1, lease).await.unwrap().unwrap();
    assert!(!guard.is_lost());
    assert!(guard.held_until() > std::time::Instant::now());

    let pid = server.pid();
    signal(pid, libc::SIGSTOP);
    let resume = Resume(pid);
    // The renewal at 100 ms gets no answer within its deadline: the breaker opens.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(resume);
    assert!(holder.is_degraded(), "the holder's breaker is open");
    // Once the other client has taken the only slot, the first guard says it may be lost.
    let start = std::time::Instant::now();
    loop {
        let taken = other.acquire("solo", 1, Duration::from_secs(5)).await.unwrap();
        if let Ok(taken) = taken {
            assert!(guard.is_lost(), "another client holds the slot and the first guard says is_lost() == false");
            assert!(guard.held_until() <= std::time::Instant::now());
            drop(taken);
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(3), "the unrenewed lease never ran out");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_the_limit() {
    let server = Server::start();
    let client =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let (held, most, acquired) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
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
    let client =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let policy = Policy::parse("1000/h counter").unwrap();
    let admitted = Arc::new(AtomicI64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..64 {
        let (client, admitted) = (client.clone(), admitted.clone());
        tasks.spawn(async move {
            for _ in 0..5 {
                let Ok(reservation) = client.reserve(&policy, "hot", 10, Duration::from_secs(5)).await.unwrap() else {
                    continue;
                };
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
    let count =
        || -> i64 { redis::cmd("GET").arg("hot").query::<Option<i64>>(&mut server.client()).unwrap().unwrap_or(0) };
    // Unused units go back: the server's count settles at what was spent.
    let spent = admitted.load(Ordering::SeqCst);
    wait_for("unused units to go back", || count() == spent).await;
    assert!(spent <= 1000 && spent > 0, "{spent}");

    // A reservation that expires returns what is left.
    let r = client.reserve(&policy, "exp", 10, Duration::from_millis(100)).await.unwrap().unwrap();
    assert!(r.take());
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!r.take(), "expired");
    wait_for("the expired reservation's refund", || {
        redis::cmd("GET").arg("exp").query::<Option<i64>>(&mut server.client()).unwrap() == Some(1)
    })
    .await;
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
