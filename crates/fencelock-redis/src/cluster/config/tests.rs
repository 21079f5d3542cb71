//! `RedisClusterConfig`'s URL grammar: round trips, redaction, hosts and every refusal.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;

const PASSWORD: &str = "s3cr3t";

#[test]
fn round_trips() {
    for (input, url) in [
        (
            "redis+cluster://127.0.0.1",
            "redis+cluster://127.0.0.1:6379",
        ),
        (
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/",
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        ),
        (
            "REDIS+CLUSTER://app:s3cr3t@h1:7000,h2,[::1]:7002",
            "redis+cluster://app:s3cr3t@h1:7000,h2:6379,[::1]:7002",
        ),
        (
            "redis+cluster://:s3cr3t@h1:1,h2:2?allow_eviction=true",
            "redis+cluster://:s3cr3t@h1:1,h2:2?allow_eviction=true",
        ),
        (
            "redis+cluster://u:p%40ss@h",
            "redis+cluster://u:p%40ss@h:6379",
        ),
        (
            "redis+cluster://app@h?allow_eviction=false",
            "redis+cluster://app@h:6379",
        ),
    ] {
        let config = RedisClusterConfig::from_url(input).unwrap();
        assert_eq!(config.to_url(), url, "{input}");
        assert_eq!(
            RedisClusterConfig::from_url(&config.to_url()).unwrap(),
            config
        );
        let shown = config.redacted_url();
        assert!(
            !shown.contains(PASSWORD) && !shown.contains("p%40ss"),
            "{shown}"
        );
        assert_eq!(config.to_string(), shown);
        assert!(!format!("{config:?}").contains(PASSWORD));
    }
    let config = RedisClusterConfig::from_url("redis+cluster://app:s3cr3t@h:1,g:2").unwrap();
    assert_eq!(config.redacted_url(), "redis+cluster://app:***@h:1,g:2");
    let allowed = config.clone().allow_eviction(true);
    assert_ne!(allowed, config);
    assert_eq!(
        RedisClusterConfig::from_url(&allowed.to_url()).unwrap(),
        allowed
    );
    let prefixed =
        RedisClusterConfig::from_url("redis+cluster://:s3cr3t@h:1?prefix=app:&allow_eviction=true")
            .unwrap();
    assert_eq!(prefixed.prefix_name(), "app:");
    assert_eq!(
        prefixed.redacted_url(),
        "redis+cluster://:***@h:1?allow_eviction=true&prefix=app%3A"
    );
    assert_eq!(
        RedisClusterConfig::from_url(&prefixed.to_url()).unwrap(),
        prefixed
    );
    let built = RedisClusterConfig::from_url("redis+cluster://:s3cr3t@h:1?allow_eviction=true")
        .unwrap()
        .prefix("app:");
    assert_eq!(built, prefixed);
}

#[test]
fn hosts_and_with_hosts() {
    let config = RedisClusterConfig::from_url("redis+cluster://u:s3cr3t@h1,h2:7001").unwrap();
    assert_eq!(
        config.hosts(),
        vec![HostPort::new("h1", 6379), HostPort::new("h2", 7001)]
    );
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("::1", 7000), HostPort::new("p", 1)])
        .unwrap();
    assert_eq!(moved.to_url(), "redis+cluster://u:s3cr3t@[::1]:7000,p:1");
    for bad in [
        vec![],
        vec![HostPort::new("a", 1)],
        vec![HostPort::new("a", 1), HostPort::new("a", 1)],
        vec![HostPort::new("a", 0), HostPort::new("b", 1)],
        vec![HostPort::new("a b", 1), HostPort::new("b", 1)],
    ] {
        match config.clone().with_hosts(&bad) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(!message.contains(PASSWORD), "{message}");
            }
            other => panic!("{bad:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn seed_urls_carry_scheme_credentials_and_ports() {
    let config = RedisClusterConfig::from_url(
        "redis+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001,h?allow_eviction=true",
    )
    .unwrap();
    assert_eq!(
        config.seed_urls(),
        [
            "redis://app:s%40cret@10.0.0.1:7000",
            "redis://app:s%40cret@[::1]:7001",
            "redis://app:s%40cret@h:6379",
        ]
    );
    for (input, urls) in [
        (
            "redis+cluster://127.0.0.1:7000",
            vec!["redis://127.0.0.1:7000"],
        ),
        (
            "redis+cluster://app@h1:1,h2:2",
            vec!["redis://app@h1:1", "redis://app@h2:2"],
        ),
        ("redis+cluster://:s3cr3t@h1:1", vec!["redis://:s3cr3t@h1:1"]),
    ] {
        let config = RedisClusterConfig::from_url(input).unwrap();
        assert_eq!(config.seed_urls(), urls, "{input}");
    }
    let moved = RedisClusterConfig::from_url("redis+cluster://u:s3cr3t@h1:1,h2:2")
        .unwrap()
        .with_hosts(&[HostPort::new("::1", 7000), HostPort::new("p", 7001)])
        .unwrap();
    assert_eq!(
        moved.seed_urls(),
        ["redis://u:s3cr3t@[::1]:7000", "redis://u:s3cr3t@p:7001"]
    );
    if cfg!(feature = "tls") {
        let tls = RedisClusterConfig::from_url("rediss+cluster://:s3cr3t@h1:7000,h2").unwrap();
        assert_eq!(
            tls.seed_urls(),
            ["rediss://:s3cr3t@h1:7000", "rediss://:s3cr3t@h2:6379"]
        );
    }
}

