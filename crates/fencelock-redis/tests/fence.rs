//! `RedisFence` on a real server: fenced batches on keys of the user's own, over the user's
//! own connections.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{Error, Fence, FenceRule, FencingToken, LockBackend, LockKey, OwnerId};
use fencelock_redis::redis::AsyncCommands;
use fencelock_redis::redis::aio::{ConnectionManager, MultiplexedConnection};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisFence, Reply, hash_tag, redis};

fn resource(name: &str) -> LockKey {
    LockKey::new(format!("fence/{name}/{}", OwnerId::random())).unwrap()
}

fn fence(token: u64) -> Fence {
    Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
}

async fn multiplexed(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn manager(server: &RedisServer) -> ConnectionManager {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// Every key and its value, as a sorted dump: to compare a server before and after.
async fn dump(conn: &mut MultiplexedConnection) -> Vec<(String, String, String)> {
    let keys: Vec<String> = conn.keys("*").await.unwrap();
    let mut out = Vec::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE")
            .arg(&key)
            .query_async(conn)
            .await
            .unwrap();
        let value = match kind.as_str() {
            "string" => conn.get::<_, String>(&key).await.unwrap(),
            "hash" => format!(
                "{:?}",
                conn.hgetall::<_, Vec<(String, String)>>(&key)
                    .await
                    .unwrap()
            ),
            "list" => format!(
                "{:?}",
                conn.lrange::<_, Vec<String>>(&key, 0, -1).await.unwrap()
            ),
            other => other.to_owned(),
        };
        let ttl: i64 = conn.pttl(&key).await.unwrap();
        out.push((key, value, (ttl > 0).to_string()));
    }
    out.sort();
    out
}

/// Writes, reads and their replies, on both kinds of the user's own async connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_apply_in_order_and_answer_each_command() {
    let server = RedisServer::spawn();
    let mut conn = multiplexed(&server).await;
    let r = resource("replies");
    let tag = hash_tag(&r);
    let (balance, audit, cache) = (
        format!("balance:{tag}"),
        format!("audit:{tag}"),
        format!("cache:{tag}"),
    );
    let f = fence(7);
    let replies = RedisFence::new(conn.clone())
        .set(&balance, "100")
        .incr_by(&balance, -30)
        .hset(&audit, "debit", "30")
        .hset(&audit, "debit", "30")
        .set_px(&cache, "x", Duration::from_secs(60))
        .expire(&audit, Duration::from_secs(600))
        .pexpire(format!("absent:{tag}"), 1000)
        .get(&balance)
        .get(format!("absent:{tag}"))
        .hgetall(&audit)
        .del(&cache)
        .commit(&r, f)
        .await
        .unwrap();
    assert_eq!(
        replies,
        vec![
            Reply::Stored,
            Reply::Int(70),
            Reply::Int(1),
            Reply::Int(0),
            Reply::Stored,
            Reply::Int(1),
            Reply::Int(0),
            Reply::Value(Some(b"70".to_vec())),
            Reply::Value(None),
            Reply::Hash(vec![(b"debit".to_vec(), b"30".to_vec())]),
            Reply::Int(1),
        ]
    );
    let ttl: i64 = conn.pttl(&audit).await.unwrap();
    assert!(ttl > 0 && ttl <= 600_000, "{ttl}");
    let (last, reads) = RedisFence::new(manager(&server).await)
        .get(&balance)
        .hgetall(format!("nothing:{tag}"))
        .peek(&r)
        .await
        .unwrap();
    assert_eq!(last, Some(f));
    assert_eq!(
        reads,
        vec![Reply::Value(Some(b"70".to_vec())), Reply::Hash(Vec::new())]
    );
    let (last, _) = RedisFence::new(conn.clone())
        .peek(&resource("never"))
        .await
        .unwrap();
    assert_eq!(last, None);
    // The backend hands out a fence on its own connection, with its prefix.
    let backend = RedisConfig::new(server.url())
        .prefix("app")
        .connect()
        .await
        .unwrap();
    let key = resource("backend");
    let lease = backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    backend
        .fence()
        .set(format!("v:{}", hash_tag(&key)), "1")
        .commit(&key, lease.fence())
        .await
        .unwrap();
    let record: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(format!("app:{}:fence", hash_tag(&key)))
        .arg("token")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(record, vec![Some(lease.token.to_string())]);
}

