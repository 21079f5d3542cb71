//! `DynamoFence` on moto: fenced puts, updates, deletes and transactions on the caller's own
//! table (key `id`, S), refusing superseded holders as `Stale` and changing nothing then.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use fencelock_core::{Error, Fence, FenceRule, FencingToken, LockBackend, LockKey, OwnerId};
use fencelock_dynamodb::aws_sdk_dynamodb::Client;
use fencelock_dynamodb::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType, ReturnValue,
    ScalarAttributeType,
};
use fencelock_dynamodb::{DynamoTable, FenceOutcome, FencedWrite};

type Item = HashMap<String, AttributeValue>;

/// The application's own table, whose key is `id` (S).
const USER_TABLE: &str = "fencelock-user-items";

/// The lock table and the application's table, created if needed.
async fn tables() -> DynamoTable {
    let table = common::connect().await;
    let created = table
        .client()
        .create_table()
        .table_name(USER_TABLE)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
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
        .await;
    if let Err(e) = created {
        let text = format!("{e:?}");
        assert!(
            text.contains("ResourceInUse"),
            "create the user table: {text}"
        );
    }
    table
}

/// A key of its own for each test.
fn key() -> Item {
    HashMap::from([("id".to_owned(), s(&OwnerId::random().to_string()))])
}

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.to_owned())
}

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

