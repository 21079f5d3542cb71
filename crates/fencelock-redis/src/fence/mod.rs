//! `RedisFence`: fenced writes and reads on the user's own Redis keys.

mod command;

use std::fmt;
use std::time::Duration;

use fencelock_core::{Error, Fence, FenceRule, LockKey, Result};
use redis::Value;
use redis::aio::ConnectionLike;
use tracing::Instrument;
use tracing::field::Empty;

use self::command::Command;
pub use self::command::Reply;
use crate::codec::parse_fence;
use crate::error::{REDIS as BACKEND, bounded, protocol};
use crate::keys::{DEFAULT_PREFIX, KeySpace, tag};
use crate::link::ScriptsPerNode;
use crate::options::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_VALUE_LEN};
use crate::outcome::finish;
use crate::scripts::SCRIPTS;
use crate::slot::slot;

/// The Redis Cluster hash tag of `resource`, braces included: put it in the name of every key
/// a [`RedisFence`] guards with that resource, so that the keys and the resource's fence
/// record share a hash slot (`balance:{account:42}` for the resource `account:42`).
///
/// It is the resource's name in braces, with `%`, `{` and `}` percent-encoded (`%25`, `%7B`,
/// `%7D`); for a name without those characters, simply `{<resource>}`.
///
/// ```
/// use fencelock_core::LockKey;
/// let resource = LockKey::new("account:42")?;
/// assert_eq!(fencelock_redis::hash_tag(&resource), "{account:42}");
/// # Ok::<(), fencelock_core::Error>(())
/// ```
pub fn hash_tag(resource: &LockKey) -> String {
    tag(resource)
}

/// A batch of commands on the user's own Redis keys, applied only if a fence is admitted: one
/// Lua script admits the fence (the rule of DESIGN section 2, as [`RedisStorage`](crate::RedisStorage)
/// applies it), records it, and runs the commands, in one atomic step.
///
/// Build it on any async connection of the `redis` crate the application already has
/// ([`ConnectionManager`](redis::aio::ConnectionManager),
/// [`MultiplexedConnection`](redis::aio::MultiplexedConnection)), or take one from a backend
/// with [`RedisLockBackend::fence`](crate::RedisLockBackend::fence); add commands (`SET` with
/// an optional expiry, `HSET`, `DEL`, `INCRBY`, `PEXPIRE`, and the reads `GET`, `HGETALL`);
/// then [`commit`](Self::commit) under a resource and a fence.
///
/// ```no_run
/// # async fn demo(guard: fencelock_core::LockGuard) -> Result<(), Box<dyn std::error::Error>> {
/// use fencelock_core::LockKey;
/// use fencelock_redis::{RedisFence, Reply, hash_tag, redis};
///
/// // The application's own connection; `redis` is re-exported, so the versions match.
/// let conn = redis::Client::open("redis://127.0.0.1:6379")?
///     .get_multiplexed_async_connection()
///     .await?;
/// let resource = LockKey::new("account:42")?;
/// let tag = hash_tag(&resource); // "{account:42}"
/// // Read, then write, each fenced: a holder superseded in between is refused.
/// let replies = RedisFence::new(conn.clone())
///     .get(format!("balance:{tag}"))
///     .commit(&resource, guard.fence())
///     .await?;
/// let balance: i64 = match &replies[0] {
///     Reply::Value(Some(bytes)) => String::from_utf8_lossy(bytes).parse().unwrap_or(0),
///     _ => 0,
/// };
/// RedisFence::new(conn)
///     .set(format!("balance:{tag}"), (balance - 100).to_string())
///     .hset(format!("audit:{tag}"), "last", "debit 100")
///     .commit(&resource, guard.fence())
///     .await?;
/// # Ok(()) }
/// ```
///
/// # The fence and its keys
///
/// The fence record of a resource is the hash `{prefix}:{<resource>}:fence` (fields `token`
/// and `owner`; prefix `fencelock` by default). Every key of a batch must be in the same
/// Redis Cluster hash slot as that record, which [`hash_tag`] makes easy: name the keys with
/// the resource's hash tag. A batch with a key in another slot, a key in fencelock's own key
/// space (`{prefix}:...`), an invalid key name, a value over the size limit or a zero expiry
/// is refused before anything is sent ([`Error::InvalidKey`], [`Error::ValueTooLarge`],
/// [`Error::InvalidTtl`]). The check is made on a single server too, so a batch that works
/// there works on a cluster.
///
/// # Why it is safe
///
/// Redis runs a script atomically: no other command runs between its first and its last
/// step. The fence check and the commands therefore see one state; no stale holder can slip
/// a write between the check and the commands, and no newer holder can be admitted in
/// between. A refused fence is [`Error::Stale`] and nothing is applied, and so is a command
/// that could not run (a key of the wrong type, an increment of a value that is not an
/// integer or that would overflow): the script checks every command against the state it
/// will meet before it writes anything, since Redis does not undo a script that stops half
/// way. Reads are fenced like writes (they record the fence), which is what prevents the
/// lost update of two holders that both read before either writes.
pub struct RedisFence<C> {
    conn: C,
    prefix: String,
    rule: FenceRule,
    call_timeout: Duration,
    max_value_len: usize,
    /// Whether `commit` asks the server for its eviction policy (a connection of the user's
    /// own); `false` when the backend checked at connect or the user allowed eviction.
    check_eviction: bool,
    commands: Vec<Command>,
}

