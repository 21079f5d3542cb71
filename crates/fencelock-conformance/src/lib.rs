//! The conformance suite of fencelock.
//!
//! Every property of the `LockBackend` / `FencedStorage` contract is a plain
//! `pub async fn(&Setup)` in [`properties`] that panics when the property fails. Backend
//! differences come in through [`Setup`] and the backend's
//! [`Capabilities`](fencelock_core::Capabilities), never through `cfg` flags, so third-party
//! backends can run the same suite.
//!
//! [`conformance_suite!`] stamps out one named `#[tokio::test]` per property:
//!
//! ```ignore
//! async fn setup() -> fencelock_conformance::Setup { /* a fresh backend */ }
//! mod memory {
//!     fencelock_conformance::conformance_suite!(super::setup());
//! }
//! ```
#![warn(missing_docs)]

pub mod properties;
mod setup;

pub use setup::{BoxFuture, Outage, Setup};

/// Expands to one `#[tokio::test]` per property, each running it on a fresh setup obtained by
/// awaiting `$setup` (an expression evaluating to a future of [`Setup`]). The calling crate
/// needs `tokio` with the `macros` and `rt-multi-thread` features.
#[macro_export]
macro_rules! conformance_suite {
    ($setup:expr) => {
        $crate::conformance_suite!(@properties $setup;
            grant_contend_release,
            tokens_increase_over_1000_grants,
            tokens_never_reused_after_release_expiry_or_advance,
            advance_token_raises_next_grant,
            expiry_hands_over,
            extend_keeps_lease_and_token,
            extend_after_takeover_is_lease_lost,
            stale_release_is_a_noop,
            double_release,
            inspect_reports_holder_and_token,
            waiter_gets_lock_after_release,
            wait_budget_spent_is_timeout,
            dropped_acquire_future_leaves_no_lock_beyond_ttl,
            dropped_guard_releases,
            watchdog_keeps_lock_past_three_ttls,
            lost_fires_when_lease_is_taken_over,
            counter_increments_are_exact,
            paused_client_is_refused,
            storage_admits_newer_token,
            storage_refuses_older_token,
            storage_admits_same_token_same_owner,
            storage_refuses_equal_token_other_owner,
            fenced_reads_prevent_lost_update,
            fenced_read_of_empty_resource_records_fence,
            refused_operation_changes_nothing,
            values_from_empty_to_one_mib,
            oversized_value_is_refused,
            bad_keys_are_refused,
            unusual_keys_round_trip,
            bad_ttls_are_refused_and_change_nothing,
            wait_budget_overflow_is_refused,
            lost_fires_when_backend_goes_away,
        );
    };
    (@properties $setup:expr; $($property:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $property() {
                let setup: $crate::Setup = $setup.await;
                $crate::properties::$property(&setup).await;
            }
        )*
    };
}
