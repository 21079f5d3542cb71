//! What a worker reports, one line each on its stdout, and how the coordinator reads it back.
//!
//! Every line starts with the time it was written, in nanoseconds on the machine's monotonic
//! clock (see `clock`), then the event. A `*-begin` line is written before its call and the
//! answer's line after it, so the two stamps enclose the call's effect on the storage. Tokens
//! are decimal, owners 32 hex digits, values decimal or `-` for "no value yet":
//!
//! ```text
//! ready                                      (connected; the run may start)
//! acquired <token> <owner> <resource>          (resource: the counter's index, 0 but for a
//!                                            semaphore's slots)
//! read-begin <token> <owner>                 (sent before the fenced read)
//! read <token> <owner> ok <value|->          read <token> <owner> stale <cur-token> <cur-owner>
//! read <token> <owner> unknown <reason>
//! peek-begin                                 (control run: sent before the unfenced read)
//! peek <value|->                             (control run: the unfenced read)
//! write-begin <token> <owner> <value>        (sent before the write, so a write cut short counts)
//! write <token> <owner> <value> ok|stale <cur-token> <cur-owner>|unknown <reason>
//! released <token> <owner> yes|no
//! healed <floor> <counter>                   (advance_token after a stale fresh grant)
//! error <reason>
//! ```

use std::fmt;

use fencelock::{Fence, FencingToken, OwnerId};

/// What happened to a fenced operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome<T> {
    /// The storage admitted it.
    Admitted(T),
    /// The storage refused it: it is at `current`.
    Stale { current: Fence },
    /// No answer (time-out, cut connection): it may or may not have been admitted.
    Unknown { reason: String },
}

/// One worker event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    Ready,
    /// A grant; the cycle's storage operations are on counter `resource`.
    Acquired {
        fence: Fence,
        resource: usize,
    },
    ReadBegin {
        fence: Fence,
    },
    Read {
        fence: Fence,
        outcome: Outcome<Option<u64>>,
    },
    PeekBegin,
    Peek {
        value: Option<u64>,
    },
    WriteBegin {
        fence: Fence,
        value: u64,
    },
    Write {
        fence: Fence,
        value: u64,
        outcome: Outcome<()>,
    },
    Released {
        fence: Fence,
        released: bool,
    },
    Healed {
        floor: u64,
        counter: u64,
    },
    Error {
        reason: String,
    },
}

struct F<'a>(&'a Fence);

impl fmt::Display for F<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0.token, self.0.owner)
    }
}

struct V(Option<u64>);

impl fmt::Display for V {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("-"),
        }
    }
}

/// Keeps a reason on one line.
fn one_line(reason: &str) -> String {
    reason.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Ready => f.write_str("ready"),
            Event::Acquired { fence, resource } => {
                write!(f, "acquired {} {resource}", F(fence))
            }
            Event::ReadBegin { fence } => write!(f, "read-begin {}", F(fence)),
            Event::PeekBegin => f.write_str("peek-begin"),
            Event::Read { fence, outcome } => {
                write!(f, "read {} ", F(fence))?;
                match outcome {
                    Outcome::Admitted(v) => write!(f, "ok {}", V(*v)),
                    Outcome::Stale { current } => write!(f, "stale {}", F(current)),
                    Outcome::Unknown { reason } => write!(f, "unknown {}", one_line(reason)),
                }
            }
            Event::Peek { value } => write!(f, "peek {}", V(*value)),
            Event::WriteBegin { fence, value } => write!(f, "write-begin {} {value}", F(fence)),
            Event::Write {
                fence,
                value,
                outcome,
            } => {
                write!(f, "write {} {value} ", F(fence))?;
                match outcome {
                    Outcome::Admitted(()) => f.write_str("ok"),
                    Outcome::Stale { current } => write!(f, "stale {}", F(current)),
                    Outcome::Unknown { reason } => write!(f, "unknown {}", one_line(reason)),
                }
            }
            Event::Released { fence, released } => {
                let word = if *released { "yes" } else { "no" };
                write!(f, "released {} {word}", F(fence))
            }
            Event::Healed { floor, counter } => write!(f, "healed {floor} {counter}"),
            Event::Error { reason } => write!(f, "error {}", one_line(reason)),
        }
    }
}

/// An event and when its worker wrote it (nanoseconds on the monotonic clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamped {
    pub(crate) at: u64,
    pub(crate) event: Event,
}

impl fmt::Display for Stamped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.at, self.event)
    }
}

/// Reads one line back; `None` for anything that is not a stamped event.
pub(crate) fn parse(line: &str) -> Option<Stamped> {
    let (at, rest) = line.trim_start().split_once(' ')?;
    Some(Stamped {
        at: at.parse().ok()?,
        event: parse_event(rest)?,
    })
}

