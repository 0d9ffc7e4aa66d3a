//! CL.WINDOW never admits more than its limit in any span of its window, whatever the
//! clients refund and whichever form (exact or `PRECISION`) each call uses: a refund gives
//! back the oldest live units, and a key written in one form is converted by a call of the
//! other. Checked against the actions that really happened (admitted, not refunded).

mod harness;

use harness::{Server, get_bytes, throttle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, on the clock the server reads too (same machine).
fn wall_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

#[test]
fn a_refund_gives_back_the_oldest_unit() {
    // The case: A at 0, B at 500 ms; A's work does not happen (refund at 550); C at
    // 560 is admitted. Refunding the newest entry (B's) let D in at 1010: B, C and D within
    // 510 ms against 2 per 1000 ms. Now A's entry goes, and D waits for B.
    let server = Server::start();
    let mut c = server.client();
    let w = "CL.WINDOW w 2 1000";
    let start = Instant::now();
    let at = |ms: u64| std::thread::sleep(Duration::from_millis(ms).saturating_sub(start.elapsed()));
    assert_eq!(throttle(&mut c, &format!("{w} 1 MS"))[..3], [0, 2, 1], "A");
    at(500);
    assert_eq!(throttle(&mut c, &format!("{w} 1 MS"))[..3], [0, 2, 0], "B");
    let before = get_bytes(&mut c, "w");
    at(550);
    let r = throttle(&mut c, &format!("{w} -1 MS"));
    assert_eq!(r[..3], [0, 2, 1], "A refunded");
    assert!((900..=1000).contains(&r[4]), "the newest unit (B's) stays: {r:?}");
    let after = get_bytes(&mut c, "w");
    assert_eq!(after.len(), before.len(), "a refund edits in place");
    assert_eq!(after[4..8], [1, 0, 0, 0], "head moved past A's entry");
    assert_eq!(after[8..], before[8..], "no entry rewritten");
    at(560);
    assert_eq!(throttle(&mut c, &format!("{w} 1 MS"))[..3], [0, 2, 0], "C");
    at(1010);
    let d = throttle(&mut c, &format!("{w} 1 MS"));
    assert_eq!(d[..3], [1, 2, 0], "D is denied until B leaves: {d:?}");
    assert!(start.elapsed() < Duration::from_millis(1450), "the test ran late; D's verdict proves nothing");
}

#[test]
fn a_ring_refund_gives_back_the_oldest_bucket_first() {
    let server = Server::start();
    let mut c = server.client();
    let w = "CL.WINDOW p 2 1000 PRECISION 100";
    let start = Instant::now();
    let at = |ms: u64| std::thread::sleep(Duration::from_millis(ms).saturating_sub(start.elapsed()));
    throttle(&mut c, &format!("{w} 1 MS"));
    at(500);
    throttle(&mut c, &format!("{w} 1 MS"));
    assert_eq!(throttle(&mut c, &format!("{w} -1 MS"))[..3], [0, 2, 1]);
    at(1150);
    // The first unit's bucket would have left by now, the second's not: the second stays.
    let r = throttle(&mut c, &format!("{w} 2 MS"));
    assert_eq!(r[..3], [1, 2, 1], "{r:?}");
    assert!(start.elapsed() < Duration::from_millis(1450), "the test ran late");
}

/// One admitted action that really happened: the wall-clock instants around the call that
/// admitted it (the server's instant lies between them).
#[derive(Clone, Copy)]
struct Action {
    sent: i64,
    answered: i64,
}

/// The most real actions that certainly fell within one span of `window_ms`: actions all
/// sent at or after some action's sending and answered less than a window after it.
fn most_in_one_window(actions: &mut [Action], window_ms: i64) -> usize {
    actions.sort_by_key(|a| a.sent);
    let window = window_ms * 1_000_000;
    (0..actions.len())
        .map(|i| {
            let start = actions[i].sent - 1_000; // a server instant may be truncated to µs
            actions[i..].iter().take_while(|a| a.sent < start + window).filter(|a| a.answered < start + window).count()
        })
        .max()
        .unwrap_or(0)
}

/// `CLIENTS` connections call the limiter (each call in the form `forms[i % forms.len()]`,
/// so a rolling deploy is several forms at once) for `RUN`. Every fourth unit a client is
/// admitted turns out not to happen: the client refunds it `REFUND_AFTER` later (its work
/// failed), while it still counts. Returns the real actions and the count of refunds.
fn hammer(server: &Server, forms: &[&str]) -> (Vec<Action>, usize) {
    const CLIENTS: usize = 16;
    const RUN: Duration = Duration::from_secs(3);
    const REFUND_AFTER: Duration = Duration::from_millis(200);
    let start = Instant::now();
    let per_client: Vec<(Vec<Action>, usize)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|client| {
                scope.spawn(move || {
                    let mut c = server.client();
                    let (mut real, mut refunds, mut admitted) = (Vec::new(), 0, 0usize);
                    let mut pending: std::collections::VecDeque<Instant> = Default::default();
                    let mut i = client;
                    while start.elapsed() < RUN {
                        let form = forms[i % forms.len()];
                        i += 1;
                        if pending.front().is_some_and(|due| due.elapsed() > Duration::ZERO) {
                            pending.pop_front();
                            assert_eq!(throttle(&mut c, &format!("{form} -1"))[0], 0);
                            refunds += 1;
                            continue;
                        }
                        let sent = wall_ns();
                        let r = throttle(&mut c, &format!("{form} 1"));
                        let answered = wall_ns();
                        if r[0] == 1 {
                            continue;
                        }
                        admitted += 1;
                        if admitted % 4 == 0 {
                            pending.push_back(Instant::now() + REFUND_AFTER);
                        } else {
                            real.push(Action { sent, answered });
                        }
                    }
                    // A unit whose refund is still pending did not happen either: it is not
                    // among the real actions, and the run's end stops the calls.
                    (real, refunds)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let refunds = per_client.iter().map(|(_, n)| n).sum();
    (per_client.into_iter().flat_map(|(real, _)| real).collect(), refunds)
}

/// Runs `hammer` and checks that no window ever held more than `limit` real actions, and
/// that the limiter was saturated (so the check is not vacuous).
fn never_more_than_the_limit(forms: &[&str], limit: usize, window_ms: i64) {
    let server = Server::start();
    let (mut real, refunds) = hammer(&server, forms);
    let most = most_in_one_window(&mut real, window_ms);
    eprintln!(
        "{forms:?}: {} real actions, {refunds} refunds, at most {most} in one window of {window_ms} ms",
        real.len()
    );
    assert!(most <= limit, "{most} real actions within {window_ms} ms against a limit of {limit}: {forms:?}");
    assert!(refunds > 20 && real.len() > 3 * limit, "the limiter was hammered: {} real, {refunds} refunds", real.len());
    assert!(most >= limit * 3 / 4, "the limiter was saturated: at most {most} in a window");
}

#[test]
fn refunding_clients_never_get_more_than_the_limit_exact() {
    never_more_than_the_limit(&["CL.WINDOW conc:w 50 500 MS"], 50, 500);
}

#[test]
fn refunding_clients_never_get_more_than_the_limit_with_precision() {
    never_more_than_the_limit(&["CL.WINDOW conc:p 50 500 MS PRECISION 50"], 50, 500);
}

#[test]
fn a_rolling_deploy_switching_precision_never_gets_more_than_the_limit() {
    // Half the calls (old deployment) exact, half (new one) with PRECISION, on one key.
    never_more_than_the_limit(&["CL.WINDOW conc:d 50 500 MS", "CL.WINDOW conc:d 50 500 MS PRECISION 50"], 50, 500);
}

#[test]
fn adding_and_removing_precision_converts_a_live_key() {
    let server = Server::start();
    let mut c = server.client();
    for _ in 0..3 {
        throttle(&mut c, "CL.WINDOW w 5 10");
    }
    assert_eq!(get_bytes(&mut c, "w")[0], 1, "an exact log");
    // Adding PRECISION: every logged action counts in its bucket; a peek converts nothing.
    assert_eq!(throttle(&mut c, "CL.WINDOW w 5 10 0 PRECISION 1")[..3], [0, 5, 2]);
    assert_eq!(get_bytes(&mut c, "w")[0], 1, "a peek writes nothing");
    assert_eq!(throttle(&mut c, "CL.WINDOW w 5 10 PRECISION 1")[..3], [0, 5, 1]);
    assert_eq!(get_bytes(&mut c, "w")[0], 2, "stored as buckets");
    // Removing it: every unit becomes an entry, none lost.
    assert_eq!(throttle(&mut c, "CL.WINDOW w 5 10")[..3], [0, 5, 0]);
    let log = get_bytes(&mut c, "w");
    assert_eq!((log[0], log.len()), (1, 8 + 5 * 8), "an exact log of five entries");
    let r = throttle(&mut c, "CL.WINDOW w 5 10");
    assert!(r[..3] == [1, 5, 0] && r[3] <= 10 && r[4] <= 10, "{r:?}");
    // A ring holding more than an exact log's limit keeps only the newest `limit + 1` units:
    // over its limit, a peek is refused too (as on the ring), and converts nothing either.
    throttle(&mut c, "CL.WINDOW big 1000000 60 5000 PRECISION 1");
    let r = throttle(&mut c, "CL.WINDOW big 3 60");
    assert!(r[..3] == [1, 3, 0] && r[3] <= 60, "{r:?}");
    assert_eq!(throttle(&mut c, "CL.WINDOW big 3 60 0")[..3], [1, 3, 0], "a peek over the limit is refused");
    assert_eq!(get_bytes(&mut c, "big")[0], 2);
}
