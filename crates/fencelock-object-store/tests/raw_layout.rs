//! `ObjectLayout::Raw`: the body exactly as written, the fence in the object's metadata
//! (DESIGN section 5.7, *A layout for other readers*). Safe where every put moves the version
//! (the in-memory store's counter), refused where the version is the body's hash (S3, on the
//! moto server), and the stale holder is refused in the interleaving that would break it there.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::sync::Arc;

use bytes::Bytes;
use fencelock_core::{Error, Fence, FencingToken, OwnerId};
use fencelock_object_store::object_store::aws::AmazonS3Builder;
use fencelock_object_store::object_store::memory::InMemory;
use fencelock_object_store::object_store::path::Path;
use fencelock_object_store::object_store::{
    Attribute, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};
use fencelock_object_store::{ObjectFence, ObjectLayout};
use support::moto::{BUCKET, moto};

fn fence(token: u64) -> Fence {
    Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
}

/// An in-memory store and a raw-layout fence on it.
async fn raw_in_memory() -> (Arc<dyn ObjectStore>, ObjectFence) {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let fence =
        ObjectFence::connect_with_layout(store.clone(), &Path::default(), ObjectLayout::Raw)
            .await
            .unwrap();
    assert_eq!(fence.layout(), ObjectLayout::Raw);
    (store, fence)
}

/// The body a plain reader gets, and the fence metadata stored beside it.
async fn plain_read(
    store: &dyn ObjectStore,
    path: &Path,
) -> (Bytes, Option<String>, UpdateVersion) {
    let result = store.get_opts(path, GetOptions::default()).await.unwrap();
    let meta = result
        .attributes
        .get(&Attribute::Metadata(ObjectLayout::RAW_METADATA_KEY.into()))
        .map(|value| value.as_ref().to_owned());
    let version = UpdateVersion {
        e_tag: result.meta.e_tag.clone(),
        version: result.meta.version.clone(),
    };
    (result.bytes().await.unwrap(), meta, version)
}

fn assert_stale(
    result: fencelock_core::Result<impl std::fmt::Debug>,
    presented: Fence,
    current: Fence,
) {
    match result {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => assert_eq!((p, c), (presented, current)),
        other => panic!("expected Stale({presented:?} < {current:?}), got {other:?}"),
    }
}

/// What a plain `get` of the store returns is exactly the payload; the fence is in the
/// metadata; fenced reads, peeks, tombstones and fenced reads of missing objects keep the body
/// as a plain reader expects (a tombstone and a read-created object are empty).
#[tokio::test]
async fn a_plain_read_of_a_raw_object_is_exactly_the_payload() {
    let (store, objects) = raw_in_memory().await;
    let path = Path::from("tables/events/part-0.json");
    let holder = fence(4);
    let payload = b"{\"id\":1}\nfencelock-object v1 9 not-a-header value\n";
    objects.put(&path, holder, payload).await.unwrap();

    let (body, meta, _) = plain_read(&*store, &path).await;
    assert_eq!(&body[..], payload);
    assert_eq!(
        meta.as_deref(),
        Some(format!("fencelock-object v1 4 {} value", holder.owner).as_str())
    );
    assert_eq!(
        objects.get(&path, holder).await.unwrap().as_deref(),
        Some(&payload[..])
    );
    let seen = objects.peek(&path).await.unwrap().unwrap();
    assert_eq!(
        (seen.value.as_deref(), seen.fence),
        (Some(&payload[..]), holder)
    );

    // A newer holder's fenced read advances the fence and leaves the body as it is.
    let next = fence(5);
    objects.get(&path, next).await.unwrap();
    let (body, meta, _) = plain_read(&*store, &path).await;
    assert_eq!(&body[..], payload);
    assert!(meta.unwrap().starts_with("fencelock-object v1 5 "));

    // A tombstone is an empty body holding the fence.
    objects.delete(&path, next).await.unwrap();
    let (body, meta, _) = plain_read(&*store, &path).await;
    assert!(body.is_empty());
    assert!(meta.unwrap().ends_with(" none"));
    assert_eq!(objects.get(&path, next).await.unwrap(), None);

    // A fenced read of a missing object creates an empty one holding the fence.
    let missing = Path::from("tables/events/part-1.json");
    assert_eq!(objects.get(&missing, next).await.unwrap(), None);
    let (body, meta, _) = plain_read(&*store, &missing).await;
    assert!(body.is_empty());
    assert!(meta.unwrap().starts_with("fencelock-object v1 5 "));
}

