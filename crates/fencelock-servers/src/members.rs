//! [`Members`]: the processes of one spawned group of servers (an etcd cluster, a ZooKeeper
//! ensemble, one server of either; each backend's crate gives its [`Service`]) on free ports of 127.0.0.1, in one temporary directory,
//! killed and removed on drop.
//!
//! Everything a fault run does to a member is the same for every kind of server: start it on
//! its ports and data, wait until it serves, kill it (SIGKILL), start it again on the same
//! ports and data, pause (SIGSTOP) and resume it, show the tail of its log. What differs is a
//! [`Service`]: the command that runs a member, the files it needs first, and how to tell that
//! it serves.
//!
//! ```no_run
//! # fn demo() -> std::io::Result<()> {
//! use std::net::TcpStream;
//! use std::process::Command;
//! use std::time::Duration;
//!
//! use fencelock_servers::members::{Member, Members, Service};
//!
//! /// Python's HTTP server on each member's port: what a backend's crate writes for its server.
//! #[derive(Debug, Clone)]
//! struct Http;
//!
//! impl Service for Http {
//!     fn name(&self) -> &'static str {
//!         "http.server"
//!     }
//!     fn install_hint(&self) -> &'static str {
//!         "install python3"
//!     }
//!     fn ports(&self, _count: usize) -> usize {
//!         1
//!     }
//!     fn start_timeout(&self) -> Duration {
//!         Duration::from_secs(10)
//!     }
//!     fn command(&self, members: &[Member], index: usize) -> Command {
//!         let mut command = Command::new("python3");
//!         let port = members[index].client_port().to_string();
//!         command.args(["-m", "http.server", "--bind", "127.0.0.1", &port]);
//!         command
//!     }
//!     fn serving(&self, member: &Member) -> bool {
//!         TcpStream::connect(("127.0.0.1", member.client_port())).is_ok()
//!     }
//! }
//!
//! let group = Members::start(Http, 3)?;
//! group.kill(2);             // SIGKILL
//! group.try_restart(2)?;     // same ports and data directory
//! group.pause(0)?;           // SIGSTOP: connections stay open, nothing is answered
//! group.resume(0)?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::port::free_port;
use crate::set::Process;

/// Groups that fail to start (a port probed free was taken before the server bound it) are
/// tried again on new ports, this many times in all.
const ATTEMPTS: usize = 5;

/// What one kind of server needs to run as [`Members`].
pub trait Service: Clone + Send + Sync + fmt::Debug + 'static {
    /// The server's name in messages (`etcd`, `ZooKeeper`).
    fn name(&self) -> &'static str;

    /// What to install when its binary is missing.
    fn install_hint(&self) -> &'static str;

    /// The ports each member of a group of `count` takes; the first is its client port.
    fn ports(&self, count: usize) -> usize;

    /// How long a member may take to serve after it is started.
    fn start_timeout(&self) -> Duration;

    /// Checks that the server is installed; a missing one is [`io::ErrorKind::NotFound`]. The
    /// default leaves that to the first launch.
    fn check_installed(&self) -> io::Result<()> {
        Ok(())
    }

    /// Writes what the members need before their first start (configuration files), once
    /// their ports and directories are known. Each member's directory exists.
    fn prepare(&self, _members: &[Member]) -> io::Result<()> {
        Ok(())
    }

    /// The command that runs `members[index]`. Its standard output and error go to the
    /// member's log.
    fn command(&self, members: &[Member], index: usize) -> Command;

    /// Whether `member` serves requests.
    fn serving(&self, member: &Member) -> bool;

    /// The member that leads the group now, if one answers so.
    fn leader(&self, _members: &[Member]) -> Option<usize> {
        None
    }
}

/// One member's place: its name, its ports on 127.0.0.1, its data directory and its log.
#[derive(Debug, Clone)]
pub struct Member {
    /// Its position in the group, from 0.
    pub index: usize,
    /// Its name (`m0`, `m1`, ...), also its directory's.
    pub name: String,
    /// Its ports, as many as [`Service::ports`] asked; the first is its client port.
    pub ports: Vec<u16>,
    /// Its data directory.
    pub dir: PathBuf,
    /// Its log file.
    pub log: PathBuf,
}

