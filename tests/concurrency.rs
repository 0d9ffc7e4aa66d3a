//! Many connections hammer the same limiters of every kind at once: the total admitted never
//! exceeds what each algorithm allows for the elapsed time, and never falls far below it.

mod harness;

use harness::{Server, throttle};
use std::time::{Duration, Instant};

const THREADS: usize = 8;
const RUN: Duration = Duration::from_secs(4);

/// A limiter, and the bounds on what it may admit over a span of `ms` milliseconds.
struct Limiter {
    call: &'static str,
    /// The most it may admit in `ms` (from the parameters), and the least a saturated
    /// limiter admits (the same formula with the time lost between windows).
    bounds: fn(f64) -> (f64, f64),
}

const LIMITERS: &[Limiter] = &[
    // Burst 10, then one per 10 ms: at most 10 + ⌊E / 10⌋ (+1 for the interval in progress).
    Limiter {
        call: "CL.THROTTLE conc:t 9 100 1000 MS",
        bounds: |e| (10.0 + (e / 10.0).floor() + 1.0, 10.0 + e / 10.0),
    },
    // At most 50 in any 500 ms: 50 per started span of 500 ms.
    Limiter { call: "CL.WINDOW conc:w 50 500 MS", bounds: |e| (50.0 * (e / 500.0).ceil(), 50.0 * (e / 500.0).floor()) },
    // Buckets of 50 ms count until their end leaves: no more than exact, at worst a bucket later.
    Limiter {
        call: "CL.WINDOW conc:wp 50 500 MS PRECISION 50",
        bounds: |e| (50.0 * (e / 500.0).ceil(), 50.0 * (e / 550.0).floor()),
    },
    // 20 tokens, 10 more every 100 ms: 20 + 10 per refill in the span.
    Limiter {
        call: "CL.BUCKET conc:b 20 10 100 MS",
        bounds: |e| (20.0 + 10.0 * ((e / 100.0).floor() + 1.0), 20.0 + 10.0 * (e / 100.0 - 1.0).floor()),
    },
    // 40 per window of 250 ms, each opened by the first call after the last closed.
    Limiter {
        call: "CL.COUNTER conc:c 40 250 MS",
        bounds: |e| (40.0 * ((e / 250.0).floor() + 1.0), 40.0 * (e / 250.0).floor()),
    },
];

#[test]
fn concurrent_clients_never_exceed_the_limit() {
    let server = Server::start();
    let start = Instant::now();
    let per_thread: Vec<(Vec<u64>, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                scope.spawn(move || {
                    let mut c = server.client();
                    let mut admitted = vec![0u64; LIMITERS.len()];
                    let mut calls = 0u64;
                    let mut i = t; // threads start on different limiters
                    while start.elapsed() < RUN {
                        let which = i % LIMITERS.len();
                        if throttle(&mut c, LIMITERS[which].call)[0] == 0 {
                            admitted[which] += 1;
                        }
                        calls += 1;
                        i += 1;
                    }
                    (admitted, calls)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let calls: u64 = per_thread.iter().map(|(_, n)| n).sum();
    eprintln!("{THREADS} connections, {calls} calls in {elapsed_ms:.0} ms");
    for (i, limiter) in LIMITERS.iter().enumerate() {
        let admitted: u64 = per_thread.iter().map(|(a, _)| a[i]).sum();
        let (most, least) = (limiter.bounds)(elapsed_ms);
        eprintln!("{:45} admitted {admitted:5}  bound {most:5.0}  saturated floor {least:5.0}", limiter.call);
        assert!(admitted as f64 <= most, "{}: admitted {admitted} > {most} in {elapsed_ms:.0} ms", limiter.call);
        assert!(
            admitted as f64 >= 0.85 * least,
            "{}: admitted only {admitted} of ~{least} in {elapsed_ms:.0} ms",
            limiter.call
        );
    }
    assert!(calls > 10 * LIMITERS.len() as u64 * 100, "the limiters were hammered: {calls} calls");
}
