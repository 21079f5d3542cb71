//! `fencelock inspect` reaches the locks of an application that chose where its keys live: a
//! lock held by a library [`Locker`] whose config set a key prefix (or a PostgreSQL schema) is
//! seen by `inspect` given the same prefix in the URL, and reported as never granted under
//! a spec without it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use fencelock::postgres::PgConfig;
use fencelock::redis::servers::RedisServer;
use fencelock::redis::{RedisConfig, RedlockConfig};
use fencelock::spec::{BackendConfig, BackendSpec};
use fencelock::{LockGuard, Locker};
use fencelock_testkit::postgres::PgSchema;
use serde_json::Value;

/// A locker on the backend `config` describes, set up in the library, not from a URL.
async fn locker(config: impl BackendConfig) -> Locker {
    let connected = BackendSpec::from_config(config).connect().await.unwrap();
    Locker::new(connected.backend)
}

/// `fencelock inspect --json --backend spec key`, parsed.
async fn inspect_json(spec: &str, key: &str) -> Value {
    let args = ["inspect", "--json", "--backend", spec, key].map(str::to_owned);
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        common::fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{spec}: {out}{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{spec}: {e}: {out}"))
}

/// `fencelock inspect --backend spec key`, as text.
async fn inspect_text(spec: &str, key: &str) -> String {
    let args = ["inspect", "--backend", spec, key].map(str::to_owned);
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        common::fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{spec}: {out}{err}");
    out
}

/// The lock `guard` holds is seen under `with` (the holder, its token, never_granted false)
/// and reported never granted under `without`, in JSON and in text.
async fn seen_only_under(guard: &LockGuard, key: &str, with: &str, without: &str) {
    let seen = inspect_json(with, key).await;
    assert_eq!(
        seen["holder"]["token"],
        guard.token().get(),
        "{with}: {seen}"
    );
    assert_eq!(
        seen["holder"]["owner"],
        guard.fence().owner.to_string(),
        "{with}: {seen}"
    );
    assert_eq!(seen["never_granted"], false, "{with}: {seen}");

    let unseen = inspect_json(without, key).await;
    assert_eq!(unseen["holder"], Value::Null, "{without}: {unseen}");
    assert_eq!(unseen["last_token"], Value::Null, "{without}: {unseen}");
    assert_eq!(unseen["never_granted"], true, "{without}: {unseen}");

    let text = inspect_text(without, key).await;
    let holder = common::inspect_row(&text, "holder").unwrap_or_default();
    assert!(holder.starts_with("none (never granted under "), "{text}");
    let last = common::inspect_row(&text, "last token").unwrap_or_default();
    assert!(
        last.contains("another key prefix, schema or chroot"),
        "{text}"
    );
    assert!(!text.contains("the lock is free"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_prefix_set_in_the_library_is_reached_through_the_url() {
    let server = RedisServer::spawn();
    let url = server.url();
    let config = RedisConfig::from_url(&url).unwrap().prefix("app:");
    // The URL the config prints is the one that reaches its locks.
    let with = config.to_url();
    assert!(with.ends_with("?prefix=app%3A"), "{with}");
    let locker = locker(config).await;
    let guard = locker.lock("invoices/7").await.unwrap();
    seen_only_under(&guard, "invoices/7", &format!("{url}?prefix=app:"), &url).await;
    seen_only_under(&guard, "invoices/7", &with, &format!("{url}?prefix=other")).await;
    guard.release().await.unwrap();
    // Released, the key is free under the prefix, and was used there.
    let after = inspect_json(&with, "invoices/7").await;
    assert_eq!(after["holder"], Value::Null, "{after}");
    assert_eq!(after["never_granted"], false, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_prefix_set_in_the_library_is_reached_through_the_url() {
    let a = RedisServer::spawn();
    let b = RedisServer::spawn();
    let c = RedisServer::spawn();
    let nodes = [&a, &b, &c].map(|server| format!("127.0.0.1:{}", server.port()));
    let url = format!("redlock://{}", nodes.join(","));
    let config = RedlockConfig::from_url(&url).unwrap().prefix("jobs");
    let with = config.to_url();
    assert!(with.ends_with("?prefix=jobs"), "{with}");
    let locker = locker(config).await;
    let guard = locker.lock("nightly").await.unwrap();
    seen_only_under(&guard, "nightly", &with, &url).await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_schema_set_in_the_library_is_reached_through_the_url() {
    let application = PgSchema::create().await;
    let other = PgSchema::create().await;
    let config = PgConfig::from_url(application.url())
        .unwrap()
        .schema(application.name());
    let with = config.to_url();
    assert!(
        with.contains(&format!("schema={}", application.name())),
        "{with}"
    );
    let locker = locker(config).await;
    let key = format!("inspect-prefix/{}", application.unique_id());
    let guard = locker.lock(&key).await.unwrap();
    let without = format!("{}?schema={}", other.url(), other.name());
    seen_only_under(&guard, &key, &with, &without).await;
    guard.release().await.unwrap();
    drop(locker);
    application.cleanup().await;
    other.cleanup().await;
}
