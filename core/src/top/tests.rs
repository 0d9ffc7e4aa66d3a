use std::collections::HashMap;

use super::*;
use proptest::prelude::*;

fn sketch() -> Box<Sketch> {
    Box::new(Sketch::new())
}

/// Checks every guarantee the module documents against the exact counts of the stream.
fn check_bounds(s: &Sketch, exact: &HashMap<Vec<u8>, u64>) {
    let n: u64 = exact.values().sum();
    assert_eq!(s.total(), n);
    let all = s.top(SLOTS);
    assert_eq!(all.len(), s.tracked());
    assert_eq!(all.iter().map(|e| e.count).sum::<u64>(), n, "the counts sum to the denials recorded");
    let bound = s.error_bound();
    assert!(bound * SLOTS as u64 <= n, "the smallest count is at most N / SLOTS");
    for e in &all {
        let truth = exact.get(e.key).copied().unwrap_or(0);
        assert!(truth <= e.count, "{:?}: {} under its true {}", e.key, e.count, truth);
        assert!(e.count - e.error <= truth, "{:?}: count {} − error {} over {}", e.key, e.count, e.error, truth);
        assert!(
            e.error <= bound.max(if s.tracked() < SLOTS { 0 } else { n / SLOTS as u64 }),
            "error {} above the bound {}",
            e.error,
            bound
        );
        assert!(e.count <= truth + n / SLOTS as u64, "{:?}: {} more than N/SLOTS over {}", e.key, e.count, truth);
    }
    for (key, &count) in exact {
        if count > n / SLOTS as u64 {
            assert!(all.iter().any(|e| e.key == key.as_slice()), "{key:?} denied {count} > N/SLOTS times is tracked");
        }
    }
    for pair in all.windows(2) {
        assert!(pair[0].count >= pair[1].count, "highest first");
    }
}

#[test]
fn counts_are_exact_while_every_key_fits() {
    let mut s = sketch();
    let mut exact = HashMap::new();
    for i in 0..5_000u64 {
        let key = format!("user:{}", (i * 7919) % 900).into_bytes();
        s.record(&key);
        *exact.entry(key).or_insert(0) += 1;
    }
    assert_eq!(s.error_bound(), 0);
    for e in s.top(SLOTS) {
        assert_eq!((e.count, e.error), (exact[e.key], 0));
    }
    check_bounds(&s, &exact);
}

/// A Zipf stream (s = 1.1) over 50,000 keys: the heavy keys come out first with their
/// counts within the bound.
#[test]
fn a_skewed_stream_keeps_the_bound() {
    let keys = 50_000usize;
    let weights: Vec<f64> = (1..=keys).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut cumulative = Vec::with_capacity(keys);
    let mut acc = 0.0;
    for w in &weights {
        acc += w / total;
        cumulative.push(acc);
    }
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut s = sketch();
    s.seed(42);
    let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
    for _ in 0..300_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let u = (rng >> 11) as f64 / (1u64 << 53) as f64;
        let rank = cumulative.partition_point(|&c| c < u).min(keys - 1);
        let key = format!("rl:{{tenant}}:user:{rank}").into_bytes();
        s.record(&key);
        *exact.entry(key).or_insert(0) += 1;
    }
    check_bounds(&s, &exact);
    let mut truth: Vec<(&Vec<u8>, &u64)> = exact.iter().collect();
    truth.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let top = s.top(10);
    // The ten heaviest keys are far above the bound: reported exactly in order.
    assert!(*truth[9].1 > 4 * s.error_bound());
    assert_eq!(
        top.iter().map(|e| e.key).collect::<Vec<_>>(),
        truth[..10].iter().map(|(k, _)| k.as_slice()).collect::<Vec<_>>()
    );
}

#[test]
fn long_keys_are_tracked_by_their_prefix_and_reset_forgets() {
    let mut s = sketch();
    let long = |tail: u8| [vec![b'k'; KEY_BYTES], vec![tail; 10]].concat();
    s.record(&long(1));
    s.record(&long(2));
    s.record(b"");
    let top = s.top(5);
    assert_eq!(top[0], Entry { key: &long(1)[..KEY_BYTES], count: 2, error: 0 });
    assert_eq!(top[1], Entry { key: b"", count: 1, error: 0 });
    s.reset();
    assert_eq!((s.top(5), s.total(), s.tracked()), (vec![], 0, 0));
    s.record(b"again");
    assert_eq!(s.top(5), vec![Entry { key: b"again", count: 1, error: 0 }]);
}

#[test]
fn cl_top_parses_its_arguments() {
    let parse = |words: &[&[u8]]| Request::parse(words);
    assert_eq!(parse(&[]), Ok(Request { count: DEFAULT_COUNT, reset: false }));
    assert_eq!(parse(&[b"5", b"reset"]), Ok(Request { count: 5, reset: true }));
    assert_eq!(parse(&[b"RESET", b"1024"]), Ok(Request { count: 1024, reset: true }));
    assert_eq!(parse(&[b"0"]).unwrap_err().to_string(), "ERR count must be an integer from 1 to 1024");
    assert_eq!(parse(&[b"1025"]).unwrap_err().to_string(), "ERR count must be an integer from 1 to 1024");
    assert_eq!(parse(&[b"-1"]).unwrap_err().to_string(), "ERR count must be an integer from 1 to 1024");
    assert_eq!(parse(&[b"1.5"]), Err(Error::NotAnInteger));
    assert_eq!(parse(&[b"TOP"]), Err(Error::Syntax));
    assert_eq!(parse(&[b"5", b"6"]), Err(Error::Syntax));
    assert_eq!(parse(&[b"5", b"RESET", b"x"]), Err(Error::WrongArity("cl.top")));
    assert_eq!(COMMAND.arity(), -1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any stream over any alphabet (few keys, many keys, long keys) keeps every bound.
    #[test]
    fn any_stream_keeps_the_bounds(
        alphabet in 1usize..5_000, len in 0usize..20_000, seed in any::<u64>(), wide in any::<bool>(),
    ) {
        let mut s = sketch();
        s.seed(seed);
        let mut exact: HashMap<Vec<u8>, u64> = HashMap::new();
        let mut rng = seed | 1;
        for _ in 0..len {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            // Squaring skews the draw towards small ranks.
            let r = ((rng % alphabet as u64).pow(2) / alphabet as u64) as usize;
            let key = if wide { format!("{r}:{}", "x".repeat(r % 200)) } else { r.to_string() }.into_bytes();
            let kept = key[..key.len().min(KEY_BYTES)].to_vec();
            s.record(&key);
            *exact.entry(kept).or_insert(0) += 1;
        }
        check_bounds(&s, &exact);
    }
}
