//! Stores that cannot fence are refused when the fence is built, saying why; objects that are
//! not fenced objects, and servers that are down, give typed errors and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use fencelock_core::{Error, Fence, FencingToken, OwnerId};
use fencelock_object_store::object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use fencelock_object_store::object_store::local::LocalFileSystem;
use fencelock_object_store::object_store::memory::InMemory;
use fencelock_object_store::object_store::path::Path;
use fencelock_object_store::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use fencelock_object_store::{ObjectFence, ObjectStorage, ObjectStoreConfig};
use support::moto::{BUCKET, moto};

/// The test server's bucket as a plain S3 store, conditional puts as S3 does them.
fn raw_s3() -> impl ObjectStore {
    AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(moto().endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .build()
        .unwrap()
}

fn config_message(result: fencelock_core::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::InvalidConfig { message, .. }) => message,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn a_local_file_system_store_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let message = config_message(ObjectStorage::connect(store, Path::from("fenced")).await);
    assert!(
        message.contains("does not implement a conditional update"),
        "{message}"
    );
    assert!(message.contains("LocalFileSystem"), "{message}");
    // The probe cleaned up after itself.
    assert_eq!(
        std::fs::read_dir(dir.path().join("fenced"))
            .unwrap()
            .count(),
        0
    );
}

#[tokio::test]
async fn s3_with_conditional_puts_disabled_is_refused() {
    let store = AmazonS3Builder::new()
        .with_bucket_name(BUCKET)
        .with_endpoint(moto().endpoint())
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_conditional_put(S3ConditionalPut::Disabled)
        .build()
        .unwrap();
    let message = config_message(ObjectFence::connect(Arc::new(store), &Path::from("p")).await);
    assert!(message.contains("conditional create"), "{message}");
}

#[tokio::test]
async fn an_object_that_is_not_fenced_is_refused_and_left_alone() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let fence = ObjectFence::connect(store.clone(), &Path::default())
        .await
        .unwrap();
    let path = Path::from("plain.txt");
    store
        .put(&path, PutPayload::from_static(b"written by another tool"))
        .await
        .unwrap();
    let holder = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    for result in [
        fence.put(&path, holder, b"fenced").await.map(drop),
        fence.get(&path, holder).await.map(drop),
        fence.peek(&path).await.map(drop),
    ] {
        match result {
            Err(Error::Backend { message, .. }) => {
                assert!(
                    message.contains("plain.txt is not a fenced object"),
                    "{message}"
                );
                assert!(message.contains("InMemory"), "{message}");
            }
            other => panic!("expected Backend, got {other:?}"),
        }
    }
    let body = store.get(&path).await.unwrap().bytes().await.unwrap();
    assert_eq!(&body[..], b"written by another tool");
}

#[tokio::test]
async fn a_server_that_is_down_is_unavailable_and_named() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config: ObjectStoreConfig = format!(
        "s3://bkt/x?endpoint=http://127.0.0.1:{port}&access_key_id=a&secret_access_key=hunter2"
    )
    .parse()
    .unwrap();
    let error = config.connect_storage().await.unwrap_err();
    assert!(error.is_retryable(), "{error}");
    let text = error.to_string();
    assert!(text.contains(&format!("127.0.0.1%3A{port}")), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[tokio::test]
async fn a_missing_bucket_is_named() {
    let config: ObjectStoreConfig = format!(
        "s3://no-such-bucket-here/x?endpoint={}&access_key_id=test&secret_access_key=test",
        moto().endpoint()
    )
    .parse()
    .unwrap();
    let message = config_message(config.connect_storage().await);
    assert!(message.contains("no-such-bucket-here"), "{message}");
    assert!(message.contains("does the bucket exist?"), "{message}");
}

/// Why the fence is kept in the body (DESIGN section 5.7): on S3 a plain object's ETag is its
/// body's MD5, so rewriting the same body with other metadata keeps the ETag, and a
/// conditional put on the older ETag still lands. Shown on the S3 server itself.
#[tokio::test]
async fn s3_etags_follow_the_body_alone() {
    use fencelock_object_store::object_store::{
        Attribute, AttributeValue, Attributes, PutMode, PutOptions, UpdateVersion,
    };

    let store = raw_s3();
    let path = Path::from(format!("etags/{}", OwnerId::random()));
    let put = |fence_meta: &'static str, mode: PutMode| {
        let mut attributes = Attributes::new();
        attributes.insert(
            Attribute::Metadata("fence".into()),
            AttributeValue::from(fence_meta),
        );
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        store.put_opts(&path, PutPayload::from_static(b"same body"), options)
    };
    let first = put("5", PutMode::Create).await.unwrap();
    let second = put("6", PutMode::Update(UpdateVersion::from(first.clone())))
        .await
        .unwrap();
    assert_eq!(first.e_tag, second.e_tag, "the metadata changed the ETag");
    // The holder of fence 5 still matches after fence 6 was recorded in metadata.
    put("5", PutMode::Update(UpdateVersion::from(first)))
        .await
        .expect("a metadata-only fence would have been overwritten by a stale put");
}

