//! Exponential backoff with a total budget, per region task.
//!
//! The schedule ([`Backoff::next_delay`]) is deterministic: it starts at
//! `base` and doubles to `max`. [`Backoff::sleep`] sleeps a jittered share
//! of each step ("equal jitter": between half and all of it), so tasks that
//! failed together do not retry in lockstep.

use std::time::{Duration, Instant};

use crate::{Error, Result};

pub struct Backoff {
    next: Duration,
    max: Duration,
    deadline: Instant,
    pub attempts: u32,
}

impl Backoff {
    /// Starts at `base`, doubles to `max`, never sleeps past `deadline`.
    pub fn new(base: Duration, max: Duration, deadline: Instant) -> Self {
        Backoff {
            next: base,
            max,
            deadline,
            attempts: 0,
        }
    }

    /// The next delay, or an error naming `what` when the budget is spent.
    pub fn next_delay(&mut self, what: &(dyn Fn() -> String + Send + Sync)) -> Result<Duration> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Error::Deadline(format!(
                "deadline exceeded after {} retries: {}",
                self.attempts,
                what()
            )));
        }
        let d = self.next.min(self.deadline - now);
        self.next = (self.next * 2).min(self.max);
        self.attempts += 1;
        Ok(d)
    }

    /// Advances the schedule by `n` steps without sleeping (a retry of
    /// work that already failed starts where it left off).
    pub fn skip(&mut self, n: u32) {
        for _ in 0..n.min(32) {
            self.next = (self.next * 2).min(self.max);
        }
        self.attempts += n;
    }

    pub async fn sleep(&mut self, what: &(dyn Fn() -> String + Send + Sync)) -> Result<()> {
        let d = self.next_delay(what)?;
        tokio::time::sleep(jitter(d)).await;
        Ok(())
    }
}

/// Between half of `d` and all of it, uniformly.
fn jitter(d: Duration) -> Duration {
    let half = d / 2;
    half + half.mul_f64(fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap_and_stops_at_the_deadline() {
        let mut b = Backoff::new(
            Duration::from_millis(2),
            Duration::from_millis(10),
            Instant::now() + Duration::from_secs(60),
        );
        let d: Vec<u128> = (0..5)
            .map(|_| b.next_delay(&|| String::new()).unwrap().as_millis())
            .collect();
        assert_eq!(d, vec![2, 4, 8, 10, 10]);
        let mut b = Backoff::new(
            Duration::from_millis(2),
            Duration::from_millis(10),
            Instant::now(),
        );
        let err = b.next_delay(&|| "region 7".into()).unwrap_err();
        assert!(err.to_string().contains("region 7"), "{err}");
    }

    #[test]
    fn skipped_steps_continue_the_schedule_and_jitter_stays_within_half() {
        let mut b = Backoff::new(
            Duration::from_millis(2),
            Duration::from_millis(10),
            Instant::now() + Duration::from_secs(60),
        );
        b.skip(2);
        assert_eq!(b.next_delay(&String::new).unwrap().as_millis(), 8);
        for _ in 0..100 {
            let j = jitter(Duration::from_millis(100));
            assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
        }
    }
}
