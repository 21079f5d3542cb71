//! `ObjectFence`: fenced puts and reads of objects, each a conditional put on the version read.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fencelock_core::{Error, Fence, FenceRule, Result, validate_value};
use object_store::path::Path;
use object_store::{
    Attributes, Error as StoreError, GetOptions, ObjectStore, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};
use tracing::Instrument;

use crate::error::{BACKEND, map_store_error, protocol, timed_out};
use crate::frame::{FencedObject, Frame};
use crate::layout::ObjectLayout;
use crate::probe::check_conditional_puts;

/// The largest payload accepted unless configured otherwise: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;

/// How long one request to the store may take unless configured otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How many conditional puts one call makes before it gives up with [`Error::Conflict`]:
/// each failed one means another writer's put landed in between.
const MAX_ATTEMPTS: usize = 16;

/// Fenced puts and reads of the application's own objects, on any [`ObjectStore`] with
/// conditional puts (S3 and S3-compatible servers honouring `If-Match`, GCS, Azure, the
/// in-memory store), under a fence from a lock of any backend.
///
/// Each object carries its own fence: the body is one header line holding the last admitted
/// fence, then the payload ([`FencedObject`]). [`put`](Self::put) and [`get`](Self::get)
/// admit a fence by the rule of DESIGN section 2 (newer token, or the same token and owner;
/// [`FenceRule::Strict`] on request), and a refused one is [`Error::Stale`] with nothing
/// written. [`peek`](Self::peek) reads without fencing. Objects written here are read back
/// through this type (or [`decode`](crate::decode)): other readers see the header line,
/// unless the fence is built with [`ObjectLayout::Raw`] on a store that allows it
/// ([`connect_with_layout`](Self::connect_with_layout)), which leaves the body exactly as
/// written and keeps the fence in the object's metadata.
///
/// ```
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::sync::Arc;
///
/// use fencelock_core::{Fence, FencingToken, OwnerId};
/// use fencelock_object_store::ObjectFence;
/// use object_store::memory::InMemory;
/// use object_store::path::Path;
///
/// // Any store; `connect` checks it refuses a stale conditional put, with a probe object.
/// let fence = ObjectFence::connect(Arc::new(InMemory::new()), &Path::from("probes")).await?;
/// let report = Path::from("reports/2026-q3.json");
/// let old = Fence::new(FencingToken::new(5).unwrap(), OwnerId::random());
/// let new = Fence::new(FencingToken::new(6).unwrap(), OwnerId::random());
/// fence.put(&report, old, b"{\"draft\":1}").await?;
/// fence.put(&report, new, b"{\"final\":1}").await?;
/// // The holder of token 5 wakes up late: its put is refused, the object stays token 6's.
/// assert!(fence.put(&report, old, b"{\"draft\":2}").await.is_err());
/// assert_eq!(fence.get(&report, new).await?.as_deref(), Some(&b"{\"final\":1}"[..]));
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Why it is safe
///
/// Every admission is one conditional put on the version (ETag, generation) of the object as
/// it was read: `If-None-Match: *` when there was none, `If-Match` otherwise. The store
/// applies the put only if the object is still that version, so the rule was checked against
/// the fence the object holds at the moment the put lands; a put that fails its condition
/// changes nothing, and the call reads again and decides again (fences only advance, so a
/// refusal stays a refusal). DESIGN section 5.7 gives the whole argument, with racing writers,
/// puts whose answer is lost, and what the store must guarantee.
///
/// # Unknown outcomes
///
/// A call that fails with a retryable error ([`Error::Unavailable`]: a time-out, a reset
/// connection) may have been applied: the put may have reached the store. Assume it may have
/// landed, as for any write whose answer was lost; the next call decides correctly either
/// way (a later call under the same fence is admitted whether or not it landed, under the
/// default rule).
#[derive(Clone)]
pub struct ObjectFence {
    store: Arc<dyn ObjectStore>,
    name: Arc<str>,
    layout: ObjectLayout,
    rule: FenceRule,
    max_value_len: usize,
    call_timeout: Duration,
}

