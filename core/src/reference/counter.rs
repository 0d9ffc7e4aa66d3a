//! CL.COUNTER as a plain struct: a count and the instant its window closes (the key's
//! expiry; `closes_at` 0 and count 0 is no key).

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Model {
    pub count: i128,
    pub closes_at: i128,
}

impl Model {
    /// A call (a take, or a `debit`); only a call that writes changes the key.
    pub fn call(&mut self, now: i128, limit: i128, window: i128, q: i128, debit: bool) -> [i128; 5] {
        // Redis reclaims the key once the clock's millisecond is past its expiry (a clock
        // that steps back before then finds it again).
        if now.div_euclid(1_000_000) > super::ceil_ms(self.closes_at) {
            *self = Model::default();
        }
        let (reply, write) = self.decide(now, limit, window, q, debit);
        if let Some(m) = write {
            *self = m;
        }
        reply
    }

    /// The reply, and the key after the call if the call writes it.
    fn decide(&self, now: i128, limit: i128, window: i128, q: i128, debit: bool) -> ([i128; 5], Option<Model>) {
        // A stored close stands, however far ahead (no call moves it earlier).
        let open = Some(*self).filter(|m| m.closes_at > now);
        let count = open.map_or(0, |m| m.count);
        let reply = |limited: bool, count: i128, closes_at: Option<i128>, retry: i128| {
            let ttl = if count > 0 { closes_at.map_or(0, |at| at - now) } else { 0 };
            [limited as i128, limit, (limit - count).clamp(0, limit), retry, ttl]
        };
        let closes_at = open.map(|m| m.closes_at);
        let denied = |retry: i128| (reply(true, count, closes_at, retry), None);
        if q < 0 {
            let Some(open) = open else { return (reply(false, 0, None, -1), None) };
            let count = (open.count + q).max(0);
            let after = if count == 0 { Model::default() } else { Model { count, ..open } };
            return (reply(false, count, closes_at, -1), Some(after));
        }
        if debit && q > 0 {
            // Counted whatever the limit says, in the open window or a new one.
            let fitted = count + q <= limit;
            let closes_at = closes_at.unwrap_or(super::floor_ms(now) + window);
            let retry = if fitted || q > limit { -1 } else { closes_at - now };
            let after = Model { count: count + q, closes_at };
            return (reply(!fitted, count + q, Some(closes_at), retry), Some(after));
        }
        if q > limit {
            return denied(-1);
        }
        if count + q > limit {
            return denied(closes_at.map_or(0, |at| at - now));
        }
        if q == 0 {
            return (reply(false, count, closes_at, -1), None);
        }
        let closes_at = closes_at.unwrap_or(super::floor_ms(now) + window);
        let after = Model { count: count + q, closes_at };
        (reply(false, count + q, Some(closes_at), -1), Some(after))
    }
}
