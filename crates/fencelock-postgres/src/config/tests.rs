//! Unit tests of the URL grammar, redaction and settings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use fencelock_core::{Error, HostPort};

use super::*;

fn invalid(url: &str) -> String {
    match PgConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url:?}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn parses_the_grammar() {
    let config = PgConfig::from_url(
        "postgresql://app:s3cret@db:5433/test?backend=advisory&sslmode=disable&schema=locks",
    )
    .unwrap();
    assert_eq!(config.backend_kind(), PgBackendKind::Advisory);
    assert_eq!(config.schema_name(), "locks");
    assert_eq!(config.hosts(), vec![HostPort::new("db", 5433)]);
    assert_eq!(config.options.get_database(), Some("test"));
    assert_eq!(config.options.get_username(), "app");
    assert_eq!(
        config.to_url(),
        "postgresql://app:s3cret@db:5433/test?sslmode=disable&backend=advisory&schema=locks"
    );
    let plain = PgConfig::from_url("postgres://postgres@127.0.0.1/test").unwrap();
    assert_eq!(plain.backend_kind(), PgBackendKind::Lease);
    assert_eq!(plain.schema_name(), DEFAULT_SCHEMA);
    assert_eq!(plain.hosts(), vec![HostPort::new("127.0.0.1", 5432)]);
    assert_eq!(plain.to_url(), "postgres://postgres@127.0.0.1/test");
    assert_eq!(
        PgConfig::from_url("POSTGRES://h/db").unwrap().hosts(),
        vec![HostPort::new("h", 5432)]
    );
}

#[test]
fn round_trips_through_to_url() {
    for url in [
        "postgres://h",
        "postgres://h/db",
        "postgres://u@h:1/db",
        "postgres://u:p%40ss@h:6432/db?backend=lease",
        "postgresql://u:pw@[::1]:5432/db?application_name=my%20app&sslmode=require",
        "postgres://h/db?schema=fencelock&backend=advisory",
        "postgres://h/db?options=-c%20statement_timeout%3D5s&options%5Bwork_mem%5D=4MB",
        "postgres://h/db?ssl-mode=prefer&statement-cache-capacity=10&schema=x_1",
        "postgres://h:6432/db?pooler=transaction",
        "postgres://h/db?backend=advisory&pooler=none&schema=s",
        "postgres://h/db?pooler=detect",
        "postgres://h/db?idle_in_transaction_timeout=1500ms",
        "postgres://h/db?idle_in_transaction_timeout=0ms",
    ] {
        let config = PgConfig::from_url(url).unwrap();
        let again = PgConfig::from_url(&config.to_url()).unwrap();
        assert_eq!(again, config, "{url}");
        assert_eq!(again.to_url(), config.to_url(), "{url}");
    }
    let config = PgConfig::from_url("postgres://h/db?backend=lease&schema=fencelock").unwrap();
    assert_eq!(config, PgConfig::from_url("postgres://h/db").unwrap());
    let config = PgConfig::from_url("postgres://h/db?idle_in_transaction_timeout=2min").unwrap();
    assert_eq!(config.idle_in_transaction_timeout, Duration::from_secs(120));
    assert_eq!(
        config.to_url(),
        "postgres://h/db?idle_in_transaction_timeout=120000ms"
    );
    assert_eq!(
        PgConfig::from_url("postgres://h/db?idle_in_transaction_timeout=30s").unwrap(),
        PgConfig::from_url("postgres://h/db").unwrap()
    );
}

#[test]
fn never_shows_the_password() {
    let config = PgConfig::from_url("postgres://app:hunter2@db/test?backend=advisory").unwrap();
    for shown in [
        config.to_string(),
        format!("{config:?}"),
        config.redacted_url(),
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("app:***@db"), "{shown}");
    }
    assert!(config.to_url().contains("hunter2"));
    for url in [
        "postgres://app:hunter2@db:99999/test",
        "postgres://app:hunter2@db:http/test",
        "postgres://app:hunter2@/test",
        "postgres://app:hunter2@db/test?backend=redlock",
        "postgres://app:hunter2@db/test?nosuch=1",
        "postgres://app:hunter2@db/test?sslmode=bogus",
        "postgres://app:hunter2@db/test?schema=Bad",
        "postgres://app:hunter2@db/test?password=hunter2",
        "postgres://app:hunter2@db/test#frag",
        "postgres://app:hunter2@db/a/b",
        "postgres://app:hunter2@[::1/test",
        "mysql://app:hunter2@db/test",
    ] {
        let message = invalid(url);
        assert!(!message.contains("hunter2"), "{url}: {message}");
    }
}