impl fmt::Debug for ObjectFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectFence")
            .field("store", &self.name)
            .field("layout", &self.layout)
            .field("rule", &self.rule)
            .field("max_value_len", &self.max_value_len)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

/// What an admission does.
#[derive(Clone, Copy)]
enum Op<'a> {
    Read,
    Write(&'a [u8]),
    /// The payload removed, the fence kept: a tombstone.
    Delete,
    /// A write when the object holds no payload; a read when it does.
    Create(&'a [u8]),
}

/// What one attempt of an operation does, once the object is read: a create resolves to a
/// write or a read.
#[derive(Clone, Copy)]
enum Step<'a> {
    Read,
    Write(&'a [u8]),
    Delete,
}

impl Op<'_> {
    fn word(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write(_) => "write",
            Op::Delete => "delete",
            Op::Create(_) => "create",
        }
    }
}

/// An object as read, with the version a conditional put names.
struct Loaded {
    frame: Frame,
    version: UpdateVersion,
}

/// Why a put was not applied.
enum PutRefused {
    /// The object changed since it was read (or appeared): read again.
    Changed,
    /// Anything else, as a fencelock error.
    Failed(Error),
}

impl ObjectFence {
    /// Fencing on `store`, once it has shown that it refuses a conditional put against a
    /// version that is no longer current, with a probe object written under `probe_dir`
    /// (a few requests; the probe is deleted again).
    ///
    /// A store without conditional puts (a local file system store, S3 with conditional
    /// puts disabled) or one that ignores their conditions is refused with
    /// [`Error::InvalidConfig`] saying so; an unreachable store is [`Error::Unavailable`].
    /// Objects are framed ([`ObjectLayout::Framed`]): the fence in a header line of the body.
    pub async fn connect(store: Arc<dyn ObjectStore>, probe_dir: &Path) -> Result<Self> {
        Self::connect_with_layout(store, probe_dir, ObjectLayout::Framed).await
    }

