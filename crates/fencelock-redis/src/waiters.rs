//! Wake-ups for [`LockBackend::wait_for_release`](fencelock_core::LockBackend::wait_for_release)
//! and [`wait_for_turn`](fencelock_core::LockBackend::wait_for_turn): one shared pub/sub
//! connection per backend, one `Notify` per waiting request.
//!
//! A channel is subscribed once per process, by its first waiter, and stays subscribed while
//! any request waits on it, so a waiter that finds it subscribed costs no round trip. One task
//! per backend sends every SUBSCRIBE and UNSUBSCRIBE: it holds no lock across a round trip,
//! and each command carries every channel that needs one at the time it is sent, so waiters
//! arriving on many keys at once are covered by one round trip, not one each in turn. On one
//! server a release hands the lock to the first live queued waiter and publishes the grant
//! (`>waiter token time-us ms`, see `scripts/queue.lua`), which wakes that waiter to take it
//! up with its next try (what the message tells of the grant is never read: anyone with the
//! publish right could have sent it); a message with a waiter's id alone wakes that waiter
//! to try; a release that
//! names no waiter (a lock value, from Redlock nodes and read phases) wakes every waiter of
//! the channel.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::grant_box::{GrantBox, Handed};

/// How long a queued waiter sleeps at most before it tries again, which keeps its place
/// (a place lapses after [`PLACE_TTL`] without a try).
pub(crate) const TURN_REFRESH: Duration = Duration::from_millis(500);

/// How long a queued waiter's place outlives its last try: a waiter that vanished (its
/// process died between tries) keeps a free lock from the waiters behind it this long at most.
pub(crate) const PLACE_TTL: Duration = Duration::from_secs(2);

/// The longest ttl a release (or a leave) grants the next waiter with, until that waiter
/// renews the grant into its own ttl: a waiter that vanished holds a lock handed to it this
/// long at most. Four [`TURN_REFRESH`]es, so a waiter that missed the publish still finds the
/// grant with its next try.
pub(crate) const HANDOFF_TTL: Duration = Duration::from_secs(2);

/// The subscriber connection and the waiters per channel.
pub(crate) struct Waiters {
    conn: Connection,
    state: Mutex<State>,
    generation: AtomicU64,
    /// Where hand-offs deliver grants (one server; Redlock nodes hand nothing off).
    grants: Option<Arc<GrantBox>>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// The registration of each queued waiter, from its first try to its grant or leave.
    queued: HashMap<OwnerId, Queued>,
    subscriber: Option<Subscriber>,
    next_id: u64,
    /// The task that sends SUBSCRIBE and UNSUBSCRIBE, started by the first waiter that needs
    /// a subscription (see [`commands`]).
    commands: Option<mpsc::UnboundedSender<Ask>>,
}

/// A request to the command task to bring the subscriptions in line with the waiters: with a
/// reply, from a waiter that needs its channel subscribed (true once it is); without, from a
/// channel's last waiter leaving.
type Ask = Option<oneshot::Sender<bool>>;

#[derive(Default)]
struct Channel {
    entries: HashMap<u64, Entry>,
    /// The subscriber generation on which SUBSCRIBE was confirmed.
    subscribed: Option<u64>,
    /// Whether a waiter asked for the subscription: one granted at its first try never does,
    /// and costs no SUBSCRIBE.
    wanted: bool,
}

struct Entry {
    /// The queued waiter this entry wakes for; `None` wakes on every release.
    waiter: Option<String>,
    notify: Arc<Notify>,
}

struct Queued {
    registration: Registration,
    /// Whether the channel was subscribed when the last try was sent: if so, a release after
    /// that try reaches this waiter, and it may sleep.
    covered: bool,
    /// When the holder's time ran out, as the last refused try said.
    holder_until: Option<Instant>,
}

