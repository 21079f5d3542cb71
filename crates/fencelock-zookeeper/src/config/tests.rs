//! The `zookeeper://` grammar: round trips, refusals, TLS options.
#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;

#[test]
fn a_password_in_the_clear_to_a_remote_member_is_flagged() {
    let exposed = |url: &str| ZkConfig::from_url(url).unwrap().password_exposed();
    assert!(exposed("zookeeper://app:pw@zk1.example:2181"));
    assert!(exposed(
        "zookeeper://app:pw@127.0.0.1:2181,zk2.example:2181"
    ));
    assert!(!exposed("zookeeper://app:pw@127.0.0.1:2181"));
    assert!(!exposed("zookeeper://zk1.example:2181"));
}

fn refusal(url: &str) -> String {
    match ZkConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url}: expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn urls_round_trip() {
    for url in [
        "zookeeper://127.0.0.1:2181",
        "zookeeper://a:1,b:2,[::1]:3/apps/locks?session_timeout=10s&prefix=orders",
        "zookeeper://u:p%40ss@h:2181?session_timeout=1500ms",
    ] {
        let config = ZkConfig::from_url(url).unwrap();
        assert_eq!(config.to_url(), url);
        assert_eq!(ZkConfig::from_url(&config.to_url()).unwrap(), config);
    }
    let config = ZkConfig::from_url("zookeeper://h").unwrap();
    assert_eq!(config.hosts(), vec![HostPort::new("h", 2181)]);
    assert_eq!(config.session_timeout_value(), DEFAULT_SESSION_TIMEOUT);
    assert_eq!(config.prefix_name(), DEFAULT_PREFIX);
}

#[test]
fn bad_urls_are_refused_naming_the_setting_without_the_password() {
    for (url, word) in [
        ("redis://h", "zookeeper://"),
        ("zookeeper://", "names no host"),
        ("zookeeper://h:0", "port"),
        ("zookeeper://h:99999", "port"),
        ("zookeeper://h:x", "port"),
        ("zookeeper://h,h", "twice"),
        (
            "zookeeper://h?prefix=a&prefix=b",
            "repeats the option `prefix`",
        ),
        ("zookeeper://h?tls=true", "tls"),
        ("zookeeper://h?tls=yes", "tls"),
        ("zookeeper://h?tls_ca=/ca.pem", "`tls_ca` needs tls=true"),
        ("zookeeper://h?sasl=true", "unknown option `sasl`"),
        ("zookeeper://h?session_timeout=5", "session_timeout"),
        ("zookeeper://h?session_timeout=1ms", "session_timeout"),
        ("zookeeper://h?prefix=a/b", "prefix"),
        ("zookeeper://h?prefix=", "prefix"),
        ("zookeeper://h/a/", "chroot"),
        ("zookeeper://h/a//b", "chroot"),
        ("zookeeper://h/zookeeper", "chroot"),
        ("zookeeper://h\0", "NUL"),
        ("zookeeper://u@h", "password"),
    ] {
        let message = refusal(url);
        assert!(message.contains(word), "{url}: {message}");
    }
    let message = refusal("zookeeper://u:s3cret@h:0");
    assert!(!message.contains("s3cret"), "{message}");
    let config = ZkConfig::from_url("zookeeper://u:s3cret@h").unwrap();
    assert!(!format!("{config:?} {config}").contains("s3cret"));
    assert_eq!(config.redacted_url(), "zookeeper://u:***@h:2181");
}

#[test]
fn tls_options_need_their_feature_and_a_ca() {
    let url = "zookeeper://localhost:2281?tls=true&tls_ca=/etc/my%20ca.pem";
    if cfg!(feature = "tls") {
        let config = ZkConfig::from_url(url).unwrap();
        assert!(config.is_tls());
        assert_eq!(config.tls_ca_path(), Some(Path::new("/etc/my ca.pem")));
        assert_eq!(ZkConfig::from_url(&config.to_url()).unwrap(), config);
        let built = ZkConfig::from_url("zookeeper://localhost:2281")
            .unwrap()
            .tls_ca("/etc/my ca.pem");
        assert_eq!(built, config);
        for (bad, word) in [
            ("zookeeper://h?tls=true", "tls_ca"),
            ("zookeeper://h?tls=true&tls_ca=/a&tls_cert=/c", "tls_key"),
            ("zookeeper://h?tls=true&tls_ca=", "tls_ca"),
            ("zookeeper://-h?tls=true&tls_ca=/a", "TLS certificate"),
        ] {
            let message = refusal(bad);
            assert!(message.contains(word), "{bad}: {message}");
        }
        let with_key = "zookeeper://u:s3cret@h?tls=true&tls_ca=/a&tls_cert=/c&tls_key=/k";
        let config = ZkConfig::from_url(with_key).unwrap();
        assert!(!format!("{config:?}").contains("s3cret"));
    } else {
        let message = refusal(url);
        assert!(message.contains("`tls` feature"), "{message}");
        let built = ZkConfig::from_url("zookeeper://h")
            .unwrap()
            .tls_ca("/ca.pem");
        match built.validate() {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains("`tls` feature"), "{message}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
}

#[test]
fn digest_hosts_and_options_keep_zookeepers_own_rules() {
    for (url, word) in [
        ("zookeeper://:pw@h", "the user name is empty"),
        (
            "zookeeper://a%3Ab:pw@h",
            "the user name must not contain ':'",
        ),
        ("zookeeper://a%0Ab:pw@h", "the user name must not contain"),
        (
            "zookeeper://u:s3cret%0A@h",
            "the password must not contain control",
        ),
        ("zookeeper://u:s3cret%00@h", "the password holds a NUL"),
        ("zookeeper://u:s3cret%ff@h", "the password is not UTF-8"),
        (
            "zookeeper://bad!name",
            "host \"bad!name\" is not a host name",
        ),
        ("zookeeper://h,H:2181", "host h:2181 is listed twice"),
        ("zookeeper://h?prefix=a%2Fb", "prefix"),
        ("zookeeper://h?tls", "option `tls` is `true` or `false`"),
        ("zookeeper://u:s3cret#x@h", "takes no fragment"),
    ] {
        let message = refusal(url);
        assert!(message.contains(word), "{url}: {message}");
        assert!(!message.contains("s3cret"), "{message}");
    }
    // Where an `@` follows a `/` or `?`, what a message would quote may be the password's.
    let message = refusal("zookeeper://u:s3/cret@h:0");
    assert!(!message.contains("cret"), "{message}");
    assert!(message.contains("must be percent-encoded"), "{message}");
    // A `+` in an option is a plus sign, as it always was.
    let config = ZkConfig::from_url("zookeeper://h?prefix=a+b").unwrap();
    assert_eq!(config.prefix_name(), "a+b");
    assert_eq!(config.to_url(), "zookeeper://h:2181?prefix=a%2Bb");
    assert_eq!(ZkConfig::from_url(&config.to_url()).unwrap(), config);
    let spaced = ZkConfig::from_url("zookeeper://h/a@b?prefix=a%20b").unwrap();
    assert_eq!(
        (spaced.prefix_name(), spaced.chroot()),
        ("a b", Some("/a@b"))
    );
}
