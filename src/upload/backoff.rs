//! Owns the delays between delivery attempts: exponential (base × 2^attempt) up to a cap,
//! with "full jitter" in the upper half, so a line of units that lost the collector at the
//! same moment do not all come back at the same second (AWS Architecture Blog, "Exponential
//! Backoff And Jitter", 2015).

use std::time::Duration;

/// Retry delays; pure (the caller supplies the random word), so tests are tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before retry number `attempt` (0 = the first retry): uniformly in
    /// [ceiling/2, ceiling], ceiling = min(cap, base × 2^attempt), drawn from `random`.
    pub fn delay(&self, attempt: u32, random: u64) -> Duration {
        let ceiling_ms = (self.base.as_millis() as u64)
            .saturating_mul(1u64 << attempt.min(32))
            .min(self.cap.as_millis() as u64);
        let half = ceiling_ms / 2;
        let span = ceiling_ms - half;
        let jitter = if span == 0 { 0 } else { random % (span + 1) };
        Duration::from_millis(half + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_within_the_jitter_band() {
        let b = Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
        };
        // (attempt, random, expected ms)
        let table: &[(u32, u64, u64)] = &[
            (0, 0, 250),
            (0, 250, 500),
            (1, 0, 500),
            (1, u64::MAX, 500 + u64::MAX % 501),
            (3, 0, 2000),
            (6, 0, 15_000),  // 32 s capped to 30 s
            (40, 0, 15_000), // no overflow far out
            (40, 15_000, 30_000),
        ];
        for &(attempt, random, ms) in table {
            assert_eq!(
                b.delay(attempt, random),
                Duration::from_millis(ms),
                "{attempt} {random}"
            );
        }
    }
}
