//! `RedlockConfig`'s URL grammar: round trips, redaction, hosts and every refusal.

#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;

const PASSWORD: &str = "s3cr3t";

#[test]
fn parses_nodes_credentials_db_and_storage() {
    let config = RedlockConfig::from_url("redlock://h1:6379,h2:6380,[::1]:6381").unwrap();
    assert_eq!(
        config.hosts(),
        vec![
            HostPort::new("h1", 6379),
            HostPort::new("h2", 6380),
            HostPort::new("::1", 6381)
        ]
    );
    assert_eq!(config.storage(), config.node_configs().first());
    assert_eq!(
        config.to_url(),
        "redlock://h1:6379,h2:6380,[::1]:6381",
        "no ?storage= for the default"
    );

    let config = RedlockConfig::from_url(
        "redlock://app:s3cr3t@h1:1,h2/3?storage=redis%3A%2F%2Fu%3Apw%40data%3A7%2F1",
    )
    .unwrap();
    let nodes: Vec<String> = config
        .node_configs()
        .iter()
        .map(RedisConfig::to_url)
        .collect();
    assert_eq!(
        nodes,
        ["redis://app:s3cr3t@h1:1/3", "redis://app:s3cr3t@h2:6379/3"]
    );
    assert_eq!(
        config.storage().map(RedisConfig::to_url).as_deref(),
        Some("redis://u:pw@data:7/1")
    );
    let shown = config.redacted_url();
    assert!(
        !shown.contains(PASSWORD) && !shown.contains("pw%40"),
        "{shown}"
    );
    assert!(
        shown.starts_with("redlock://app:***@h1:1,h2:6379/3?storage="),
        "{shown}"
    );
    assert_eq!(config.to_string(), shown);
    assert!(!format!("{config:?}").contains(PASSWORD));
    assert!(!format!("{config:?}").contains(":pw@"));

    // An unencoded storage URL works too, and a storage equal to the first node is the
    // default.
    let plain = RedlockConfig::from_url("REDLOCK://h1,h2?storage=redis://h1:6379").unwrap();
    assert_eq!(plain, RedlockConfig::from_url("redlock://h1,h2").unwrap());
}

#[test]
fn round_trips() {
    for input in [
        "redlock://h1",
        "redlock://h1:1,h2:2,h3:3",
        "redlock://:s3cr3t@h1,h2/2",
        "redlock://user@h1,h2",
        "redlock://user:p%2Fss@h1,h2?storage=redis%3A%2F%2F%3Apw%40d%3A9%2F4",
        "redlock://h1,h2?storage=redis://h3",
        "redlock://[::1]:7000,[::1]:7001",
        "redlock://h1,h2?allow_eviction=true",
        "redlock://h1,h2?storage=redis%3A%2F%2Fd%3A1&allow_eviction=true",
        "redlock://h1?storage=redis%3A%2F%2Fd%3A1%3Fallow_eviction%3Dtrue",
        "redlock://h1?allow_eviction=false",
        "redlock://h1,h2?prefix=app:",
        "redlock://h1,h2?storage=redis%3A%2F%2Fd%3A1&prefix=a%2Fb&allow_eviction=true",
    ] {
        let config = RedlockConfig::from_url(input).unwrap();
        assert_eq!(
            RedlockConfig::from_url(&config.to_url()).unwrap(),
            config,
            "{input} -> {}",
            config.to_url()
        );
    }
}

#[test]
fn the_prefix_is_part_of_the_url() {
    let config = RedlockConfig::from_url("redlock://:s3cr3t@h1:1,h2:2?prefix=app:").unwrap();
    assert_eq!(config.prefix_name(), "app:");
    assert_eq!(config.to_url(), "redlock://:s3cr3t@h1:1,h2:2?prefix=app%3A");
    assert_eq!(config.to_string(), "redlock://:***@h1:1,h2:2?prefix=app%3A");
    let built = RedlockConfig::from_url("redlock://:s3cr3t@h1:1,h2:2")
        .unwrap()
        .prefix("app:");
    assert_eq!(built, config);
    assert_eq!(
        RedlockConfig::from_url("redlock://h1:1?prefix=fencelock")
            .unwrap()
            .to_url(),
        "redlock://h1:1"
    );
}

