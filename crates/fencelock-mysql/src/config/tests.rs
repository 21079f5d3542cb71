//! `MySqlConfig`'s URL grammar: round trips, redaction, hosts and every refusal.

#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn a_password_to_an_unverified_remote_server_is_flagged() {
    let flagged = |url: &str| MySqlConfig::from_url(url).unwrap().password_unprotected();
    assert!(flagged("mysql://app:pw@db.example/d"));
    assert!(flagged("mysql://app:pw@db.example/d?ssl-mode=preferred"));
    assert!(!flagged("mysql://app:pw@127.0.0.1/d"));
    assert!(!flagged("mysql://app:pw@localhost/d"));
    assert!(!flagged("mysql://app@db.example/d"));
    if cfg!(feature = "tls") {
        assert!(flagged("mysql://app:pw@db.example/d?ssl-mode=required"));
        assert!(!flagged(
            "mysql://app:pw@db.example/d?ssl-mode=verify_identity&ssl-ca=/etc/hostname"
        ));
    } else {
        let refused = MySqlConfig::from_url("mysql://app:pw@db.example/d?ssl-mode=required");
        assert!(
            matches!(&refused, Err(Error::InvalidConfig { message, .. }) if message.contains("`tls` feature")),
            "{refused:?}"
        );
    }
}

fn refusal(url: &str) -> String {
    match MySqlConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn reads_every_part_and_round_trips() {
    for url in [
        "mysql://root@127.0.0.1/test",
        "mysql://root@127.0.0.1:3306/test",
        "mysql://app:s%40cret@db.example:3307/orders?prefix=locks_",
        "mariadb://app:pw@[::1]:3306/orders",
        "mysql://app@localhost/test?backend=get_lock&prefix=x_",
    ] {
        let config = MySqlConfig::from_url(url).unwrap();
        assert_eq!(
            MySqlConfig::from_url(&config.to_url()).unwrap(),
            config,
            "{url}"
        );
    }
    let config = MySqlConfig::from_url("mysql://app:s%40cret@db.example/orders").unwrap();
    assert_eq!(config.hosts(), vec![HostPort::new("db.example", 3306)]);
    assert_eq!(config.database_name(), "orders");
    assert_eq!(config.prefix_name(), DEFAULT_PREFIX);
    assert_eq!(config.backend_kind(), MySqlBackendKind::GetLock);
    let v6 = MySqlConfig::from_url("mysql://a@[::1]:3310/d").unwrap();
    assert_eq!(v6.hosts(), vec![HostPort::new("::1", 3310)]);
    assert_eq!(v6.connect_options().unwrap().get_host(), "::1");
}

#[test]
fn the_password_never_shows() {
    let config = MySqlConfig::from_url("mysql://app:hunter2@db/orders").unwrap();
    assert_eq!(config.to_url(), "mysql://app:hunter2@db/orders");
    for shown in [
        config.to_string(),
        format!("{config:?}"),
        config.redacted_url(),
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("app:***@db"), "{shown}");
    }
    for bad in [
        "mysql://app:hunter2@db:99999/orders",
        "mysql://app:hunter2@db/orders?nope=1",
        "mysql://app:hunter2@db/",
        "mysql://app:hunter2@db:port/orders",
        "postgres://app:hunter2@db/orders",
    ] {
        let message = refusal(bad);
        assert!(!message.contains("hunter2"), "{message}");
    }
}

#[test]
fn names_what_is_wrong() {
    let cases = [
        ("mysql://root@db:99999/test", "port 99999 is out of range"),
        ("mysql://root@db:0/test", "port 0 is out of range"),
        ("mysql://root@db:x1/test", "port `x1` is not a number"),
        ("mysql://root@/test", "names no host"),
        ("mysql://db/test", "names no user"),
        ("mysql://root@db", "names no database"),
        ("mysql://root@db/", "names no database"),
        ("mysql://root@db/a/b", "one database name"),
        ("mysql://root@db/test?foo=1", "unknown option `foo`"),
        ("mysql://ro%00ot@db/test", "the user name holds a NUL"),
        ("mysql://root@db/te%00st", "the database name holds a NUL"),
        ("mysql://root:p%00w@db/test", "the password holds a NUL"),
        ("mysql://ro%ffot@db/test", "the user name is not UTF-8"),
        (
            "mysql://root@db/test?prefix=a%ff",
            "option `prefix` is not UTF-8",
        ),
        (
            "mysql://root@db/test?prefix=a%00",
            "option `prefix` holds a NUL",
        ),
        (
            "mysql://root@db/test?backend=get_lock&backend=get_lock",
            "repeats the option `backend`",
        ),
        (
            "mysql://root@db/test?prefix=a_&prefix=b_",
            "repeats the option `prefix`",
        ),
        (
            "mysql://root@db/test?backend=lease",
            "unknown MySQL backend \"lease\"",
        ),
        ("mysql://root@db/test?prefix=Bad", "lowercase ASCII"),
        ("mysql://root@db/test?prefix=1a", "starts with a digit"),
        ("mysql://root@db/test?prefix=", "is empty"),
        ("mysql://root@db/test#frag", "no fragment"),
        ("redis://root@db/test", "not a MySQL URL"),
    ];
    for (url, expected) in cases {
        let message = refusal(url);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let long = format!("mysql://root@db/test?prefix={}", "p".repeat(33));
    assert!(refusal(&long).contains("longer than 32 bytes"));
}

#[test]
fn with_hosts_points_elsewhere() {
    let config = MySqlConfig::from_url("mysql://root:pw@db:3306/test?prefix=t_").unwrap();
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("10.0.0.7", 4000)])
        .unwrap();
    assert_eq!(moved.hosts(), vec![HostPort::new("10.0.0.7", 4000)]);
    assert_eq!(
        moved.to_url(),
        "mysql://root:pw@10.0.0.7:4000/test?prefix=t_"
    );
    let v6 = config
        .clone()
        .with_hosts(&[HostPort::new("::1", 4000)])
        .unwrap();
    assert_eq!(v6.hosts(), vec![HostPort::new("::1", 4000)]);
    assert!(config.clone().with_hosts(&[]).is_err());
    assert!(
        config
            .clone()
            .with_hosts(&[HostPort::new("a", 1), HostPort::new("b", 2)])
            .is_err()
    );
    assert!(config.with_hosts(&[HostPort::new("a", 0)]).is_err());
}
