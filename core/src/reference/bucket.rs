//! CL.BUCKET simulated refill by refill: `next_refill` is `None` while the bucket is full
//! (its clock stopped). `tokens` below zero is debt a debit left.

#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub capacity: i128,
    pub tokens_per_refill: i128,
    pub interval: i128,
    pub tokens: i128,
    pub next_refill: Option<i128>,
}

impl Model {
    pub fn new(capacity: i64, tokens: i64, interval: i64) -> Model {
        Model {
            capacity: capacity.into(),
            tokens_per_refill: tokens.into(),
            interval: interval.into(),
            tokens: capacity.into(),
            next_refill: None,
        }
    }

    /// Applies every refill due by `now` (one at a time), stopping the clock when full.
    /// (Time only moves forward here: a clock stepping back is checked by invariants.)
    fn advance(&mut self, now: i128) {
        while let Some(at) = self.next_refill.filter(|&at| at <= now) {
            self.tokens = (self.tokens + self.tokens_per_refill).min(self.capacity);
            self.next_refill = (self.tokens < self.capacity).then_some(at + self.interval);
        }
    }

    /// When the bucket will first hold at least `tokens`.
    fn when_holding(&self, tokens: i128, now: i128) -> i128 {
        let mut future = *self;
        let mut t = now;
        while future.tokens < tokens {
            t = future.next_refill.expect("a bucket short of tokens has a running clock");
            future.advance(t);
        }
        t
    }

    /// A draw of `q` tokens, or a `debit` of them (taken whatever the bucket holds).
    pub fn call(&mut self, now: i128, q: i128, debit: bool) -> [i128; 5] {
        self.advance(now);
        let cap = self.capacity;
        let reply = |m: &Model, limited: bool, retry: i128| {
            [limited as i128, cap, m.tokens.clamp(0, cap), retry, m.when_holding(cap, now) - now]
        };
        if q < 0 {
            self.tokens = (self.tokens - q).min(cap);
            if self.tokens == cap {
                self.next_refill = None;
            }
            return reply(self, false, -1);
        }
        if debit && q > 0 {
            let fitted = q <= self.tokens;
            if self.next_refill.is_none() {
                self.next_refill = Some(super::floor_ms(now) + self.interval);
            }
            self.tokens -= q;
            let retry = if fitted || q > cap { -1 } else { self.when_holding(q, now) - now };
            return reply(self, !fitted, retry);
        }
        if q > cap {
            return reply(self, true, -1);
        }
        if self.tokens < q {
            return reply(self, true, self.when_holding(q, now) - now);
        }
        if q > 0 && self.next_refill.is_none() {
            self.next_refill = Some(super::floor_ms(now) + self.interval);
        }
        self.tokens -= q;
        reply(self, false, -1)
    }
}