impl<C> fmt::Debug for RedisFence<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let commands: Vec<String> = self
            .commands
            .iter()
            .map(|c| format!("{} {}", c.name(), c.key()))
            .collect();
        f.debug_struct("RedisFence")
            .field("prefix", &self.prefix)
            .field("rule", &self.rule)
            .field("call_timeout", &self.call_timeout)
            .field("max_value_len", &self.max_value_len)
            .field("check_eviction", &self.check_eviction)
            .field("commands", &commands)
            .finish_non_exhaustive()
    }
}

impl<C> RedisFence<C> {
    /// An empty batch on `conn`, with the defaults: prefix `fencelock`,
    /// [`FenceRule::Monotonic`], 5 s for the call, values up to 16 MiB.
    pub fn new(conn: C) -> Self {
        RedisFence {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            rule: FenceRule::Monotonic,
            call_timeout: DEFAULT_CALL_TIMEOUT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            check_eviction: true,
            commands: Vec::new(),
        }
    }

    /// The prefix of the fence records' names (default `fencelock`; the same rules as
    /// [`RedisConfig::prefix`](crate::RedisConfig::prefix)).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The rule that admits a fence (default [`FenceRule::Monotonic`]; [`FenceRule::Strict`]
    /// admits one batch per grant).
    pub fn rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The longest the call may take before it fails with [`Error::Unavailable`] (default
    /// 5 s). A call that timed out may still have been applied.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The largest value (and hash field) accepted, in bytes (default 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// Accepts a server that may evict keys (`maxmemory-policy` other than `noeviction`;
    /// default `false`). Without it, [`commit`](Self::commit) refuses such a server with
    /// [`Error::InvalidConfig`] and applies nothing: an evicted fence record lets a stale
    /// holder in. A batch from [`RedisLockBackend::fence`](crate::RedisLockBackend::fence)
    /// is not checked again (the backend checked its server at connect).
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.check_eviction = !allow;
        self
    }

    /// Skips the eviction check: the backend whose connection this is checked at connect.
    pub(crate) fn server_checked(mut self) -> Self {
        self.check_eviction = false;
        self
    }

    fn push(mut self, command: Command) -> Self {
        self.commands.push(command);
        self
    }

    /// `SET key value`.
    pub fn set(self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.push(Command::Set {
            key: key.into(),
            value: value.into(),
            px: None,
        })
    }

    /// `SET key value PX ttl` (the ttl rounded up to whole milliseconds).
    pub fn set_px(self, key: impl Into<String>, value: impl Into<Vec<u8>>, ttl: Duration) -> Self {
        self.push(Command::Set {
            key: key.into(),
            value: value.into(),
            px: Some(ttl),
        })
    }

