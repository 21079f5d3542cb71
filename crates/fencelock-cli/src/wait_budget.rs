//! `--wait` as `run` and `elect` spend it: connecting and obtaining the lock within one
//! deadline.

use std::time::Duration;

use fencelock::spec::Connected;
use tokio::time::{Instant, timeout_at};

use crate::error::CliError;
use crate::spec::Spec;

/// How long connecting and the one try may take when `--wait` is zero (and connecting, when
/// `elect` waits without a bound).
const TRY_ONCE_WITHIN: Duration = Duration::from_secs(5);

/// The shortest pause between two connection attempts within `--wait`.
const CONNECT_RETRY_FLOOR: Duration = Duration::from_millis(50);

/// How long past `--wait` a call already sent may take to answer before the server counts as
/// not answering (the lock's own wait ends first when the server answers).
const ANSWER_SLACK: Duration = Duration::from_millis(500);

/// `--wait` as `run` and `elect` spend it: connecting and then waiting for the lock share one
/// deadline (a wait of zero, a single try, has [`TRY_ONCE_WITHIN`] for both), and a call
/// already sent gets [`ANSWER_SLACK`] past it before the server counts as not answering.
pub(crate) struct WaitBudget<'a> {
    spec: &'a Spec,
    wait: Duration,
    deadline: Instant,
}

impl<'a> WaitBudget<'a> {
    /// Starts the clock on a wait of `wait` for the server `spec` names.
    pub(crate) fn start(spec: &'a Spec, wait: Duration) -> Self {
        let mut budget = WaitBudget {
            spec,
            wait,
            deadline: Instant::now(),
        };
        budget.deadline += budget.within();
        budget
    }

    /// How long connecting and obtaining may take in all.
    fn within(&self) -> Duration {
        if self.wait.is_zero() {
            TRY_ONCE_WITHIN
        } else {
            self.wait
        }
    }

    fn no_answer(&self) -> CliError {
        CliError::NoAnswer {
            server: self.spec.to_string(),
            within: self.within(),
        }
    }

    /// Connects to the server, within the deadline. With a wait, a server that refuses the
    /// connection or is not there yet (a restart) is tried again with the default backoff
    /// until the deadline, and the last refusal is the error; a single try tries once.
    pub(crate) async fn connect(&self) -> Result<Connected, CliError> {
        let backoff = fencelock::Backoff::default();
        let mut attempt = 0;
        loop {
            match timeout_at(self.deadline, self.spec.spec().connect()).await {
                Err(_) => return Err(self.no_answer()),
                Ok(Ok(connected)) => return Ok(connected),
                Ok(Err(e)) if e.is_retryable() && !self.wait.is_zero() => {
                    let pause = backoff.pause(attempt).max(CONNECT_RETRY_FLOOR);
                    attempt += 1;
                    if Instant::now() + pause >= self.deadline {
                        return Err(e.into());
                    }
                    tokio::time::sleep(pause).await;
                }
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }

    /// The wait left for the lock itself: zero for a single try, else up to the deadline.
    pub(crate) fn left(&self) -> Duration {
        if self.wait.is_zero() {
            Duration::ZERO
        } else {
            self.deadline.saturating_duration_since(Instant::now())
        }
    }

    /// What `request` answers, or [`CliError::NoAnswer`] when it has not answered
    /// [`ANSWER_SLACK`] past the deadline.
    pub(crate) async fn answer<T>(&self, request: impl Future<Output = T>) -> Result<T, CliError> {
        timeout_at(self.deadline + ANSWER_SLACK, request)
            .await
            .map_err(|_| self.no_answer())
    }
}
