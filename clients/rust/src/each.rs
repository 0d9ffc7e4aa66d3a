//! Several decisions in one call, for a caller that decides many limiters per request (a gateway
//! service): [`Throttle::check_each`] (independent decisions, one `CL.EACH` per hash slot) and
//! [`Throttle::check_all_slots`] (all or nothing, one `CL.ALL` per hash slot, slots in parallel).
//! Quantities are signed as the commands take them: positive takes, 0 peeks, negative refunds.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use redis::Value;
use redis::cluster_routing::Slot;

use crate::client::{Throttle, memory_decision, record};
use crate::decision::{Decision, Numbers, Reason, Source, Verdict};
use crate::error::{Error, Failed};
use crate::policy::Policy;
use crate::transport::{Conn, NOT_CONNECTED, send_pipe};
use crate::wire::{Backend, Call, each_command, five, single_command};

/// The most limiters one `CL.ALL` takes.
const MAX_ALL: usize = redis_throttle_core::all::MAX_KEYS;

/// Runs futures concurrently and returns their outputs in order (no extra crate for a join).
async fn join_all<T>(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(move |cx| {
        let mut pending = false;
        for (slot, fut) in out.iter_mut().zip(futures.iter_mut()) {
            if let Some(f) = fut {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *slot = Some(v);
                        *fut = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(out.iter_mut().map(|o| o.take().expect("every future finished")).collect())
        }
    })
    .await
}

/// The commands of one slot's pipeline: its calls in order, cut where the charge changes (a
/// debit or not: `DEBIT` is one word for a whole `CL.EACH`) and at `per_command` calls.
fn commands(group: &[usize], calls: &[Call<'_>], per_command: usize) -> Vec<Vec<usize>> {
    let debit = |j: usize| calls[j].0.debits() && calls[j].2 >= 0;
    let mut out: Vec<Vec<usize>> = Vec::new();
    for &j in group {
        match out.last_mut() {
            Some(last) if last.len() < per_command && debit(last[0]) == debit(j) => last.push(j),
            _ => out.push(vec![j]),
        }
    }
    out
}

/// Indices of `calls` grouped by hash slot (one group off a cluster), each group at most
/// `max` long, in first-seen order.
fn groups(calls: &[Call<'_>], cluster: bool, max: usize) -> Vec<Vec<usize>> {
    let mut out: Vec<(Option<Slot>, Vec<usize>)> = Vec::new();
    for (i, (_, key, _)) in calls.iter().enumerate() {
        let slot = cluster.then(|| Slot::for_key(key));
        match out.iter_mut().find(|(s, g)| *s == slot && g.len() < max) {
            Some((_, g)) => g.push(i),
            None => out.push((slot, vec![i])),
        }
    }
    out.into_iter().map(|(_, g)| g).collect()
}

impl Throttle {
    /// Decides each `(policy, key, quantity)` on its own, exactly as [`Throttle::check_n`],
    /// [`Throttle::peek`] (quantity 0) or [`Throttle::refund`] (negative) would, in one round
    /// trip per hash slot (slots in parallel): a decision per call, in order. With the module,
    /// one `CL.EACH` per slot (up to 16 limiters each, all decided at one instant; more make a
    /// pipeline of them); with the Functions twin, a pipeline of single calls. A policy that
    /// debits ([`Policy::debiting`]) charges its units, as [`Throttle::debit`] does; takes,
    /// peeks, refunds and debits mix freely (`DEBIT` being one word for a whole `CL.EACH`, a
    /// slot's consecutive debits share one, and its other calls another, in the calls' order).
    /// The deny cache answers a take it holds a denial for (never a debit); a slot that cannot
    /// answer within the deadline gets the failure policy's decisions.
    pub async fn check_each(&self, calls: &[(&Policy, &[u8], i64)]) -> Result<Vec<Decision>, Error> {
        if calls.len() == 1 {
            return Ok(vec![self.decide(calls, false).await?]);
        }
        let inner = &*self.inner;
        let Some(link) = inner.link.get() else {
            return calls
                .iter()
                .map(|c| self.fallback(std::slice::from_ref(c), false, Reason::Connection(NOT_CONNECTED.into())))
                .collect();
        };
        if let Conn::Memory(store, clock) = &link.conn {
            let mut store = store.lock().unwrap_or_else(|e| e.into_inner());
            let now = clock.now();
            return calls
                .iter()
                .map(|c| memory_decision(&mut store, std::slice::from_ref(c), now, false, Source::Server))
                .collect();
        }
        if link.backend == Backend::Twin
            && let Some((policy, zone)) = calls.iter().find_map(|(p, _, _)| p.named_zone().map(|z| (p, z)))
        {
            return Err(Error::Invalid(format!(
                "policy \"{policy}\" follows the time zone {zone}, but the server runs the Functions twin, which has no time zone database: give the quota a fixed offset (tz +01:00) or load the module"
            )));
        }
        let mut out: Vec<Option<Decision>> = vec![None; calls.len()];
        let now = std::time::Instant::now();
        let mut pending: Vec<Call<'_>> = Vec::with_capacity(calls.len());
        let mut pending_at: Vec<usize> = Vec::with_capacity(calls.len());
        for (i, &(policy, key, quantity)) in calls.iter().enumerate() {
            if quantity > 0
                && !policy.debits()
                && let Some(cache) = &inner.cache
                && let Some(numbers) = cache.lookup(&policy.params(), key, quantity, now)
            {
                out[i] = Some(Decision::new(numbers, Source::DenyCache));
                continue;
            }
            pending.push((policy, key, quantity));
            pending_at.push(i);
        }
        let cluster = link.conn.is_cluster();
        let slots = groups(&pending, cluster, usize::MAX);
        // The module decides up to 16 limiters of one slot in one CL.EACH (each group of a
        // slot's pipeline is one command); the twin, one call per limiter.
        let each = link.backend == Backend::Module;
        let per_command = if each { MAX_ALL } else { 1 };
        let sent = std::time::Instant::now();
        let sends: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = slots
            .iter()
            .map(|group| {
                let mut pipe = redis::pipe();
                pipe.ignore_errors();
                for part in commands(group, &pending, per_command) {
                    let calls: Vec<Call<'_>> = part.iter().map(|&j| pending[j]).collect();
                    match (each, &calls[..]) {
                        (true, [_, _, ..]) => pipe.add_command(each_command(&calls)),
                        (_, _) => {
                            for &(policy, key, quantity) in &calls {
                                pipe.add_command(single_command(link.backend, policy, key, quantity));
                            }
                            &mut pipe
                        }
                    };
                }
                let key = pending[group[0]].1;
                let fut: Pin<Box<dyn Future<Output = _> + Send + '_>> = Box::pin(async move {
                    let (result, _) = self.guarded(key, |conn| send_pipe(conn, pipe, key, false)).await;
                    result
                });
                fut
            })
            .collect();
        let replies = join_all(sends).await;
        for (group, reply) in slots.iter().zip(replies) {
            // A CL.EACH reply (an array of five-integer arrays) stands for its limiters' replies.
            let sizes: Vec<usize> = commands(group, &pending, per_command).iter().map(Vec::len).collect();
            let reply = reply.and_then(|value| flatten_each(value, &sizes, each));
            match reply {
                Ok(Value::Array(items)) if items.len() == group.len() => {
                    for (&j, item) in group.iter().zip(items) {
                        if let Value::ServerError(e) = item {
                            return Err(Error::Server(e.into()));
                        }
                        let decision = Decision::new(Numbers::from_reply(five(&item)?), Source::Server);
                        let (policy, key, quantity) = pending[j];
                        if let Some(cache) = &inner.cache {
                            if quantity > 0 {
                                cache.insert(&policy.params(), key, quantity, sent, &decision.numbers());
                            } else if quantity < 0 {
                                cache.forget(&policy.params(), key);
                            }
                        }
                        out[pending_at[j]] = Some(decision);
                    }
                }
                Ok(other) => return Err(Error::Invalid(format!("expected {} replies, got {other:?}", group.len()))),
                Err(Failed::Refused(e)) => return Err(Error::Server(e)),
                Err(Failed::Down(reason)) => {
                    for &j in group {
                        out[pending_at[j]] = Some(self.fallback(&pending[j..=j], false, reason.clone())?);
                    }
                }
            }
        }
        let decisions: Vec<Decision> = out.into_iter().map(|d| d.expect("every call decided")).collect();
        decisions.iter().for_each(record);
        Ok(decisions)
    }

    /// Decides every `(policy, key, quantity)` at once, all or nothing, wherever their keys
    /// live: one `CL.ALL` per hash slot (at most 16 limiters each; more make more calls), the
    /// calls in parallel. When every call admits, every limiter is charged; when one denies, the
    /// units the admitting calls took are given back at once (refunds bounded by `HELD`, never
    /// more than each still holds), so nothing stays charged. Between the two, a concurrent
    /// request may find those units taken: it can be refused, never admitted beyond a limit.
    /// The decision's `each` holds every limiter's numbers as its single command would have
    /// replied (as `CL.ALL … DETAILS` does), `binding` the index of the binding one.
    pub async fn check_all_slots(&self, calls: &[(&Policy, &[u8], i64)]) -> Result<Decision, Error> {
        crate::client::one_charge(calls)?;
        let cluster = self.is_cluster();
        let parts = groups(calls, cluster, MAX_ALL);
        if parts.len() <= 1 {
            return self.decide(calls, true).await;
        }
        let sends: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = parts
            .iter()
            .map(|group| {
                let part: Vec<Call<'_>> = group.iter().map(|&i| calls[i]).collect();
                let fut: Pin<Box<dyn Future<Output = _> + Send + '_>> =
                    Box::pin(async move { self.take_held(&part, true).await });
                fut
            })
            .collect();
        let results = join_all(sends).await;
        let mut decided = Vec::with_capacity(results.len());
        for r in results {
            decided.push(r);
        }
        let denied = decided.iter().any(|r| matches!(r, Ok((d, _)) if !d.allowed()));
        let failed = decided.iter().any(Result::is_err);
        // Debits are charges, never refused: nothing is given back when one overdrew.
        if (denied || failed) && !crate::client::debits(calls) {
            // Give back what the admitting parts took (and only that: their held instants).
            for (group, result) in parts.iter().zip(&decided) {
                if let Ok((d, held)) = result
                    && d.allowed()
                {
                    for (&i, held) in group.iter().zip(held) {
                        let (policy, key, quantity) = calls[i];
                        if let (true, Some(held)) = (quantity > 0, held) {
                            let refunded = u32::try_from(quantity).unwrap_or(u32::MAX);
                            if let Err(e) = self.refund_held(policy, key, refunded, *held).await {
                                tracing::warn!(error = %e, "redis-throttle: a refund after another slot's denial failed; those units stay taken until they expire");
                            }
                        }
                    }
                }
            }
        }
        let mut each: Vec<Option<Numbers>> = vec![None; calls.len()];
        let mut source = Source::Server;
        for (group, result) in parts.iter().zip(decided) {
            let (d, _) = result?;
            if d.is_degraded() {
                source = d.source.clone();
            }
            let numbers: Vec<Numbers> =
                if d.each.len() == group.len() { d.each.clone() } else { vec![d.numbers(); group.len()] };
            for (&i, n) in group.iter().zip(numbers) {
                each[i] = Some(n);
            }
        }
        let each: Vec<Numbers> = each.into_iter().map(|n| n.expect("every limiter decided")).collect();
        let binding = binding_of(&each, denied);
        let mut decision = Decision::new(each[binding], source);
        if denied && decision.allowed() {
            decision.verdict = Verdict::Denied { retry_after: std::time::Duration::ZERO };
        }
        decision.binding = binding;
        decision.each = each;
        Ok(decision)
    }
}

/// A slot's pipeline reply as one reply per limiter: each `CL.EACH` reply (of a part of
/// `per_command` limiters, the last maybe fewer; a part of one was a single command) replaced by
/// its limiters' five-integer arrays. An error reply of a CL.EACH stands for each of its limiters.
fn flatten_each(value: Value, sizes: &[usize], each: bool) -> Result<Value, Failed> {
    let Value::Array(commands) = value else { return Ok(value) };
    if !each {
        return Ok(Value::Array(commands));
    }
    let mut out = Vec::with_capacity(sizes.iter().sum());
    for (&size, reply) in sizes.iter().zip(commands) {
        match reply {
            Value::Array(replies) if size > 1 && replies.len() == size => out.extend(replies),
            Value::ServerError(e) if size > 1 => out.extend((0..size).map(|_| Value::ServerError(e.clone()))),
            single => out.push(single),
        }
    }
    Ok(Value::Array(out))
}

/// CL.ALL's rule: denied, the denying limiter with the longest wait (never counts as longest);
/// admitted, the one with the fewest remaining; the first of equals.
fn binding_of(each: &[Numbers], denied: bool) -> usize {
    let mut best = 0;
    for (i, n) in each.iter().enumerate() {
        let b = &each[best];
        let better = if denied {
            let wait = |v: &Verdict| match v {
                Verdict::Never => (2, std::time::Duration::ZERO),
                Verdict::Denied { retry_after } => (1, *retry_after),
                Verdict::Allowed => (0, std::time::Duration::ZERO),
            };
            wait(&n.verdict) > wait(&b.verdict)
        } else {
            n.remaining < b.remaining
        };
        if better {
            best = i;
        }
    }
    best
}