/// A holder that wakes up after a newer one wrote is refused, and the newer payload stays.
#[tokio::test]
async fn a_stale_holder_is_refused_after_a_newer_put() {
    let (store, objects) = raw_in_memory().await;
    let path = Path::from("report.csv");
    let (old, new) = (fence(5), fence(6));
    objects.put(&path, old, b"a,b\n1,2\n").await.unwrap();
    objects.put(&path, new, b"a,b\n3,4\n").await.unwrap();
    assert_stale(objects.put(&path, old, b"a,b\n5,6\n").await, old, new);
    assert_stale(objects.get(&path, old).await, old, new);
    let (body, _, _) = plain_read(&*store, &path).await;
    assert_eq!(&body[..], b"a,b\n3,4\n");
}

/// The interleaving that breaks a metadata fence on S3: holder A (token 5) reads, holder B
/// (token 6) makes a fenced read of the same body (or writes the same bytes), which changes
/// only the metadata; then A writes. On S3 the ETag, the body's MD5, would be the one A read,
/// and A's `If-Match` would land. Here every put moves the version: the version A read is gone
/// (the store itself refuses a put naming it), and A's fenced write is `Stale`.
#[tokio::test]
async fn a_stale_holder_is_refused_after_a_newer_fenced_read_of_the_same_body() {
    let (store, objects) = raw_in_memory().await;
    for newer_writes_same_bytes in [false, true] {
        let path = Path::from(format!("same-body-{newer_writes_same_bytes}"));
        let (a, b) = (fence(5), fence(6));
        objects.put(&path, a, b"balance=100").await.unwrap();

        // A reads.
        assert_eq!(
            objects.get(&path, a).await.unwrap().as_deref(),
            Some(&b"balance=100"[..])
        );
        let (_, _, seen_by_a) = plain_read(&*store, &path).await;
        // B reads (or rewrites the same bytes): the body is unchanged, the fence advances.
        if newer_writes_same_bytes {
            objects.put(&path, b, b"balance=100").await.unwrap();
        } else {
            objects.get(&path, b).await.unwrap();
        }
        let (body, meta, now) = plain_read(&*store, &path).await;
        assert_eq!(&body[..], b"balance=100", "the body changed");
        assert!(meta.unwrap().starts_with("fencelock-object v1 6 "));
        assert_ne!(now, seen_by_a, "the version did not move with the fence");

        // A's conditional put on the version it read is refused by the store itself...
        let late = store
            .put_opts(
                &path,
                PutPayload::from_static(b"balance=90"),
                PutOptions {
                    mode: PutMode::Update(seen_by_a),
                    ..PutOptions::default()
                },
            )
            .await;
        assert!(
            matches!(
                late,
                Err(fencelock_object_store::object_store::Error::Precondition { .. })
            ),
            "{late:?}"
        );
        // ...and A's fenced write is Stale: B's read stands.
        assert_stale(objects.put(&path, a, b"balance=90").await, a, b);
        objects.put(&path, b, b"balance=80").await.unwrap();
        let (body, _, _) = plain_read(&*store, &path).await;
        assert_eq!(&body[..], b"balance=80");
    }
}

/// Writers racing on one object: the newest token's put always lands and stays, every older
/// one lands before it or is `Stale`, and the body is the newest payload, as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_writers_leave_the_newest_payload() {
    let (store, objects) = raw_in_memory().await;
    for round in 0..25 {
        let path = Path::from(format!("race/{round}"));
        let fences: Vec<Fence> = (1..=4).map(fence).collect();
        let tasks: Vec<_> = fences
            .iter()
            .map(|&f| {
                let objects = objects.clone();
                let path = path.clone();
                tokio::spawn(async move {
                    let payload = format!("written by {}", f.token);
                    objects.put(&path, f, payload.as_bytes()).await
                })
            })
            .collect();
        for (task, f) in tasks.into_iter().zip(&fences) {
            match task.await.unwrap() {
                Ok(()) => {}
                Err(Error::Stale { presented, .. }) if presented != fences[3] => {
                    assert_eq!(presented, *f);
                }
                other => panic!("round {round}, token {}: {other:?}", f.token),
            }
        }
        let (body, meta, _) = plain_read(&*store, &path).await;
        assert_eq!(&body[..], b"written by 4", "round {round}");
        assert!(meta.unwrap().starts_with("fencelock-object v1 4 "));
        assert_eq!(objects.peek(&path).await.unwrap().unwrap().fence, fences[3]);
    }
}