#[test]
fn errors_name_what_is_wrong() {
    let cases = [
        ("postgres://db:99999/test", "port 99999 is out of range"),
        ("postgres://u:p@db:70000", "port 70000 is out of range"),
        ("postgres://db:0/test", "port 0 is out of range"),
        ("postgres://db:http/test", "port `http` is not a number"),
        ("postgres:///test", "names no host"),
        ("postgres://", "names no host"),
        ("postgres://u:p@/test", "names no host"),
        (
            "postgres://db/test?backend=redlock",
            "unknown Postgres backend \"redlock\"",
        ),
        (
            "postgres://db/test?backend=",
            "unknown Postgres backend \"\"",
        ),
        (
            "postgres://db/test?backend=Advisory",
            "unknown Postgres backend \"Advisory\"",
        ),
        (
            "postgres://db/test?backend=leases",
            "unknown Postgres backend \"leases\"",
        ),
        (
            "postgres://db/test?backend=advisory%20",
            "unknown Postgres backend \"advisory \"",
        ),
        (
            "postgres://db/test?idle_in_transaction_timeout=30",
            "has no unit ms, s or min",
        ),
        (
            "postgres://db/test?idle_in_transaction_timeout=1h",
            "has no unit ms, s or min",
        ),
        (
            "postgres://db/test?idle_in_transaction_timeout=-1s",
            "is not a duration",
        ),
        (
            "postgres://db/test?idle_in_transaction_timeout=100000000s",
            "longer than PostgreSQL accepts",
        ),
        (
            "postgres://db/test?backend=lease&backend=advisory",
            "repeats the option `backend`",
        ),
        (
            "postgres://db/test?schema=a&schema=b",
            "repeats the option `schema`",
        ),
        (
            "postgres://db/test?schema=Upper",
            "invalid schema name \"Upper\"",
        ),
        ("postgres://db/test?schema=1st", "invalid schema name"),
        ("postgres://db/test?schema=a-b", "invalid schema name"),
        ("postgres://db/test?foo=1", "unknown option `foo`"),
        (
            "postgres://db/test?pooler=pgbouncer",
            "unknown pooler mode \"pgbouncer\"",
        ),
        (
            "postgres://db/test?pooler=none&pooler=transaction",
            "repeats the option `pooler`",
        ),
        (
            "postgres://db/test?sslmode=require&sslmode=disable",
            "repeats the option `sslmode`",
        ),
        (
            "postgres://db/test?sslmode=require&ssl-mode=disable",
            "repeats the option `ssl-mode` (also given as `sslmode`)",
        ),
        (
            "postgres://db/test?sslrootcert=/a.pem&ssl-ca=/b.pem",
            "repeats the option `ssl-ca`",
        ),
        (
            "postgres://db/test?options[statement_timeout]=1s&options[statement_timeout]=2s",
            "repeats the option `options[statement_timeout]`",
        ),
        ("postgres://u%00@db/test", "the user name holds a NUL"),
        ("postgres://u:p%00w@db/test", "the password holds a NUL"),
        ("postgres://db/te%00st", "the database name holds a NUL"),
        (
            "postgres://db/test?host=other",
            "give `host` in the URL itself",
        ),
        ("postgres://db/test?sslmode=sometimes", "sometimes"),
        ("postgres://db/test#x", "takes no fragment"),
        ("redis://db/0", "is not a Postgres URL"),
        ("db/test", "is not a Postgres URL"),
    ];
    for (url, expected) in cases {
        let message = invalid(url);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let long = format!(
        "postgres://db/test?schema={}",
        "a".repeat(MAX_SCHEMA_LEN + 1)
    );
    assert!(invalid(&long).contains("at most 48 bytes"));
}

/// The rules every backend's URL shares (`fencelock_core::url`), which this grammar had
/// missed: option values that are not UTF-8 or hold a NUL, credentials that are not UTF-8,
/// and a password holding an unescaped `?` read as the start of the options.
#[test]
fn shares_the_url_rules_of_every_backend() {
    for (url, expected) in [
        (
            "postgres://db/test?application_name=a%ffb",
            "option `application_name` is not UTF-8",
        ),
        (
            "postgres://db/test?application_name=a%00b",
            "option `application_name` holds a NUL",
        ),
        (
            "postgres://db/test?options[statement_timeout]=1%00",
            "option `options[statement_timeout]` holds a NUL",
        ),
        ("postgres://u%ff@db/test", "the user name is not UTF-8"),
        ("postgres://db/te%ffst", "the database name is not UTF-8"),
        (
            "postgres://db/test?options[]=1",
            "unknown option `options[]`",
        ),
        ("postgres://db/test?foo=1", "`options[...]`"),
        (
            "postgres://db/test?hostaddr=10.0.0.1",
            "give `hostaddr` in the URL",
        ),
    ] {
        let message = invalid(url);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let config = PgConfig::from_url(
        "postgres://db/test?options[statement_timeout]=5s&options[work_mem]=4MB",
    )
    .unwrap();
    assert_eq!(
        config.to_url(),
        "postgres://db/test?options%5Bstatement_timeout%5D=5s&options%5Bwork_mem%5D=4MB"
    );
    // The password is `1?application_name=s3cret`: the parser reads a port, then an option
    // whose name or value may be the password's, so none of it is shown.
    for url in [
        "postgres://app:1?nosuch=s3cret@db/test",
        "postgres://app:1?schema=S3cret@db/test",
        "postgres://app:1/s3cret/x@db/test",
    ] {
        let message = invalid(url);
        assert!(
            !message.to_lowercase().contains("s3cret"),
            "{url}: {message}"
        );
        assert!(
            message.contains("must be percent-encoded"),
            "{url}: {message}"
        );
    }
}

#[test]
fn hosts_can_be_replaced() {
    let config = PgConfig::from_url("postgres://u:pw@db:5433/test?backend=advisory").unwrap();
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("::1", 6432)])
        .unwrap();
    assert_eq!(moved.hosts(), vec![HostPort::new("::1", 6432)]);
    assert_eq!(
        moved.to_url(),
        "postgres://u:pw@[::1]:6432/test?backend=advisory"
    );
    assert_eq!(moved.options.get_port(), 6432);
    assert_eq!(PgConfig::from_url(&moved.to_url()).unwrap(), moved);
    let proxy = config
        .clone()
        .with_hosts(&[HostPort::new("127.0.0.1", 40000)])
        .unwrap();
    assert_eq!(proxy.options.get_host(), "127.0.0.1");
    assert!(config.clone().with_hosts(&[]).is_err());
    assert!(
        config
            .clone()
            .with_hosts(&[HostPort::new("a", 1), HostPort::new("b", 2)])
            .is_err()
    );
    assert!(config.with_hosts(&[HostPort::new("a", 0)]).is_err());
}

