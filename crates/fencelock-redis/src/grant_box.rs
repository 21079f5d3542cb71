//! The grant box: where a release on one server hands a queued waiter its grant, and where
//! the waiter's process reads it with a blocking pop (DESIGN 5.2, *The grant arrives in a
//! reply*).
//!
//! Each backend (each process, usually) has one box, a list `{prefix}:box:<32 hex digits>`.
//! A queued try names it in the ask it leaves; a release (or leave) that hands the lock to
//! that waiter pushes `<waiter> <token> <ms>` onto it in the same script that writes the
//! grant. One task per backend, on one connection of its own, pops the box with `BLMPOP`
//! while any of the backend's requests waits, and gives each grant to its waiter: the grant
//! arrives in the reply of a request the server answers from its own state, with no message
//! between, and the waiters of every key of the process share the one blocked connection.
//!
//! A grant's start is unknown to the client; its floor, a time the grant was surely made
//! after, is the later of two lower bounds: the waiter's first try (no grant to a waiter
//! before it queued), and the send of the pop before the one that answered it, when that
//! pop left the box empty on the same connection (a grant popped now was pushed after that
//! pop ran). The lease is counted from the floor, so it ends no later than the server's.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{OwnerId, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::Connection;

/// How long one pop blocks in the server before it is sent again. A shorter wait keeps the
/// floor of a grant that arrives after a quiet spell closer to its real start; each wait costs
/// one round trip while the process has waiters.
const POP_WAIT: Duration = Duration::from_millis(500);

/// Grants one pop takes at most; fewer means it left the box empty.
const POP_COUNT: usize = 256;

/// The pause after a failed pop before the box is read again on a new connection.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A grant handed to a waiter, as its box delivered it.
#[derive(Debug)]
pub(crate) struct Handed {
    /// The token, as the script wrote it (decimal text).
    pub(crate) token: String,
    /// The hand-off ttl the server set on the grant.
    pub(crate) ttl: Duration,
    /// A time (this process's clock) the grant was surely made after.
    pub(crate) floor: Instant,
}

/// One backend's grant box.
pub(crate) struct GrantBox {
    conn: Connection,
    key: String,
    state: Mutex<State>,
}

impl std::fmt::Debug for GrantBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantBox")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    slots: HashMap<OwnerId, Slot>,
    /// Whether the reader task runs.
    reading: bool,
    /// Set when the server refused the pop (a server older than 7.0 has no `BLMPOP`, or an
    /// ACL forbids it): tries stop naming the box, and hand-offs wake by publish again.
    refused: bool,
}

struct Slot {
    /// Before the waiter's first try.
    since: Instant,
    notify: Arc<Notify>,
    handed: Option<Handed>,
}

