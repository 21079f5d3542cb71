//! Failures on real servers: lost counters, bad credentials, unreachable and frozen servers,
//! keys of the wrong type, TCP faults. Every failure is a typed error, in bounded time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{
    Error, FencedStorage, FencingToken, LockBackend, LockKey, OwnerId, TokenGuarantee,
};
use fencelock_redis::servers::{RedisServer, RedisServerOptions};
use fencelock_redis::{RedisConfig, RedisLockBackend};
use fencelock_servers::port::free_port;
use fencelock_testkit::proxy::FaultProxy;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("faults/{name}/{}", OwnerId::random())).unwrap()
}

async fn connect(url: &str, call_timeout: Duration) -> RedisLockBackend {
    RedisConfig::new(url)
        .call_timeout(call_timeout)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect")
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The string at `name`, read behind the backend's back.
async fn get(raw: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    redis::cmd("GET").arg(name).query_async(raw).await.unwrap()
}

/// Writes the string `value` at `name` behind the backend's back.
async fn set(raw: &mut redis::aio::MultiplexedConnection, name: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(name)
        .arg(value)
        .query_async(raw)
        .await
        .unwrap();
}

async fn kill(server: &std::sync::Arc<RedisServer>) {
    let server = std::sync::Arc::clone(server);
    tokio::task::spawn_blocking(move || server.kill())
        .await
        .unwrap();
}

async fn restart(server: &std::sync::Arc<RedisServer>) {
    let server = std::sync::Arc::clone(server);
    tokio::task::spawn_blocking(move || server.restart())
        .await
        .unwrap();
}

/// A restart without persistence loses the counter: tokens go backwards, the storage (on a
/// server that kept its data) refuses the new holder, `advance_token` past the storage's last
/// fence restores liveness, and the old holders stay refused throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_then_advance_token_restores_liveness() {
    let locks = std::sync::Arc::new(RedisServer::spawn());
    let data = RedisServer::spawn();
    let backend = connect(&locks.url(), Duration::from_secs(2)).await;
    assert_eq!(
        backend.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(false)
        }
    );
    let storage = RedisConfig::new(data.url())
        .connect_storage()
        .await
        .unwrap();
    let key = key("restart");

    for _ in 0..4 {
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        backend.release(&lease).await.unwrap();
    }
    let old = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert_eq!(old.token.get(), 5);
    storage.write(&key, old.fence(), b"old").await.unwrap();

    kill(&locks).await;
    restart(&locks).await;

    // The counter is gone: the next grant repeats a low token, and the storage refuses it.
    let lost = retry_acquire(&backend, &key).await;
    assert_eq!(lost.token.get(), 1, "counter should have restarted");
    assert!(matches!(
        storage.write(&key, lost.fence(), b"lost").await,
        Err(Error::Stale { .. })
    ));
    assert!(backend.release(&lost).await.unwrap());

    // Heal: raise the counter past the storage's last fence.
    let last = storage.peek(&key).await.unwrap().unwrap().fence.token;
    assert_eq!(backend.advance_token(&key, last).await.unwrap(), last);
    let healed = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(healed.token > last);
    storage.write(&key, healed.fence(), b"new").await.unwrap();

    for stale in [old.fence(), lost.fence()] {
        assert!(matches!(
            storage.write(&key, stale, b"stale").await,
            Err(Error::Stale { .. })
        ));
        assert!(matches!(
            storage.read(&key, stale).await,
            Err(Error::Stale { .. })
        ));
    }
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"new"[..]));
    assert_eq!(snapshot.fence, healed.fence());
}

/// The first calls after a restart may still see the dropped connection; the manager
/// reconnects within a few tries.
async fn retry_acquire(backend: &RedisLockBackend, key: &LockKey) -> fencelock_core::Lease {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match backend.try_acquire(key, TTL).await {
            Ok(Some(lease)) => return lease,
            Ok(None) => panic!("lock survived a restart without persistence"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no reconnect after restart: {e}"),
        }
    }
}