/// Under `FenceRule::Strict` a token is good for one operation.
#[tokio::test]
async fn the_strict_rule_admits_one_operation_per_token() {
    let fence = ObjectFence::connect(Arc::new(InMemory::new()), &Path::default())
        .await
        .unwrap()
        .with_rule(fencelock_core::FenceRule::Strict);
    let path = Path::from("once");
    let holder = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    fence.put(&path, holder, b"first").await.unwrap();
    match fence.put(&path, holder, b"second").await {
        Err(Error::Stale {
            presented, current, ..
        }) => assert_eq!((presented, current), (holder, holder)),
        other => panic!("expected Stale, got {other:?}"),
    }
    let next = Fence::new(FencingToken::new(4).unwrap(), holder.owner);
    assert_eq!(
        fence.get(&path, next).await.unwrap().as_deref(),
        Some(&b"first"[..])
    );
    assert!(fence.get(&path, next).await.is_err());
}

/// A store that takes conditional puts but ignores their conditions (as an S3-compatible
/// server without `If-Match` support does): every update overwrites, and so does every
/// create unless `honours_create`.
#[derive(Debug)]
struct IgnoresConditions {
    inner: InMemory,
    honours_create: bool,
}

impl std::fmt::Display for IgnoresConditions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IgnoresConditions")
    }
}

