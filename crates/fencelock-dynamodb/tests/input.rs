//! Bad and unusual input, checked at parse time and against moto: malformed URLs and table
//! names, a missing table, a table with another key schema, an endpoint nobody listens on.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use fencelock_core::{Error, OwnerId};
use fencelock_dynamodb::DynamoConfig;
use tokio::time::{Instant, timeout};

fn refusal(url: &str) -> String {
    match DynamoConfig::from_url(url) {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("{url}: expected InvalidConfig, got {other:?}"),
    }
}

/// A table name of its own for a test, per run.
fn unique_table(what: &str) -> String {
    format!("fencelock-{what}-{}", &OwnerId::random().to_string()[..12])
}

#[test]
fn bad_urls_name_the_option_and_never_the_secret() {
    for (url, expected) in [
        ("dynamodb://k:topsecret@ab", "3 to 255"),
        ("dynamodb://k:topsecret@has%20space", "letters, digits"),
        (
            "dynamodb://k:topsecret@locks?regoin=eu-west-1",
            "unknown option `regoin`",
        ),
        (
            "dynamodb://k:topsecret@locks?endpoint=localhost:8000",
            "option `endpoint`",
        ),
        (
            "dynamodb://k:topsecret@locks?endpoint=http://h:0",
            "option `endpoint`",
        ),
        ("dynamodb://k:topsecret@locks?create=1", "option `create`"),
        (
            "dynamodb://k:topsecret@locks?prefix=x%2Flock%2F",
            "has the part \"lock\"",
        ),
    ] {
        let message = refusal(url);
        assert!(message.contains(expected), "{url}: {message}");
        assert!(!message.contains("topsecret"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_table_names_itself_and_how_to_create_it() {
    let moto = common::moto().await;
    let table = unique_table("missing");
    let url = common::url_at(moto.port, &table, "").replace("test:test", "test:hidden-secret");
    match DynamoConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains(&table), "{message}");
            assert!(
                message.contains("`pk`") && message.contains("create=true"),
                "{message}"
            );
            assert!(!message.contains("hidden-secret"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    // With create=true the same URL makes the table, and connects.
    let created = DynamoConfig::from_url(&format!("{url}&create=true"))
        .unwrap()
        .connect()
        .await
        .expect("create=true creates the table");
    assert_eq!(created.table(), table);
    DynamoConfig::from_url(&url)
        .unwrap()
        .connect()
        .await
        .expect("the table exists now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_with_another_key_schema_is_refused_naming_it() {
    let admin = common::connect().await;
    let table = unique_table("wrong-key");
    admin
        .client()
        .create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let moto = common::moto().await;
    let url = common::url_at(moto.port, &table, "&create=true");
    match DynamoConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains(&table), "{message}");
            assert!(message.contains("[id (N, HASH)]"), "{message}");
            assert!(message.contains("`pk`"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_nobody_listens_on_is_unavailable_naming_it() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = DynamoConfig::from_url(&common::url_at(port, "locks", ""))
        .unwrap()
        .operation_timeout(Duration::from_secs(3))
        .connect_timeout(Duration::from_secs(1));
    let started = Instant::now();
    match timeout(Duration::from_secs(30), config.connect()).await {
        Ok(Err(error @ Error::Unavailable { .. })) => {
            assert!(error.is_retryable());
            let message = error.to_string();
            assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
            assert!(message.contains("\"locks\""), "{message}");
        }
        Ok(other) => panic!("expected Unavailable, got {other:?}"),
        Err(_) => panic!("connect to nothing hung"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}