/// Holder A reads, pauses past its lease; B is granted, reads and writes; A wakes and writes:
/// refused, and neither A's debit nor its audit entry lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_refused_on_user_keys() {
    let server = RedisServer::spawn();
    let backend = RedisConfig::new(server.url()).connect().await.unwrap();
    let conn = multiplexed(&server).await;
    let account = resource("account");
    let tag = hash_tag(&account);
    let (balance, audit) = (format!("balance:{tag}"), format!("audit:{tag}"));
    let ttl = Duration::from_millis(300);

    let a = backend.try_acquire(&account, ttl).await.unwrap().unwrap();
    let read = RedisFence::new(conn.clone())
        .get(&balance)
        .commit(&account, a.fence())
        .await
        .unwrap();
    assert_eq!(read, vec![Reply::Value(None)]);
    // A pauses well past its lease; B gets the lock.
    tokio::time::sleep(ttl * 4).await;
    let b = backend
        .try_acquire(&account, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the paused holder's lease expired");
    assert!(b.token > a.token);
    RedisFence::new(conn.clone())
        .get(&balance)
        .incr_by(&balance, 50)
        .hset(&audit, b.token.to_string(), "credit 50")
        .commit(&account, b.fence())
        .await
        .unwrap();
    // A wakes up and writes what it computed before the pause.
    match RedisFence::new(conn.clone())
        .set(&balance, "0")
        .hset(&audit, a.token.to_string(), "debit 100")
        .commit(&account, a.fence())
        .await
    {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!(presented, a.fence());
            assert_eq!(current, b.fence());
        }
        other => panic!("expected Stale, got {other:?}"),
    }
    let (_, state) = RedisFence::new(conn)
        .get(&balance)
        .hgetall(&audit)
        .peek(&account)
        .await
        .unwrap();
    assert_eq!(
        state,
        vec![
            Reply::Value(Some(b"50".to_vec())),
            Reply::Hash(vec![(
                b.token.to_string().into_bytes(),
                b"credit 50".to_vec()
            )]),
        ]
    );
}

/// A refused commit (stale, or a command that cannot run) changes nothing at all: not the
/// keys, not their expiries, not the fence record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_commit_applies_nothing() {
    let server = RedisServer::spawn();
    let mut conn = multiplexed(&server).await;
    let r = resource("refused");
    let tag = hash_tag(&r);
    let key = |name: &str| format!("{name}:{tag}");
    let newer = fence(10);
    RedisFence::new(conn.clone())
        .set(key("s"), "kept")
        .hset(key("h"), "f", "kept")
        .set(key("n"), "5")
        .commit(&r, newer)
        .await
        .unwrap();
    let _: () = conn.rpush(key("list"), "item").await.unwrap();
    let before = dump(&mut conn).await;

    let user = conn.clone();
    let batch = |f: Fence| {
        RedisFence::new(user.clone())
            .set(key("s"), "lost")
            .hset(key("h"), "f", "lost")
            .del(key("n"))
            .incr_by(key("fresh"), 1)
            .expire(key("s"), Duration::from_secs(5))
            .set_px(key("new"), "lost", Duration::from_secs(5))
            .commit(&r, f)
    };
    for stale in [
        fence(9),
        fence(10),
        Fence::new(newer.token, OwnerId::random()),
    ] {
        assert!(
            matches!(batch(stale).await, Err(Error::Stale { .. })),
            "{stale}"
        );
        assert_eq!(dump(&mut conn).await, before, "{stale} changed something");
    }
    // Strict: the same fence again is refused too.
    let strict = RedisFence::new(conn.clone())
        .rule(FenceRule::Strict)
        .set(key("s"), "lost")
        .commit(&r, newer)
        .await;
    assert!(matches!(strict, Err(Error::Stale { .. })), "{strict:?}");
    assert_eq!(dump(&mut conn).await, before);

    // Commands that cannot run on the keys as they are: nothing applied, not even the
    // writes before them in the batch, and the fence is not recorded.
    let newest = fence(11);
    let failing: Vec<(&str, RedisFence<MultiplexedConnection>)> = vec![
        (
            "hset on a list",
            RedisFence::new(conn.clone())
                .set(key("s"), "lost")
                .hset(key("list"), "f", "v"),
        ),
        (
            "incr of a non-integer",
            RedisFence::new(conn.clone())
                .set(key("s"), "lost")
                .incr_by(key("s"), 1),
        ),
        (
            "incr that overflows",
            RedisFence::new(conn.clone())
                .incr_by(key("n"), i64::MAX)
                .set(key("s"), "lost"),
        ),
        (
            "incr after a set in the same batch",
            RedisFence::new(conn.clone())
                .set(key("n"), "x")
                .incr_by(key("n"), 1),
        ),
        (
            "get of a hash",
            RedisFence::new(conn.clone())
                .set(key("s"), "lost")
                .get(key("h")),
        ),
        (
            "hgetall after a set",
            RedisFence::new(conn.clone())
                .set(key("h"), "now a string")
                .hgetall(key("h")),
        ),
    ];
    for (what, batch) in failing {
        match batch.commit(&r, newest).await {
            Err(Error::Backend { message, .. }) => {
                assert!(message.contains("fencelock command"), "{what}: {message}");
            }
            other => panic!("{what}: expected Backend, got {other:?}"),
        }
        assert_eq!(dump(&mut conn).await, before, "{what} changed something");
    }
    // And a batch that can run still runs under the newest fence.
    RedisFence::new(conn.clone())
        .del(key("n"))
        .incr_by(key("n"), i64::MAX)
        .commit(&r, newest)
        .await
        .unwrap();
}

