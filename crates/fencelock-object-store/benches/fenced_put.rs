//! A fenced put and a fenced read against a plain put and get on the same S3-compatible server
//! (moto, started on a free port), in the same groups, so their ratios come out of one run;
//! and the number of requests each costs, counted on the store.
//!
//! `cargo bench -p fencelock-object-store --bench fenced_put`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout
)]

#[path = "../tests/support/moto.rs"]
mod moto;

use std::fmt;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use fencelock_core::{Fence, FencingToken, OwnerId};
use fencelock_object_store::object_store::path::Path;
use fencelock_object_store::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result as StoreResult,
};
use fencelock_object_store::{ObjectFence, ObjectStoreConfig};
use futures_util::stream::BoxStream;

/// The payload of every put: a small document.
const PAYLOAD_LEN: usize = 1024;

/// Counts the requests that reach the store underneath.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ObjectStore>,
    requests: AtomicUsize,
}

impl Counting {
    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }
}

impl fmt::Display for Counting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

#[async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        self.count();
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        self.count();
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> StoreResult<GetResult> {
        self.count();
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> StoreResult<Vec<Bytes>> {
        self.count();
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, StoreResult<Path>>,
    ) -> BoxStream<'static, StoreResult<Path>> {
        self.count();
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        self.count();
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> StoreResult<ListResult> {
        self.count();
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> StoreResult<()> {
        self.count();
        self.inner.copy_opts(from, to, options).await
    }
}

struct Bench {
    raw: Arc<Counting>,
    fence: ObjectFence,
    prefix: Path,
    token: AtomicU64,
    counter: AtomicU64,
}

impl Bench {
    fn path(&self, name: &str) -> Path {
        self.prefix.clone().join(name)
    }

    fn payload(&self) -> Vec<u8> {
        // A new payload each time, so a fenced put always has something to write.
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut payload = format!("{n:020}").into_bytes();
        payload.resize(PAYLOAD_LEN, b'x');
        payload
    }

    fn next_fence(&self) -> Fence {
        let token = self.token.fetch_add(1, Ordering::Relaxed);
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
    }

    /// How many requests `op` costs, on the counting store.
    async fn requests<F: std::future::Future<Output = ()>>(&self, op: impl Fn() -> F) -> f64 {
        const RUNS: usize = 20;
        let before = self.raw.requests.load(Ordering::Relaxed);
        for _ in 0..RUNS {
            op().await;
        }
        (self.raw.requests.load(Ordering::Relaxed) - before) as f64 / RUNS as f64
    }
}

fn setup(rt: &tokio::runtime::Runtime) -> Arc<Bench> {
    let url = moto::url();
    rt.block_on(async {
        let config: ObjectStoreConfig = url.parse().unwrap();
        let raw = Arc::new(Counting {
            inner: config.object_store().unwrap(),
            requests: AtomicUsize::new(0),
        });
        let fence = ObjectFence::connect(raw.clone(), config.prefix())
            .await
            .unwrap();
        Arc::new(Bench {
            raw,
            fence,
            prefix: config.prefix().clone(),
            token: AtomicU64::new(1),
            counter: AtomicU64::new(0),
        })
    })
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bench = setup(&rt);
    let held = bench.next_fence();
    let (plain_path, fenced_path) = (bench.path("plain"), bench.path("fenced"));
    rt.block_on(async {
        let payload = PutPayload::from(bench.payload());
        bench.raw.put(&plain_path, payload).await.unwrap();
        bench
            .fence
            .put(&fenced_path, held, &bench.payload())
            .await
            .unwrap();
    });

    let mut group = c.benchmark_group("object-store-put");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("plain put (baseline)", |b| {
        b.to_async(&rt).iter(|| async {
            let payload = PutPayload::from(bench.payload());
            bench.raw.put(&plain_path, payload).await.unwrap();
        })
    });
    group.bench_function("fenced put", |b| {
        b.to_async(&rt).iter(|| async {
            bench
                .fence
                .put(&fenced_path, held, &bench.payload())
                .await
                .unwrap();
        })
    });
    group.finish();

    let mut group = c.benchmark_group("object-store-read");
    group
        .sample_size(30)
        .measurement_time(Duration::from_secs(8));
    group.bench_function("plain get (baseline)", |b| {
        b.to_async(&rt).iter(|| async {
            bench
                .raw
                .get(&plain_path)
                .await
                .unwrap()
                .bytes()
                .await
                .unwrap();
        })
    });
    group.bench_function("fenced read, fence held", |b| {
        b.to_async(&rt).iter(|| async {
            bench.fence.get(&fenced_path, held).await.unwrap();
        })
    });
    let advancing = bench.path("advancing");
    group.bench_function("fenced read, new fence", |b| {
        b.to_async(&rt).iter(|| async {
            bench
                .fence
                .get(&advancing, bench.next_fence())
                .await
                .unwrap();
        })
    });
    group.finish();

    rt.block_on(async {
        let plain_put = bench
            .requests(|| async {
                let payload = PutPayload::from(bench.payload());
                bench.raw.put(&plain_path, payload).await.unwrap();
            })
            .await;
        let fenced_put = bench
            .requests(|| async {
                bench
                    .fence
                    .put(&fenced_path, held, &bench.payload())
                    .await
                    .unwrap();
            })
            .await;
        let plain_get = bench
            .requests(|| async {
                bench
                    .raw
                    .get(&plain_path)
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap();
            })
            .await;
        let fenced_held = bench
            .requests(|| async {
                bench.fence.get(&fenced_path, held).await.unwrap();
            })
            .await;
        let fenced_new = bench
            .requests(|| async {
                bench
                    .fence
                    .get(&advancing, bench.next_fence())
                    .await
                    .unwrap();
            })
            .await;
        println!(
            "requests per operation ({PAYLOAD_LEN}-byte payload, {}):",
            bench.raw
        );
        for (name, n) in [
            ("plain put (baseline)", plain_put),
            ("fenced put", fenced_put),
            ("plain get (baseline)", plain_get),
            ("fenced read, fence held", fenced_held),
            ("fenced read, new fence", fenced_new),
        ] {
            println!("  {name:<26} {n:.2}");
        }
    });
}

criterion_group!(object_store_benches, benches);
criterion_main!(object_store_benches);