/// An object with no fence metadata (written by another tool) is not a fenced object under the
/// raw layout: every operation names it, and nothing is written over it.
#[tokio::test]
async fn a_raw_object_without_fence_metadata_is_refused_and_left_alone() {
    let (store, objects) = raw_in_memory().await;
    let path = Path::from("plain.txt");
    store
        .put(&path, PutPayload::from_static(b"written by another tool"))
        .await
        .unwrap();
    let holder = fence(3);
    for result in [
        objects.put(&path, holder, b"fenced").await.map(drop),
        objects.get(&path, holder).await.map(drop),
        objects.delete(&path, holder).await.map(drop),
        objects.peek(&path).await.map(drop),
    ] {
        match result {
            Err(Error::Backend { message, .. }) => {
                assert!(
                    message.contains("plain.txt is not a fenced object"),
                    "{message}"
                );
                assert!(message.contains("no `fencelock` metadata"), "{message}");
            }
            other => panic!("expected Backend, got {other:?}"),
        }
    }
    let (body, meta, _) = plain_read(&*store, &path).await;
    assert_eq!((&body[..], meta), (&b"written by another tool"[..], None));
}

/// On S3 (the moto server) a plain object's ETag is its body's MD5, so the raw layout is
/// refused when connecting, saying why; the framed layout on the same store is accepted, so
/// the refusal is the raw probe's. Without that probe this connect would succeed.
#[tokio::test]
async fn the_raw_layout_is_refused_on_s3_where_the_etag_is_the_body_hash() {
    let store: Arc<dyn ObjectStore> = Arc::new(
        AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(moto().endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .unwrap(),
    );
    let dir = Path::from(format!("raw-probe-{}", OwnerId::random()));
    let framed = support::moto::connected(ObjectFence::connect(store.clone(), &dir).await);
    assert_eq!(framed.layout(), ObjectLayout::Framed);

    match ObjectFence::connect_with_layout(store.clone(), &dir, ObjectLayout::Raw).await {
        Err(Error::InvalidConfig { message, .. }) => {
            for part in [
                "AmazonS3(",
                "cannot keep the fence outside the body (ObjectLayout::Raw)",
                "the store's version is the body's hash",
                "a fence kept outside the body could advance without the version changing",
                "use the default framed layout (ObjectLayout::Framed)",
            ] {
                assert!(message.contains(part), "{part:?} missing from: {message}");
            }
        }
        other => panic!("the raw layout on S3: expected InvalidConfig, got {other:?}"),
    }
    // The probes removed their objects.
    let mut listed = store.list(Some(&dir));
    assert!(futures_util::StreamExt::next(&mut listed).await.is_none());
}

/// A store that drops metadata on reads (here the in-memory store behind a wrapper that
/// clears `GetResult::attributes`, as a store without metadata support would) is refused for
/// the raw layout and accepted for the framed one.
#[tokio::test]
async fn a_store_that_returns_no_metadata_is_refused_for_the_raw_layout() {
    let store: Arc<dyn ObjectStore> = Arc::new(DropsMetadata(InMemory::new()));
    let framed = ObjectFence::connect(store.clone(), &Path::default()).await;
    assert!(framed.is_ok(), "{framed:?}");
    match ObjectFence::connect_with_layout(store, &Path::default(), ObjectLayout::Raw).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("DropsMetadata cannot keep the fence"),
                "{message}"
            );
            assert!(
                message.contains("a read did not return the metadata"),
                "{message}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[derive(Debug)]
struct DropsMetadata(InMemory);

impl std::fmt::Display for DropsMetadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DropsMetadata")
    }
}

mod dropping {
    use fencelock_object_store::object_store::path::Path;
    use fencelock_object_store::object_store::{
        Attributes, CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta,
        ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    };
    use futures_util::stream::BoxStream;

    #[async_trait::async_trait]
    impl ObjectStore for super::DropsMetadata {
        async fn put_opts(
            &self,
            at: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> Result<PutResult> {
            self.0.put_opts(at, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            at: &Path,
            opts: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(at, opts).await
        }
        async fn get_opts(&self, at: &Path, options: GetOptions) -> Result<GetResult> {
            let mut result = self.0.get_opts(at, options).await?;
            result.attributes = Attributes::new();
            Ok(result)
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }
}
