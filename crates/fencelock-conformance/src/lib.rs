#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod counting;
pub mod properties;
mod queue;
mod setup;

pub use counting::CountingTries;
pub use queue::queue_refused;
pub use setup::{BoxFuture, Outage, Reopen, Setup};

/// Expands to one `#[tokio::test]` per property of every group in [`properties`], each named
/// after its property and running it on a fresh setup obtained by awaiting `$setup` (an
/// expression evaluating to a future of [`Setup`]). The calling crate needs `tokio` with the
/// `macros` and `rt-multi-thread` features.
///
/// The names come from where the properties are declared, so a property added to any group
/// runs on every backend that invokes this macro. Invoke it once per module; to run the suite
/// on several configurations, give each its own module:
///
/// ```
/// use std::sync::Arc;
///
/// use fencelock_conformance::Setup;
/// use fencelock_memory::{MemoryLockBackend, MemoryStorage};
///
/// async fn setup() -> Setup {
///     let backend = MemoryLockBackend::new();
///     let closer = backend.clone();
///     Setup::new(
///         Arc::new(backend),
///         Arc::new(MemoryStorage::new()),
///         Box::new(move || {
///             closer.close();
///             Box::pin(async {})
///         }),
///     )
/// }
///
/// mod memory {
///     fencelock_conformance::conformance_suite!(super::setup());
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_suite {
    ($setup:expr) => {
        $crate::__fencelock_conformance_all! { __fencelock_conformance_stamp, ($setup) }
    };
}

/// Expands to one `#[tokio::test]` per property of the [`storage`](properties::storage) group
/// only: the fence rule of `FencedStorage`, checked on `$setup`'s storage with `$setup`'s
/// backend as the source of fencing tokens. Use it for a storage adapter of your own (a table
/// of yours, keys in your Redis) with any honest lock backend; [`Setup::for_storage`] builds
/// such a setup. Same requirements as [`conformance_suite!`]; the two stamp tests of the same
/// names, so they go in different modules.
///
/// ```
/// use std::sync::Arc;
///
/// use fencelock_conformance::Setup;
/// use fencelock_memory::{MemoryLockBackend, MemoryStorage};
///
/// async fn setup() -> Setup {
///     // The tokens come from any honest backend; the storage is the adapter under test.
///     Setup::for_storage(Arc::new(MemoryLockBackend::new()), Arc::new(MemoryStorage::new()))
/// }
///
/// mod my_storage {
///     fencelock_conformance::storage_suite!(super::setup());
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! storage_suite {
    ($setup:expr) => {
        $crate::__fencelock_conformance_storage! { __fencelock_conformance_stamp, ($setup) }
    };
}

/// [`conformance_suite!`], with a check awaited after every property: `$after` is an
/// expression evaluating to a future of `()`, awaited once the property passed and its setup
/// was dropped. For an invariant of the server that no property may break, checked after each
/// (nothing left behind, no object of an intruder's run).
#[macro_export]
macro_rules! conformance_suite_then {
    ($setup:expr, $after:expr) => {
        $crate::__fencelock_conformance_all! { __fencelock_conformance_stamp_then, ($setup, $after) }
    };
}

/// [`storage_suite!`], with a check awaited after every property, as in
/// [`conformance_suite_then!`].
#[macro_export]
macro_rules! storage_suite_then {
    ($setup:expr, $after:expr) => {
        $crate::__fencelock_conformance_storage! { __fencelock_conformance_stamp_then, ($setup, $after) }
    };
}

/// The callback of the `_then` stamping macros: one test per name, then the check.
#[doc(hidden)]
#[macro_export]
macro_rules! __fencelock_conformance_stamp_then {
    (($setup:expr, $after:expr); $($property:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $property() {
                let setup: $crate::Setup = $setup.await;
                $crate::properties::$property(&setup).await;
                drop(setup);
                $after.await;
            }
        )*
    };
}

/// The callback the stamping macros hand to a list of properties: one test per name.
#[doc(hidden)]
#[macro_export]
macro_rules! __fencelock_conformance_stamp {
    (($setup:expr); $($property:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $property() {
                let setup: $crate::Setup = $setup.await;
                $crate::properties::$property(&setup).await;
            }
        )*
    };
}

/// The callback that turns a list of properties into a slice of their names.
#[doc(hidden)]
#[macro_export]
macro_rules! __fencelock_conformance_names {
    ($arg:tt; $($name:ident),*) => {
        &[$(stringify!($name)),*]
    };
}