struct Subscriber {
    generation: u64,
    sink: PubSubSink,
    /// The channels the server confirmed, less those an UNSUBSCRIBE was sent for: only the
    /// command task changes it, so it is what the server has once the task's commands landed.
    channels: HashSet<String>,
    reader: AbortOnDrop,
}

/// Ends the reader task (and with it the pub/sub connection) when the subscriber goes.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl AbortOnDrop {
    /// Lets the task run to its end.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

/// One waiting request's entry in a channel; dropping it unregisters, and the last one out
/// has the command task unsubscribe.
struct Registration {
    waiters: Arc<Waiters>,
    channel: String,
    id: u64,
    notify: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Only a channel the server has needs an UNSUBSCRIBE when its last waiter leaves;
        // one whose waiters never waited (granted at the first try) costs nothing.
        let mut state = self.waiters.state();
        let Some(channel) = state.channels.get_mut(&self.channel) else {
            return;
        };
        channel.entries.remove(&self.id);
        if !channel.entries.is_empty() {
            return;
        }
        state.channels.remove(&self.channel);
        let subscribed = state
            .subscriber
            .as_ref()
            .is_some_and(|s| s.channels.contains(&self.channel));
        if subscribed && let Some(commands) = &state.commands {
            // A command task that has ended took its subscriber's connection with it.
            let _ = commands.send(None);
        }
    }
}

impl Waiters {
    pub(crate) fn new(conn: Connection) -> Self {
        Waiters {
            conn,
            state: Mutex::new(State::default()),
            generation: AtomicU64::new(0),
            grants: None,
        }
    }

