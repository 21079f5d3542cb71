//! The check a store passes before it is used: it refuses conditional puts whose condition
//! no longer holds.
//!
//! `object_store` exposes conditional puts on every store, but a store may not implement them
//! (a local file system store answers `NotImplemented` to `PutMode::Update`, S3 with
//! conditional puts disabled too), and an S3-compatible server may ignore `If-Match` and
//! overwrite. Neither can be told from the type, so a probe object is written and the
//! store must refuse a create over it and an update against a version that is gone.

use std::time::Duration;

use fencelock_core::{Error, OwnerId, Result};
use object_store::path::Path;
use object_store::{
    Error as StoreError, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    UpdateVersion,
};

use crate::error::map_store_error;

/// Checks that `store` (named `name` in messages) refuses a create over an existing object
/// and an update against a superseded version, on a probe object under `dir`.
pub(crate) async fn check_conditional_puts(
    store: &dyn ObjectStore,
    name: &str,
    dir: &Path,
    timeout: Duration,
) -> Result<()> {
    let path = dir
        .clone()
        .join(format!("fencelock-probe-{}", OwnerId::random()));
    let outcome = probe(store, name, &path, timeout).await;
    // The probe is ours alone (a random name); a failed delete leaves a small object behind.
    let _ = tokio::time::timeout(timeout, store.delete(&path)).await;
    outcome
}

async fn probe(store: &dyn ObjectStore, name: &str, path: &Path, timeout: Duration) -> Result<()> {
    let refuse = |why: &str| {
        Error::config(format!(
            "{name} cannot fence writes: {why}; fencing needs conditional puts (S3 and S3-compatible \
             servers honouring If-None-Match and If-Match on PutObject, GCS, Azure, the in-memory store)"
        ))
    };
    let put = |body: &'static str, mode: PutMode| async move {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        let call = store.put_opts(path, PutPayload::from_static(body.as_bytes()), options);
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| Error::Unavailable {
                backend: crate::error::BACKEND,
                message: format!(
                    "{name}: the conditional-put probe at {path} did not finish within {timeout:?}"
                ),
                source: None,
            })
    };
    let what = format!("conditional-put probe at {path}");
    let first = match put("probe 1", PutMode::Create).await? {
        Ok(result) => UpdateVersion::from(result),
        Err(StoreError::NotImplemented { .. } | StoreError::NotSupported { .. }) => {
            return Err(refuse(
                "it does not implement a conditional create (PutMode::Create)",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    };
    match put("probe 2", PutMode::Create).await? {
        Err(StoreError::AlreadyExists { .. } | StoreError::Precondition { .. }) => {}
        Ok(_) => {
            return Err(refuse(
                "it overwrote an object a conditional create (If-None-Match: *) named as new",
            ));
        }
        Err(error) => return Err(map_store_error(name, &what, error)),
    }
    match put("probe 3", PutMode::Update(first.clone())).await? {
        Ok(_) => {}
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
    }
    match put("probe 4", PutMode::Update(first)).await? {
        Err(StoreError::Precondition { .. } | StoreError::AlreadyExists { .. }) => Ok(()),
        Ok(_) => Err(refuse(
            "it applied a conditional update (If-Match) against a version that was gone",
        )),
        Err(error) => Err(map_store_error(name, &what, error)),
    }
}