async fn get(client: &Client, key: &Item) -> Option<Item> {
    client
        .get_item()
        .table_name(USER_TABLE)
        .set_key(Some(key.clone()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

/// Two fences of one lock as two holders get them: the first granted, released, the second
/// granted after it.
async fn old_and_new(table: &DynamoTable) -> (Fence, Fence) {
    let backend = table.backend();
    let lock = LockKey::new(format!("user-item/{}", OwnerId::random())).unwrap();
    let ttl = Duration::from_secs(30);
    let old = backend.try_acquire(&lock, ttl).await.unwrap().unwrap();
    assert!(backend.release(&old).await.unwrap());
    let new = backend.try_acquire(&lock, ttl).await.unwrap().unwrap();
    assert!(new.token > old.token);
    (old.fence(), new.fence())
}

#[track_caller]
fn assert_stale<T: std::fmt::Debug>(result: Result<T, Error>, presented: Fence, current: Fence) {
    match result {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => assert_eq!((p, c), (presented, current)),
        other => panic!("expected Stale({presented:?} behind {current:?}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_put_update_and_delete_are_refused_and_change_nothing() {
    let table = tables().await;
    let fence = table.fence();
    let client = table.client().clone();
    let (old, new) = old_and_new(&table).await;
    let key = key();
    let put = |balance| {
        FencedWrite::put(
            USER_TABLE,
            key.clone(),
            HashMap::from([("balance".to_owned(), n(balance))]),
        )
    };
    assert!(matches!(
        fence.write(put(100), old).await.unwrap(),
        FenceOutcome::Written(_)
    ));
    assert!(matches!(
        fence.write(put(200), new).await.unwrap(),
        FenceOutcome::Written(_)
    ));
    let stored = get(&client, &key).await.unwrap();
    assert_eq!(fence.fence_of(&stored).unwrap(), Some(new));
    assert_eq!(stored.get("balance"), Some(&n(200)));

    assert_stale(fence.write(put(1), old).await, old, new);
    let debit = FencedWrite::update(USER_TABLE, key.clone(), "SET #b = #b - :d")
        .name("#b", "balance")
        .value(":d", n(50));
    assert_stale(fence.write(debit, old).await, old, new);
    assert_stale(
        fence
            .write(FencedWrite::delete(USER_TABLE, key.clone()), old)
            .await,
        old,
        new,
    );
    assert_eq!(
        get(&client, &key).await,
        Some(stored),
        "a refused write changed the item"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_holders_writes_land() {
    let table = tables().await;
    let fence = table.fence();
    let client = table.client().clone();
    let (old, new) = old_and_new(&table).await;
    let key = key();
    let put = FencedWrite::put(
        USER_TABLE,
        key.clone(),
        HashMap::from([("balance".to_owned(), n(100))]),
    );
    let _ = fence.write(put, old).await.unwrap();
    // An update with a SET clause of its own, returning the new item.
    let debit = FencedWrite::update(USER_TABLE, key.clone(), "SET #b = #b - :d REMOVE #x")
        .name("#b", "balance")
        .name("#x", "unused")
        .value(":d", n(30))
        .return_values(ReturnValue::AllNew);
    let FenceOutcome::Written(after) = fence.write(debit, new).await.unwrap() else {
        panic!("the newer holder's update was refused");
    };
    assert_eq!(after.get("balance"), Some(&n(70)));
    assert_eq!(fence.fence_of(&after).unwrap(), Some(new));
    // Same holder again: admitted (same token and owner).
    let fenced_read =
        FencedWrite::update(USER_TABLE, key.clone(), "").return_values(ReturnValue::AllNew);
    let FenceOutcome::Written(read) = fence.write(fenced_read, new).await.unwrap() else {
        panic!("a fenced read by the holder was refused");
    };
    assert_eq!(read, after);
    // Under the strict rule the same fence is not admitted twice.
    let strict = table.fence().with_rule(FenceRule::Strict);
    let again = FencedWrite::update(USER_TABLE, key.clone(), "");
    assert_stale(strict.write(again, new).await, new, new);
    let _ = fence
        .write(FencedWrite::delete(USER_TABLE, key.clone()), new)
        .await
        .unwrap();
    assert_eq!(get(&client, &key).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_is_refused_as_a_whole_when_one_items_fence_is_newer() {
    let table = tables().await;
    let fence = table.fence();
    let client = table.client().clone();
    let (old, new) = old_and_new(&table).await;
    let (a, b) = (key(), key());
    let balance = |key: &Item, value| {
        FencedWrite::put(
            USER_TABLE,
            key.clone(),
            HashMap::from([("balance".to_owned(), n(value))]),
        )
    };
    let _ = fence
        .transact([(balance(&a, 10), old), (balance(&b, 10), old)])
        .await
        .unwrap();
    // A newer holder wrote `b` alone.
    let _ = fence.write(balance(&b, 20), new).await.unwrap();
    let (before_a, before_b) = (get(&client, &a).await, get(&client, &b).await);
    let transfer = |fence_a, fence_b| {
        [
            (
                FencedWrite::update(USER_TABLE, a.clone(), "ADD #b :d")
                    .name("#b", "balance")
                    .value(":d", n(-5)),
                fence_a,
            ),
            (
                FencedWrite::update(USER_TABLE, b.clone(), "ADD #b :d")
                    .name("#b", "balance")
                    .value(":d", n(5)),
                fence_b,
            ),
        ]
    };
    assert_stale(fence.transact(transfer(old, old)).await, old, new);
    assert_eq!(
        get(&client, &a).await,
        before_a,
        "a refused transaction wrote `a`"
    );
    assert_eq!(
        get(&client, &b).await,
        before_b,
        "a refused transaction wrote `b`"
    );
    // The newer fence on both lands on both.
    let _ = fence.transact(transfer(new, new)).await.unwrap();
    assert_eq!(get(&client, &a).await.unwrap().get("balance"), Some(&n(5)));
    assert_eq!(get(&client, &b).await.unwrap().get("balance"), Some(&n(25)));
    let fenced = get(&client, &a).await.unwrap();
    assert_eq!(fence.fence_of(&fenced).unwrap(), Some(new));
    // Two writes of one item: refused before anything is sent.
    match fence
        .transact([
            (FencedWrite::delete(USER_TABLE, a.clone()), new),
            (balance(&a, 1), new),
        ])
        .await
    {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("two writes of"), "{message}");
        }
        other => panic!("two writes of one item: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_own_condition_is_still_honoured() {
    let table = tables().await;
    // Fence attributes of the application's own naming.
    let fence = table.fence().with_attributes("ftoken", "fowner").unwrap();
    let client = table.client().clone();
    let (old, new) = old_and_new(&table).await;
    let (a, b) = (key(), key());
    let put = |key: &Item| {
        FencedWrite::put(
            USER_TABLE,
            key.clone(),
            HashMap::from([("balance".to_owned(), n(10))]),
        )
    };
    let _ = fence.write(put(&a), new).await.unwrap();
    let _ = fence.write(put(&b), new).await.unwrap();
    let stored = get(&client, &a).await.unwrap();
    assert_eq!(stored.get("ftoken"), Some(&n(new.token.get() as i64)));
    let debit = |amount, key: &Item| {
        FencedWrite::update(USER_TABLE, key.clone(), "SET #b = #b - :d")
            .condition("#b >= :d")
            .name("#b", "balance")
            .value(":d", n(amount))
    };
    match fence.write(debit(50, &a), new).await.unwrap() {
        FenceOutcome::ConditionFailed { index: 0, item } => {
            assert_eq!(item.as_ref(), Some(&stored))
        }
        other => panic!("an overdraft was {other:?}"),
    }
    // A stale fence is Stale, whatever the caller's condition says.
    assert_stale(fence.write(debit(50, &a), old).await, old, new);
    assert_stale(fence.write(debit(5, &a), old).await, old, new);
    // In a transaction: the second write's condition fails, so neither lands.
    match fence
        .transact([(debit(5, &a), new), (debit(50, &b), new)])
        .await
        .unwrap()
    {
        FenceOutcome::ConditionFailed { index: 1, item } => {
            assert_eq!(item.unwrap().get("balance"), Some(&n(10)));
        }
        other => panic!("a transaction with an overdraft was {other:?}"),
    }
    assert_eq!(get(&client, &a).await, Some(stored.clone()));
    let _ = fence.write(debit(5, &a), new).await.unwrap();
    assert_eq!(get(&client, &a).await.unwrap().get("balance"), Some(&n(5)));
    // A condition on a missing item: the fence admits, the condition decides.
    let missing = key();
    let create = FencedWrite::put(USER_TABLE, missing.clone(), Item::new())
        .condition("attribute_exists(#id)")
        .name("#id", "id");
    assert_eq!(
        fence.write(create, old).await.unwrap(),
        FenceOutcome::ConditionFailed {
            index: 0,
            item: None
        }
    );
    assert_eq!(get(&client, &missing).await, None);
    // Fences of another attribute pair are no fences to this one: `ftoken` is what counts.
    let default = table.fence();
    let token = FencingToken::new(1).unwrap();
    let unfenced = Fence::new(token, OwnerId::random());
    let _ = default
        .write(FencedWrite::update(USER_TABLE, a.clone(), ""), unfenced)
        .await
        .unwrap();
    assert_stale(fence.write(debit(1, &a), unfenced).await, unfenced, new);
}

/// A fenced write is one request, and so is a fenced transaction of several items: the
/// fence rides in the write's own condition, counted by the fault proxy's exchanges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_write_and_a_fenced_transaction_are_one_request_each() {
    let _tables = tables().await;
    let moto = common::moto().await;
    let proxy = fencelock_servers::proxy::FaultProxy::start(([127, 0, 0, 1], moto.port).into())
        .await
        .unwrap();
    let table = fencelock_dynamodb::DynamoConfig::from_url(&common::url_at(
        proxy.port(),
        common::TABLE,
        "",
    ))
    .unwrap()
    .connect()
    .await
    .unwrap();
    let fence = table.fence();
    let holder = Fence::new(FencingToken::new(7).unwrap(), OwnerId::random());
    let (a, b) = (key(), key());
    let put = |key: &Item| FencedWrite::put(USER_TABLE, key.clone(), Item::new());
    let before = proxy.exchanges();
    let _ = fence.write(put(&a), holder).await.unwrap();
    assert_eq!(proxy.exchanges() - before, 1, "a fenced put");
    let before = proxy.exchanges();
    let _ = fence
        .transact([
            (FencedWrite::update(USER_TABLE, a.clone(), ""), holder),
            (put(&b), holder),
        ])
        .await
        .unwrap();
    assert_eq!(proxy.exchanges() - before, 1, "a fenced transaction");
}