impl Member {
    /// Its client port on 127.0.0.1.
    pub fn client_port(&self) -> u16 {
        self.ports[0]
    }
}

/// Processes of one [`Service`], owned by their creator. Dropping it kills every member and
/// removes their directory.
pub struct Members<S: Service> {
    service: S,
    members: Vec<Member>,
    children: Vec<Mutex<Option<Child>>>,
    dir: tempfile::TempDir,
}

impl<S: Service> fmt::Debug for Members<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Members")
            .field("service", &self.service)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

impl<S: Service> Members<S> {
    /// `count` members of `service`, started together and waited for until each serves (a
    /// leader is elected). A missing server is an [`io::ErrorKind::NotFound`] error that says
    /// what to install; a group that does not start is tried again on new ports.
    pub fn start(service: S, count: usize) -> io::Result<Self> {
        if count == 0 {
            return Err(io::Error::other(format!(
                "a group of {} servers needs at least one member",
                service.name()
            )));
        }
        service.check_installed()?;
        let mut last_error = None;
        for _ in 0..ATTEMPTS {
            let group = Self::prepare(service.clone(), count)?;
            match group.start_all() {
                Ok(()) => return Ok(group),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(e),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error
            .unwrap_or_else(|| io::Error::other(format!("{} did not start", service.name()))))
    }

    fn prepare(service: S, count: usize) -> io::Result<Self> {
        // Data in memory when the host has /dev/shm: the fsync of every write costs little.
        let shm = Path::new("/dev/shm");
        let mut builder = tempfile::Builder::new();
        let prefix = format!("fencelock-{}-", service.name().to_ascii_lowercase());
        builder.prefix(&prefix);
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm).or_else(|_| builder.tempdir())?
        } else {
            builder.tempdir()?
        };
        let ports = service.ports(count);
        let mut members = Vec::with_capacity(count);
        for index in 0..count {
            let name = format!("m{index}");
            let member_dir = dir.path().join(&name);
            std::fs::create_dir_all(&member_dir)?;
            members.push(Member {
                index,
                log: dir.path().join(format!("{name}.log")),
                dir: member_dir,
                name,
                ports: (0..ports).map(|_| free_port()).collect::<io::Result<_>>()?,
            });
        }
        service.prepare(&members)?;
        Ok(Members {
            service,
            children: members.iter().map(|_| Mutex::new(None)).collect(),
            members,
            dir,
        })
    }

    fn start_all(&self) -> io::Result<()> {
        for index in 0..self.members.len() {
            self.launch(index)?;
        }
        let deadline = Instant::now() + self.service.start_timeout();
        for index in 0..self.members.len() {
            self.await_serving(index, deadline)?;
        }
        Ok(())
    }

    /// The service the members run.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// Every member's place, in order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the group has no member (never: it has at least one).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Member `index`'s client port on 127.0.0.1.
    pub fn client_port(&self, index: usize) -> u16 {
        self.members[index].client_port()
    }

    /// `127.0.0.1:<client port>,...`: every member, in order.
    pub fn hosts(&self) -> String {
        let hosts: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port()))
            .collect();
        hosts.join(",")
    }

    /// The directory holding every member's data and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Whether member `index` runs (a paused one counts as running).
    pub fn is_running(&self, index: usize) -> bool {
        self.child(index)
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Kills member `index` with SIGKILL and waits for it to exit. Its data stays for a
    /// restart.
    pub fn kill(&self, index: usize) {
        if let Some(mut child) = self.child(index).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `index` again on the same ports and data (killing it first if it still
    /// runs), and waits until it serves; in a group of several that needs a quorum of
    /// members up. An error when it does not come back.
    pub fn try_restart(&self, index: usize) -> io::Result<()> {
        self.kill(index);
        let deadline = Instant::now() + self.service.start_timeout();
        loop {
            // The ports can linger briefly after a kill.
            let launched = self
                .launch(index)
                .and_then(|()| self.await_serving(index, deadline));
            match launched {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline || e.kind() == io::ErrorKind::NotFound => {
                    return Err(e);
                }
                Err(_) => {
                    self.kill(index);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// Restarts member `index` without waiting for it to serve (when no quorum is up, it
    /// cannot).
    pub fn relaunch(&self, index: usize) -> io::Result<()> {
        self.kill(index);
        self.launch(index)
    }

    /// Freezes member `index` with SIGSTOP: its connections stay open, nothing is answered,
    /// and the others elect a leader without it.
    pub fn pause(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGSTOP)
    }

    /// Resumes member `index` after [`pause`](Self::pause).
    pub fn resume(&self, index: usize) -> io::Result<()> {
        self.signal(index, Signal::SIGCONT)
    }

    /// Whether member `index` serves requests now.
    pub fn is_serving(&self, index: usize) -> bool {
        self.service.serving(&self.members[index])
    }

    /// The member that leads the group now, if one answers so.
    pub fn leader(&self) -> Option<usize> {
        self.service.leader(&self.members)
    }

    /// The last lines of member `index`'s log, for failure messages.
    pub fn log_tail(&self, index: usize) -> String {
        let log = std::fs::read_to_string(&self.members[index].log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().rev().take(5).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join(" | ")
    }

    /// Every member as a [`Process`] of a fault run's server set, in order.
    pub fn processes(self: &Arc<Self>) -> Vec<Arc<dyn Process>> {
        (0..self.len())
            .map(|index| {
                Arc::new(MemberProcess {
                    group: self.clone(),
                    index,
                }) as Arc<dyn Process>
            })
            .collect()
    }

    fn child(&self, index: usize) -> MutexGuard<'_, Option<Child>> {
        self.children[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn describe(&self, index: usize) -> String {
        let member = &self.members[index];
        format!(
            "{} member {} (port {})",
            self.service.name(),
            member.name,
            member.client_port()
        )
    }

    fn signal(&self, index: usize, signal: Signal) -> io::Result<()> {
        let Some(pid) = self.child(index).as_ref().map(Child::id) else {
            return Ok(());
        };
        let pid = i32::try_from(pid).map_err(io::Error::other)?;
        kill(Pid::from_raw(pid), signal).map_err(|e| {
            io::Error::other(format!(
                "cannot send {signal} to {}: {e}",
                self.describe(index)
            ))
        })
    }

    /// Starts member `index`'s process (without waiting for it).
    fn launch(&self, index: usize) -> io::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.members[index].log)?;
        let child = self
            .service
            .command(&self.members, index)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .map_err(|e| {
                if e.kind() == io::ErrorKind::NotFound {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{} ({e})", self.service.install_hint()),
                    )
                } else {
                    e
                }
            })?;
        *self.child(index) = Some(child);
        Ok(())
    }

    fn await_serving(&self, index: usize, deadline: Instant) -> io::Result<()> {
        loop {
            if let Some(child) = self.child(index).as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(io::Error::other(format!(
                    "{} exited with {status}: {}",
                    self.describe(index),
                    self.log_tail(index)
                )));
            }
            if self.is_serving(index) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} not serving within {:?}: {}",
                        self.describe(index),
                        self.service.start_timeout(),
                        self.log_tail(index)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl<S: Service> Drop for Members<S> {
    fn drop(&mut self) {
        // A stopped process still dies of SIGKILL; no SIGCONT needed.
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}

/// Sends `request` to the server on 127.0.0.1:`port` and reads its whole reply (a probe the
/// server answers and then closes: an HTTP request with `Connection: close`, a ZooKeeper
/// four-letter word); `None` when nothing answers. Reads wait at most 2 s.
pub fn ask(port: u16, request: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream.write_all(request.as_bytes()).ok()?;
    let mut reply = String::new();
    let _ = stream.read_to_string(&mut reply);
    Some(reply)
}

/// Member `index` of a group, as one server of a fault run's set.
#[derive(Debug)]
struct MemberProcess<S: Service> {
    group: Arc<Members<S>>,
    index: usize,
}

impl<S: Service> Process for MemberProcess<S> {
    fn is_running(&self) -> bool {
        self.group.is_running(self.index)
    }

    fn kill(&self) {
        self.group.kill(self.index);
    }

    fn try_restart(&self) -> io::Result<()> {
        self.group.try_restart(self.index)
    }

    fn leads(&self) -> bool {
        self.group.leader() == Some(self.index)
    }
}