/// With AOF and `appendfsync always`, counters survive a SIGKILL and restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_server_keeps_counters_across_kill() {
    let server = std::sync::Arc::new(RedisServer::spawn_with(RedisServerOptions::persistent()));
    let backend = connect(&server.url(), Duration::from_secs(2)).await;
    assert_eq!(
        backend.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(true)
        }
    );
    let key = key("persistent");
    let before = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    backend.release(&before).await.unwrap();
    kill(&server).await;
    restart(&server).await;
    let after = retry_acquire(&backend, &key).await;
    assert!(
        after.token > before.token,
        "{} !> {}",
        after.token,
        before.token
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_or_missing_password_is_invalid_config() {
    let server = RedisServer::spawn_with(RedisServerOptions {
        password: Some("s3cret".into()),
        ..RedisServerOptions::default()
    });
    let port = server.port();
    for url in [
        format!("redis://:wrong@127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
        format!("redis://nosuchuser:s3cret@127.0.0.1:{port}"),
    ] {
        let started = Instant::now();
        match RedisConfig::new(&url).connect().await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(!message.contains("wrong"), "password leaked: {message}");
            }
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let backend = connect(&server.url(), Duration::from_secs(2)).await;
    let lease = backend.try_acquire(&key("auth"), TTL).await.unwrap();
    assert!(lease.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_user_urls_work() {
    let server = RedisServer::spawn_with(RedisServerOptions {
        acl_user: Some(("locker".into(), "pw".into())),
        password: Some("admin".into()),
        ..RedisServerOptions::default()
    });
    assert!(server.url().starts_with("redis://locker:pw@"));
    let backend = connect(&server.url(), Duration::from_secs(2)).await;
    let key = key("acl");
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let storage = backend.storage();
    storage.write(&key, lease.fence(), b"x").await.unwrap();
    assert!(backend.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_unavailable() {
    let port = free_port().unwrap();
    let started = Instant::now();
    match RedisConfig::new(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(Duration::from_secs(1))
        .call_timeout(Duration::from_secs(1))
        .connect()
        .await
    {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn bad_configuration_is_refused_before_any_io() {
    for url in [
        "",
        "not a url",
        "http://127.0.0.1:6379",
        "redis://",
        "redis://127.0.0.1:6379/notadb",
        "unix:///tmp/redis.sock",
    ] {
        assert!(
            matches!(
                RedisConfig::new(url).connect().await,
                Err(Error::InvalidConfig { .. })
            ),
            "{url:?}"
        );
    }
    #[cfg(not(feature = "tls"))]
    assert!(matches!(
        RedisConfig::new("rediss://127.0.0.1:6379").connect().await,
        Err(Error::InvalidConfig { .. })
    ));
    for prefix in ["", "a{b", "c}", "with space"] {
        assert!(matches!(
            RedisConfig::new("redis://127.0.0.1:1")
                .prefix(prefix)
                .connect()
                .await,
            Err(Error::InvalidConfig { .. })
        ));
    }
    assert!(matches!(
        RedisConfig::new("redis://127.0.0.1:1")
            .call_timeout(Duration::ZERO)
            .connect()
            .await,
        Err(Error::InvalidConfig { .. })
    ));
    let shown = format!("{:?}", RedisConfig::new("redis://u:hunter2@127.0.0.1:1"));
    assert!(!shown.contains("hunter2"), "{shown}");
}

/// Keys of the wrong type are typed `Backend` errors and change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_types_are_backend_errors() {
    let server = RedisServer::spawn();
    let backend = connect(&server.url(), Duration::from_secs(2)).await;
    let storage = backend.storage();
    let mut raw = raw(&server.url()).await;

    // A hash where the lock should be.
    let hashed = LockKey::new("hash-at-lock").unwrap();
    let () = redis::cmd("HSET")
        .arg("fencelock:{hash-at-lock}:lock")
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .unwrap();
    let backend_error = |r: Result<_, Error>| matches!(r, Err(Error::Backend { .. }));
    assert!(backend_error(
        backend.try_acquire(&hashed, TTL).await.map(|_| ())
    ));
    assert!(backend_error(backend.inspect(&hashed).await.map(|_| ())));
    let token = get(&mut raw, "fencelock:{hash-at-lock}:token").await;
    assert_eq!(token, None, "a refused acquire changed the counter");

    // A counter that is not a number, and one that went negative.
    for (name, value) in [("text-counter", "abc"), ("negative-counter", "-4")] {
        let key = LockKey::new(name).unwrap();
        set(&mut raw, &format!("fencelock:{{{name}}}:token"), value).await;
        assert!(backend_error(
            backend.try_acquire(&key, TTL).await.map(|_| ())
        ));
        assert!(backend_error(
            backend
                .advance_token(&key, FencingToken::new(3).unwrap())
                .await
                .map(|_| ())
        ));
        let lock = get(&mut raw, &format!("fencelock:{{{name}}}:lock")).await;
        assert_eq!(lock, None, "{name}: a refused acquire left a lock");
        let counter = get(&mut raw, &format!("fencelock:{{{name}}}:token")).await;
        assert_eq!(
            counter.as_deref(),
            Some(value),
            "{name}: a refused acquire changed the counter"
        );
    }

    // A foreign string at the lock: held by someone else, and inspect says it is not ours.
    let foreign = LockKey::new("foreign").unwrap();
    set(&mut raw, "fencelock:{foreign}:lock", "not-ours").await;
    assert!(backend.try_acquire(&foreign, TTL).await.unwrap().is_none());
    assert!(backend_error(backend.inspect(&foreign).await.map(|_| ())));

    // A list where a storage resource should be; a hash with a malformed fence.
    let listed = LockKey::new("list-at-data").unwrap();
    let () = redis::cmd("RPUSH")
        .arg("fencelock:{list-at-data}:data")
        .arg("x")
        .query_async(&mut raw)
        .await
        .unwrap();
    let fence = fencelock_core::Fence::new(FencingToken::new(1).unwrap(), OwnerId::random());
    assert!(backend_error(
        storage.read(&listed, fence).await.map(|_| ())
    ));
    assert!(backend_error(storage.write(&listed, fence, b"v").await));
    assert!(backend_error(storage.peek(&listed).await.map(|_| ())));
    let malformed = LockKey::new("malformed").unwrap();
    let () = redis::cmd("HSET")
        .arg("fencelock:{malformed}:data")
        .arg("token")
        .arg("seven")
        .query_async(&mut raw)
        .await
        .unwrap();
    assert!(backend_error(storage.write(&malformed, fence, b"v").await));
    assert!(backend_error(storage.peek(&malformed).await.map(|_| ())));
}

/// Tokens are exact across 2^53, where a Lua number (a double) stops holding every integer,
/// for a plain grant, a hand-off and a read phase. A counter at 2^63-1, which `INCR` cannot
/// raise, is a typed error that names the counter and changes nothing, for a set too: the
/// set's other lock is not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_stay_exact_past_2_53_and_stop_at_the_limit() {
    const TWO_53: u64 = 1 << 53;
    let server = RedisServer::spawn();
    let backend = connect(&server.url(), Duration::from_secs(2)).await;
    let mut raw = raw(&server.url()).await;

    let key = LockKey::new("past-2-53").unwrap();
    set(
        &mut raw,
        "fencelock:{past-2-53}:token",
        &(TWO_53 - 2).to_string(),
    )
    .await;
    for expected in [TWO_53 - 1, TWO_53, TWO_53 + 1] {
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert_eq!(lease.token.get(), expected);
        assert!(backend.release(&lease).await.unwrap());
    }
    // A hand-off: the release grants the queued waiter the counter's next token.
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert_eq!(held.token.get(), TWO_53 + 2);
    let waiter = OwnerId::random();
    let refused = backend.try_acquire_queued(&key, TTL, waiter).await.unwrap();
    assert!(refused.is_none());
    assert!(backend.release(&held).await.unwrap());
    let handed = backend
        .try_acquire_queued(&key, TTL, waiter)
        .await
        .unwrap()
        .expect("the release handed the lock to the queued waiter");
    assert_eq!(handed.token.get(), TWO_53 + 3);
    assert!(backend.release(&handed).await.unwrap());
    // A read phase takes its token from the same counter.
    let phase = backend
        .try_acquire_shared(&key, OwnerId::random(), TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(phase.token.get(), TWO_53 + 4);

    let limit = i64::MAX.to_string();
    let at_limit = LockKey::new("at-limit").unwrap();
    set(&mut raw, "fencelock:{at-limit}:token", &limit).await;
    let error = backend.try_acquire(&at_limit, TTL).await.unwrap_err();
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    assert!(
        error.to_string().contains("fencelock:{at-limit}:token"),
        "the error names the counter: {error}"
    );
    let fresh = LockKey::new("fresh").unwrap();
    let error = backend
        .try_acquire_all(&[fresh.clone(), at_limit.clone()], TTL)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Backend { .. }), "{error:?}");
    for (name, expected) in [
        ("fencelock:{at-limit}:token", Some(limit.as_str())),
        ("fencelock:{at-limit}:lock", None),
        ("fencelock:{fresh}:lock", None),
        ("fencelock:{fresh}:token", None),
    ] {
        assert_eq!(
            get(&mut raw, name).await.as_deref(),
            expected,
            "{name}: a refused grant changed it"
        );
    }
}

/// A frozen server: a call fails with `Unavailable` after the call timeout, not later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_times_out_with_unavailable() {
    let server = RedisServer::spawn();
    let call_timeout = Duration::from_secs(1);
    let backend = connect(&server.url(), call_timeout).await;
    let key = key("frozen");
    server.stop();
    let started = Instant::now();
    let result = backend.try_acquire(&key, TTL).await;
    let took = started.elapsed();
    server.cont();
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "expected Unavailable, got {result:?}"
    );
    assert!(took >= call_timeout, "gave up before the timeout: {took:?}");
    assert!(
        took < call_timeout + Duration::from_secs(4),
        "took {took:?}"
    );
}

/// A server killed while a call is in flight: the call ends with `Unavailable` well within the
/// call timeout, and later calls too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_killed_mid_call_is_unavailable() {
    let server = std::sync::Arc::new(RedisServer::spawn());
    let call_timeout = Duration::from_secs(5);
    let backend = connect(&server.url(), call_timeout).await;
    let storage = backend.storage();
    let key = key("killed");
    server.stop();
    let started = Instant::now();
    let call = {
        let storage = storage.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let fence =
                fencelock_core::Fence::new(FencingToken::new(1).unwrap(), OwnerId::random());
            storage.write(&key, fence, &[7u8; 1024]).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    kill(&server).await;
    let result = call.await.unwrap();
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "expected Unavailable, got {result:?}"
    );
    assert!(started.elapsed() < call_timeout + Duration::from_secs(3));
    let started = Instant::now();
    let later = backend.try_acquire(&key, TTL).await;
    assert!(matches!(later, Err(Error::Unavailable { .. })), "{later:?}");
    assert!(started.elapsed() < call_timeout + Duration::from_secs(3));
}

/// Through the fault proxy: a black hole times out, a reset is unavailable, and the backend
/// recovers once the network heals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_faults_through_the_proxy() {
    let server = RedisServer::spawn();
    let proxy = FaultProxy::start(server.addr()).await.unwrap();
    let call_timeout = Duration::from_secs(1);
    let backend = connect(&format!("redis://127.0.0.1:{}", proxy.port()), call_timeout).await;
    let key = key("proxy");

    proxy.set_delay(Duration::from_millis(100));
    let started = Instant::now();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "delay not applied"
    );
    proxy.set_delay(Duration::ZERO);

    proxy.set_blackhole(true);
    let started = Instant::now();
    let result = backend.extend(&lease, TTL).await;
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "{result:?}"
    );
    assert!(started.elapsed() < call_timeout + Duration::from_secs(4));

    proxy.set_reset(true);
    let result = backend.inspect(&key).await;
    assert!(
        matches!(result, Err(Error::Unavailable { .. })),
        "{result:?}"
    );

    proxy.heal();
    let deadline = Instant::now() + Duration::from_secs(15);
    let info = loop {
        match backend.inspect(&key).await {
            Ok(info) => break info,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no recovery after the network healed: {e}"),
        }
    };
    assert_eq!(info.holder, Some(lease.fence()));
    assert!(backend.release(&lease).await.unwrap());
}
