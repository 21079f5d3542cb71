#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod backoff;
mod capabilities;
mod composite;
mod config;
pub mod duration;
pub mod epoch;
mod error;
mod fence;
mod full_server;
mod guard;
mod holder_record;
mod host;
mod key;
mod kinds;
mod lease;
mod lease_state;
mod live_leases;
mod locker;
pub mod metrics;
mod moving;
mod scope;
mod storage;
mod storage_config;
mod storage_ext;
mod supervisors;
pub mod tools;
pub mod url;
mod watchdog;

pub use backend::{LockBackend, MIN_TTL, validate_floor, validate_ttl};
pub use backoff::Backoff;
pub use capabilities::{Capabilities, LockKinds, TimeAuthority, TokenGuarantee, WakeUp};
pub use composite::{CompositeGuard, LockAllRequest, MemberLost};
pub use config::{BackendConfig, Connected, Scheme, Schemes};
pub use error::{BoxError, Error, LostReason, NodeReport, Result};
pub use fence::{Fence, FenceRule, FencingToken, OwnerId, admission_order};
pub use full_server::{Entry as FullServerEntry, FullServer};
pub use guard::LockGuard;
pub use holder_record::{
    HOLDER_RESOURCE_PREFIX, HolderInfo, MAX_HOST_LEN, MAX_PURPOSE_LEN, holder_resource,
    read_holder, record_holder,
};
pub use host::{HostPort, is_local_host, password_exposed};
pub use key::LockKey;
pub use kinds::{
    COMPANION_SUFFIX, CampaignRequest, Election, LeaderChange, Leadership, Observer, PermitGuard,
    PermitRequest, ReadGuard, ReadPhase, ReadRequest, RwLocker, Semaphore, UpgradeableReadGuard,
    UpgradeableReadRequest, UpgradedGuard, WriteRequest,
};
pub use lease::{Lease, LockInfo, QueueEntry, QueueRole, drift_margin, valid_until};
pub use locker::{DEFAULT_TTL, LockOptions, LockRequest, Locker};
pub use moving::{MovedPast, move_past};
pub use scope::{Held, scope};
pub use storage::{FencedStorage, Snapshot, validate_value};
pub use storage_config::{BackendStorage, StorageConfig, StorageScheme};
pub use storage_ext::FencedStorageExt;

/// Re-exported so backend crates and users share one version.
pub use async_trait::async_trait;
/// Re-exported for [`LockGuard::lost_token`].
pub use tokio_util::sync::CancellationToken;
