//! Composite locks as benchmark operations: a set of free keys taken with one
//! `Locker::lock_all` and released, next to the same keys taken one `Locker::lock` at a time
//! and released, through the same locker, so the ratio is the composite form's cost over the
//! single grants it is made of.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{LockKey, Locker, Result};

use crate::error::harness;
use crate::subject::{Op, TTL};

/// How a [`SetGrant`] takes its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetForm {
    /// One `Locker::lock` per key, in key order, then one release per key.
    Singles,
    /// One `Locker::lock_all` of every key, then `CompositeGuard::release`.
    Composite,
}

/// Takes a set of free keys without waiting, watchdog off, and releases them.
pub(crate) struct SetGrant {
    form: SetForm,
    locker: Locker,
    keys: Vec<LockKey>,
}

impl SetGrant {
    /// Grants of `keys` in `form` through `locker`.
    pub(crate) fn new(form: SetForm, locker: &Locker, keys: Vec<LockKey>) -> Self {
        SetGrant {
            form,
            locker: locker.clone(),
            keys,
        }
    }
}

#[async_trait]
impl Op for SetGrant {
    async fn once(&self) -> Result<Option<Duration>> {
        let released = match self.form {
            SetForm::Composite => {
                let set = self
                    .locker
                    .lock_all(self.keys.iter().map(LockKey::as_str))
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .watchdog(false)
                    .await?;
                set.release().await?
            }
            SetForm::Singles => {
                let mut guards = Vec::with_capacity(self.keys.len());
                for key in &self.keys {
                    let guard = self
                        .locker
                        .lock(key.as_str())
                        .ttl(TTL)
                        .wait(Duration::ZERO)
                        .watchdog(false)
                        .await?;
                    guards.push(guard);
                }
                let mut all = true;
                while let Some(guard) = guards.pop() {
                    all &= guard.release().await?;
                }
                all
            }
        };
        if released {
            Ok(None)
        } else {
            Err(harness(format!(
                "a {:?} grant of {} keys was gone before its release",
                self.form,
                self.keys.len()
            )))
        }
    }
}