    /// `HSET key field value`.
    pub fn hset(
        self,
        key: impl Into<String>,
        field: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Self {
        self.push(Command::HSet {
            key: key.into(),
            field: field.into(),
            value: value.into(),
        })
    }

    /// `DEL key`.
    pub fn del(self, key: impl Into<String>) -> Self {
        self.push(Command::Del { key: key.into() })
    }

    /// `INCRBY key by`: the key (absent: 0) must hold a 64-bit integer, and the result must
    /// fit in one.
    pub fn incr_by(self, key: impl Into<String>, by: i64) -> Self {
        self.push(Command::IncrBy {
            key: key.into(),
            by,
        })
    }

    /// `PEXPIRE key ttl` (rounded up to whole milliseconds; zero is refused, use
    /// [`del`](Self::del)).
    pub fn expire(self, key: impl Into<String>, ttl: Duration) -> Self {
        self.push(Command::PExpire {
            key: key.into(),
            ttl,
        })
    }

    /// `PEXPIRE key millis`.
    pub fn pexpire(self, key: impl Into<String>, millis: u64) -> Self {
        self.expire(key, Duration::from_millis(millis))
    }

    /// `GET key`: a fenced read of a string.
    pub fn get(self, key: impl Into<String>) -> Self {
        self.push(Command::Get { key: key.into() })
    }

    /// `HGETALL key`: a fenced read of a hash.
    pub fn hgetall(self, key: impl Into<String>) -> Self {
        self.push(Command::HGetAll { key: key.into() })
    }

    /// Checks the options and every command without the network; the fence record's name.
    fn check(&self, resource: &LockKey) -> Result<String> {
        let keys = KeySpace::new(&self.prefix)?;
        if self.call_timeout.is_zero() {
            return Err(Error::config(
                "RedisFence call_timeout must be greater than zero",
            ));
        }
        let record = keys.fence(resource);
        let record_slot = slot(record.as_bytes());
        for command in &self.commands {
            command.check(&keys, record_slot, self.max_value_len)?;
        }
        Ok(record)
    }
}

impl<C: ConnectionLike + Send> RedisFence<C> {
    /// Admits `fence` for `resource` and, if admitted, records it and runs the batch, in one
    /// atomic step. Returns one [`Reply`] per command, in order.
    ///
    /// `resource` is a name as [`Locker::lock`](fencelock_core::Locker::lock) takes it (a
    /// `&str`, a `String`, a [`LockKey`]); an invalid one is [`Error::InvalidKey`] and nothing
    /// is sent. A fence older than the last one admitted for `resource` (or, by the default
    /// rule, the same token from another owner) is [`Error::Stale`] and nothing is applied. A batch
    /// without commands only admits and records the fence. Bad input is refused before
    /// anything is sent (see the type's docs); a command that cannot run on the keys as they
    /// are (a wrong type, an overflow) is [`Error::Backend`] naming it, and nothing is applied.
    /// A server that may evict keys is [`Error::InvalidConfig`] naming its policy, and
    /// nothing is applied, unless [`allow_eviction`](Self::allow_eviction) says otherwise;
    /// the check runs in the same script, on the node that holds the fence record.
    pub async fn commit(mut self, resource: impl AsRef<str>, fence: Fence) -> Result<Vec<Reply>> {
        let resource = &LockKey::new(resource)?;
        let record = self.check(resource)?;
        let span = tracing::debug_span!("fenced_commit", backend = BACKEND, resource = %resource, token = fence.token.get(), commands = self.commands.len(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.fence_apply.prepare_invoke();
            invocation.key(record);
            for command in &self.commands {
                invocation.key(command.key());
            }
            invocation
                .arg(fence.token.get().to_string())
                .arg(fence.owner.to_string())
                .arg(self.rule.as_str())
                .arg(if self.check_eviction {
                    "check-eviction"
                } else {
                    ""
                });
            for command in &self.commands {
                invocation.arg(command.args()?);
            }
            let reply: Value = bounded(
                BACKEND,
                self.call_timeout,
                "fenced commit",
                invocation.invoke_async(&mut ScriptsPerNode(&mut self.conn)),
            )
            .await?;
            decode_commit(resource, fence, &self.commands, reply)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "admitted")
    }

    /// The unfenced observer read: the last fence admitted for `resource` (`None` if none
    /// was) and the batch's reads, in one consistent step that records nothing. The batch
    /// may hold only [`get`](Self::get) and [`hgetall`](Self::hgetall); a write is
    /// [`Error::InvalidConfig`].
    pub async fn peek(mut self, resource: impl AsRef<str>) -> Result<(Option<Fence>, Vec<Reply>)> {
        let resource = &LockKey::new(resource)?;
        let record = self.check(resource)?;
        if let Some(write) = self.commands.iter().find(|c| !c.is_read()) {
            return Err(Error::config(format!(
                "RedisFence::peek runs only reads; the batch has {} {}",
                write.name(),
                write.key()
            )));
        }
        let mut invocation = SCRIPTS.fence_peek.prepare_invoke();
        invocation.key(record);
        for command in &self.commands {
            invocation.key(command.key());
        }
        for command in &self.commands {
            invocation.arg(command.name());
        }
        let reply: Vec<Value> = bounded(
            BACKEND,
            self.call_timeout,
            "fenced peek",
            invocation.invoke_async(&mut ScriptsPerNode(&mut self.conn)),
        )
        .await?;
        let mut items = reply.into_iter();
        let (token, owner) = (items.next(), items.next());
        let fence = match (token, owner) {
            (Some(Value::BulkString(token)), Some(Value::BulkString(owner))) => {
                Some(parse_fence(BACKEND, Some(&token), Some(&owner))?)
            }
            (Some(Value::Nil), Some(Value::Nil)) => None,
            _ => {
                return Err(protocol(
                    BACKEND,
                    "the fenced peek answered something unexpected",
                ));
            }
        };
        Ok((fence, decode_replies(&self.commands, items)?))
    }
}

/// The commit script's reply: the commands' replies, or the stale fence.
fn decode_commit(
    resource: &LockKey,
    presented: Fence,
    commands: &[Command],
    reply: Value,
) -> Result<Vec<Reply>> {
    let unexpected = || protocol(BACKEND, "the fenced commit answered something unexpected");
    let Value::Array(items) = reply else {
        return Err(unexpected());
    };
    let mut items = items.into_iter();
    match items.next() {
        Some(Value::BulkString(status)) if status == b"ok" => decode_replies(commands, items),
        Some(Value::BulkString(status)) if status == b"evicts" => {
            let Some(Value::BulkString(policy)) = items.next() else {
                return Err(unexpected());
            };
            Err(Error::config(format!(
                "the server of this RedisFence connection may evict keys (maxmemory-policy \
                 {}): under memory pressure it can delete the fence record of {resource}, \
                 which lets a stale holder in; set `maxmemory-policy noeviction` on the \
                 server, or accept the risk with RedisFence::allow_eviction(true)",
                String::from_utf8_lossy(&policy)
            )))
        }
        Some(Value::BulkString(status)) if status == b"stale" => {
            let (token, owner) = (items.next(), items.next());
            let (Some(Value::BulkString(token)), Some(Value::BulkString(owner))) = (token, owner)
            else {
                return Err(unexpected());
            };
            Err(Error::Stale {
                resource: resource.to_string(),
                presented,
                current: parse_fence(BACKEND, Some(&token), Some(&owner))?,
            })
        }
        _ => Err(unexpected()),
    }
}

fn decode_replies(
    commands: &[Command],
    items: impl ExactSizeIterator<Item = Value>,
) -> Result<Vec<Reply>> {
    if items.len() != commands.len() {
        return Err(protocol(
            BACKEND,
            format!(
                "a fenced batch of {} commands got {} replies",
                commands.len(),
                items.len()
            ),
        ));
    }
    commands
        .iter()
        .zip(items)
        .map(|(command, value)| command.decode(value))
        .collect()
}