impl GrantBox {
    pub(crate) fn new(conn: Connection) -> Self {
        let key = conn.keys.grant_box(&OwnerId::random());
        GrantBox {
            conn,
            key,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Before a queued try of `waiter`: registers it (once per request; `notify` wakes it when
    /// its grant arrives) and has the reader running. Returns the box to name in the try, or
    /// `None` when the server refused the box.
    pub(crate) fn enter(self: &Arc<Self>, waiter: OwnerId, notify: &Arc<Notify>) -> Option<&str> {
        let mut state = self.state();
        if state.refused {
            return None;
        }
        state.slots.entry(waiter).or_insert_with(|| Slot {
            since: Instant::now(),
            notify: Arc::clone(notify),
            handed: None,
        });
        if !state.reading {
            state.reading = true;
            tokio::spawn(read(Arc::downgrade(self)));
        }
        Some(&self.key)
    }

    /// The grant delivered to `waiter`, if one was.
    pub(crate) fn take(&self, waiter: OwnerId) -> Option<Handed> {
        self.state()
            .slots
            .get_mut(&waiter)
            .and_then(|slot| slot.handed.take())
    }

    /// `waiter`'s request ended: a grant delivered later is not its to take (the leave, or
    /// the grant the request did take, settled it on the server).
    pub(crate) fn forget(&self, waiter: OwnerId) {
        self.state().slots.remove(&waiter);
    }

    /// One popped entry, `<waiter> <token> <ms>`, for its waiter; `after` is the send of the
    /// pop before, when that one left the box empty on this connection.
    fn deliver(&self, entry: &str, after: Option<Instant>) {
        let Some((waiter, token, ms)) = parse_entry(entry) else {
            tracing::debug!(entry, "a grant box entry of an unknown form, ignored");
            return;
        };
        let mut state = self.state();
        // A waiter no longer registered ended its request: its leave released the grant,
        // or its own try took it up, or the grant lapses after the hand-off ttl.
        let Some(slot) = state.slots.get_mut(&waiter) else {
            return;
        };
        let floor = after.map_or(slot.since, |after| after.max(slot.since));
        slot.handed = Some(Handed {
            token: token.to_owned(),
            ttl: Duration::from_millis(ms),
            floor,
        });
        slot.notify.notify_one();
    }

    /// Whether the reader should stop: no request waits. Clears `reading` when so, under the
    /// same lock `enter` takes, so a waiter that enters after always finds a reader.
    fn idle(&self) -> bool {
        let mut state = self.state();
        if state.slots.is_empty() {
            state.reading = false;
            return true;
        }
        false
    }

    fn refuse(&self) {
        let mut state = self.state();
        state.refused = true;
        state.reading = false;
        // Woken, each waiter tries again without the box, and is woken by publish after.
        for slot in state.slots.values() {
            slot.notify.notify_one();
        }
    }
}

/// An entry of the box, `<waiter> <token> <ms>`: the waiter, the token as the script wrote
/// it, and the hand-off's ttl in milliseconds; `None` for anything else.
fn parse_entry(entry: &str) -> Option<(OwnerId, &str, u64)> {
    let mut parts = entry.split(' ');
    let (Some(waiter), Some(token), Some(ms), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    Some((waiter.parse().ok()?, token, ms.parse().ok()?))
}

/// The reader task: pops the box while the backend has waiters, and ends with the backend.
async fn read(grants: Weak<GrantBox>) {
    let mut conn = None;
    // The send of the last pop that left the box empty on the current connection.
    let mut after: Option<Instant> = None;
    loop {
        let Some(grants) = grants.upgrade() else {
            return;
        };
        if grants.idle() {
            return;
        }
        if conn.is_none() {
            match open(&grants.conn).await {
                Ok(opened) => conn = Some(opened),
                Err(e) => {
                    tracing::debug!(error = %e, "grant box connection failed");
                    drop(grants);
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
            }
        }
        let Some(link) = conn.as_mut() else {
            continue;
        };
        let sent = Instant::now();
        let popped: redis::RedisResult<Option<(String, Vec<String>)>> = redis::cmd("BLMPOP")
            .arg(POP_WAIT.as_secs_f64())
            .arg(1)
            .arg(&grants.key)
            .arg("LEFT")
            .arg("COUNT")
            .arg(POP_COUNT)
            .query_async(link)
            .await;
        match popped {
            Ok(None) => after = Some(sent),
            Ok(Some((_, entries))) => {
                for entry in &entries {
                    grants.deliver(entry, after);
                }
                if entries.len() < POP_COUNT {
                    after = Some(sent);
                }
            }
            // The server answered, and said no: asking again gets the same answer.
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                tracing::warn!(
                    server = %grants.conn.server,
                    error = %e,
                    "the server refused BLMPOP (Redis 7.0 or later, and the ACL's permission, \
                     are needed): hand-offs wake waiters by publish instead"
                );
                grants.refuse();
                return;
            }
            Err(e) => {
                // What a lost reply popped is found by its waiter's next try (every 500 ms).
                tracing::debug!(error = %e, "grant box pop failed");
                conn = None;
                after = None;
                drop(grants);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// A connection of the box's own: its pops block, so it carries nothing else.
async fn open(conn: &Connection) -> Result<redis::aio::MultiplexedConnection> {
    let Some(client) = &conn.client else {
        return Err(fencelock_core::Error::config(
            "a Redis Cluster connection has no grant box",
        ));
    };
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(conn.connect_timeout))
        .set_response_timeout(Some(POP_WAIT + conn.call_timeout));
    crate::error::bounded(
        conn.backend,
        conn.connect_timeout + conn.call_timeout,
        "grant box connect",
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    .map_err(|e| e.in_context(&conn.server))
}