mod ignoring {
    use fencelock_object_store::object_store::path::Path;
    use fencelock_object_store::object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    };
    use futures_util::stream::BoxStream;

    #[async_trait::async_trait]
    impl ObjectStore for super::IgnoresConditions {
        async fn put_opts(
            &self,
            at: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> Result<PutResult> {
            let honoured = self.honours_create && matches!(opts.mode, PutMode::Create);
            let opts = if honoured {
                opts
            } else {
                PutOptions::default()
            };
            self.inner.put_opts(at, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            at: &Path,
            opts: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.inner.put_multipart_opts(at, opts).await
        }
        async fn get_opts(&self, at: &Path, options: GetOptions) -> Result<GetResult> {
            self.inner.get_opts(at, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.inner.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }
}

#[tokio::test]
async fn a_store_that_ignores_conditions_is_refused() {
    for (honours_create, expected) in [
        (false, "it overwrote an object a conditional create"),
        (
            true,
            "it applied a conditional update (If-Match) against a version that was gone",
        ),
    ] {
        let store = Arc::new(IgnoresConditions {
            inner: InMemory::new(),
            honours_create,
        });
        let message = config_message(ObjectFence::connect(store.clone(), &Path::from("p")).await);
        assert!(
            message.contains("IgnoresConditions cannot fence writes"),
            "{message}"
        );
        assert!(message.contains(expected), "{message}");
        // The probe removed its object.
        let mut listed = store.list(None);
        assert!(futures_util::StreamExt::next(&mut listed).await.is_none());
    }
}

/// `s3://bucket/prefix` puts the application's fenced objects under the prefix, as the
/// URL's docs say: `connect_fence` writes `reports/q3.json` as `<prefix>/reports/q3.json`,
/// and nothing at the bucket's root (before, only the probe used the prefix).
#[tokio::test]
async fn a_fence_from_a_url_writes_under_its_prefix() {
    let prefix = format!("t-{}", OwnerId::random());
    let config: ObjectStoreConfig = moto().url(&prefix).parse().unwrap();
    let fence = support::moto::connected(config.connect_fence().await);
    let path = Path::from(format!("reports/{prefix}.json"));
    let holder = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    fence.put(&path, holder, b"q3").await.unwrap();
    assert_eq!(
        fence.get(&path, holder).await.unwrap().as_deref(),
        Some(&b"q3"[..])
    );
    let raw = raw_s3();
    let under = Path::from(format!("{prefix}/reports/{prefix}.json"));
    assert!(
        raw.head(&under).await.is_ok(),
        "no object at {under}: the prefix was not used"
    );
    assert!(
        raw.head(&path).await.is_err(),
        "the object was written at the bucket's root"
    );
}

/// A fenced delete leaves a tombstone that keeps the fence (DESIGN.md 5.7, *Deleting*): the
/// object reads as gone, and a paused holder's older token is still refused there. A delete
/// through the store itself forgets the fence, and that older token is admitted: the loss
/// the tombstone exists for.
#[tokio::test]
async fn a_tombstone_keeps_the_fence_that_a_store_delete_forgets() {
    let store: Arc<dyn ObjectStore> = Arc::new(raw_s3());
    let fence =
        support::moto::connected(ObjectFence::connect(store.clone(), &Path::from("probe")).await);
    let path = Path::from(format!("tombstone/{}", OwnerId::random()));
    let old = Fence::new(FencingToken::new(2).unwrap(), OwnerId::random());
    let new = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    fence.put(&path, old, b"draft").await.unwrap();

    fence.delete(&path, new).await.unwrap();
    assert_eq!(fence.get(&path, new).await.unwrap(), None);
    match fence.put(&path, old, b"late").await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!((presented, current), (old, new));
        }
        other => panic!("a paused holder's put after the tombstone: {other:?}"),
    }
    let tomb = fence
        .peek(&path)
        .await
        .unwrap()
        .expect("the tombstone is gone");
    assert_eq!((tomb.value, tomb.fence), (None, new));
    // Deleting again under the same fence changes nothing; an older fence is refused.
    fence.delete(&path, new).await.unwrap();
    assert!(matches!(
        fence.delete(&path, old).await,
        Err(Error::Stale { .. })
    ));

    store.delete(&path).await.unwrap();
    fence.put(&path, old, b"late").await.expect(
        "after a plain delete the older token was refused: the fence survived, contrary to \
         what DESIGN 5.7 says of a store's delete",
    );
}

/// Put-if-absent, on S3's conditional puts: the first create writes, a later one leaves the
/// payload as it is but advances the fence (its "it exists" is a read), an older fence is
/// refused as stale, and a tombstone counts as absent.
#[tokio::test]
async fn a_create_writes_only_where_no_payload_is() {
    let store: Arc<dyn ObjectStore> = Arc::new(raw_s3());
    let fence =
        support::moto::connected(ObjectFence::connect(store.clone(), &Path::from("probe")).await);
    let path = Path::from(format!("create/{}", OwnerId::random()));
    let fences: Vec<Fence> = (1..=4)
        .map(|t| Fence::new(FencingToken::new(t).unwrap(), OwnerId::random()))
        .collect();

    assert!(fence.create(&path, fences[1], b"first").await.unwrap());
    assert!(!fence.create(&path, fences[2], b"second").await.unwrap());
    let now = fence.peek(&path).await.unwrap().unwrap();
    assert_eq!(now.value.as_deref(), Some(&b"first"[..]));
    assert_eq!(
        now.fence, fences[2],
        "the refused create did not advance the fence"
    );
    match fence.create(&path, fences[0], b"late").await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!((presented, current), (fences[0], fences[2]));
        }
        other => panic!("an older holder's create: {other:?}"),
    }

    fence.delete(&path, fences[2]).await.unwrap();
    assert!(fence.create(&path, fences[3], b"again").await.unwrap());
    let now = fence.peek(&path).await.unwrap().unwrap();
    assert_eq!(
        (now.value.as_deref(), now.fence),
        (Some(&b"again"[..]), fences[3])
    );
}
