//! `RedisConfig`'s URL grammar: round trips, redaction, hosts and every refusal.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;

const PASSWORD: &str = "s3cr3t";

#[test]
fn round_trips() {
    for (input, url) in [
        ("redis://127.0.0.1", "redis://127.0.0.1:6379"),
        ("redis://127.0.0.1:6380/", "redis://127.0.0.1:6380"),
        ("redis://127.0.0.1:6379/3", "redis://127.0.0.1:6379/3"),
        (
            "redis://app:s3cr3t@localhost:6380/0",
            "redis://app:s3cr3t@localhost:6380/0",
        ),
        ("redis://:s3cr3t@[::1]:6379", "redis://:s3cr3t@[::1]:6379"),
        ("redis://app@h", "redis://app@h:6379"),
        ("REDIS://Host.Example", "redis://Host.Example:6379"),
        ("redis://u:p%40ss%2Fw@h", "redis://u:p%40ss%2Fw@h:6379"),
        ("redis://u:p@ss@h", "redis://u:p%40ss@h:6379"),
        (
            "redis://:s3cr3t@h/2?allow_eviction=true",
            "redis://:s3cr3t@h:6379/2?allow_eviction=true",
        ),
        ("redis://h?allow_eviction=false", "redis://h:6379"),
    ] {
        let config = RedisConfig::from_url(input).unwrap();
        assert_eq!(config.to_url(), url, "{input}");
        assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
        assert_eq!(RedisConfig::new(input), config, "{input}");
        let shown = config.redacted_url();
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("p%40ss"),
            "{shown}"
        );
        assert_eq!(config.to_string(), shown);
        assert!(!format!("{config:?}").contains("s3cr3t"));
    }
    let config = RedisConfig::from_url("redis://app:s3cr3t@h:1/2").unwrap();
    assert_eq!(config.redacted_url(), "redis://app:***@h:1/2");
    let allowed = config.clone().allow_eviction(true);
    assert_ne!(allowed, config);
    assert_eq!(
        allowed.redacted_url(),
        "redis://app:***@h:1/2?allow_eviction=true"
    );
    assert_eq!(RedisConfig::from_url(&allowed.to_url()).unwrap(), allowed);
}

/// The key prefix is part of the URL: read from `?prefix=`, written back when it is not
/// the default, however it was set.
#[test]
fn the_prefix_round_trips_through_the_url() {
    let config = RedisConfig::from_url("redis://:s3cr3t@h:1/2?prefix=app:").unwrap();
    assert_eq!(config.prefix_name(), "app:");
    assert_eq!(config.to_url(), "redis://:s3cr3t@h:1/2?prefix=app%3A");
    assert_eq!(config.redacted_url(), "redis://:***@h:1/2?prefix=app%3A");
    assert_eq!(config.to_string(), config.redacted_url());
    assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
    let built = RedisConfig::from_url("redis://:s3cr3t@h:1/2")
        .unwrap()
        .prefix("app:");
    assert_eq!(built, config);
    let default = RedisConfig::from_url("redis://h:1?prefix=fencelock").unwrap();
    assert_eq!(default.to_url(), "redis://h:1");
    assert_eq!(default, RedisConfig::from_url("redis://h:1").unwrap());
    let all = RedisConfig::from_url("redis://h:1?prefix=a%2Fb&allow_eviction=true").unwrap();
    assert_eq!(all.to_url(), "redis://h:1?allow_eviction=true&prefix=a%2Fb");
    assert_eq!(RedisConfig::from_url(&all.to_url()).unwrap(), all);
}

#[test]
fn hosts_and_with_hosts() {
    let config = RedisConfig::from_url("redis://u:s3cr3t@h1/4").unwrap();
    assert_eq!(config.hosts(), vec![HostPort::new("h1", 6379)]);
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("::1", 7000)])
        .unwrap();
    assert_eq!(moved.to_url(), "redis://u:s3cr3t@[::1]:7000/4");
    assert_eq!(moved.hosts(), vec![HostPort::new("::1", 7000)]);
    for bad in [
        vec![],
        vec![HostPort::new("a", 1), HostPort::new("b", 2)],
        vec![HostPort::new("a", 0)],
        vec![HostPort::new("a b", 1)],
        vec![HostPort::new("", 1)],
    ] {
        match config.clone().with_hosts(&bad) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(!message.contains(PASSWORD), "{message}");
            }
            other => panic!("{bad:?}: expected InvalidConfig, got {other:?}"),
        }
    }
    assert!(RedisConfig::new("nope").hosts().is_empty());
}