/// Every bad URL is refused with a message naming the problem, never the password.
#[test]
fn bad_urls_name_the_problem() {
    for (input, expected) in [
        ("redis+cluster://", "names no node"),
        ("redis+cluster://:s3cr3t@", "names no node"),
        ("redis+cluster://h1,,h2", "node 2 of 3 is empty"),
        ("redis+cluster://h1,", "node 2 of 2 is empty"),
        (
            "redis+cluster://:s3cr3t@h1:99999",
            "port 99999 is out of range",
        ),
        (
            "redis+cluster://h1:1,h2:abc",
            "node 2 of 2 (`h2:abc`) port `abc`",
        ),
        ("redis+cluster://h1:1,h1:1", "node h1:1 is listed twice"),
        ("redis+cluster://h1:1,H1:1", "node h1:1 is listed twice"),
        ("redis+cluster://h1:6379,h1", "listed twice"),
        ("redis+cluster://h1/0", "takes no database"),
        (
            "redis+cluster://h1?prefix=a+b",
            "option `prefix`: redis key prefix",
        ),
        ("redis+cluster://h1?prefx=x", "unknown option `prefx`"),
        (
            "redis+cluster://h1?allow_eviction=yes",
            "`allow_eviction` is `yes`",
        ),
        (
            "redis+cluster://h1?allow_eviction=true&allow_eviction=true",
            "repeats the option `allow_eviction`",
        ),
        ("redis+cluster://h1#frag", "takes no fragment"),
        (
            "redis+cluster://u:a@b:s3cr3t@h1,u:s3cr3t@h2",
            "one set of credentials",
        ),
        ("redis+cluster://u:pa/s3cr3t@h", "takes no database"),
        ("redis+clusterx://h", "is not redis+cluster://"),
        ("redis://h", "is not redis+cluster://"),
        ("h1:7000,h2:7000", "is not a URL"),
    ] {
        match RedisClusterConfig::from_url(input) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(expected), "{input:?}: {message}");
                assert!(!message.contains(PASSWORD), "{input:?}: {message}");
                assert!(message.starts_with("redis cluster URL"), "{message}");
            }
            other => panic!("{input:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn tls_needs_its_feature() {
    let result = RedisClusterConfig::from_url("rediss+cluster://:s3cr3t@h1:7000,h2:7000");
    if cfg!(feature = "tls") {
        let config = result.unwrap();
        assert_eq!(config.to_url(), "rediss+cluster://:s3cr3t@h1:7000,h2:7000");
    } else {
        match result {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains("`tls` feature"), "{message}");
                assert!(!message.contains(PASSWORD), "{message}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn bad_options_are_refused_at_connect() {
    let config = RedisClusterConfig::from_url("redis+cluster://h1").unwrap();
    assert!(config.clone().prefix("a{b").validate().is_err());
    assert!(
        config
            .clone()
            .call_timeout(Duration::ZERO)
            .validate()
            .is_err()
    );
    assert!(config.validate().is_ok());
}
