//! A guide to fencelock, from the first lock to running it in production.
//!
//! Read it top to bottom: each section builds on the one before. Every Rust block is a complete
//! program, compiled as a test of this crate; the ones that need a server are only compiled. This
//! page exists in builds with the features `redis`, `postgres`, `mysql`, `zookeeper`,
//! `object-store` and `blocking`.
//!
//! # 1. Why fencing
//!
//! A lock server cannot tell a dead client from a paused one. A client can stop for a while at any
//! moment: a garbage-collection pause, a page swapped out, a throttled VM. If it stops for longer
//! than its lease, the server gives the lock to someone else. When the first client wakes up, it
//! still believes it holds the lock, and it writes.
//!
//! Checking "do I still hold it?" before the write does not help: the pause can come right after
//! the check. No lock alone closes this gap.
//!
//! fencelock closes it where the data lives. Every grant carries a **fencing token**, a number that
//! strictly increases per key. Every operation on the data presents the grant's **fence** (the
//! token and a random owner id). The storage remembers the newest fence it has admitted per
//! resource and refuses any older one with [`Error::Stale`](crate::Error::Stale). A paused holder
//! can never overwrite its successor's work.
//!
//! Here is the whole story, on the in-process backend ([`fencelock::memory`](crate::memory)):
//!
//! ```rust
//! use std::time::Duration;
//!
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{Error, FencedStorageExt, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     // One lock service and one store, shared by two clients (two `Locker`s).
//!     let backend = MemoryLockBackend::new();
//!     let storage = MemoryStorage::new();
//!     let client1 = Locker::new(backend.clone());
//!     let client2 = Locker::new(backend);
//!
//!     // Client 1 takes a short lease. Its watchdog is off: a paused process renews nothing.
//!     let old = client1
//!         .lock("account-7")
//!         .ttl(Duration::from_millis(100))
//!         .watchdog(false)
//!         .await?;
//!     let _balance = storage.read_key("account-7", old.fence()).await?; // a fenced read
//!
//!     // Client 1 pauses for longer than its lease.
//!     tokio::time::sleep(Duration::from_millis(300)).await;
//!
//!     // The lease ran out, so client 2 gets the lock, with a greater token, and writes.
//!     let new = client2.lock("account-7").await?;
//!     assert!(new.token() > old.token());
//!     let new_fence = new.fence();
//!     storage.write_key("account-7", new_fence, b"balance=150").await?;
//!     new.release().await?;
//!
//!     // Client 1 wakes up and writes what it computed before the pause: refused.
//!     let late = storage.write_key("account-7", old.fence(), b"balance=70").await;
//!     match late {
//!         Err(Error::Stale { presented, current, .. }) => {
//!             assert_eq!(presented, old.fence());
//!             assert_eq!(current, new_fence);
//!         }
//!         other => panic!("the stale write was not refused: {other:?}"),
//!     }
//!     assert!(!old.release().await?); // false: the lease was already gone
//!     Ok(())
//! }
//! ```
//!
//! Two things follow, and the rest of this guide leans on them (DESIGN.md, section 2):
//!
//! - **Safety lives in the storage.** Even if the lock service fails and two clients hold "the
//!   lock" at once, no admitted operation is lost or overwritten by a stale one.
//! - **The lock service is responsible for liveness.** Tokens that increase in grant order mean
//!   the newest holder is admitted. A token that goes backwards (a counter lost in a server
//!   restart) fences the new holder out until the counter is raised again (section 8). That is a
//!   stall, never lost data.
//!
//! Reads count too. A fenced read advances the fence like a write, so a holder that read under an
//! old token can no longer write after a newer holder has read. `fencelock demo` (section 6) tells
//! the same story on any backend, with and without fencing.
//!
//! # 2. The first lock
//!
//! A [`Locker`](crate::Locker) takes locks from one backend. [`lock(key)`](crate::Locker::lock)
//! builds a request; you can set its options, then `.await` it for a
//! [`LockGuard`](crate::LockGuard). The guard's [`fence()`](crate::LockGuard::fence) is what you
//! present to storage. [`release()`](crate::LockGuard::release) ends it and tells you whether the
//! lock was still held.
//!
//! ```rust
//! use std::time::Duration;
//!
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{DEFAULT_TTL, Error, FencedStorageExt, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let storage = MemoryStorage::new();
//!
//!     // The defaults every request starts from.
//!     let defaults = locker.options();
//!     assert_eq!(defaults.ttl, DEFAULT_TTL); // 30 s, or the backend's longest lease if shorter
//!     assert_eq!(defaults.wait, Duration::from_secs(10));
//!     assert!(defaults.watchdog && defaults.fair);
//!
//!     let guard = locker
//!         .lock("reports/daily")
//!         .ttl(Duration::from_secs(10)) // the lease; the watchdog renews it at about a third
//!         .wait(Duration::from_secs(5)) // how long to wait while someone else holds it
//!         .await?; // Error::Timeout when the wait runs out
//!
//!     // Locks are not re-entrant: this locker asking again fails at once.
//!     let again = locker.lock("reports/daily").await;
//!     assert!(matches!(again, Err(Error::AlreadyHeld { .. })));
//!
//!     let fence = guard.fence(); // (token, owner): present it with every operation
//!     storage.write_key("reports/daily", fence, b"done").await?;
//!     assert!(guard.release().await?); // true: it was still held
//!
//!     locker.shutdown().await?; // the last line: no lock is left to its ttl
//!     Ok(())
//! }
//! ```
//!
//! The defaults ([`LockOptions`](crate::LockOptions)), each changed on the request:
//!
//! | setting | default | set with |
//! |---|---|---|
//! | lease ttl | 30 s ([`DEFAULT_TTL`](crate::DEFAULT_TTL)), or the backend's longest lease when that is shorter (a ZooKeeper session) | [`ttl`](crate::LockRequest::ttl) |
//! | wait for a held lock | 10 s; zero tries once | [`wait`](crate::LockRequest::wait), [`wait_forever`](crate::LockRequest::wait_forever) |
//! | watchdog (renews at about ttl/3) | on | [`watchdog`](crate::LockRequest::watchdog) |
//! | fair queue where the backend has one | on | [`fair`](crate::LockRequest::fair) |
//!
//! [`Locker::with_options`](crate::Locker::with_options) changes them for every request of a
//! locker. [`try_lock`](crate::Locker::try_lock) tries once and returns `None` when the lock is
//! held.
//!
//! A few rules worth knowing on day one:
//!
//! - **One holder per `Locker` value.** Each clone of a `Locker` is a holder of its own: give each
//!   task that may contend for a key its own clone. The same value asking for a key it holds gets
//!   [`Error::AlreadyHeld`](crate::Error::AlreadyHeld), without waiting and without a new token.
//! - **End guards on purpose.** Dropping a guard releases the lock in a background task, which
//!   never reaches the server if the runtime shuts down first; the lock then lapses at its ttl.
//!   Prefer `release().await`, and call [`Locker::shutdown`](crate::Locker::shutdown) before
//!   `main` returns.
//! - **Stop when the lease is lost.** [`lost()`](crate::LockGuard::lost) completes when the
//!   watchdog cannot renew, or the lock is gone. Stop working then: your writes would be refused
//!   anyway.
//!
//! [`fencelock::scope`](crate::scope) handles the last two rules for you. It takes the lock, hands
//! the work the fence, stops the work at its next `.await` if the lease is lost (returning
//! [`Error::LeaseLost`](crate::Error::LeaseLost)), and releases the lock after:
//!
//! ```rust
//! use std::time::Duration;
//!
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{FencedStorageExt, Locker, scope};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let storage = MemoryStorage::new();
//!
//!     let request = locker.lock("nightly-report").ttl(Duration::from_secs(30));
//!     let written = scope(request, |fence| async move {
//!         // Every write presents the fence: a holder superseded meanwhile is refused.
//!         storage.write_key("nightly-report", fence, b"done").await
//!     })
//!     .await; // the lock's error, if any
//!     written??; // then the work's own
//!     Ok(())
//! }
//! ```
//!
//! `scope` takes every lock kind of section 4: sets, readers, writers, permits and campaigns.
//!
//! # 3. Fencing your own data
//!
//! The lock only hands out tokens. Fencing happens where your data is, and the check must be
//! atomic with the write. fencelock ships that check for the places data usually lives. Each
//! takes a fence from a lock of **any** backend: a Redis lock can fence PostgreSQL rows.
//!
//! ## PostgreSQL tables: `PgFence`
//!
//! [`PgFence::admit`](crate::postgres::PgFence::admit) runs `fencelock_admit` inside your
//! transaction. It admits the fence for one named resource and keeps that resource's fence record
//! locked until your transaction ends. Every statement after it, in any table, is fenced: the
//! transaction commits with the admitted fence, or a refusal aborts it and nothing is written.
//!
//! ```rust,no_run
//! use std::time::Duration;
//!
//! use fencelock::Locker;
//! use fencelock::postgres::{PgDatabase, SqlxResultExt, sqlx};
//! use fencelock::spec::BackendSpec;
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let pool = sqlx::PgPool::connect("postgres://app@db/app").await.into_fencelock("app")?;
//!     let db = PgDatabase::from_pool(pool.clone(), "fencelock")?; // fencelock's schema
//!     db.migrate().await?; // once, at start-up: installs fencelock_admit
//!     let fence = db.fence();
//!
//!     // The lock may come from anywhere; here, Redis.
//!     let locks = BackendSpec::parse("redis://cache:6379")?.connect().await?;
//!     let locker = Locker::new(locks.backend);
//!     let guard = locker.lock("account/10").ttl(Duration::from_secs(10)).await?;
//!
//!     let mut tx = pool.begin().await.into_fencelock("app")?;
//!     fence.admit(&mut *tx, "account/10", guard.fence()).await?; // Error::Stale if superseded
//!     sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 10")
//!         .execute(&mut *tx)
//!         .await
//!         .into_fencelock("app")?;
//!     sqlx::query("INSERT INTO audit_log (account_id, amount, fence_token) VALUES (10, -100, $1)")
//!         .bind(i64::try_from(guard.fence().token)?) // a token as a bigint, checked
//!         .execute(&mut *tx)
//!         .await
//!         .into_fencelock("app")?;
//!     tx.commit().await.into_fencelock("app")?;
//!     guard.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! The rules for your transaction:
//!
//! - **Admit first**, then read and write, then commit at once. The next holder's admit waits for
//!   your transaction, so do nothing slow in between (no calls to other services).
//! - **Reads count.** For read, compute, write, admit before the `SELECT`. A statement that
//!   computes the new value itself (`SET balance = balance - 100`) needs no separate read.
//! - **`?` on driver errors** needs `.into_fencelock("name")`
//!   ([`SqlxResultExt`](crate::postgres::SqlxResultExt)): the core error type cannot convert
//!   from `sqlx::Error` by itself.
//! - **Tokens in your own columns** go through `i64::try_from(token)?` and come back through
//!   `FencingToken::try_from(value)?`; both refuse a value that would wrap.
//!
//! For single-row updates, a trigger can fence each row of a table by two fence columns instead
//! ([`PgFence::guard_table`](crate::postgres::PgFence::guard_table)). The crate docs of
//! [`fencelock::postgres`](crate::postgres) cover it, and `examples/ledger.rs` and
//! `examples/redis_lock_postgres_data.rs` are whole programs.
//!
//! ## MySQL and MariaDB tables: `MySqlFence`
//!
//! [`MySqlFence`](crate::mysql::MySqlFence) is the same check in your MySQL or MariaDB
//! transaction. A refusal rolls back your whole transaction before it returns `Error::Stale`.
//!
//! ```rust,no_run
//! use std::time::Duration;
//!
//! use fencelock::Locker;
//! use fencelock::mysql::{MySqlConfig, map_sqlx_error, sqlx};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let db = MySqlConfig::from_url("mysql://app@db:3306/shop")?.connect().await?;
//!     let locker = Locker::new(db.lock_backend());
//!     let sql = |e: sqlx::Error| map_sqlx_error("shop", e);
//!
//!     let guard = locker.lock("accounts/10").ttl(Duration::from_secs(10)).await?;
//!     let mut tx = db.pool().begin().await.map_err(sql)?;
//!     db.fence().admit(&mut tx, "accounts/10", guard.fence()).await?; // first, before reading
//!     sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 10")
//!         .execute(&mut *tx)
//!         .await
//!         .map_err(sql)?;
//!     tx.commit().await.map_err(sql)?;
//!     guard.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Redis keys: `RedisFence`
//!
//! [`RedisFence`](crate::redis::RedisFence) runs one Lua script that admits the fence and applies
//! your commands (`set`, `hset`, `del`, `incr_by`, `expire`, and the fenced reads `get` and
//! `hgetall`), atomically. Every key of a batch must carry the resource's hash tag, so that the
//! batch works on Redis Cluster too.
//!
//! ```rust,no_run
//! use std::time::Duration;
//!
//! use fencelock::redis::{RedisConfig, Reply, hash_tag};
//! use fencelock::{Error, LockKey, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let backend = RedisConfig::from_url("redis://127.0.0.1:6379")?.connect().await?;
//!     let fence = backend.fence(); // on the backend's connection; RedisFence::new(conn) on yours
//!     let locker = Locker::new(backend);
//!
//!     let account = LockKey::new("account:42")?;
//!     let tag = hash_tag(&account); // "{account:42}": every key of the batch shares its slot
//!     let guard = locker.lock(&account).ttl(Duration::from_secs(10)).await?;
//!     let result = fence
//!         .incr_by(format!("balance:{tag}"), -100)
//!         .hset(format!("audit:{tag}"), guard.token().to_string(), "debit 100")
//!         .commit(&account, guard.fence())
//!         .await;
//!     match result {
//!         Ok(replies) => assert!(matches!(replies[0], Reply::Int(_))), // the new balance
//!         Err(Error::Stale { .. }) => {} // a newer holder came by: nothing was applied
//!         Err(e) => return Err(e),
//!     }
//!     guard.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Object storage: `ObjectFence`
//!
//! [`ObjectFence`](crate::object_store::ObjectFence) fences your own objects on S3 and
//! S3-compatible servers, GCS, Azure and the in-memory store. Each object keeps its fence in a
//! header line of its body, and every fenced put is a conditional put on the version just read. A
//! store that cannot refuse a stale conditional put is refused when connecting.
//!
//! ```rust
//! use fencelock::memory::MemoryLockBackend;
//! use fencelock::object_store::ObjectStoreConfig;
//! use fencelock::object_store::object_store::path::Path;
//! use fencelock::{Error, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     // In production: "s3://bucket/prefix?endpoint=..&access_key_id=..&secret_access_key=..".
//!     let objects = ObjectStoreConfig::from_url("memory-objects://")?.connect_fence().await?;
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let report = Path::from("reports/q3.json");
//!
//!     // A holder that keeps its fence past its lease (or, here, past its release)...
//!     let first = locker.lock("reports/q3").await?;
//!     let stale = first.fence();
//!     objects.put(&report, stale, b"draft").await?;
//!     first.release().await?;
//!
//!     // ...is refused once the next holder has written.
//!     let second = locker.lock("reports/q3").await?;
//!     objects.put(&report, second.fence(), b"final").await?;
//!     let late = objects.put(&report, stale, b"draft 2").await;
//!     assert!(matches!(late, Err(Error::Stale { .. })));
//!     let read = objects.get(&report, second.fence()).await?; // a fenced read
//!     assert_eq!(read.as_deref(), Some(&b"final"[..]));
//!     second.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! Delete with `ObjectFence::delete`, which leaves a tombstone that keeps the fence. A `DELETE`
//! through the store, or a lifecycle rule that expires objects, forgets the fence (section 8).
//!
//! Readers that know nothing of fencelock (Spark, `aws s3 cp`) see the header line. On S3 it
//! stays: the conditional put names the ETag, which is the MD5 of the body alone, so a fence kept
//! in metadata could advance without the ETag changing, and an older holder's put would still
//! land. Such readers fetch the object and strip the header with
//! [`decode`](crate::object_store::decode). On a store whose version changes with every put
//! (GCS, Azure, the in-memory store),
//! [`ObjectLayout::Raw`](crate::object_store::ObjectLayout::Raw) leaves the body exactly as
//! written and keeps the fence in the object's metadata; connecting with it checks the store
//! with a probe object, and refuses S3 saying why.
//!
//! ```rust
//! use std::sync::Arc;
//!
//! use fencelock::Locker;
//! use fencelock::memory::MemoryLockBackend;
//! use fencelock::object_store::object_store::memory::InMemory;
//! use fencelock::object_store::object_store::path::Path;
//! use fencelock::object_store::object_store::{ObjectStore, ObjectStoreExt};
//! use fencelock::object_store::{ObjectFence, ObjectLayout, decode};
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let guard = locker.lock("events").await?;
//!     let part = Path::from("events/part-0.json");
//!
//!     // S3 (the in-memory store stands in for it here): the default framed layout, and a
//!     // reader that fetches the object itself decodes it.
//!     let s3: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
//!     let framed = ObjectFence::connect(s3.clone(), &Path::default()).await?;
//!     framed.put(&part, guard.fence(), b"{\"id\":1}").await?;
//!     let body = s3.get(&part).await?.bytes().await?;
//!     let object = decode(body).ok_or("not a fenced object")?;
//!     assert_eq!(object.value.as_deref(), Some(&b"{\"id\":1}"[..]));
//!     assert_eq!(object.fence, guard.fence());
//!
//!     // A store whose version moves with every put: the body as written, for any reader.
//!     let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
//!     let raw = ObjectFence::connect_with_layout(store.clone(), &Path::default(), ObjectLayout::Raw)
//!         .await?;
//!     raw.put(&part, guard.fence(), b"{\"id\":1}").await?;
//!     assert_eq!(&store.get(&part).await?.bytes().await?[..], b"{\"id\":1}");
//!     guard.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## The backend's own storage
//!
//! Every lock backend ships a [`FencedStorage`](crate::FencedStorage) next to it: a key-value
//! store that applies the same rule. [`FencedStorageExt`](crate::FencedStorageExt) gives it
//! methods by name: [`read_key`](crate::FencedStorageExt::read_key),
//! [`write_key`](crate::FencedStorageExt::write_key) and the unfenced observer read
//! [`peek_key`](crate::FencedStorageExt::peek_key). With a server,
//! `BackendSpec::parse(url)?.connect().await?` returns the lock backend and this storage together
//! ([`BackendSpec`](crate::spec::BackendSpec)).
//!
//! ```rust
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{FencedStorageExt, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let storage = MemoryStorage::new();
//!
//!     let guard = locker.lock("visits").await?;
//!     let fence = guard.fence();
//!     // Read, compute, write: the read is fenced too.
//!     let old = storage.read_key("visits", fence).await?;
//!     let count: u64 = old
//!         .and_then(|bytes| String::from_utf8(bytes).ok())
//!         .and_then(|text| text.parse().ok())
//!         .unwrap_or(0);
//!     storage.write_key("visits", fence, (count + 1).to_string().as_bytes()).await?;
//!     guard.release().await?;
//!
//!     // An observer's read: no fence presented, nothing advanced.
//!     let snapshot = storage.peek_key("visits").await?.expect("written above");
//!     assert_eq!(snapshot.value.as_deref(), Some(&b"1"[..]));
//!     assert_eq!(snapshot.fence, fence);
//!     Ok(())
//! }
//! ```
//!
//! Operations on different resources are fenced independently, so a holder that touches several
//! can be refused half way. Keep one resource per critical section, or put the work in one
//! database transaction (`PgFence`, `MySqlFence`).
//!
//! # 4. Beyond one exclusive lock
//!
//! ## Sets of keys
//!
//! [`lock_all`](crate::Locker::lock_all) takes every key of a set, or none. The keys are taken in
//! one sorted order, whatever order you give, so two callers with overlapping sets never deadlock.
//! If one key is not obtained within the wait, the keys already taken are released. The
//! [`CompositeGuard`](crate::CompositeGuard) keeps each member's own fence: present
//! `guard.fence("accounts/a")` with writes to `accounts/a`'s data.
//!
//! ```rust
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{FencedStorageExt, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let storage = MemoryStorage::new();
//!
//!     let both = locker.lock_all(["accounts/bob", "accounts/alice"]).await?;
//!     let alice = both.fence("accounts/alice").expect("a member of the set");
//!     storage.write_key("accounts/alice", alice, b"balance=50").await?;
//!     for (key, fence) in both.fences() {
//!         // Every member's key and fence, in key order.
//!         storage.write_key(&key, fence, b"audited").await?;
//!     }
//!     assert!(both.release().await?);
//!     Ok(())
//! }
//! ```
//!
//! A set's `lost()` fires when any member is lost. Where the backend can, a set of free keys is
//! granted in one step ([`Capabilities::atomic_sets`](crate::Capabilities::atomic_sets), section
//! 7); elsewhere the keys are taken one at a time.
//!
//! To admit a whole set in one database transaction, use
//! [`PgFence::admit_all`](crate::postgres::PgFence::admit_all) or `MySqlFence::admit_all`. They
//! admit in one global order, so two transactions with overlapping sets never deadlock either:
//!
//! ```rust,no_run
//! use fencelock::Locker;
//! use fencelock::postgres::{PgDatabase, SqlxResultExt};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let db = PgDatabase::connect("postgres://app@db/app").await?; // creates the schema
//!     let locker = Locker::new(db.backend()); // the lease backend of the same database
//!
//!     let both = locker.lock_all(["accounts/alice", "accounts/bob"]).await?;
//!     let mut tx = db.pool().begin().await.into_fencelock("app")?;
//!     db.fence().admit_all(&mut tx, both.fences()).await?;
//!     // ... the transfer's UPDATEs ...
//!     tx.commit().await.into_fencelock("app")?;
//!     both.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! ## Readers and upgrades
//!
//! [`RwLocker`](crate::RwLocker) gives read/write locks. Readers that overlap share one read
//! fence. A writer is the key's exclusive lock, so its token is greater than the read fence before
//! it, and the storage refuses the readers once the writer has touched the data. There is no
//! writer preference: a stream of readers can keep a writer waiting.
//!
//! An [upgradeable reader](crate::RwLocker::upgradeable_read) reads beside plain readers, then
//! upgrades to the writer with no other writer in between. One at a time per key. Where you use
//! upgradeable readers, take writers with [`rw.write(key)`](crate::RwLocker::write), which keeps
//! that promise.
//!
//! ```rust
//! use std::time::Duration;
//!
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{FencedStorageExt, Locker, RwLocker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let rw = RwLocker::new(Locker::new(MemoryLockBackend::new()));
//!     let storage = MemoryStorage::new();
//!
//!     let a = rw.read("catalog").await?;
//!     let b = rw.read("catalog").await?;
//!     assert_eq!(a.fence(), b.fence()); // one read fence for the phase
//!     let _catalog = storage.read_key("catalog", a.fence()).await?;
//!     a.release().await?;
//!     b.release().await?;
//!
//!     let reader = rw.upgradeable_read("catalog").await?;
//!     let _current = storage.read_key("catalog", reader.fence()).await?;
//!     let writer = reader.upgrade(Duration::from_secs(1)).await?; // a new, greater token
//!     storage.write_key("catalog", writer.fence(), b"v2").await?;
//!     writer.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! Shared locks need a primitive of the backend's own. Every backend but Redlock offers them; on
//! Redlock a reader is refused with [`Error::Unsupported`](crate::Error::Unsupported).
//!
//! ## Elections and semaphores
//!
//! An [`Election`](crate::Election) campaign waits for the election key's lock and holds it with
//! the watchdog. The grant's token is the **term**, and the leader's fence is the fence for
//! everything it writes: a deposed leader that still writes is refused once its successor has
//! written. [`Election::observe`](crate::Election::observe) reports changes of leader.
//!
//! A [`Semaphore`](crate::Semaphore) of N permits is N slots, each the exclusive lock on
//! `<key>/permit/<i>`. Each slot has its own tokens, so a permit fences the data of its slot, not
//! data shared by all holders (that needs a lock).
//!
//! Both are built on exclusive locks, so they work on every backend.
//!
//! ```rust
//! use fencelock::memory::{MemoryLockBackend, MemoryStorage};
//! use fencelock::{Election, FencedStorageExt, Locker, Semaphore};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let locker = Locker::new(MemoryLockBackend::new());
//!     let storage = MemoryStorage::new();
//!
//!     // One leader per term.
//!     let election = Election::new(&locker, "scheduler")?;
//!     let leader = election.campaign().await?;
//!     storage.write_key("schedule", leader.fence(), b"run at 02:00").await?;
//!     assert_eq!(leader.term(), leader.fence().token);
//!     leader.resign().await?;
//!
//!     // At most two transcoders at once.
//!     let transcode = Semaphore::new(&locker, "transcode", 2)?;
//!     let permit = transcode.acquire().await?;
//!     storage.write_key(permit.slot_key(), permit.fence(), b"job 17").await?;
//!     permit.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! # 5. Without an async runtime: `fencelock::blocking`
//!
//! [`fencelock::blocking`](crate::blocking) has the same locks and storage, one blocking call
//! each. Its [`Locker`](crate::blocking::Locker) owns a small runtime with one worker thread. Its
//! requests run there, and its guards' watchdogs renew there while your thread works or sleeps.
//! The contract, the errors and the defaults are those of the async API.
//!
//! ```rust
//! use std::time::Duration;
//!
//! use fencelock::blocking::Locker;
//!
//! fn main() -> fencelock::Result<()> {
//!     // Any spec: "redis://127.0.0.1:6379", "postgres://app@db/app", ...
//!     let (locker, storage) = Locker::connect("memory://")?;
//!
//!     let guard = locker.lock("nightly-report").ttl(Duration::from_secs(10)).acquire()?;
//!     storage.write("nightly-report", guard.fence(), b"done")?;
//!
//!     // Another holder (a clone is a holder of its own) finds the lock taken.
//!     assert!(locker.clone().try_lock("nightly-report")?.is_none());
//!
//!     assert!(guard.release()?);
//!     Ok(())
//! }
//! ```
//!
//! Dropping a blocking guard releases the lock and waits for the answer. A call made from inside
//! an async runtime would block one of its threads, so it is refused with `Error::Unsupported`:
//! use the async API there. For the lock kinds of section 4,
//! [`as_async`](crate::blocking::Locker::as_async) gives the async locker underneath.
//!
//! # 6. The command line, for scripts
//!
//! The `fencelock` command (crate `fencelock-cli`) works with any backend spec. It takes the spec
//! as `--backend` or from `FENCELOCK_BACKEND`. A spec with a password belongs in a file only you
//! can read, given as `--backend @FILE`: on the command line it is visible to every user in the
//! process list. `run`, `elect`, `inspect` and `advance-token` refuse `memory://`, which excludes
//! nothing across processes.
//!
//! ## `fencelock run`: a command under a lock
//!
//! `run` takes the lock, runs the command while a watchdog renews the lease, releases the lock
//! when the command exits, and exits with the command's code. The command gets `FENCELOCK_KEY`,
//! `FENCELOCK_TOKEN` and `FENCELOCK_OWNER` in its environment.
//!
//! ```text
//! # a cron job that runs once across hosts
//! fencelock run --backend redis://redis.example:6379 --key nightly-report -- ./report.sh
//! # wait up to a minute for the lock, with a 10 s lease renewed while the job runs
//! export FENCELOCK_BACKEND=postgres://app@db.example/app
//! fencelock run --key migrate --wait 1m --ttl 10s -- ./migrate
//! # flock(1) spellings: try once, exit 1 when held, a shell string, no message
//! fencelock run -n -E 1 -q --key backup -c 'pg_dump app > app.sql'
//! # readers side by side; at most 4 at once; two locks together, all or none
//! fencelock run --key catalog --shared -- ./export-catalog.sh
//! fencelock run --key transcode --permits 4 --wait 10m -- ./transcode.sh
//! fencelock run --key accounts/alice --key accounts/bob -- ./transfer.sh
//! ```
//!
//! Unlike the library, `run` does not wait by default: `--wait` is 0, which connects and tries
//! once. `--wait` bounds connecting as well as waiting.
//!
//! The exit codes a script can rely on:
//!
//! | code | meaning |
//! |---|---|
//! | the command's | the command ran under the lock and exited with it |
//! | 75 | the lock was not obtained within `--wait` (`-E CODE` chooses another) |
//! | 76 | the lease was lost while the command ran; the command got SIGTERM, then SIGKILL after `--grace` |
//! | 128 + N | fencelock got signal N: it passed it on, waited for the command to exit, then released |
//! | 126, 127 | the command could not be executed, or was not found |
//! | 2 | bad input (spec, key, ttl, arguments); nothing was changed |
//! | 1 | fencelock failed (for example, the server did not answer in time) |
//!
//! The command runs in a process group of its own, and if fencelock dies, the kernel (on Linux)
//! kills the command too. A *stopped* fencelock (SIGSTOP, a frozen VM) is not dead, though: its
//! lease runs out while the command works on. So a job that writes data presents its token with
//! every write. A shell job writing PostgreSQL admits its fence first in its own transaction:
//!
//! ```text
//! fencelock run --key ledger -c 'exec psql "$DATABASE_URL" -v ON_ERROR_STOP=1 \
//!     -v token="$FENCELOCK_TOKEN" -v owner="$FENCELOCK_OWNER" -f post-ledger.sql'
//! # post-ledger.sql:
//! #   BEGIN;
//! #   SELECT fencelock_admit('ledger', :token, decode(:'owner', 'hex'));
//! #   UPDATE accounts SET balance = balance - 10 WHERE id = 1;
//! #   COMMIT;
//! ```
//!
//! `run --json` writes the grant as one JSON line on stderr before the command starts, and
//! `--grant-file PATH` writes it to a file of its own.
//!
//! ## `fencelock elect`: a command while leader
//!
//! `elect` campaigns for a key and runs the command while it leads. The term is handed to the
//! command as `FENCELOCK_TOKEN` (and `FENCELOCK_TERM`). It campaigns without a time limit unless
//! `--wait` sets one.
//!
//! ```text
//! # one scheduler across hosts; a standby takes over within a ttl when the leader dies
//! fencelock elect --backend redis://redis.example:6379 --key scheduler -- ./scheduler
//! # cron on every host: only one runs the job; the others exit 0 quietly
//! fencelock elect -n -q -E 0 --key nightly -c 'backup --all'
//! ```
//!
//! ## `fencelock inspect` and `fencelock advance-token`
//!
//! `inspect` shows who holds a lock, with which token and for how long, the key's last token, its
//! queue of waiters, and what the backend guarantees. `advance-token` raises a key's token counter.
//! Section 8 says when you need them.
//!
//! ```text
//! fencelock inspect --backend redis://127.0.0.1:6379 nightly-report
//! fencelock inspect --json nightly-report | jq '.holder.token'
//! fencelock inspect --permits 4 transcode
//! # after a Redis restart without persistence, the storage is at token 41
//! fencelock advance-token --backend redis://127.0.0.1:6379 --key nightly-report --to 41
//! ```
//!
//! Every subcommand's `--help` lists its options, examples and exit codes.
//!
//! # 7. Choosing a backend
//!
//! Every backend keeps the contract of section 1. They differ in what they promise beyond it. A
//! backend says so in its [`Capabilities`](crate::Capabilities), and `fencelock inspect` prints
//! them in words.
//!
//! ```rust
//! use fencelock::memory::MemoryLockBackend;
//! use fencelock::{LockBackend, TimeAuthority, TokenGuarantee};
//!
//! fn main() {
//!     let capabilities = MemoryLockBackend::new().capabilities();
//!     assert_eq!(capabilities.tokens, TokenGuarantee::None); // counters live as long as the value
//!     assert_eq!(capabilities.time_authority, TimeAuthority::Client);
//!     assert!(capabilities.fair && capabilities.kinds.shared && capabilities.atomic_sets);
//! }
//! ```
//!
//! The same, read from servers:
//!
//! ```rust,no_run
//! use fencelock::spec::BackendSpec;
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     for url in [
//!         "redis://127.0.0.1:6379",
//!         "postgres://app@db/app?backend=lease",
//!         "mysql://app@db:3306/app",
//!         "zookeeper://zk1:2181,zk2:2181,zk3:2181",
//!     ] {
//!         let connected = BackendSpec::parse(url)?.connect().await?;
//!         let capabilities = connected.backend.capabilities();
//!         println!(
//!             "{url}: tokens {:?}, clock {:?}, fair {}",
//!             capabilities.tokens, capabilities.time_authority, capabilities.fair
//!         );
//!     }
//!     Ok(())
//! }
//! ```
//!
//! ## What each backend guarantees
//!
//! From each backend's `Capabilities` and DESIGN.md, section 5.
//!
//! - **Tokens** ([`TokenGuarantee`](crate::TokenGuarantee)): whether the token counters survive
//!   a restart of the server. If they do not, tokens can repeat after a restart; the storage then
//!   refuses the new holders until the counter is raised (section 8). A stall, never lost data.
//! - **Lease clock** ([`TimeAuthority`](crate::TimeAuthority)): whose clock ends a lease. `Server`
//!   means the server's clock, so a client's clock does not matter.
//! - **Fair**: a waiting request keeps its place in arrival order, and a release hands the lock to
//!   the first waiter.
//! - **Readers**: shared locks ([`RwLocker`](crate::RwLocker)). Semaphores and elections work
//!   everywhere.
//! - **Set in one step**: a set of free keys granted in one round trip
//!   ([`lock_all`](crate::Locker::lock_all)).
//!
//! | backend (spec) | tokens | lease clock | fair | readers | set in one step |
//! |---|---|---|---|---|---|
//! | memory (`memory://`) | `None`: live as long as the backend value, one process | `Client` | yes | yes | yes |
//! | Redis, one server (`redis://`) | `DurableIfServerPersists`: only with AOF (`appendfsync always`) | `Server` | yes | yes | yes |
//! | Redlock (`redlock://h1,h2,h3`) | `DurableIfServerPersists`, on each node | `Server` | no | no | no |
//! | Redis Cluster (`redis+cluster://`) | `DurableIfServerPersists`; a failover can lose a grant (the fence still holds) | `Server` | no (waiters poll) | yes | no |
//! | PostgreSQL lease (`postgres://...?backend=lease`, the default) | `Durable`: after a crash or failover, a new epoch keeps tokens increasing | `Server` | yes (not behind a transaction pooler) | yes | yes |
//! | PostgreSQL advisory (`?backend=advisory`) | `Durable` | `Server` | yes | yes | no |
//! | MySQL / MariaDB (`mysql://`, `mariadb://`) | `Durable` when `innodb_flush_log_at_trx_commit` is 1 (MariaDB: or 3); otherwise `DurableIfServerPersists` | `Server` | yes | yes | no |
//! | etcd (`etcd://`, feature `etcd`) | `Durable` | `Server` | yes | yes | yes |
//! | ZooKeeper (`zookeeper://`) | `Durable` | `Server`; a ttl is at most the session timeout | yes | yes | no |
//! | object storage (`s3://`, `memory-objects://`) | storage only: fences tokens from any lock backend | | | | |
//!
//! A few more things that decide a choice:
//!
//! - **Your data is in PostgreSQL or MySQL.** A lock from the same database gives durable tokens,
//!   and `PgFence` or `MySqlFence` commits the fence with your data. The PostgreSQL advisory
//!   backend and MySQL interoperate with plain `pg_advisory_lock` and `GET_LOCK` clients. Behind
//!   PgBouncer in transaction mode, use the lease backend.
//! - **Redis.** Fast, and fair on one server. Run it with `maxmemory-policy noeviction`: an
//!   evicted fence record would let a stale write in (connecting refuses such a server unless told
//!   otherwise). Without AOF, a restart loses the counters, which `advance-token` heals.
//! - **Redlock** survives the loss of a minority of nodes, at the price of no readers and no fair
//!   queue.
//! - **etcd and ZooKeeper** keep tokens on a quorum. etcd grants whole-second leases, needs
//!   `protoc` to build, and has no TLS yet. ZooKeeper's longest lease is its session timeout.
//! - **Memory** is for tests and for tasks of one process.
//!
//! ## What it costs
//!
//! BENCHMARKS.md compares each backend with the raw commands a user would write without
//! fencelock, on the same server. Its ratios are what matter; absolute times depend on the
//! machine. From its section *The same sitting again, at `c9581e8`* (two rounds each):
//!
//! | backend | acquire+release, against raw | hand-off with the watchdog on, in round trips after idle (memory: in time) |
//! |---|---|---|
//! | memory | 1.36x, 1.30x | 73.0, 72.4 µs |
//! | Redis | 1.11x, 1.18x | 1.86, 1.81 |
//! | Redlock, 5 nodes | 1.93x, 2.15x | 3.88, 4.13 |
//! | PostgreSQL lease | 3.21x, 2.89x | 3.51, 3.05 |
//! | PostgreSQL advisory | 2.56x, 2.80x | 4.07, 3.69 |
//! | MariaDB | 3.78x, 3.70x | 6.76, 5.19 |
//! | etcd, 3 members | 1.12x, 1.17x | 7.14, 5.81 |
//! | ZooKeeper, 3 servers | 1.22x, 1.22x | 4.28, 3.58 |
//!
//! The grant costs more than the raw command because it also advances the key's token counter.
//! A fenced write costs little more than a plain one: 1.18x a plain `SET` on Redis, and 1.12x
//! (lease schema) and 1.14x (advisory schema) a raw `UPDATE` on PostgreSQL (BENCHMARKS.md,
//! *Against the targets*).
//!
//! Fair waiting is the default: it keeps the order of waiters across processes, and on one
//! Redis server it is also the faster (64 tasks on one key: 5,292-7,679 grants/s fair against
//! 4,067-5,391 barging, p99 13-18 ms against 17-22 ms, in three sittings). `lock(k).fair(false)`
//! barges where that suits you better: within one process a release then passes the lock to the
//! next barging waiter in one step, which on the PostgreSQL lease backend made a hot key of one
//! process faster than fair (939-1,381 grants/s against 686-865 with 16 and 64 tasks)
//! (BENCHMARKS.md, *Passing within a process*).
//!
//! # 8. Operating it
//!
//! ## Moving to another lock service
//!
//! Moving a resource from one lock service to another (say, from Redis to the PostgreSQL lease
//! backend) over the same data has one trap. The storage holds the old service's tokens, which
//! are often larger than what the new service grants at first. The new holders are refused until
//! the new counter is past them.
//!
//! Raising the new counter past the storage's fence is not enough. The fence is the last token
//! that *wrote*; a holder of the old service with a larger token that has not written yet would
//! still be admitted after the new service's holder. The new counter must go past the old
//! service's **last grant** (DESIGN.md, section 2). The procedure:
//!
//! 1. Stop every client of the old service from taking the lock (deploy the new spec, or stop the
//!    jobs). The tool cannot check this step.
//! 2. For every key, raise the new counter past the old service's last grant:
//!
//!    ```text
//!    fencelock advance-token --backend 'postgres://app@db/app?backend=lease' \
//!        --key nightly-report --past redis://cache:6379
//!    ```
//!
//! 3. Start the clients on the new service.
//!
//! Then every old token is below every new one. An old holder is admitted only until a new holder
//! first writes, and refused as stale after that.
//!
//! From a program, step 2 is [`fencelock::move_past`](crate::move_past):
//!
//! ```rust
//! use fencelock::memory::MemoryLockBackend;
//! use fencelock::{LockKey, Locker, MovedPast, move_past};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     // Two lock services over the same data (in production, two servers).
//!     let (old, new) = (MemoryLockBackend::new(), MemoryLockBackend::new());
//!     let key = LockKey::new("nightly-report")?;
//!     let last = Locker::new(old.clone()).lock(&key).await?; // the old service's last grant
//!     let last_token = last.token();
//!     last.release().await?;
//!
//!     // Once no client takes the lock on the old service any more:
//!     let moved = move_past(&old, &new, &key).await?;
//!     assert!(matches!(moved, MovedPast::Moved { still_held: None, .. }));
//!
//!     let first = Locker::new(new).lock(&key).await?; // the new service's first grant
//!     assert!(first.token() > last_token);
//!     first.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! When the old service is gone and cannot be asked, lift the counter past the fence the storage
//! holds (`--to-fence-of RESOURCE`), or past the old service's last grant if you know it
//! (`--to N`). Only the second closes the gap described above.
//!
//! ## Watching it
//!
//! `fencelock inspect K` shows the holder, its token and time left, the key's last token, the
//! readers, and the queue of waiters in grant order. It also shows the storage's fence of the
//! resource (`--resource R`; the key by default) next to the last token, and says when the storage
//! is ahead: the sign of a counter that went back. `--json` prints one object for scripts
//! (`holder`, `last_token`, `never_granted`, `queue`, the capabilities in words). A key never used
//! under the spec's prefix shows as `never granted`, not as free: check the prefix or schema in the
//! URL.
//!
//! With the feature `metrics`, fencelock reports through the `metrics` facade
//! ([`fencelock::metrics`](crate::metrics)) to whichever recorder you install: grants, wait and
//! hold times, renewals, leases lost and backend errors. Stale refusals happen in the storage, so
//! wrap it to count them: [`MeteredStorage::new(storage)`](crate::metrics::MeteredStorage).
//!
//! ## Healing a counter
//!
//! After a restart that lost the counters (Redis without AOF, a ZooKeeper snapshot restored, an
//! etcd backup restored), grants start again below the storage's fences, and the storage refuses
//! the new holders. Nothing is lost, but nobody gets through. Raise the counter:
//!
//! ```text
//! # FENCELOCK_BACKEND names the lock service
//! fencelock advance-token --key nightly-report --to-fence-of nightly-report
//! fencelock advance-token --key nightly-report --to 41
//! ```
//!
//! The same from Rust is [`LockBackend::advance_token`](crate::LockBackend::advance_token), and
//! [`LockBackend::inspect`](crate::LockBackend::inspect) is what `inspect` reads:
//!
//! ```rust
//! use std::sync::Arc;
//!
//! use fencelock::memory::MemoryLockBackend;
//! use fencelock::{FencingToken, LockBackend, LockKey, Locker};
//!
//! #[tokio::main]
//! async fn main() -> fencelock::Result<()> {
//!     let backend = Arc::new(MemoryLockBackend::new());
//!     let key = LockKey::new("nightly-report")?;
//!     assert_eq!(backend.inspect(&key).await?.last_token, None); // never granted
//!
//!     // The next grant carries a token above 41.
//!     backend.advance_token(&key, FencingToken::new(41).expect("not zero")).await?;
//!     let locker = Locker::new(backend.clone());
//!     let guard = locker.lock(&key).await?;
//!     assert!(guard.token().get() > 41);
//!     assert_eq!(backend.inspect(&key).await?.holder, Some(guard.fence()));
//!     guard.release().await?;
//!     Ok(())
//! }
//! ```
//!
//! `advance-token` only ever raises a counter, and refuses a floor that would nearly use up the
//! key's counter unless given `--force`.
//!
//! ## What an operator must never delete
//!
//! fencelock keeps two kinds of state on your servers. Losing a **counter** is a liveness failure:
//! holders stall until `advance-token`. Losing a **fence** is a safety failure: the next write of
//! any token is admitted, a paused holder's included. Do not delete, expire or evict either
//! (DESIGN.md, sections 5 and 8):
//!
//! | backend | counters | fences |
//! |---|---|---|
//! | Redis | `{prefix}:{<key>}:token` (never expires) | `{prefix}:{<resource>}:data` (`RedisStorage`), `{prefix}:{<resource>}:fence` (`RedisFence`) |
//! | PostgreSQL | the rows of `fencelock_counters` (triggers refuse a `DELETE`), and `fencelock_epoch` | the rows of `fencelock_fences` (`fencelock_admit`) and of `fencelock_storage` (`PgStorage`) |
//! | MySQL / MariaDB | `<prefix>epoch` (the durable epoch) | `<prefix>fences` (`MySqlFence`) and `<prefix>storage` |
//! | etcd | `<prefix>/token/<key>` | `<prefix>/fence/<resource>` |
//! | ZooKeeper | the key node `/<prefix>/lock/<key>` | `/<prefix>/data/<resource>` |
//! | object storage | | every fenced object: delete through `ObjectFence::delete` (a tombstone), never a plain `DELETE` or a lifecycle rule |
//!
//! On Redis this also means `maxmemory-policy noeviction`. On ZooKeeper without credentials every
//! node is world-writable, so anyone who can reach the ensemble can delete a counter: use
//! credentials. To clear a MySQL installation on purpose, `MySqlDatabase::uninstall` drops it
//! whole, token counters included.
//!
//! A fence that holds a token nobody granted (a bug, a forged call) shuts out every real holder.
//! On PostgreSQL, `PgFence::lower_fence` (or `fencelock_lower_fence` in SQL) sets it back to the
//! service's last token, which `inspect` shows; it only ever lowers a fence.
//!
//! ## A checklist
//!
//! - Present the fence with every read and write of the protected data, and admit first inside a
//!   database transaction.
//! - End `main` with `locker.shutdown().await`, and stop work when `lost()` fires (or use
//!   `fencelock::scope`).
//! - Keep each critical section to one resource, or one database transaction.
//! - Run Redis with `noeviction`, and with AOF if you want tokens to survive a restart.
//! - Never delete counters or fences; heal counters with `advance-token`.
//! - Move between lock services with `advance-token --past`, after the old service's clients
//!   stopped taking the lock.
//! - Keep spec passwords in a file (`--backend @FILE`), not on the command line.
