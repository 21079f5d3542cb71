//! `DynamoConfig`'s URL grammar: what it reads, renders back and refuses.

#![allow(clippy::unwrap_used)]
use super::*;

fn refusal(url: &str) -> String {
    match DynamoConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn reads_every_part_and_round_trips() {
    for url in [
        "dynamodb://locks",
        "dynamodb://locks/",
        "dynamodb://my_table.v2-x?region=eu-west-1",
        "dynamodb://k%40x:s%2Fe%2Bc%3Dr%3Aet@locks?region=us-east-1&endpoint=http://127.0.0.1:5000",
        "dynamodb://locks?endpoint=https%3A%2F%2Fvpce.example&prefix=",
        "dynamodb://locks?prefix=team%20a%2F&create=true",
        "dynamodb://locks?create=false&endpoint=http://[::1]:8000",
    ] {
        let config = DynamoConfig::from_url(url).unwrap();
        assert_eq!(
            DynamoConfig::from_url(&config.to_url()).unwrap(),
            config,
            "{url} -> {}",
            config.to_url()
        );
    }
    let config = DynamoConfig::from_url(
        "dynamodb://k%40x:s%2Fe%2Bc%3Dr%3Aet@locks?region=us-east-1&endpoint=http://127.0.0.1:5000&create=true",
    )
    .unwrap();
    assert_eq!(config.table(), "locks");
    assert_eq!(
        config.credentials(),
        Some(&("k@x".to_owned(), "s/e+c=r:et".to_owned()))
    );
    assert_eq!(config.region(), Some("us-east-1"));
    assert!(config.creates_table());
    assert_eq!(config.hosts(), vec![HostPort::new("127.0.0.1", 5000)]);
    assert_eq!(config.prefix_name(), DEFAULT_PREFIX);
    assert_eq!(
        DynamoConfig::from_url("dynamodb://locks?region=eu-west-1")
            .unwrap()
            .hosts(),
        vec![HostPort::new("dynamodb.eu-west-1.amazonaws.com", 443)]
    );
    assert_eq!(
        DynamoConfig::from_url("dynamodb://locks?endpoint=https://h")
            .unwrap()
            .hosts(),
        vec![HostPort::new("h", 443)]
    );
}

#[test]
fn the_secret_never_shows() {
    let config = DynamoConfig::from_url("dynamodb://AKID:hunter2@locks?region=eu-west-1").unwrap();
    assert_eq!(
        config.to_url(),
        "dynamodb://AKID:hunter2@locks?region=eu-west-1"
    );
    for shown in [
        config.to_string(),
        format!("{config:?}"),
        config.redacted_url(),
    ] {
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("AKID:***@locks"), "{shown}");
    }
    for bad in [
        "dynamodb://AKID:hunter2@lo",
        "dynamodb://AKID:hunter2@locks?nope=1",
        "dynamodb://AKID:hunter2@locks/path",
        "dynamodb://AKID:hunter2@",
        "dynamodb://AKID:hun/ter2@locks",
        "dynamodb://AKID:hun?ter2@locks",
        "dynamodb://AKID:hun#ter2@locks",
        "dynamodb://AKID:hunter2@locks?endpoint=ftp://h",
        "dynamodb://AKID:hunter2@locks?region=EU",
        "dynamodb://AKID:hunter2@locks?prefix=lock%2F",
        "redis://AKID:hunter2@locks",
    ] {
        let message = refusal(bad);
        assert!(!message.contains("hunter2"), "{message}");
        assert!(!message.contains("ter2"), "{message}");
    }
}

#[test]
fn names_what_is_wrong() {
    let long = format!("dynamodb://{}", "t".repeat(256));
    let cases = [
        ("dynamodb://", "names no table"),
        ("dynamodb://ab", "has 2 characters"),
        (long.as_str(), "has 256 characters"),
        ("dynamodb://my%20table", "holds '%'"),
        ("dynamodb://t:able", "holds ':'"),
        ("dynamodb://locks/x", "takes no path"),
        ("dynamodb://locks?foo=1", "unknown option `foo`"),
        (
            "dynamodb://locks?region=a&region=b",
            "repeats the option `region`",
        ),
        (
            "dynamodb://locks?endpoint=127.0.0.1:5000",
            "must start with http://",
        ),
        (
            "dynamodb://locks?endpoint=http://h:99999",
            "port 99999 is out of range",
        ),
        ("dynamodb://locks?endpoint=http://h/x", "no path"),
        ("dynamodb://locks?endpoint=http://", "names no host"),
        (
            "dynamodb://locks?create=yes",
            "option `create` is `true` or `false`",
        ),
        ("dynamodb://locks?region=Eu%20west", "is not a region name"),
        ("dynamodb://locks?prefix=app", "does not end with `/`"),
        (
            "dynamodb://locks?prefix=app%2Fdata%2F",
            "has the part \"data\"",
        ),
        ("dynamodb://locks?prefix=a%01%2F", "control character"),
        ("dynamodb://key@locks", "without a secret key"),
        ("dynamodb://:s@locks", "without an access key id"),
        ("dynamodb://k:@locks", "empty secret key"),
        ("dynamodb://locks#f", "no fragment"),
        ("redis://locks", "does not start with dynamodb://"),
    ];
    for (url, expected) in cases {
        let message = refusal(url);
        assert!(message.contains(expected), "{url}: {message}");
    }
    let prefix = format!("dynamodb://locks?prefix={}%2F", "p".repeat(MAX_PREFIX_LEN));
    assert!(refusal(&prefix).contains("longer than 256 bytes"));
    DynamoConfig::from_url(&format!("dynamodb://{}", "t".repeat(255))).unwrap();
    DynamoConfig::from_url("dynamodb://a.b").unwrap();
}

#[test]
fn with_hosts_points_the_endpoint_elsewhere() {
    let config =
        DynamoConfig::from_url("dynamodb://k:s@locks?endpoint=http://127.0.0.1:5000").unwrap();
    let moved = config
        .clone()
        .with_hosts(&[HostPort::new("127.0.0.1", 6000)])
        .unwrap();
    assert_eq!(
        moved.to_url(),
        "dynamodb://k:s@locks?endpoint=http%3A%2F%2F127.0.0.1%3A6000"
    );
    assert!(config.clone().with_hosts(&[]).is_err());
    assert!(
        config
            .with_hosts(&[HostPort::new("a", 1), HostPort::new("b", 2)])
            .is_err()
    );
    let aws = DynamoConfig::from_url("dynamodb://locks?region=eu-west-1")
        .unwrap()
        .with_hosts(&[HostPort::new("proxy", 8443)])
        .unwrap();
    assert_eq!(aws.endpoint_url().as_deref(), Some("https://proxy:8443"));
}
