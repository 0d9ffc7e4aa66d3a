//! CL.EACH as plainly as its contract: every limiter decided alone, by its own algorithm's
//! model, at the same instant, with the call's `DEBIT` or not; a key changes only when its own
//! limiter writes it, whatever the others decide.

use super::{counter, throttle};

/// One limiter of a call and its key, as its own model holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Limiter {
    /// CL.THROTTLE's parameters and the stored TAT (`None`: no key).
    Throttle { max_burst: i64, count: i64, period: i64, tat: Option<i64> },
    /// CL.COUNTER's parameters and its key.
    Counter { limit: i64, window: i64, key: counter::Model },
}

/// A call at `now` with one quantity per limiter (`debit`: the call's `DEBIT`): each limiter's
/// reply, `None` for one whose parameters the module must report as too large (then the call
/// is an error and nothing is written for any limiter).
pub fn call(limiters: &mut [Limiter], now: i64, quantities: &[i64], debit: bool) -> Option<Vec<[i128; 5]>> {
    // Decided on copies first: an error of one leaves every key as it was.
    let mut after = limiters.to_vec();
    let mut replies = Vec::with_capacity(limiters.len());
    for (limiter, &q) in after.iter_mut().zip(quantities) {
        let reply = match limiter {
            Limiter::Throttle { max_burst, count, period, tat } => {
                // The key is gone once its expiry (the TAT's millisecond) has passed.
                if tat.is_some_and(|t| i128::from(now).div_euclid(1_000_000) > super::ceil_ms(t.into())) {
                    *tat = None;
                }
                let (reply, write) = throttle::call(*tat, now, *max_burst, *count, *period, q, debit)?;
                match write {
                    None => {}
                    Some(None) => *tat = None,
                    Some(Some(t)) => *tat = Some(i64::try_from(t).ok()?),
                }
                reply
            }
            Limiter::Counter { limit, window, key } => {
                key.call(now.into(), (*limit).into(), (*window).into(), q.into(), debit)
            }
        };
        replies.push(reply);
    }
    limiters.clone_from_slice(&after);
    Some(replies)
}
