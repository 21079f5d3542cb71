//! The raw baseline of the memory backend: `tokio::sync::Mutex<HashMap>` tables.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::LockKey;
use tokio::sync::Mutex;

use fencelock_core::Result;
use fencelock_core::tools::{Baseline, Op, RawTryLock};

/// `tokio::sync::Mutex<HashMap>`: a lock table and a data table in process.
#[derive(Debug, Default)]
pub struct MemoryBaseline {
    locks: Mutex<HashMap<String, u64>>,
    data: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    counter: AtomicU64,
}

impl MemoryBaseline {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl RawTryLock for MemoryBaseline {
    const LABEL: &'static str = "raw tokio Mutex<HashMap> insert + remove";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let token = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let mut locks = self.locks.lock().await;
        if locks.contains_key(key.as_str()) {
            return Ok(false);
        }
        locks.insert(key.as_str().to_owned(), token);
        drop(locks);
        self.locks.lock().await.remove(key.as_str());
        Ok(true)
    }
}

#[async_trait]
impl Baseline for MemoryBaseline {
    fn round_trip_label(&self) -> String {
        "raw tokio Mutex<HashMap> lookup".into()
    }

    fn write_label(&self) -> String {
        "raw tokio Mutex<HashMap> insert".into()
    }

    async fn round_trip(&self) -> Result<()> {
        std::hint::black_box(self.locks.lock().await.get("round-trip"));
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(MemoryWriter {
            data: self.data.clone(),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }
}

struct MemoryWriter {
    data: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    resource: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for MemoryWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let mut data = self.data.lock().await;
        std::hint::black_box(data.insert(self.resource.clone(), self.value.clone()));
        Ok(None)
    }
}