/// Bad input is a typed error, and nothing is sent: the connection's server is gone, yet the
/// error is about the input, not the network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_sent() {
    let server = RedisServer::spawn();
    let conn = multiplexed(&server).await;
    server.kill();
    // A fixed name, so the slots compared below are always the same ones.
    let r = LockKey::new("fence/input").unwrap();
    let tag = hash_tag(&r);
    let good = format!("k:{tag}");
    let other_slot = format!("k:{{{}}}", "another resource");
    let too_long = format!("{}{tag}", "x".repeat(LockKey::MAX_LEN));
    let f = fence(1);
    for (what, batch) in [
        (
            "another slot",
            RedisFence::new(conn.clone()).set(&other_slot, "v"),
        ),
        (
            "another slot after a good key",
            RedisFence::new(conn.clone())
                .set(&good, "v")
                .get("plain-key"),
        ),
        ("empty key", RedisFence::new(conn.clone()).del("")),
        (
            "control character",
            RedisFence::new(conn.clone()).get(format!("a\nb:{tag}")),
        ),
        ("key too long", RedisFence::new(conn.clone()).get(&too_long)),
        (
            "fencelock's own key space",
            RedisFence::new(conn.clone()).set(format!("fencelock:{tag}:fence"), "x"),
        ),
        (
            "another prefix's key space",
            RedisFence::new(conn.clone())
                .prefix("app")
                .incr_by(format!("app:{tag}:token"), 1),
        ),
    ] {
        match batch.commit(&r, f).await {
            Err(Error::InvalidKey { .. }) => {}
            other => panic!("{what}: expected InvalidKey, got {other:?}"),
        }
    }
    let big = vec![0u8; 1025];
    for (what, batch) in [
        (
            "value",
            RedisFence::new(conn.clone()).set(&good, big.clone()),
        ),
        (
            "hash value",
            RedisFence::new(conn.clone()).hset(&good, "f", big.clone()),
        ),
        (
            "hash field",
            RedisFence::new(conn.clone()).hset(&good, big.clone(), "v"),
        ),
    ] {
        match batch.max_value_len(1024).commit(&r, f).await {
            Err(Error::ValueTooLarge {
                size: 1025,
                max: 1024,
            }) => {}
            other => panic!("{what}: expected ValueTooLarge, got {other:?}"),
        }
    }
    for (what, batch) in [
        (
            "zero expiry",
            RedisFence::new(conn.clone()).expire(&good, Duration::ZERO),
        ),
        (
            "zero pexpire",
            RedisFence::new(conn.clone()).pexpire(&good, 0),
        ),
        (
            "zero px",
            RedisFence::new(conn.clone()).set_px(&good, "v", Duration::ZERO),
        ),
        (
            "endless expiry",
            RedisFence::new(conn.clone()).expire(&good, Duration::MAX),
        ),
    ] {
        match batch.commit(&r, f).await {
            Err(Error::InvalidTtl { .. }) => {}
            other => panic!("{what}: expected InvalidTtl, got {other:?}"),
        }
    }
    for (what, batch) in [
        ("bad prefix", RedisFence::new(conn.clone()).prefix("a{b")),
        (
            "zero call timeout",
            RedisFence::new(conn.clone()).call_timeout(Duration::ZERO),
        ),
    ] {
        match batch.commit(&r, f).await {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
    }
    match RedisFence::new(conn.clone()).set(&good, "v").peek(&r).await {
        Err(Error::InvalidConfig { message, .. }) => assert!(message.contains("only reads")),
        other => panic!("a write in a peek: expected InvalidConfig, got {other:?}"),
    }
    // The same batch with good input does reach for the server, which is gone.
    match RedisFence::new(conn).set(&good, "v").commit(&r, f).await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable from the dead server, got {other:?}"),
    }
}

