//! A key's queue of waiting requests, in arrival order (DESIGN 4.0.1 and 5.1).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::OwnerId;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How long a queued waiter sleeps at most before it tries again, which keeps its place
/// (a place lapses after [`PLACE_TTL`] without a try).
pub(crate) const TURN_REFRESH: Duration = Duration::from_millis(500);

/// How long a place outlives its waiter's last try: a waiter that vanished without leaving
/// (its task stopped being polled, its runtime gone) keeps a free lock from the waiters
/// behind it this long at most.
pub(crate) const PLACE_TTL: Duration = Duration::from_secs(2);

/// The longest ttl a hand-off grants the next waiter with, until that waiter renews the grant
/// into its own ttl: a waiter that vanished holds a lock handed to it this long at most.
pub(crate) const HANDOFF_TTL: Duration = Duration::from_secs(2);

/// One waiting request.
#[derive(Debug)]
pub(crate) struct Place {
    pub(crate) waiter: OwnerId,
    /// The ttl its tries ask for, which a hand-off grants (capped at [`HANDOFF_TTL`]).
    pub(crate) ttl: Duration,
    /// When the place lapses unless the waiter tries again.
    pub(crate) lapses_at: Instant,
    /// Woken once, when the lock is handed to this waiter (or the backend closes).
    pub(crate) turn: Arc<Notify>,
}

impl Place {
    fn live(&self, now: Instant) -> bool {
        self.lapses_at > now
    }
}

/// The places of one key, first come first.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    places: VecDeque<Place>,
}

impl Queue {
    /// The first place that has not lapsed at `now`.
    pub(crate) fn head(&self, now: Instant) -> Option<&Place> {
        self.places.iter().find(|place| place.live(now))
    }

    /// The live places, first come first.
    pub(crate) fn live(&self, now: Instant) -> impl Iterator<Item = &Place> {
        self.places.iter().filter(move |place| place.live(now))
    }

    /// Drops the places that lapsed by `now`.
    pub(crate) fn forget_lapsed(&mut self, now: Instant) {
        self.places.retain(|place| place.live(now));
    }

    /// Keeps `waiter`'s place (adding it at the back if it has none) for another
    /// [`PLACE_TTL`] from `now`, asking for `ttl`.
    pub(crate) fn keep(&mut self, waiter: OwnerId, ttl: Duration, now: Instant) {
        let lapses_at = now + PLACE_TTL;
        match self.places.iter_mut().find(|place| place.waiter == waiter) {
            Some(place) => {
                place.ttl = ttl;
                place.lapses_at = lapses_at;
            }
            None => self.places.push_back(Place {
                waiter,
                ttl,
                lapses_at,
                turn: Arc::new(Notify::new()),
            }),
        }
    }

    /// The wake-up of `waiter`'s live place, and when the place lapses.
    pub(crate) fn turn_of(&self, waiter: OwnerId, now: Instant) -> Option<(Arc<Notify>, Instant)> {
        self.live(now)
            .find(|place| place.waiter == waiter)
            .map(|place| (place.turn.clone(), place.lapses_at))
    }

    /// Takes `waiter`'s place out of the queue; whether it had one.
    pub(crate) fn remove(&mut self, waiter: OwnerId) -> bool {
        let before = self.places.len();
        self.places.retain(|place| place.waiter != waiter);
        self.places.len() != before
    }

    /// Takes the first live place out of the queue, forgetting lapsed ones before it.
    pub(crate) fn pop_head(&mut self, now: Instant) -> Option<Place> {
        while let Some(place) = self.places.pop_front() {
            if place.live(now) {
                return Some(place);
            }
        }
        None
    }

    /// Puts a place taken by [`pop_head`](Self::pop_head) back at the head.
    pub(crate) fn put_back(&mut self, place: Place) {
        self.places.push_front(place);
    }

    /// Wakes every waiter (the backend closed).
    pub(crate) fn wake_all(&self) {
        for place in &self.places {
            place.turn.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter() -> OwnerId {
        OwnerId::random()
    }

    #[tokio::test(start_paused = true)]
    async fn places_keep_their_arrival_and_lapse_without_a_try() {
        let mut queue = Queue::default();
        let (a, b) = (waiter(), waiter());
        let now = Instant::now();
        queue.keep(a, Duration::from_secs(1), now);
        queue.keep(b, Duration::from_secs(1), now);
        // A later try of `b` refreshes its place and keeps it behind `a`.
        queue.keep(b, Duration::from_secs(3), now + PLACE_TTL / 2);
        assert_eq!(queue.head(now).map(|p| p.waiter), Some(a));
        // `a` lapses, `b` does not.
        let later = now + PLACE_TTL;
        assert_eq!(
            queue.head(later).map(|p| (p.waiter, p.ttl)),
            Some((b, Duration::from_secs(3)))
        );
        assert!(queue.turn_of(a, later).is_none());
        let popped = queue.pop_head(later).map(|p| p.waiter);
        assert_eq!(popped, Some(b));
        assert!(queue.head(later).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_place_is_gone_and_the_next_one_heads() {
        let mut queue = Queue::default();
        let (a, b) = (waiter(), waiter());
        let now = Instant::now();
        queue.keep(a, Duration::from_secs(1), now);
        queue.keep(b, Duration::from_secs(1), now);
        assert!(queue.remove(a));
        assert!(!queue.remove(a));
        assert_eq!(queue.head(now).map(|p| p.waiter), Some(b));
    }
}
