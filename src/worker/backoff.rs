//! Waiting between attempts when Redis fails: capped exponential growth with jitter, so
//! a fleet of workers neither spins on a dead server nor reconnects in lockstep.

use std::time::Duration;

use rand::Rng;

/// Capped exponential delays with jitter. `next` grows the delay, `reset` starts over
/// after a success.
#[derive(Debug, Clone)]
pub struct RetryDelay {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl RetryDelay {
    pub fn new(initial: Duration, max: Duration) -> RetryDelay {
        let initial = initial.max(Duration::from_millis(1));
        RetryDelay {
            initial,
            max: max.max(initial),
            failures: 0,
        }
    }

    /// The ceiling of the next delay: initial × 2^failures, capped at max.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32 << self.failures.min(30);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// The delay to wait now: uniformly between half the ceiling and the ceiling
    /// ("equal jitter"), never zero.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.failures = self.failures.saturating_add(1);
        let half = ceiling / 2;
        let spread = (ceiling - half).as_micros() as u64;
        let jitter = if spread == 0 {
            0
        } else {
            rand::rng().random_range(0..=spread)
        };
        (half + Duration::from_micros(jitter)).max(Duration::from_millis(1))
    }

    /// How many failures in a row were seen.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_then_stay_capped() {
        let mut d = RetryDelay::new(Duration::from_millis(100), Duration::from_secs(2));
        let ceilings: Vec<u64> = (0..8)
            .map(|_| {
                let c = d.ceiling();
                let got = d.next_delay();
                assert!(
                    got >= c / 2 && got <= c,
                    "{got:?} outside [{:?}, {c:?}]",
                    c / 2
                );
                c.as_millis() as u64
            })
            .collect();
        assert_eq!(ceilings, [100, 200, 400, 800, 1600, 2000, 2000, 2000]);
        assert_eq!(d.failures(), 8);
    }

    #[test]
    fn reset_starts_over() {
        let mut d = RetryDelay::new(Duration::from_millis(50), Duration::from_secs(1));
        for _ in 0..5 {
            d.next_delay();
        }
        d.reset();
        assert_eq!(d.ceiling(), Duration::from_millis(50));
    }

    #[test]
    fn never_zero_and_never_overflows() {
        let mut d = RetryDelay::new(Duration::ZERO, Duration::from_secs(3600));
        for _ in 0..200 {
            assert!(d.next_delay() > Duration::ZERO);
        }
        assert_eq!(d.ceiling(), Duration::from_secs(3600));
    }
}