/// Keys in the resource's slot are accepted whatever else their names hold; the fence record
/// shares their slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_named_with_the_hash_tag_share_the_record_slot() {
    let server = RedisServer::spawn();
    let conn = multiplexed(&server).await;
    for name in ["account:42", "with {braces}", "50%", "}{", "unicodé 鍵"] {
        let r = LockKey::new(name).unwrap();
        let tag = hash_tag(&r);
        RedisFence::new(conn.clone())
            .set(tag.clone(), "a")
            .set(format!("prefix:{tag}:suffix"), "b")
            .hset(format!("{tag}{{not-a-tag}}"), "f", "c")
            .commit(&r, fence(1))
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
    }
}

/// `INCRBY` is checked exactly up to the edges of a 64-bit integer, through the batch: the
/// last step that fits is applied, the first that does not refuses the whole batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incr_by_is_checked_exactly_to_the_edges_of_i64() {
    let server = RedisServer::spawn();
    let mut conn = multiplexed(&server).await;
    let r = resource("edges");
    let n = format!("n:{}", hash_tag(&r));
    let f = fence(1);
    let replies = RedisFence::new(conn.clone())
        .set(&n, (i64::MAX - 10).to_string())
        .incr_by(&n, 9)
        .incr_by(&n, 1)
        .incr_by(&n, -1)
        .incr_by(&n, 1)
        .commit(&r, f)
        .await
        .unwrap();
    assert_eq!(replies[4], Reply::Int(i64::MAX));
    match RedisFence::new(conn.clone())
        .incr_by(&n, -5)
        .incr_by(&n, 6)
        .commit(&r, f)
        .await
    {
        Err(Error::Backend { message, .. }) => assert!(message.contains("overflow"), "{message}"),
        other => panic!("expected Backend, got {other:?}"),
    }
    let kept: i64 = conn.get(&n).await.unwrap();
    assert_eq!(kept, i64::MAX);
    let replies = RedisFence::new(conn.clone())
        .set(&n, (i64::MIN + 1).to_string())
        .incr_by(&n, -1)
        .incr_by(&n, i64::MAX)
        .incr_by(&n, -i64::MAX)
        .incr_by(&n, 0)
        .commit(&r, f)
        .await
        .unwrap();
    assert_eq!(
        replies[1..],
        [
            Reply::Int(i64::MIN),
            Reply::Int(-1),
            Reply::Int(i64::MIN),
            Reply::Int(i64::MIN)
        ]
    );
    match RedisFence::new(conn.clone())
        .incr_by(&n, -1)
        .commit(&r, f)
        .await
    {
        Err(Error::Backend { message, .. }) => assert!(message.contains("overflow"), "{message}"),
        other => panic!("expected Backend, got {other:?}"),
    }
    let kept: i64 = conn.get(&n).await.unwrap();
    assert_eq!(kept, i64::MIN);
}

/// A `RedisFence` on a connection of the user's own checks the eviction policy itself (no
/// connect-time check covers that connection): a server that may evict keys is refused,
/// naming the policy, and nothing is applied or recorded, unless eviction is allowed; a
/// backend's own fence was checked at connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_connection_on_an_evicting_server_is_refused_unless_allowed() {
    let server = RedisServer::spawn();
    let mut conn = multiplexed(&server).await;
    for (name, value) in [("maxmemory", "3mb"), ("maxmemory-policy", "allkeys-lru")] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let resource = resource("evicting");
    let key = format!("balance:{}", hash_tag(&resource));
    let before = dump(&mut conn).await;
    match RedisFence::new(conn.clone())
        .set(&key, "1")
        .commit(&resource, fence(1))
        .await
    {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("maxmemory-policy allkeys-lru"),
                "{message}"
            );
            assert!(message.contains("maxmemory-policy noeviction"), "{message}");
            assert!(message.contains("allow_eviction"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert_eq!(dump(&mut conn).await, before, "nothing applied or recorded");

    let replies = RedisFence::new(conn.clone())
        .allow_eviction(true)
        .set(&key, "1")
        .commit(&resource, fence(1))
        .await
        .unwrap();
    assert_eq!(replies, vec![Reply::Stored]);

    let backend = RedisConfig::from_url(&server.url())
        .unwrap()
        .allow_eviction(true)
        .connect()
        .await
        .unwrap();
    backend
        .fence()
        .set(&key, "2")
        .commit(&resource, fence(2))
        .await
        .unwrap();
    let value: String = conn.get(&key).await.unwrap();
    assert_eq!(value, "2");
}