#[test]
fn with_hosts_moves_the_lock_nodes() {
    let config =
        RedlockConfig::from_url("redlock://:s3cr3t@h1,h2,h3/1?storage=redis://d:9").unwrap();
    let moved = config
        .clone()
        .with_hosts(&[
            HostPort::new("p", 1),
            HostPort::new("p", 2),
            HostPort::new("p", 3),
        ])
        .unwrap();
    assert_eq!(
        moved.to_url(),
        "redlock://:s3cr3t@p:1,p:2,p:3/1?storage=redis%3A%2F%2Fd%3A9"
    );
    assert_eq!(moved.storage(), config.storage());
    let default = RedlockConfig::from_url("redlock://h1,h2").unwrap();
    let moved = default
        .with_hosts(&[HostPort::new("p", 1), HostPort::new("p", 2)])
        .unwrap();
    assert_eq!(
        moved.storage().unwrap().hosts(),
        vec![HostPort::new("p", 1)]
    );
    assert!(matches!(
        config.with_hosts(&[HostPort::new("p", 1)]),
        Err(Error::InvalidConfig { .. })
    ));
}

/// Every bad URL is refused with a message naming the problem, never the password.
#[test]
fn bad_urls_name_the_problem() {
    for (input, expected) in [
        ("redlock://", "names no node"),
        ("redlock://:s3cr3t@", "names no node"),
        ("redis://h1,h2", "scheme is not redlock://"),
        ("redlock://h1,,h2", "node 2 of 3 is empty"),
        ("redlock://h1,", "node 2 of 2 is empty"),
        (
            "redlock://h1:notaport,h2",
            "node 1 of 2 (`h1:notaport`) port `notaport`",
        ),
        (
            "redlock://:s3cr3t@h1,h2:99999",
            "node 2 of 2 (`h2:99999`) port 99999 is out of range",
        ),
        ("redlock://h1,:6379", "node 2 of 2 (`:6379`) names no host"),
        ("redlock://h1,h2/notadb", "is not a database number"),
        ("redlock://h1,h2/0/1", "is not a database number"),
        (
            "redlock://h1,h2?prefix=a%7Bb",
            "option `prefix`: redis key prefix",
        ),
        ("redlock://h1,h2?prefx=x", "unknown option `prefx`"),
        (
            "redlock://h1,h2?storage=redis%3A%2F%2Fd%3Fprefix%3Dx",
            "takes no `prefix`: the key prefix is the redlock's",
        ),
        ("redlock://h1,h2?storage=http://x", "scheme `http`"),
        (
            "redlock://h1,h2?storage=redis%3A%2F%2F%3As3cr3t%40%3A1",
            "storage",
        ),
        (
            "redlock://h1,h2?storage=redis%3A%2F%2F%3As3cr3t%40d%3A99999",
            "port 99999 is out of range",
        ),
        (
            "redlock://h1,h2?storage=redis://x&storage=redis://y",
            "repeats the option `storage`",
        ),
        ("redlock://h1,h2#frag", "takes no fragment"),
        (
            "redlock://h1?allow_eviction=maybe",
            "`allow_eviction` is `maybe`",
        ),
        (
            "redlock://h1?allow_eviction=true&allow_eviction=true",
            "repeats the option `allow_eviction`",
        ),
        (
            "redlock://h1?storage=redis%3A%2F%2Fd%3Fallow_eviction%3D1",
            "`allow_eviction` is `1`",
        ),
        (
            "redlock://u:s3cr3t@h1,v:s3cr3t@h2",
            "one set of credentials",
        ),
        ("redlock://h1,H1:6379", "node h1:6379 is listed twice"),
        ("redlock://u%00:s3cr3t@h1,h2", "the user name holds a NUL"),
        (
            "redlock://h1?storage=redis%3A%2F%2Fu%2500%40d",
            "the user name holds a NUL",
        ),
        ("redlock://h1:6379/0,h1:6379/1", "is not a database number"),
        ("redlock://u:pa/s3cr3t@h1,h2", "must be percent-encoded"),
        ("redlock://u:pa?s3cr3t@h1,h2", "must be percent-encoded"),
    ] {
        match RedlockConfig::from_url(input) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(expected), "{input:?}: {message}");
                assert!(!message.contains(PASSWORD), "{input:?}: {message}");
            }
            other => panic!("{input:?}: expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn configs_from_new_are_checked_at_build() {
    let config = RedlockConfig::new(["redis://h1:1", "redis://H1:1/2"]);
    assert!(matches!(
        config.build_nodes(),
        Err(Error::InvalidConfig { .. })
    ));
    let config = RedlockConfig::new(["redis://:s3cr3t@h1:99999"]);
    match config.build_nodes() {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("out of range"), "{message}");
            assert!(!message.contains(PASSWORD), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(!format!("{config:?}").contains(PASSWORD));
    assert!(!config.to_string().contains(PASSWORD));
    assert!(matches!(
        RedlockConfig::new(Vec::<String>::new()).build_nodes(),
        Err(Error::InvalidConfig { .. })
    ));
}
