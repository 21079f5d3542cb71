//! The stamping macros cannot miss a property. This binary stamps both suites on the memory
//! backend (so they also run here), then lists its own tests through the test harness and
//! compares them with [`GROUPS`] and with every property function found in the source.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_conformance::properties::{GROUPS, PropertyGroup};
use fencelock_memory::{MemoryLockBackend, MemoryStorage};

async fn setup() -> Setup {
    let backend = MemoryLockBackend::new();
    let closer = backend.clone();
    Setup::new(
        Arc::new(backend),
        Arc::new(MemoryStorage::new()),
        Box::new(move || {
            closer.close();
            Box::pin(async {})
        }),
    )
}

async fn storage_setup() -> Setup {
    Setup::for_storage(
        Arc::new(MemoryLockBackend::new()),
        Arc::new(MemoryStorage::new()),
    )
}

mod suite {
    fencelock_conformance::conformance_suite!(super::setup());
}

mod storage_only {
    fencelock_conformance::storage_suite!(super::storage_setup());
}

/// The tests of this binary whose path starts with `module::`, as the harness lists them.
fn stamped(module: &str) -> BTreeSet<String> {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--list", "--format", "terse"])
        .output()
        .expect("run this test binary with --list");
    assert!(output.status.success(), "--list failed: {output:?}");
    let listing = String::from_utf8(output.stdout).unwrap();
    let prefix = format!("{module}::");
    listing
        .lines()
        .filter_map(|line| line.strip_suffix(": test"))
        .filter_map(|name| name.strip_prefix(&prefix))
        .map(str::to_owned)
        .collect()
}

fn names(groups: &[PropertyGroup]) -> Vec<String> {
    groups
        .iter()
        .flat_map(|group| group.properties)
        .map(|name| (*name).to_owned())
        .collect()
}

fn storage_group() -> &'static PropertyGroup {
    GROUPS
        .iter()
        .find(|group| group.name == "storage")
        .expect("a group named storage")
}

/// The name of every `async fn` taking a `&Setup` in the code of `src/properties/`.
fn property_functions_in_source() -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/properties");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        // Code only: the docs of the declaring macros show a property's shape too.
        let text: String = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (_, rest) in text
            .match_indices("async fn ")
            .map(|(at, _)| text.split_at(at + 9))
        {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let params = &rest[name.len()..rest.find(')').unwrap()];
            // `$name` is the declaring macro's own pattern, not a property.
            if !name.is_empty() && params.contains("&Setup") {
                assert!(
                    found.insert(name.clone()),
                    "property {name} defined twice ({})",
                    path.display()
                );
            }
        }
    }
    found
}

/// Asserts `found == expected`, naming what is missing from `found` and what it has in excess.
fn assert_same(found: &BTreeSet<String>, expected: &BTreeSet<String>, what: &str) {
    let missing: Vec<_> = expected.difference(found).collect();
    let excess: Vec<_> = found.difference(expected).collect();
    assert!(
        missing.is_empty() && excess.is_empty(),
        "{what}: missing {missing:?}, in excess {excess:?}"
    );
}

#[test]
fn conformance_suite_stamps_every_declared_property_once() {
    let declared = names(GROUPS);
    let unique: BTreeSet<String> = declared.iter().cloned().collect();
    assert_eq!(unique.len(), declared.len(), "a property is declared twice");
    assert_same(
        &stamped("suite"),
        &unique,
        "tests stamped by conformance_suite!",
    );
}

#[test]
fn storage_suite_stamps_the_storage_group() {
    let storage: BTreeSet<String> = names(std::slice::from_ref(storage_group()))
        .into_iter()
        .collect();
    assert!(storage.contains("storage_refuses_equal_token_other_owner"));
    assert_same(
        &stamped("storage_only"),
        &storage,
        "tests stamped by storage_suite!",
    );
}

#[test]
fn every_property_function_is_declared() {
    let declared: BTreeSet<String> = names(GROUPS).into_iter().collect();
    let in_source = property_functions_in_source();
    assert!(
        in_source.contains("grant_contend_release"),
        "the scan of src/properties found no property: {in_source:?}"
    );
    assert_same(
        &in_source,
        &declared,
        "property functions in src/properties/ against GROUPS",
    );
}

/// A property whose capability the backend does not claim passes at once; the run says so on
/// its stderr, uncaptured, so that a pass is not taken for a check (the memory backend claims
/// no durable tokens).
#[test]
fn a_property_that_does_not_apply_says_so_in_the_run() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "suite::durable_tokens_survive_reopening"])
        .output()
        .expect("run this test binary on one property");
    assert!(output.status.success(), "the property failed: {output:?}");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(
        said.contains(
            "durable_tokens_survive_reopening: not applicable: the backend does not claim \
             durable tokens"
        ),
        "the run did not say the property does not apply: {said}"
    );
}