#[test]
fn application_name_replaces_the_urls() {
    let config = PgConfig::from_url("postgres://db/test?application_name=old&sslmode=disable")
        .unwrap()
        .application_name("chaos-worker-3");
    assert_eq!(
        config.options.get_application_name(),
        Some("chaos-worker-3")
    );
    assert_eq!(
        config.to_url(),
        "postgres://db/test?sslmode=disable&application_name=chaos-worker-3"
    );
    assert_eq!(PgConfig::from_url(&config.to_url()).unwrap(), config);
}

#[test]
fn backend_kinds_parse_and_print() {
    for kind in PgBackendKind::ALL {
        assert_eq!(kind.as_str().parse::<PgBackendKind>().unwrap(), *kind);
    }
    assert!("Lease".parse::<PgBackendKind>().is_err());
    let config = PgConfig::from_url("postgres://db/test")
        .unwrap()
        .with_backend_kind(PgBackendKind::Advisory);
    assert_eq!(config.to_url(), "postgres://db/test?backend=advisory");
}

#[test]
fn pooler_modes_parse_print_and_round_trip() {
    for mode in PgPooler::ALL {
        assert_eq!(mode.as_str().parse::<PgPooler>().unwrap(), *mode);
        let config = PgConfig::from_url("postgres://db/test")
            .unwrap()
            .with_pooler(*mode);
        assert_eq!(config.pooler(), *mode);
        assert_eq!(PgConfig::from_url(&config.to_url()).unwrap(), config);
    }
    let config = PgConfig::from_url("postgres://db:6432/test?pooler=transaction").unwrap();
    assert_eq!(config.pooler(), PgPooler::Transaction);
    assert_eq!(
        config.to_url(),
        "postgres://db:6432/test?pooler=transaction"
    );
    let default = PgConfig::from_url("postgres://db/test?pooler=detect").unwrap();
    assert_eq!(default.pooler(), PgPooler::Detect);
    assert_eq!(default.to_url(), "postgres://db/test");
    assert!(format!("{config:?}").contains("Transaction"));
    assert_ne!(
        config,
        PgConfig::from_url("postgres://db:6432/test?pooler=none").unwrap()
    );
}

#[test]
fn from_options_writes_a_url() {
    let options = PgConnectOptions::new_without_pgpass()
        .host("db")
        .port(5433)
        .username("u")
        .password("pw")
        .database("test")
        .application_name("app");
    let config = PgConfig::from_options(options);
    assert_eq!(config.hosts(), vec![HostPort::new("db", 5433)]);
    assert!(!config.to_string().contains("pw"));
    let url = config.to_url();
    assert!(url.starts_with("postgres://u:pw@db:5433/test?"), "{url}");
    assert_eq!(PgConfig::from_url(&url).unwrap().to_url(), url);
}
