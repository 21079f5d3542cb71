//! The signals that end `fencelock` (SIGHUP, SIGINT, SIGTERM), caught so that it can pass them
//! to the command it runs, or stop what it started, before it exits with 128 + N.

use nix::sys::signal::Signal;
use tokio::signal::unix::{self, SignalKind};

use crate::error::CliError;

/// Listens for SIGHUP, SIGINT and SIGTERM from the moment it is installed: from then on they no
/// longer end the process by themselves.
#[derive(Debug)]
pub(crate) struct Signals {
    hup: unix::Signal,
    int: unix::Signal,
    term: unix::Signal,
}

impl Signals {
    /// Installs the handlers.
    pub(crate) fn install() -> Result<Self, CliError> {
        let listen = |kind: SignalKind| {
            unix::signal(kind).map_err(|e| CliError::io("cannot listen for signals", e))
        };
        Ok(Signals {
            hup: listen(SignalKind::hangup())?,
            int: listen(SignalKind::interrupt())?,
            term: listen(SignalKind::terminate())?,
        })
    }

    /// The next of them to arrive.
    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
        }
    }
}