    /// As [`connect`](Self::connect), with objects in `layout`. For [`ObjectLayout::Raw`]
    /// (the body exactly as written, the fence in the object's metadata) the probe also
    /// checks that the store returns metadata on a read, and that a conditional put of the
    /// same body with other metadata moves the version the next conditional put must name;
    /// a store whose version is its body's hash (S3, where a plain object's ETag is its MD5)
    /// fails that check and is refused with [`Error::InvalidConfig`] saying why: there a fence
    /// kept outside the body could advance without the version changing, so an older
    /// holder's put would still land.
    ///
    /// ```
    /// # async fn demo() -> fencelock_core::Result<()> {
    /// use std::sync::Arc;
    /// use fencelock_core::{Fence, FencingToken, OwnerId};
    /// use fencelock_object_store::{ObjectFence, ObjectLayout};
    /// use fencelock_object_store::object_store::{ObjectStore, ObjectStoreExt};
    /// use fencelock_object_store::object_store::{memory::InMemory, path::Path};
    ///
    /// // The in-memory store's version moves with every put: it passes the probe.
    /// let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    /// let fence = ObjectFence::connect_with_layout(store.clone(), &Path::default(), ObjectLayout::Raw).await?;
    /// let table = Path::from("tables/events/part-0.parquet");
    /// let holder = Fence::new(FencingToken::new(7).unwrap(), OwnerId::random());
    /// fence.put(&table, holder, b"PAR1...").await?;
    /// // Any other reader sees the bytes as written.
    /// let body = store.get(&table).await.unwrap().bytes().await.unwrap();
    /// assert_eq!(&body[..], b"PAR1...");
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub async fn connect_with_layout(
        store: Arc<dyn ObjectStore>,
        probe_dir: &Path,
        layout: ObjectLayout,
    ) -> Result<Self> {
        let name: Arc<str> = Arc::from(store.to_string());
        check_conditional_puts(&*store, &name, probe_dir, DEFAULT_CALL_TIMEOUT, layout).await?;
        Ok(ObjectFence {
            store,
            name,
            layout,
            rule: FenceRule::Monotonic,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// The rule that admits a fence (default [`FenceRule::Monotonic`]; [`FenceRule::Strict`]
    /// admits one operation per token).
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The largest payload [`put`](Self::put) accepts, in bytes (default
    /// [`DEFAULT_MAX_VALUE_LEN`]). Payloads are held in memory whole.
    pub fn with_max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = len;
        self
    }

    /// How long one request may take before the call fails with a retryable
    /// [`Error::Unavailable`] (default [`DEFAULT_CALL_TIMEOUT`]); a put that timed out may
    /// have been applied. Zero is refused by every call with [`Error::InvalidConfig`].
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The store's name (its `Display`, `AmazonS3(bucket)`), as errors show it.
    pub fn store_name(&self) -> &str {
        &self.name
    }

    /// Where objects keep their fence ([`ObjectLayout::Framed`] unless connected with
    /// [`connect_with_layout`](Self::connect_with_layout)).
    pub fn layout(&self) -> ObjectLayout {
        self.layout
    }

    /// The largest payload accepted.
    pub fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    /// The store this fences.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// A fenced put: admits `fence` for the object at `path` and stores `payload` there, in
    /// one conditional put. [`Error::Stale`] when the object's fence is newer (nothing
    /// written); [`Error::ValueTooLarge`] before anything is sent; [`Error::Backend`] when
    /// the object exists but is not a fenced object (nothing written).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave its put in flight: it may still land, and only if the
    /// object is unchanged since this call read it, so it lands as an admitted put.
    pub async fn put(&self, path: &Path, fence: Fence, payload: &[u8]) -> Result<()> {
        self.admit(path, fence, Op::Write(payload)).await.map(drop)
    }

    /// A fenced read: admits `fence` for the object at `path` (advancing its fence, which is
    /// a conditional put of the object with the new fence when it held an older one) and
    /// returns the payload. A fenced read of a missing object creates it with the fence and
    /// no payload, so an older holder cannot write there afterwards.
    ///
    /// # Cancel safety
    ///
    /// As for [`put`](Self::put).
    pub async fn get(&self, path: &Path, fence: Fence) -> Result<Option<Bytes>> {
        self.admit(path, fence, Op::Read).await
    }

    /// A fenced put-if-absent: admits `fence` for the object at `path` and stores `payload`
    /// there only when the object holds no payload (it is missing, a tombstone, or was
    /// created by a fenced read). `Ok(true)` when this call stored it; `Ok(false)` when a
    /// payload was there, which is left as it is while the fence advances to `fence`, as a
    /// fenced [`get`](Self::get) does (the answer "it exists" is a read, and an older holder
    /// must not write after it). [`Error::Stale`] when the object's fence is newer, whether
    /// or not it holds a payload.
    ///
    /// ```
    /// # async fn demo() -> fencelock_core::Result<()> {
    /// use std::sync::Arc;
    /// use fencelock_core::{Fence, FencingToken, OwnerId};
    /// use fencelock_object_store::ObjectFence;
    /// use fencelock_object_store::object_store::{memory::InMemory, path::Path};
    ///
    /// let fence = ObjectFence::connect(Arc::new(InMemory::new()), &Path::default()).await?;
    /// let path = Path::from("log/00000001.json");
    /// let first = Fence::new(FencingToken::new(1).unwrap(), OwnerId::random());
    /// let second = Fence::new(FencingToken::new(2).unwrap(), OwnerId::random());
    /// assert!(fence.create(&path, first, b"commit 1").await?);
    /// assert!(!fence.create(&path, second, b"commit 1'").await?); // taken: left as it is
    /// assert_eq!(fence.get(&path, second).await?.as_deref(), Some(&b"commit 1"[..]));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`put`](Self::put).
    pub async fn create(&self, path: &Path, fence: Fence, payload: &[u8]) -> Result<bool> {
        Ok(self
            .admit(path, fence, Op::Create(payload))
            .await?
            .is_none())
    }

    /// A fenced delete that keeps the fence: admits `fence` for the object at `path` and
    /// removes its payload, leaving a *tombstone* (the object with the fence and no payload,
    /// in one conditional put). Afterwards [`get`](Self::get) answers `None`, as for a
    /// missing object, and a holder with an older fence is still refused
    /// ([`Error::Stale`]). Deleting the object from the store instead (`DELETE`, a lifecycle
    /// rule) forgets its fence: the next put of any token, a paused holder's included, is
    /// admitted there (DESIGN.md 5.7, *Deleting*).
    ///
    /// ```
    /// # async fn demo() -> fencelock_core::Result<()> {
    /// use std::sync::Arc;
    /// use fencelock_core::{Error, Fence, FencingToken, OwnerId};
    /// use fencelock_object_store::ObjectFence;
    /// use fencelock_object_store::object_store::{memory::InMemory, path::Path};
    ///
    /// let fence = ObjectFence::connect(Arc::new(InMemory::new()), &Path::default()).await?;
    /// let path = Path::from("reports/q3.json");
    /// let old = Fence::new(FencingToken::new(2).unwrap(), OwnerId::random());
    /// let new = Fence::new(FencingToken::new(3).unwrap(), OwnerId::random());
    /// fence.put(&path, old, b"draft").await?;
    /// fence.delete(&path, new).await?;
    /// assert_eq!(fence.get(&path, new).await?, None);
    /// assert!(matches!(fence.put(&path, old, b"late").await, Err(Error::Stale { .. })));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    ///
    /// # Cancel safety
    ///
    /// As for [`put`](Self::put).
    pub async fn delete(&self, path: &Path, fence: Fence) -> Result<()> {
        self.admit(path, fence, Op::Delete).await.map(drop)
    }

    /// The object and its last admitted fence, without fencing; `None` when there is none.
    pub async fn peek(&self, path: &Path) -> Result<Option<FencedObject>> {
        self.check_options()?;
        Ok(self.load(path).await?.map(|loaded| FencedObject {
            value: loaded.frame.value,
            fence: loaded.frame.fence,
        }))
    }

    fn check_options(&self) -> Result<()> {
        if self.call_timeout.is_zero() {
            return Err(Error::config(
                "ObjectFence call timeout must be greater than zero",
            ));
        }
        Ok(())
    }

    async fn admit(&self, path: &Path, fence: Fence, op: Op<'_>) -> Result<Option<Bytes>> {
        self.check_options()?;
        if let Op::Write(payload) | Op::Create(payload) = op {
            validate_value(payload, self.max_value_len)?;
        }
        let span = tracing::debug_span!(
            "fenced_object",
            store = %self.name,
            object = %path,
            op = op.word(),
            token = fence.token.get(),
        );
        self.admit_loop(path, fence, op).instrument(span).await
    }

    async fn admit_loop(&self, path: &Path, fence: Fence, op: Op<'_>) -> Result<Option<Bytes>> {
        // Set once a put of this call failed its condition: a store that re-sends a put
        // itself can report a put that landed as failed, so finding this call's own fence
        // and payload afterwards means it landed.
        let mut contended = false;
        for _ in 0..MAX_ATTEMPTS {
            let current = self.load(path).await?;
            let last = current.as_ref().map(|c| c.frame.fence);
            let stored = current.as_ref().and_then(|c| c.frame.value.clone());
            // A create is a write where no payload is, and a read where one is; its answer
            // is `None` when it wrote. Its own put that landed though reported as failed
            // (this call's fence and payload found after a failed condition) wrote.
            let step = match op {
                Op::Create(payload)
                    if contended && last == Some(fence) && stored.as_deref() == Some(payload) =>
                {
                    return Ok(None);
                }
                Op::Create(_) if stored.is_some() => Step::Read,
                Op::Create(payload) | Op::Write(payload) => Step::Write(payload),
                Op::Read => Step::Read,
                Op::Delete => Step::Delete,
            };
            let already = last == Some(fence)
                && match step {
                    Step::Read => true,
                    Step::Write(payload) => stored.as_deref() == Some(payload),
                    Step::Delete => stored.is_none(),
                };
            if already && (contended || self.rule.admits(last, fence)) {
                // Nothing to change: the object holds this fence (and this payload).
                return Ok(stored);
            }
            self.rule.check(path.as_ref(), last, fence)?;
            let (next, answer) = match step {
                Step::Read => (stored.clone(), stored),
                Step::Write(payload) => (Some(Bytes::copy_from_slice(payload)), None),
                Step::Delete => (None, None),
            };
            let (body, attributes) = self.layout.encode(fence, next.as_deref());
            let mode = match current {
                None => PutMode::Create,
                Some(loaded) => PutMode::Update(loaded.version),
            };
            match self.put_conditional(path, body, attributes, mode).await {
                Ok(()) => return Ok(answer),
                Err(PutRefused::Changed) => contended = true,
                Err(PutRefused::Failed(error)) => return Err(error),
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!(
                "{}: {path} changed under {MAX_ATTEMPTS} conditional puts in a row",
                self.name
            ),
            source: None,
        })
    }

    async fn timed<T>(
        &self,
        what: &str,
        call: impl Future<Output = std::result::Result<T, StoreError>>,
    ) -> Result<std::result::Result<T, StoreError>> {
        tokio::time::timeout(self.call_timeout, call)
            .await
            .map_err(|_| timed_out(&self.name, what, self.call_timeout))
    }

    /// The object at `path`, decoded, with its version; `None` when there is none.
    async fn load(&self, path: &Path) -> Result<Option<Loaded>> {
        let what = format!("read of {path}");
        let mut result = match self
            .timed(&what, self.store.get_opts(path, GetOptions::default()))
            .await?
        {
            Ok(result) => result,
            Err(StoreError::NotFound { .. }) => return Ok(None),
            Err(error) => return Err(map_store_error(&self.name, &what, error)),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        if version.e_tag.is_none() && version.version.is_none() {
            return Err(protocol(
                &self.name,
                format!(
                    "the read of {path} came back without an ETag or version, which conditional puts need"
                ),
            ));
        }
        let largest = (self.max_value_len + self.layout.overhead()) as u64;
        if result.meta.size > largest {
            return Err(protocol(
                &self.name,
                format!(
                    "the object at {path} is {} bytes, larger than any fenced object of at most {} bytes of payload",
                    result.meta.size, self.max_value_len
                ),
            ));
        }
        let attributes = std::mem::take(&mut result.attributes);
        let body = match self.timed(&what, result.bytes()).await? {
            Ok(body) => body,
            Err(error) => return Err(map_store_error(&self.name, &what, error)),
        };
        let frame = self.layout.decode(body, &attributes).map_err(|why| {
            protocol(
                &self.name,
                format!("the object at {path} is not a fenced object: {why}; nothing was written"),
            )
        })?;
        Ok(Some(Loaded { frame, version }))
    }

    async fn put_conditional(
        &self,
        path: &Path,
        body: Bytes,
        attributes: Attributes,
        mode: PutMode,
    ) -> std::result::Result<(), PutRefused> {
        let what = format!("conditional put of {path}");
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let call = self
            .store
            .put_opts(path, PutPayload::from_bytes(body), options);
        match self.timed(&what, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(StoreError::Precondition { .. } | StoreError::AlreadyExists { .. })) => {
                Err(PutRefused::Changed)
            }
            Ok(Err(error)) => Err(PutRefused::Failed(may_have_landed(map_store_error(
                &self.name, &what, error,
            )))),
            Err(error) => Err(PutRefused::Failed(may_have_landed(error))),
        }
    }
}

/// A put that failed without an answer may still have been applied: say so.
fn may_have_landed(error: Error) -> Error {
    match error {
        Error::Unavailable {
            backend,
            message,
            source,
        } => Error::Unavailable {
            backend,
            message: format!("{message} (the put may have been applied)"),
            source,
        },
        other => other,
    }
}
