//! `ObjectStoreConfig`'s URL grammar: round trips, redaction, hosts and every refusal.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::s3::MAX_PREFIX_LEN;
use super::*;

fn refusal(url: &str) -> String {
    match ObjectStoreConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn urls_round_trip() {
    for url in [
        "memory-objects://",
        "s3://bucket",
        "s3://my.bucket-1/a/b",
        "s3://bkt/pre%20fix?region=eu-west-1",
        "s3://bkt/a%3Fb%23c%25d/%7B%C3%BC%7D",
        "s3://bkt/p?endpoint=http://127.0.0.1:9000&region=us-east-1&access_key_id=AK&secret_access_key=s%2Fk%26y",
        "s3://bkt?endpoint=https://[::1]:9443&secret_key=x&access_key_id=y",
    ] {
        let config = ObjectStoreConfig::from_url(url).unwrap();
        let again = ObjectStoreConfig::from_url(&config.to_url()).unwrap();
        assert_eq!(again, config, "{url} -> {}", config.to_url());
        assert_eq!(again.to_url(), config.to_url());
    }
    let config = ObjectStoreConfig::from_url("s3://bkt/a/b/").unwrap();
    assert_eq!(config.prefix().as_ref(), "a/b");
    assert_eq!(config.bucket(), Some("bkt"));
    assert!(config.is_shared());
    assert!(
        !ObjectStoreConfig::from_url("memory-objects://")
            .unwrap()
            .is_shared()
    );
}

#[test]
fn the_secret_key_never_shows() {
    let url = "s3://bkt?endpoint=http://127.0.0.1:9000&access_key_id=AK&secret_access_key=hunter2";
    let config = ObjectStoreConfig::from_url(url).unwrap();
    for shown in [
        config.to_string(),
        format!("{config:?}"),
        config.redacted_url(),
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("secret_access_key=***"), "{shown}");
    }
    assert!(config.to_url().contains("hunter2"));
    for bad in [
        "s3://bkt?secret_access_key=hunter2&nosuch=1",
        "s3://bkt?secret_access_key=hunter2",
        "s3://BKT?secret_access_key=hunter2&access_key_id=a",
        "s3://bkt?secret_access_key=hunter2&secret_key=hunter2",
        "s3://bkt?endpoint=http://u:hunter2@h:1&secret_access_key=hunter2&access_key_id=a",
        "s3://u:hunter2@bkt",
    ] {
        let message = refusal(bad);
        assert!(!message.contains("hunter2"), "{bad}: {message}");
    }
}

#[test]
fn bad_input_is_named() {
    for (url, expected) in [
        ("s3://", "the bucket name is missing"),
        ("s3://ab", "3 to 63"),
        ("s3://Bucket", "lower-case letters"),
        ("s3://-bkt", "start and end"),
        ("s3://bkt:9000", "a bucket has no port"),
        ("s3://bkt/a//b", "not an object path"),
        ("s3://bkt/a/../b", "not an object path"),
        ("s3://bkt/a%00", "NUL"),
        ("s3://bkt?region=EU", "not a region name"),
        ("s3://bkt?endpoint=ftp://h", "http:// or https://"),
        ("s3://bkt?endpoint=http://h:1/path", "no path or query"),
        ("s3://bkt?endpoint=http://h:0", "port"),
        ("s3://bkt?endpoint=nonsense", "is not a URL"),
        ("s3://bkt?access_key_id=a", "go together"),
        (
            "s3://bkt?access_key_id=&secret_access_key=",
            "must not be empty",
        ),
        (
            "s3://bkt?endpoint=http://h:1&endpoint=http://h:2",
            "repeats the option",
        ),
        ("s3://bkt?prefix=x", "unknown option `prefix`"),
        ("s3://bkt#frag", "no fragment"),
        ("memory-objects://host", "takes nothing after"),
        ("gs://bkt", "not an object store URL"),
    ] {
        let message = refusal(url);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let long = format!("s3://bkt/{}", "p".repeat(MAX_PREFIX_LEN + 1));
    assert!(refusal(&long).contains("longer than"));
}

#[test]
fn hosts_are_the_endpoint() {
    let config = ObjectStoreConfig::from_url("s3://bkt?endpoint=http://127.0.0.1:9000").unwrap();
    assert_eq!(config.hosts(), vec![HostPort::new("127.0.0.1", 9000)]);
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("::1", 9100)])
        .unwrap();
    assert_eq!(moved.hosts(), vec![HostPort::new("::1", 9100)]);
    assert!(config.clone().with_hosts(&[]).is_err());
    let https = ObjectStoreConfig::from_url("s3://bkt?endpoint=https://s3.example").unwrap();
    assert_eq!(https.hosts(), vec![HostPort::new("s3.example", 443)]);
    assert!(
        ObjectStoreConfig::from_url("s3://bkt")
            .unwrap()
            .hosts()
            .is_empty()
    );
    assert!(
        ObjectStoreConfig::from_url("memory-objects://")
            .unwrap()
            .with_hosts(&[HostPort::new("h", 1)])
            .is_err()
    );
}
