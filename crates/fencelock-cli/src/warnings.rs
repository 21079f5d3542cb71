//! The backends' warnings on the command line. The libraries report what a user should know
//! but what is not an error (a ZooKeeper session without credentials, a Redis server whose
//! eviction policy could not be read, a detected connection pooler) as `tracing` events at
//! WARN; without a subscriber they would be lost. This one prints each on stderr as the
//! command's own warnings are printed, `fencelock: warning: <message> (<fields>)`, each
//! distinct line once per process (a benchmark connects many times), and nothing else.

use std::collections::HashSet;
use std::fmt::{self, Write as _};
use std::sync::Mutex;

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Installs the subscriber for the whole process; a no-op if one is installed already.
pub fn install() {
    let _ = tracing::subscriber::set_global_default(Warnings::default());
}

#[derive(Default)]
struct Warnings {
    printed: Mutex<HashSet<String>>,
}

impl Subscriber for Warnings {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && *metadata.level() <= Level::WARN
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::WARN)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // No span is ever recorded (`enabled` is false for spans); the id is never looked at.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let line = line(event);
        let fresh = self
            .printed
            .lock()
            .map(|mut printed| printed.insert(line.clone()))
            .unwrap_or(true);
        if fresh {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{line}");
            }
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// `fencelock: warning: <message> (<name>=<value>, ...)`.
fn line(event: &Event<'_>) -> String {
    let mut fields = Fields::default();
    event.record(&mut fields);
    let mut line = format!("fencelock: warning: {}", fields.message);
    if !fields.rest.is_empty() {
        let _ = write!(line, " ({})", fields.rest.join(", "));
    }
    line
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
}
