//! CL.COUNTER as a plain struct: a count and the instant its window closes.

#[derive(Debug, Clone, Copy, Default)]
pub struct Model {
    pub count: i128,
    pub closes_at: i128,
}

impl Model {
    /// A call; a peek (`q == 0`) changes nothing.
    pub fn call(&mut self, now: i128, limit: i128, window: i128, q: i128) -> [i128; 5] {
        // The key goes once its window has closed, whatever the call (Redis reclaims it).
        if self.closes_at <= now {
            *self = Model::default();
        }
        let mut m = *self;
        let reply = m.decide(now, limit, window, q);
        if q != 0 {
            *self = m;
        }
        reply
    }

    fn decide(&mut self, now: i128, limit: i128, window: i128, q: i128) -> [i128; 5] {
        if self.closes_at <= now {
            *self = Model::default();
        }
        // A window closing more than one window from now (a clock stepped back) closes then.
        self.closes_at = self.closes_at.min(super::ceil_ms(now) + window);
        let ttl = |m: &Model| if m.count > 0 { m.closes_at - now } else { 0 };
        let rem = |m: &Model| (limit - m.count).clamp(0, limit);
        if q < 0 {
            self.count = (self.count + q).max(0);
            return [0, limit, rem(self), -1, ttl(self)];
        }
        if q > limit {
            return [1, limit, rem(self), -1, ttl(self)];
        }
        if self.count + q > limit {
            return [1, limit, rem(self), self.closes_at - now, ttl(self)];
        }
        if q > 0 {
            if self.count == 0 {
                self.closes_at = super::ceil_ms(now) + window;
            }
            self.count += q;
        }
        [0, limit, rem(self), -1, ttl(self)]
    }
}
