//! The check a store passes before it is used: it refuses conditional puts whose condition
//! no longer holds.
//!
//! `object_store` exposes conditional puts on every store, but a store may not implement them
//! (a local file system store answers `NotImplemented` to `PutMode::Update`, S3 with
//! conditional puts disabled too), and an S3-compatible server may ignore `If-Match` and
//! overwrite. Neither can be told from the type, so a probe object is written and the
//! store must refuse a create over it and an update against a version that is gone.
//!
//! The raw layout ([`ObjectLayout::Raw`]) keeps the fence in metadata, outside the body, and
//! is safe only where the version a conditional put names moves with every put, so the probe
//! then also puts the same body with other metadata and requires the store to refuse an
//! update against the version from before that put (S3, whose ETag is the body's MD5, does
//! not), and to return the metadata on a read.

use std::future::Future;
use std::time::Duration;

use fencelock_core::{Error, OwnerId, Result};
use object_store::path::Path;
use object_store::{
    AttributeValue, Attributes, Error as StoreError, GetOptions, ObjectStore, ObjectStoreExt,
    PutMode, PutOptions, PutPayload, UpdateVersion,
};

use crate::error::map_store_error;
use crate::layout::ObjectLayout;

/// Checks that `store` (named `name` in messages) refuses a create over an existing object
/// and an update against a superseded version, on a probe object under `dir`; for
/// [`ObjectLayout::Raw`], also that every put moves the version and that metadata
/// round-trips.
pub(crate) async fn check_conditional_puts(
    store: &dyn ObjectStore,
    name: &str,
    dir: &Path,
    timeout: Duration,
    layout: ObjectLayout,
) -> Result<()> {
    let path = dir
        .clone()
        .join(format!("fencelock-probe-{}", OwnerId::random()));
    let outcome = probe(store, name, &path, timeout, layout).await;
    // The probe is ours alone (a random name); a failed delete leaves a small object behind.
    let _ = tokio::time::timeout(timeout, store.delete(&path)).await;
    outcome
}

async fn probe(
    store: &dyn ObjectStore,
    name: &str,
    path: &Path,
    timeout: Duration,
    layout: ObjectLayout,
) -> Result<()> {
    let refuse = |why: &str| {
        Error::config(format!(
            "{name} cannot fence writes: {why}; fencing needs conditional puts (S3 and S3-compatible \
             servers honouring If-None-Match and If-Match on PutObject, GCS, Azure, the in-memory store)"
        ))
    };
    let put = |body: &'static str, mode: PutMode, fence: Option<&'static str>| async move {
        let mut attributes = Attributes::new();
        if let Some(fence) = fence {
            attributes.insert(ObjectLayout::raw_attribute(), AttributeValue::from(fence));
        }
        let options = PutOptions {
            mode,
            attributes,
            ..PutOptions::default()
        };
        let call = store.put_opts(path, PutPayload::from_static(body.as_bytes()), options);
        within(timeout, name, path, call).await
    };
    let what = format!("conditional-put probe at {path}");
    let first = match put("probe 1", PutMode::Create, None).await? {
        Ok(result) => UpdateVersion::from(result),
        Err(StoreError::NotImplemented { .. } | StoreError::NotSupported { .. }) => {
            return Err(refuse(
                "it does not implement a conditional create (PutMode::Create)",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    };
    match put("probe 2", PutMode::Create, None).await? {
        Err(StoreError::AlreadyExists { .. } | StoreError::Precondition { .. }) => {}
        Ok(_) => {
            return Err(refuse(
                "it overwrote an object a conditional create (If-None-Match: *) named as new",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    }
    let third = match put("probe 3", PutMode::Update(first.clone()), None).await? {
        Ok(result) => UpdateVersion::from(result),
        Err(StoreError::NotImplemented { .. } | StoreError::NotSupported { .. }) => {
            return Err(refuse(
                "it does not implement a conditional update (PutMode::Update)",
            ));
        }
        Err(StoreError::Generic { source, .. }) if source.to_string().contains("ETag required") => {
            return Err(refuse(
                "its puts return no ETag or version to update against",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    };
    match put("probe 4", PutMode::Update(first), None).await? {
        Err(StoreError::Precondition { .. } | StoreError::AlreadyExists { .. }) => {}
        Ok(_) => {
            return Err(refuse(
                "it applied a conditional update (If-Match) against a version that was gone",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    }
    match layout {
        ObjectLayout::Framed => Ok(()),
        ObjectLayout::Raw => probe_raw(store, name, path, timeout, third, put).await,
    }
}

/// The checks of [`ObjectLayout::Raw`], on the probe object at version `current`: a put
/// stores metadata and a read returns it, and a put of the same body with other metadata
/// moves the version, so that an update naming the version from before it is refused.
async fn probe_raw<F, Fut>(
    store: &dyn ObjectStore,
    name: &str,
    path: &Path,
    timeout: Duration,
    current: UpdateVersion,
    put: F,
) -> Result<()>
where
    F: Fn(&'static str, PutMode, Option<&'static str>) -> Fut,
    Fut: Future<Output = Result<object_store::Result<object_store::PutResult>>>,
{
    let refuse = |why: &str| {
        Error::config(format!(
            "{name} cannot keep the fence outside the body ({}): {why}; use the default \
             framed layout ({}), which keeps the fence in the body",
            ObjectLayout::Raw.name(),
            ObjectLayout::Framed.name(),
        ))
    };
    let what = format!("metadata probe at {path}");
    let read_fence = || async {
        let call = store.get_opts(path, GetOptions::default());
        match within(timeout, name, path, call).await? {
            Ok(result) => Ok(result
                .attributes
                .get(&ObjectLayout::raw_attribute())
                .map(|value| value.as_ref().to_owned())),
            Err(error) => Err(map_store_error(name, &what, error)),
        }
    };
    let before = match put("probe raw", PutMode::Update(current), Some("fence 1")).await? {
        Ok(result) => UpdateVersion::from(result),
        Err(StoreError::NotImplemented { .. } | StoreError::NotSupported { .. }) => {
            return Err(refuse("it does not store metadata with a put"));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    };
    if read_fence().await?.as_deref() != Some("fence 1") {
        return Err(refuse(
            "a read did not return the metadata the put before it stored",
        ));
    }
    if let Err(error) = put(
        "probe raw",
        PutMode::Update(before.clone()),
        Some("fence 2"),
    )
    .await?
    {
        return Err(map_store_error(name, &what, error));
    }
    if read_fence().await?.as_deref() != Some("fence 2") {
        return Err(refuse(
            "a put of new metadata did not replace the metadata a read returns",
        ));
    }
    match put("probe raw", PutMode::Update(before), Some("fence 3")).await? {
        Err(StoreError::Precondition { .. } | StoreError::AlreadyExists { .. }) => Ok(()),
        Ok(_) => Err(refuse(
            "a conditional put of the same body with other metadata left the version its \
             condition names as it was (an update against the version from before that put \
             still landed): the store's version is the body's hash (a plain S3 object's ETag is \
             its MD5), so a fence kept outside the body could advance without the version \
             changing, and an older holder's conditional put would still land after a newer \
             holder's fenced read",
        )),
        Err(error) => Err(map_store_error(name, &what, error)),
    }
}

/// `call`, or a retryable error when it does not finish within `timeout`.
async fn within<T>(
    timeout: Duration,
    name: &str,
    path: &Path,
    call: impl Future<Output = T>,
) -> Result<T> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| Error::Unavailable {
            backend: crate::error::BACKEND,
            message: format!(
                "{name}: the conditional-put probe at {path} did not finish within {timeout:?}"
            ),
            source: None,
        })
}
