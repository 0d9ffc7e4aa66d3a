//! CL.ACQUIRE and CL.RELEASE over a plain map of every lease, as the contract states them:
//! an expired lease simply no longer counts (when it is removed is the module's business).

use std::collections::BTreeMap;

/// Every lease: id → expiry (ns, on a whole millisecond).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Model {
    pub leases: BTreeMap<Vec<u8>, i128>,
}

impl Model {
    /// The live leases at `now`.
    pub fn live(&self, now: i128) -> BTreeMap<Vec<u8>, i128> {
        self.leases.iter().filter(|&(_, &e)| e > now).map(|(id, &e)| (id.clone(), e)).collect()
    }

    /// `[limited, limit, remaining, retry_after, reset_after]` in ns (`-1`: no retry time).
    pub fn acquire(&mut self, now: i128, limit: i128, lease: i128, id: &[u8]) -> [i128; 5] {
        self.leases = self.live(now);
        let mut expiries: Vec<i128> = self.leases.values().copied().collect();
        expiries.sort_unstable_by(|a, b| b.cmp(a));
        if !self.leases.contains_key(id) && expiries.len() as i128 >= limit {
            // Admitted again once all but limit − 1 leases have expired: at the limit-th latest.
            let frees = expiries[limit as usize - 1];
            return [1, limit, 0, frees - now, expiries[0] - now];
        }
        self.leases.insert(id.to_vec(), super::floor_ms(now) + lease);
        let latest = self.leases.values().copied().max().unwrap_or(now);
        [0, limit, (limit - self.leases.len() as i128).max(0), -1, latest - now]
    }

    /// Whether `id` held a live lease (now removed).
    pub fn release(&mut self, now: i128, id: &[u8]) -> bool {
        self.leases = self.live(now);
        self.leases.remove(id).is_some()
    }
}
