//! Many connections hammer the same limiters of every kind at once: the total admitted never
//! exceeds what each algorithm allows for the elapsed time, and never falls far below what it
//! allows for the time it was really hammered (a loaded machine stalls the clients: a span
//! in which nobody called a limiter is not held against it).

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
    let per_thread: Vec<(Vec<u64>, Vec<Vec<Instant>>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                scope.spawn(move || {
                    let mut c = server.client();
                    let mut admitted = vec![0u64; LIMITERS.len()];
                    let mut calls = vec![Vec::new(); LIMITERS.len()];
                    let mut i = t; // threads start on different limiters
                    while start.elapsed() < RUN {
                        let which = i % LIMITERS.len();
                        calls[which].push(Instant::now());
                        if throttle(&mut c, LIMITERS[which].call)[0] == 0 {
                            admitted[which] += 1;
                        }
                        i += 1;
                    }
                    (admitted, calls)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let elapsed_ms = start.elapsed().as_secs_f64() * 1000.0;
    let calls: usize = per_thread.iter().flat_map(|(_, c)| c).map(Vec::len).sum();
    eprintln!("{THREADS} connections, {calls} calls in {elapsed_ms:.0} ms");
    for (i, limiter) in LIMITERS.iter().enumerate() {
        let admitted: u64 = per_thread.iter().map(|(a, _)| a[i]).sum();
        let (most, _) = (limiter.bounds)(elapsed_ms);
        // The floor counts only the time the limiter was hammered: the run less every span
        // of more than 20 ms in which no client called it (the machine stalled them).
        let mut instants: Vec<Instant> = per_thread.iter().flat_map(|(_, c)| c[i].iter().copied()).collect();
        instants.sort();
        let stalled: f64 = instants
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1000.0)
            .filter(|&gap| gap > 20.0)
            .fold(0.0, |sum, gap| sum + gap);
        let (_, least) = (limiter.bounds)(elapsed_ms - stalled);
        eprintln!(
            "{:45} admitted {admitted:5}  bound {most:5.0}  saturated floor {least:5.0} (stalled {stalled:.0} ms)",
            limiter.call
        );
        assert!(admitted as f64 <= most, "{}: admitted {admitted} > {most} in {elapsed_ms:.0} ms", limiter.call);
        assert!(
            admitted as f64 >= 0.85 * least,
            "{}: admitted only {admitted} of ~{least} in {elapsed_ms:.0} ms ({stalled:.0} ms stalled)",
            limiter.call
        );
    }
    assert!(calls > 10 * LIMITERS.len() * 100, "the limiters were hammered: {calls} calls");
}
