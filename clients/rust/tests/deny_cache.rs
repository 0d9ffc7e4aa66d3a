//! The deny cache against a real server: its memory is bounded in bytes, keys included (32 KiB
//! keys, measured with a counting allocator: the process's live heap, not the cache's own
//! accounting), and an operator's `DEL` of a denied key is seen only once the cache forgets
//! it (`forget_denial`, `clear_deny_cache`) or the denial's `retry_after` ends.

#[path = "../../../tests/harness/mod.rs"]
mod harness;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use harness::Server;
use redis_throttle_client::{Config, Policy, Source, Throttle};

/// Counts the bytes live on the heap.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

fn bytes(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s contract;
// the counter is only arithmetic on the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(bytes(layout.size()), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (through this allocator).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(bytes(layout.size()), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as `GlobalAlloc::realloc` requires, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(bytes(new_size) - bytes(layout.size()), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn key(i: u32) -> Vec<u8> {
    let mut key = format!("long:{i}:").into_bytes();
    key.resize(32 * 1024, b'x');
    key
}

/// Denies `keys` distinct 32 KiB keys through a client whose cache holds `budget` bytes: how
/// much the process's heap grew, and the cache's entries and bytes by its own count.
async fn fill(server: &Server, budget: usize, keys: u32) -> (isize, usize, usize) {
    let config = Config { deadline: Duration::from_secs(2), deny_cache_bytes: budget, ..Config::default() };
    let client = Throttle::connect_with(&server.url(), config).await.unwrap();
    let policy = Policy::parse("1/h").unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut server.client()).unwrap();
    // Warm the connection's buffers with keys of the same length.
    for i in 0..20 {
        client.check(&policy, key(1_000_000 + i)).await.unwrap();
    }
    client.clear_deny_cache();
    let before = LIVE.load(Ordering::SeqCst);
    let mut cached = 0;
    for i in 0..keys {
        let k = key(i);
        assert!(client.check(&policy, &k).await.unwrap().allowed());
        assert!(!client.check(&policy, &k).await.unwrap().allowed());
        cached += u32::from(client.check(&policy, &k).await.unwrap().source == Source::DenyCache);
    }
    assert_eq!(cached, keys, "each denial was answered from the cache right after it");
    let grown = LIVE.load(Ordering::SeqCst) - before;
    let mib = |b: f64| b / f64::from(1 << 20);
    eprintln!(
        "{keys} denied 32 KiB keys, budget {budget} bytes: the heap grew {:.2} MiB; the cache holds {} entries, {:.2} MiB by its count",
        mib(grown as f64),
        client.deny_cache_len(),
        mib(client.deny_cache_bytes() as f64)
    );
    (grown, client.deny_cache_len(), client.deny_cache_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deny_cache_is_bounded_in_bytes_with_long_keys() {
    let server = Server::start();
    let budget = 4 << 20;
    let keys = 800;
    // Bounded by entries only (as before the byte bound): the keys' bytes pile up.
    let (unbounded, entries, _) = fill(&server, usize::MAX, keys).await;
    assert_eq!(entries, keys as usize);
    assert!(unbounded > bytes(keys as usize * 32 * 1024), "the measurement sees the keys: {unbounded}");
    // Bounded by bytes.
    let (grown, entries, held) = fill(&server, budget, keys).await;
    assert!(entries * 32 * 1024 >= budget * 3 / 4, "the budget is used: {entries} entries");
    assert!(held <= budget + budget / 8, "{held} bytes by the cache's count");
    assert!(grown <= bytes(budget + budget / 4), "the heap grew {grown} bytes for a {budget}-byte cache");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_stays_denied_until_the_cache_forgets_it() {
    let server = Server::start();
    let client =
        Throttle::connect_with(&server.url(), Config { deadline: Duration::from_secs(2), ..Config::default() })
            .await
            .unwrap();
    let policy = Policy::parse("1/h").unwrap();
    for key in ["a", "b"] {
        assert!(client.check(&policy, key).await.unwrap().allowed());
        assert!(!client.check(&policy, key).await.unwrap().allowed());
    }
    // An operator resets both keys.
    let _: i64 = redis::cmd("DEL").arg("a").arg("b").query(&mut server.client()).unwrap();
    for key in ["a", "b"] {
        let d = client.check(&policy, key).await.unwrap();
        assert_eq!((d.allowed(), &d.source), (false, &Source::DenyCache), "the cache still denies a deleted key");
    }
    // One key forgotten: the server admits it.
    client.forget_denial(&policy, "a");
    let d = client.check(&policy, "a").await.unwrap();
    assert_eq!((d.allowed(), &d.source), (true, &Source::Server));
    assert_eq!(client.check(&policy, "b").await.unwrap().source, Source::DenyCache);
    // All forgotten.
    client.clear_deny_cache();
    assert_eq!(client.deny_cache_len(), 0);
    let d = client.check(&policy, "b").await.unwrap();
    assert_eq!((d.allowed(), &d.source), (true, &Source::Server));
}