fn parse_event(line: &str) -> Option<Event> {
    let mut words = line.split_whitespace();
    let kind = words.next()?;
    let event = match kind {
        "ready" => Event::Ready,
        "acquired" => Event::Acquired {
            fence: fence(&mut words)?,
            resource: words.next()?.parse().ok()?,
        },
        "read-begin" => Event::ReadBegin {
            fence: fence(&mut words)?,
        },
        "peek-begin" => Event::PeekBegin,
        "read" => {
            let fence = fence(&mut words)?;
            let outcome = match words.next()? {
                "ok" => Outcome::Admitted(value(words.next()?)?),
                "stale" => Outcome::Stale {
                    current: self::fence(&mut words)?,
                },
                "unknown" => Outcome::Unknown {
                    reason: rest(words),
                },
                _ => return None,
            };
            return Some(Event::Read { fence, outcome });
        }
        "peek" => Event::Peek {
            value: value(words.next()?)?,
        },
        "write-begin" => Event::WriteBegin {
            fence: fence(&mut words)?,
            value: words.next()?.parse().ok()?,
        },
        "write" => {
            let fence = fence(&mut words)?;
            let value = words.next()?.parse().ok()?;
            let outcome = match words.next()? {
                "ok" => Outcome::Admitted(()),
                "stale" => Outcome::Stale {
                    current: self::fence(&mut words)?,
                },
                "unknown" => Outcome::Unknown {
                    reason: rest(words),
                },
                _ => return None,
            };
            return Some(Event::Write {
                fence,
                value,
                outcome,
            });
        }
        "released" => Event::Released {
            fence: fence(&mut words)?,
            released: match words.next()? {
                "yes" => true,
                "no" => false,
                _ => return None,
            },
        },
        "healed" => Event::Healed {
            floor: words.next()?.parse().ok()?,
            counter: words.next()?.parse().ok()?,
        },
        "error" => {
            return Some(Event::Error {
                reason: rest(words),
            });
        }
        _ => return None,
    };
    words.next().is_none().then_some(event)
}

fn fence<'a>(words: &mut impl Iterator<Item = &'a str>) -> Option<Fence> {
    let token = FencingToken::new(words.next()?.parse().ok()?)?;
    let owner: OwnerId = words.next()?.parse().ok()?;
    Some(Fence::new(token, owner))
}

fn value(word: &str) -> Option<Option<u64>> {
    if word == "-" {
        Some(None)
    } else {
        word.parse().ok().map(Some)
    }
}

fn rest<'a>(words: impl Iterator<Item = &'a str>) -> String {
    words.collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    #[test]
    fn every_event_round_trips() {
        let events = [
            Event::Ready,
            Event::Acquired {
                fence: fence(3, 7),
                resource: 2,
            },
            Event::ReadBegin { fence: fence(3, 7) },
            Event::PeekBegin,
            Event::Read {
                fence: fence(3, 7),
                outcome: Outcome::Admitted(None),
            },
            Event::Read {
                fence: fence(3, 7),
                outcome: Outcome::Admitted(Some(41)),
            },
            Event::Read {
                fence: fence(3, 7),
                outcome: Outcome::Stale {
                    current: fence(4, u128::MAX),
                },
            },
            Event::Read {
                fence: fence(3, 7),
                outcome: Outcome::Unknown {
                    reason: "timed out after 2s".into(),
                },
            },
            Event::Peek { value: Some(9) },
            Event::Peek { value: None },
            Event::WriteBegin {
                fence: fence(u64::MAX, 1),
                value: 42,
            },
            Event::Write {
                fence: fence(3, 7),
                value: 42,
                outcome: Outcome::Admitted(()),
            },
            Event::Write {
                fence: fence(3, 7),
                value: 42,
                outcome: Outcome::Stale {
                    current: fence(5, 8),
                },
            },
            Event::Write {
                fence: fence(3, 7),
                value: 42,
                outcome: Outcome::Unknown {
                    reason: "connection reset".into(),
                },
            },
            Event::Released {
                fence: fence(3, 7),
                released: false,
            },
            Event::Healed {
                floor: 10,
                counter: 11,
            },
            Event::Error {
                reason: "redis unavailable: refused".into(),
            },
        ];
        for (at, event) in (0u64..).zip(events) {
            let stamped = Stamped {
                at: at * 1_000_000_007,
                event,
            };
            let line = stamped.to_string();
            assert_eq!(parse(&line), Some(stamped), "{line}");
        }
    }

    #[test]
    fn reasons_stay_on_one_line_and_junk_is_ignored() {
        let event = Event::Error {
            reason: "two\nlines".into(),
        };
        assert_eq!(event.to_string(), "error two lines");
        for junk in [
            "",
            "12",
            "ready",
            "x ready",
            "-1 ready",
            "12 acquired",
            "12 acquired 0 00",
            "12 acquired 3 00000000000000000000000000000007",
            "12 read 1 xyz ok 1",
            "12 nope 1",
            "12 peek 1 2",
            "12 peek-begin 1",
        ] {
            assert_eq!(parse(junk), None, "{junk:?}");
        }
    }
}
