//! The local deadline of each lease, as pure functions of a monotonic clock: when a lease
//! must be treated as gone on this worker, how long an `extend` may wait for its reply,
//! and what the deadline watcher does to a lease now.
//!
//! The deadline is the moment the call that granted or last extended the lease was
//! *sent*, plus the lease length it asked for. Redis starts the lease no earlier than it
//! receives that call, so the local deadline passes before the lease ends in Redis (up to
//! the difference in clock rates). A handler cancelled at its deadline and stopped within
//! the grace period therefore overlaps another worker's run of the job by at most the
//! grace period, however long the worker is cut off from Redis.
//!
//! A claim that carries the request id of an earlier claim whose reply was lost on every
//! try gets that claim's leases back (Redis replays them): the call that granted them is
//! the earlier one, so their deadline counts from its first send
//! ([`crate::queue::Claimed::first_sent`]), not from the call that brought the reply.

use std::time::Duration;

use tokio::time::Instant;

/// A lease granted or extended by a call sent at `sent`, asking for `lease`.
pub(super) fn deadline(sent: Instant, lease: Duration) -> Instant {
    sent + lease
}

/// The leases of a claim whose call was sent at `sent`, asking for `lease`: from the
/// first send of the request they answer when that was earlier (`first_sent`, a replay
/// of a claim whose reply was lost), else from `sent`.
pub(super) fn claim_deadline(
    sent: Instant,
    first_sent: Option<Instant>,
    lease: Duration,
) -> Instant {
    deadline(first_sent.map_or(sent, |first| first.min(sent)), lease)
}

/// How long an `extend` sent at `now`, covering leases with these deadlines, may wait for
/// its reply: the time left before the earliest one. `None` when there is nothing to
/// renew or one of them has already passed (a reply cannot save it).
pub(super) fn extend_timeout(
    now: Instant,
    deadlines: impl IntoIterator<Item = Instant>,
) -> Option<Duration> {
    let earliest = deadlines.into_iter().min()?;
    (earliest > now).then(|| earliest - now)
}

/// What the deadline watcher does to one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// Nothing yet; look again at the given moment (`None`: nothing left to do).
    Wait(Option<Instant>),
    /// The deadline passed: the lease is lost, cancel the handler.
    Cancel,
    /// Cancelled `grace` ago and still running: abort the handler.
    Abort,
}

/// The watcher's step for a lease with `deadline` at `now`; `cancelled_at` is when its
/// handler was cancelled because the lease was lost (deadline or stale renewal), and
/// `running` whether the handler still runs.
pub(super) fn step(
    now: Instant,
    deadline: Instant,
    cancelled_at: Option<Instant>,
    running: bool,
    grace: Duration,
) -> Step {
    match cancelled_at {
        None if now >= deadline => Step::Cancel,
        None => Step::Wait(Some(deadline)),
        Some(_) if !running => Step::Wait(None),
        Some(at) if now >= at + grace => Step::Abort,
        Some(at) => Step::Wait(Some(at + grace)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_deadline_counts_from_the_send_time() {
        let t = Instant::now();
        assert_eq!(deadline(t, 1000 * MS), t + 1000 * MS);
    }

    #[test]
    fn a_replayed_claim_counts_from_its_first_send() {
        let first = Instant::now();
        let later = first + 1900 * MS;
        let lease = 3000 * MS;
        // Leases replayed by a later call end where the first send's would.
        assert_eq!(claim_deadline(later, Some(first), lease), first + lease);
        assert!(claim_deadline(later, Some(first), lease) < deadline(later, lease));
        // Leases the call made itself: from its own send.
        assert_eq!(claim_deadline(later, None, lease), later + lease);
        // Never later than the call's own send time gives.
        assert_eq!(claim_deadline(first, Some(later), lease), first + lease);
    }

    #[test]
    fn an_extend_waits_no_longer_than_the_earliest_deadline() {
        let t = Instant::now();
        let cases: &[(&[u64], Option<u64>)] = &[
            (&[], None),
            (&[3000], Some(3000)),
            (&[3000, 200, 900], Some(200)),
            (&[0], None),
            (&[500, 0], None),
        ];
        for (deadlines, want) in cases {
            let got = extend_timeout(t, deadlines.iter().map(|&d| t + Duration::from_millis(d)));
            assert_eq!(got, want.map(Duration::from_millis), "{deadlines:?}");
        }
        // Already past.
        assert_eq!(extend_timeout(t + 10 * MS, [t]), None);
    }

    #[test]
    fn the_watcher_cancels_at_the_deadline_and_aborts_after_the_grace() {
        let t = Instant::now();
        let grace = 100 * MS;
        let d = t + 1000 * MS;
        let cases = [
            (t, None, true, Step::Wait(Some(d))),
            (t + 999 * MS, None, true, Step::Wait(Some(d))),
            (d, None, true, Step::Cancel),
            (d + 5000 * MS, None, true, Step::Cancel),
            (d, Some(d), true, Step::Wait(Some(d + grace))),
            (d + 99 * MS, Some(d), true, Step::Wait(Some(d + grace))),
            (d + grace, Some(d), true, Step::Abort),
            (d + grace, Some(d), false, Step::Wait(None)),
            // Lost to a stale renewal before its deadline: the grace runs from then.
            (t + 10 * MS, Some(t), true, Step::Wait(Some(t + grace))),
            (t + grace, Some(t), true, Step::Abort),
        ];
        for (i, (now, cancelled, running, want)) in cases.into_iter().enumerate() {
            assert_eq!(step(now, d, cancelled, running, grace), want, "case {i}");
        }
    }
}
