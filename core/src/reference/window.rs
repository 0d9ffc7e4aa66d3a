//! CL.WINDOW with an explicit list of logged instants. `precision` switches the counting
//! rule to buckets.

#[derive(Debug, Default, Clone)]
pub struct Model {
    pub log: Vec<i128>,
}

impl Model {
    pub fn call(&mut self, now: i128, limit: i128, window: i128, precision: Option<i128>, q: i128) -> [i128; 5] {
        // When an action logged at `t` stops counting.
        let leaves = |t: i128| match precision {
            None => t + window,
            Some(p) => (t.div_euclid(p) + 1) * p + window,
        };
        // (Time only moves forward here: a clock stepping back is checked by invariants.)
        let counted: Vec<i128> = self.log.iter().copied().filter(|&t| leaves(t) > now).collect();
        let used = counted.len() as i128;
        let reply = |log: &[i128], limited: bool, used: i128, retry: i128| {
            let reset = log.last().map_or(0, |&t| (leaves(t) - now).max(0));
            [limited as i128, limit, (limit - used).clamp(0, limit), retry, if used > 0 { reset } else { 0 }]
        };
        if q < 0 {
            let drop = (-q).min(used) as usize;
            self.log.truncate(self.log.len() - drop);
            return reply(&self.log, false, used - drop as i128, -1);
        }
        if q > limit {
            return reply(&self.log, true, used, -1);
        }
        if used + q > limit {
            let retry = leaves(counted[(used + q - limit - 1) as usize]) - now;
            return reply(&self.log, true, used, retry);
        }
        let stamp = self.log.last().map_or(now, |&t| t.max(now));
        self.log.extend(std::iter::repeat_n(stamp, q as usize));
        reply(&self.log, false, used + q, -1)
    }
}
