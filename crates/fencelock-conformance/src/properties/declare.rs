//! The two macros that make the list of properties impossible to miss: a property exists only
//! as an entry of `declare_properties!`, and a group only as an entry of `declare_groups!`.
//! Every consumer of the list (the stamping macros, [`GROUPS`](super::GROUPS), the flat
//! re-exports) expands what these two macros produce, never a list written by hand.

/// Declares one group of properties. Defines each `pub async fn name(s: &Setup) { .. }` as
/// written, and a hidden exported macro `$list! { callback, arg }` that expands to
/// `$crate::callback! { arg; name, .. }` with the name of every property of the group.
///
/// The properties are written inside a block (`declare_properties!(list, { .. });`) so that
/// rustfmt formats them like any other function.
macro_rules! declare_properties {
    ($list:ident, {
        $(
            $(#[$attr:meta])*
            pub async fn $name:ident($setup:ident: &Setup $(,)?) $body:block
        )*
    }) => {
        $(
            $(#[$attr])*
            pub async fn $name($setup: &Setup) $body
        )*

        #[doc(hidden)]
        #[macro_export]
        macro_rules! $list {
            ($callback:ident, $arg:tt) => {
                $crate::$callback! { $arg; $($name),* }
            };
        }
    };
}

/// Declares the groups: for each `group => list`, the public module `properties::group`
/// (whose file declares its properties with `declare_properties!` and the macro `list`), the
/// flat re-export of its properties, its entry in [`GROUPS`](super::GROUPS), and its share of
/// the hidden exported `__fencelock_conformance_all! { callback, arg }`, which expands every
/// group's list.
macro_rules! declare_groups {
    ($($(#[$attr:meta])* $group:ident => $list:ident),* $(,)?) => {
        $(
            $(#[$attr])*
            #[macro_use]
            pub mod $group;
            pub use self::$group::*;
        )*

        /// Every group with the names of its properties, in the order the suite stamps them.
        pub const GROUPS: &[PropertyGroup] = &[$(
            PropertyGroup {
                name: stringify!($group),
                properties: $list! { __fencelock_conformance_names, () },
            }
        ),*];

        #[doc(hidden)]
        #[macro_export]
        macro_rules! __fencelock_conformance_all {
            ($callback:ident, $arg:tt) => {
                $( $crate::$list! { $callback, $arg } )*
            };
        }
    };
}