/// Every bad URL is refused with a message naming the problem, never the password.
#[test]
fn bad_urls_name_the_problem() {
    for (input, expected) in [
        ("redis://:6379", "names no host"),
        ("redis://:s3cr3t@:6379", "names no host"),
        ("redis://", "names no host"),
        ("redis:///0", "names no host"),
        ("redis:host", "names no host"),
        ("redis://127.0.0.1:99999", "port 99999 is out of range"),
        (
            "redis://:s3cr3t@127.0.0.1:99999",
            "port 99999 is out of range",
        ),
        ("redis://[::1]:70000", "port 70000 is out of range"),
        ("redis://h:0", "port 0 is out of range"),
        ("redis://h:abc", "port `abc` is not a number"),
        ("redis://u:pa/s3cr3t@h", "must be percent-encoded"),
        ("redis://u:pa?s3cr3t@h:1", "must be percent-encoded"),
        ("redis://u:pa#s3cr3t@h:1", "must be percent-encoded"),
        (
            "redis://host/notadb",
            "path `/notadb` is not a database number",
        ),
        ("redis://host/0/1", "is not a database number"),
        ("redis://host/-1", "is not a database number"),
        ("redis://host/+1", "is not a database number"),
        ("redis://host/99999999999", "is not a database number"),
        (
            "redis://host?prefix=",
            "option `prefix`: redis key prefix must not be empty",
        ),
        (
            "redis://host?prefix=a%7Bb",
            "option `prefix`: redis key prefix",
        ),
        (
            "redis://host?prefix=a+b",
            "must not contain braces, whitespace",
        ),
        (
            "redis://host?prefix=a&prefix=b",
            "repeats the option `prefix`",
        ),
        ("redis://host?prefx=x", "unknown option `prefx`"),
        (
            "redis://u:s3cr3t@host?protocol=resp3",
            "unknown option `protocol`",
        ),
        ("redis://host#frag", "takes no fragment"),
        ("redis://u%00@h", "the user name holds a NUL"),
        ("redis://u:s3cr3t%00@h", "the password holds a NUL"),
        ("redis://u:s3cr3t%ff@h", "the password is not UTF-8"),
        (
            "redis://h?allow_eviction=%ff",
            "option `allow_eviction` is not UTF-8",
        ),
        ("redis://h?allow_eviction=%00", "holds a NUL"),
        ("redis://host?tls_ca=/ca.pem", "needs a rediss://"),
        (
            "redis://host?allow_eviction=yes",
            "`allow_eviction` is `yes`",
        ),
        (
            "redis://host?allow_eviction=true&allow_eviction=true",
            "repeats the option `allow_eviction`",
        ),
        ("http://host", "scheme `http` is not redis"),
        ("", "is not a URL"),
        ("127.0.0.1:6379", "is not a URL"),
        ("localhost:6379", "scheme `localhost`"),
        ("redis://[::1", "is not a URL"),
    ] {
        for result in [
            RedisConfig::from_url(input).map(drop),
            RedisConfig::new(input).validate().map(drop),
        ] {
            match result {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(message.contains(expected), "{input:?}: {message}");
                    assert!(!message.contains(PASSWORD), "{input:?}: {message}");
                    assert!(message.starts_with("redis URL"), "{message}");
                }
                other => panic!("{input:?}: expected InvalidConfig, got {other:?}"),
            }
        }
    }
}

#[test]
fn tls_needs_its_feature() {
    let result = RedisConfig::from_url("rediss://:s3cr3t@host:6380");
    if cfg!(feature = "tls") {
        let config = result.unwrap();
        assert_eq!(config.to_url(), "rediss://:s3cr3t@host:6380");
        assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
        let with_ca =
            RedisConfig::from_url("rediss://h:1?tls_ca=/etc/my%20ca.pem&allow_eviction=true")
                .unwrap();
        assert_eq!(
            with_ca.to_url(),
            "rediss://h:1?allow_eviction=true&tls_ca=%2Fetc%2Fmy+ca.pem"
        );
        assert_eq!(RedisConfig::from_url(&with_ca.to_url()).unwrap(), with_ca);
        assert_eq!(
            RedisConfig::from_url("rediss://h:1")
                .unwrap()
                .tls_ca("/etc/my ca.pem"),
            RedisConfig::from_url("rediss://h:1?tls_ca=/etc/my%20ca.pem").unwrap()
        );
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
fn unusable_urls_given_to_new_are_reported_by_validate() {
    let config = RedisConfig::new("redis://:s3cr3t@127.0.0.1:99999");
    assert!(!format!("{config:?}").contains(PASSWORD));
    assert!(!config.to_string().contains(PASSWORD));
    assert!(config.validate().is_err());
}