    /// Waiters whose hand-offs arrive in a grant box (one server).
    pub(crate) fn with_grant_box(conn: Connection) -> Self {
        Waiters {
            grants: Some(Arc::new(GrantBox::new(conn.clone()))),
            ..Waiters::new(conn)
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until the lock on `key` may have been released, at most `max`. Returns early
    /// when the lock is free, when a release is published, when the holder's ttl runs out,
    /// and spuriously when the subscriber connection drops.
    pub(crate) async fn wait(self: &Arc<Self>, key: &LockKey, max: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(max);
        let wait = self.wait_inner(key, deadline);
        match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, wait).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            },
            None => wait.await,
        }
    }

    async fn wait_inner(self: &Arc<Self>, key: &LockKey, deadline: Option<Instant>) -> Result<()> {
        let channel = self.conn.keys.channel(key);
        let registration = self.register(&channel, None);
        // Without a subscription the holder's ttl still bounds the wait.
        self.subscribe(&channel).await;
        let mut conn = self.conn.link.clone();
        let pttl: i64 = self
            .conn
            .call(
                "PTTL",
                redis::cmd("PTTL")
                    .arg(self.conn.keys.lock(key))
                    .query_async(&mut conn),
            )
            .await?;
        let until = match pttl {
            // -2: no lock; 0: expiring right now.
            ms if ms == -2 || ms == 0 => return Ok(()),
            ms if ms > 0 => {
                let expiry = Instant::now() + Duration::from_millis(ms.unsigned_abs());
                deadline.map_or(expiry, |d| d.min(expiry))
            }
            // -1: a key without expiry, not written by fencelock; wait for a publish or `max`.
            _ => match deadline {
                Some(d) => d,
                None => {
                    registration.notify.notified().await;
                    return Ok(());
                }
            },
        };
        tokio::select! {
            _ = registration.notify.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        Ok(())
    }

    /// Before a queued try of `waiter` on `key`: registers the waiter (once per request) so
    /// that a release after the try wakes it, and notes whether the channel is subscribed.
    /// Returns the grant box for the try to name, where there is one.
    pub(crate) fn before_try(self: &Arc<Self>, key: &LockKey, waiter: OwnerId) -> Option<&str> {
        let channel = self.conn.keys.channel(key);
        let exists = self.state().queued.contains_key(&waiter);
        if !exists {
            let registration = self.register(&channel, Some(waiter.to_string()));
            self.state().queued.insert(
                waiter,
                Queued {
                    registration,
                    covered: false,
                    holder_until: None,
                },
            );
        }
        let mut state = self.state();
        let generation = state.subscriber.as_ref().map(|s| s.generation);
        let subscribed = generation.is_some()
            && state.channels.get(&channel).map(|c| c.subscribed) == Some(generation);
        let notify = state.queued.get_mut(&waiter).map(|queued| {
            queued.covered = subscribed;
            Arc::clone(&queued.registration.notify)
        });
        drop(state);
        self.grants.as_ref()?.enter(waiter, &notify?)
    }

    /// The grant a hand-off delivered to `waiter` through the grant box, if one did.
    pub(crate) fn take_grant(&self, waiter: OwnerId) -> Option<Handed> {
        self.grants.as_ref()?.take(waiter)
    }

    /// A queued try of `waiter` was refused; `holder_ms` is the holder's time left (negative
    /// when unknown).
    pub(crate) fn refused(&self, waiter: OwnerId, holder_ms: i64) {
        if let Some(queued) = self.state().queued.get_mut(&waiter) {
            queued.holder_until = u64::try_from(holder_ms)
                .ok()
                .map(|ms| Instant::now() + Duration::from_millis(ms));
        }
    }

    /// `waiter`'s request ended (granted, or gave its place up): it is no longer woken.
    pub(crate) fn forget(&self, waiter: OwnerId) {
        // Dropped outside the lock: the registration's drop takes it.
        let queued = self.state().queued.remove(&waiter);
        drop(queued);
        if let Some(grants) = &self.grants {
            grants.forget(waiter);
        }
    }

    /// Waits until it may be `waiter`'s turn on `key`: a release names it, the holder's time
    /// runs out, or [`TURN_REFRESH`] passes (the next try keeps the place); at most `max`.
    /// When the channel was not yet subscribed at the last try, subscribes and returns at once,
    /// so the next try is covered by the subscription.
    pub(crate) async fn wait_turn(
        self: &Arc<Self>,
        key: &LockKey,
        waiter: OwnerId,
        max: Duration,
    ) -> Result<()> {
        let channel = self.conn.keys.channel(key);
        let (notify, covered, holder_until) = {
            let state = self.state();
            match state.queued.get(&waiter) {
                Some(queued) => (
                    Some(Arc::clone(&queued.registration.notify)),
                    queued.covered,
                    queued.holder_until,
                ),
                None => (None, false, None),
            }
        };
        let Some(notify) = notify else {
            // No try registered this waiter (it was forgotten): the next try registers it.
            return Ok(());
        };
        if !covered {
            if !self.subscribe(&channel).await {
                tokio::time::sleep(TURN_REFRESH.min(max)).await;
            }
            return Ok(());
        }
        let now = Instant::now();
        let mut until = now + TURN_REFRESH.min(max);
        if let Some(holder_until) = holder_until {
            until = until.min(holder_until.max(now));
        }
        tokio::select! {
            _ = notify.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        Ok(())
    }

    fn register(self: &Arc<Self>, channel: &str, waiter: Option<String>) -> Registration {
        let notify = Arc::new(Notify::new());
        let id = {
            let mut state = self.state();
            state.next_id += 1;
            let id = state.next_id;
            state
                .channels
                .entry(channel.to_owned())
                .or_default()
                .entries
                .insert(
                    id,
                    Entry {
                        waiter,
                        notify: Arc::clone(&notify),
                    },
                );
            id
        };
        Registration {
            waiters: Arc::clone(self),
            channel: channel.to_owned(),
            id,
            notify,
        }
    }

    /// Has `channel` (whose waiter is registered) subscribed on the shared connection, opening
    /// it first if needed, unless it already is: true once it is. A failure is logged; the
    /// caller's wait is then bounded by the holder's ttl and its own refresh.
    async fn subscribe(self: &Arc<Self>, channel: &str) -> bool {
        {
            let mut state = self.state();
            let generation = state.subscriber.as_ref().map(|s| s.generation);
            let Some(entry) = state.channels.get_mut(channel) else {
                // No waiter of this request is registered: nothing to wake.
                return false;
            };
            if generation.is_some() && entry.subscribed == generation {
                return true;
            }
            entry.wanted = true;
        }
        let (reply, answer) = oneshot::channel();
        self.ask(Some(reply));
        answer.await.unwrap_or(false)
    }

    /// Hands `ask` to the command task, starting it if there is none (or the runtime it ran
    /// on has ended).
    fn ask(self: &Arc<Self>, ask: Ask) {
        let mut state = self.state();
        let ask = match &state.commands {
            Some(commands) => match commands.send(ask) {
                Ok(()) => return,
                Err(mpsc::error::SendError(ask)) => ask,
            },
            None => ask,
        };
        let (commands, asks) = mpsc::unbounded_channel();
        // The receiver is alive until the task below ends.
        let _ = commands.send(ask);
        state.commands = Some(commands);
        drop(state);
        tokio::spawn(run_commands(Arc::downgrade(self), asks));
    }

    /// Brings the server's subscriptions in line with the waiters: one UNSUBSCRIBE of every
    /// channel no waiter needs any more, then one SUBSCRIBE of every channel a waiter asked
    /// for that the server does not have (opening the connection first if there is none). Called
    /// by the command task alone.
    async fn sync_subscriptions(self: &Arc<Self>) -> Result<()> {
        let open = {
            let state = self.state();
            state.subscriber.is_none() && state.channels.values().any(|c| c.wanted)
        };
        if open {
            self.open().await?;
        }
        let (mut sink, generation, subscribe, unsubscribe) = {
            let mut guard = self.state();
            let state = &mut *guard;
            let Some(subscriber) = state.subscriber.as_mut() else {
                return Ok(());
            };
            let generation = subscriber.generation;
            let mut subscribe = Vec::new();
            for (name, channel) in &mut state.channels {
                // A channel whose waiters all left and came back before its UNSUBSCRIBE was
                // sent is still subscribed: it needs no round trip.
                if subscriber.channels.contains(name) {
                    channel.subscribed = Some(generation);
                } else if channel.wanted {
                    subscribe.push(name.clone());
                }
            }
            let unsubscribe: Vec<String> = subscriber
                .channels
                .iter()
                .filter(|name| !state.channels.contains_key(*name))
                .cloned()
                .collect();
            for name in &unsubscribe {
                subscriber.channels.remove(name);
            }
            (subscriber.sink.clone(), generation, subscribe, unsubscribe)
        };
        // UNSUBSCRIBE with no channel would leave every channel: only a non-empty list is sent.
        if !unsubscribe.is_empty()
            && let Err(e) = self
                .conn
                .call("UNSUBSCRIBE", sink.unsubscribe(unsubscribe.as_slice()))
                .await
        {
            // A connection that failed a command is not trusted again.
            forget_subscriber(&mut self.state(), generation, true);
            return Err(e);
        }
        if subscribe.is_empty() {
            return Ok(());
        }
        let result = self
            .conn
            .call("SUBSCRIBE", sink.subscribe(subscribe.as_slice()))
            .await;
        let mut guard = self.state();
        let state = &mut *guard;
        if let Err(e) = result {
            forget_subscriber(state, generation, true);
            return Err(e);
        }
        let Some(subscriber) = state
            .subscriber
            .as_mut()
            .filter(|s| s.generation == generation)
        else {
            return Ok(());
        };
        let mut left = false;
        for name in subscribe {
            match state.channels.get_mut(&name) {
                Some(channel) => channel.subscribed = Some(generation),
                None => left = true,
            }
            subscriber.channels.insert(name);
        }
        // A channel whose last waiter left during the round trip is unsubscribed by the next
        // batch.
        if left && let Some(commands) = &state.commands {
            let _ = commands.send(None);
        }
        Ok(())
    }

    /// Opens the pub/sub connection and its reader task.
    async fn open(self: &Arc<Self>) -> Result<()> {
        let (sink, stream) = self.conn.pubsub().await?.split();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let reader = tokio::spawn(read(Arc::downgrade(self), stream, generation));
        self.state().subscriber = Some(Subscriber {
            generation,
            sink,
            channels: HashSet::new(),
            reader: AbortOnDrop(Some(reader.abort_handle())),
        });
        Ok(())
    }

    /// A release on `channel` named `next`: wakes that queued waiter and every waiter that
    /// waits for any release; a message that names no waiter (a lock value has a `:`) wakes
    /// them all. A hand-off's message (`>waiter ...`) names its waiter first; the rest, the
    /// grant it tells, is never read: anyone allowed to publish could have sent it, so a
    /// woken waiter takes a lock handed to it up with its next try, from the server's answer.
    fn wake(&self, channel: &str, message: &str) {
        let state = self.state();
        let next = match message.strip_prefix('>') {
            Some(handed) => handed.split(' ').next().unwrap_or_default(),
            None => message,
        };
        let everyone = next.contains(':');
        if let Some(channel) = state.channels.get(channel) {
            for entry in channel.entries.values() {
                let named = entry.waiter.as_deref().is_none_or(|waiter| waiter == next);
                if everyone || named {
                    entry.notify.notify_one();
                }
            }
        }
    }

    /// The subscriber connection of `generation` ended: its subscriptions are gone.
    fn lost_connection(&self, generation: u64) {
        let mut state = self.state();
        // Called from the reader task itself, which must not abort itself.
        forget_subscriber(&mut state, generation, false);
        for channel in state.channels.values() {
            for entry in channel.entries.values() {
                entry.notify.notify_one();
            }
        }
    }
}

/// Drops the subscriber of `generation` (not a newer one), ending its reader task when `abort`
/// (the reader task itself passes false), and forgets what it subscribed.
fn forget_subscriber(state: &mut State, generation: u64, abort: bool) {
    if state
        .subscriber
        .as_ref()
        .is_some_and(|s| s.generation == generation)
        && let Some(old) = state.subscriber.take()
        && !abort
    {
        old.reader.disarm();
    }
    for channel in state.channels.values_mut() {
        if channel.subscribed == Some(generation) {
            channel.subscribed = None;
        }
    }
}

/// Delivers messages until the connection ends, then forgets the connection (the next waiter
/// opens a new one) and wakes everyone, since their subscriptions are gone.
async fn read(waiters: Weak<Waiters>, mut stream: PubSubStream, generation: u64) {
    while let Some(message) = stream.next().await {
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        let next: String = message.get_payload().unwrap_or_default();
        waiters.wake(message.get_channel_name(), &next);
    }
    if let Some(waiters) = waiters.upgrade() {
        waiters.lost_connection(generation);
    }
}

/// The command task of a backend's waiters: per batch of asks (every ask waiting when it
/// wakes), one [`Waiters::sync_subscriptions`], then the answers. It alone sends SUBSCRIBE and
/// UNSUBSCRIBE, each planned from the waiters as they are when it is sent, so the commands
/// reach the server in the order the waiters came and went: an unsubscribe of an idle channel
/// never overtakes the subscribe of a waiter that came back to it. It ends with its backend.
async fn run_commands(waiters: Weak<Waiters>, mut asks: mpsc::UnboundedReceiver<Ask>) {
    while let Some(first) = asks.recv().await {
        let mut replies: Vec<oneshot::Sender<bool>> = first.into_iter().collect();
        while let Ok(more) = asks.try_recv() {
            replies.extend(more);
        }
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        let subscribed = match waiters.sync_subscriptions().await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "release channel subscription failed");
                false
            }
        };
        drop(waiters);
        for reply in replies {
            let _ = reply.send(subscribed);
        }
    }
}
