//! `fencelock chaos`: the arguments of a `fencelock-chaos` run, its progress on stderr and its
//! report on stdout; and `fencelock worker`, the process each chaos worker runs.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use fencelock_chaos::{
    ChaosConfig, FaultKind, Outcome, Persistence, Progress, Target, WorkerLauncher, Workload,
};

use crate::args::parse_duration;
use crate::error::CliError;
use crate::exit::Exit;
use crate::signals::Signals;
use crate::spec::{BACKEND_ENV, Spec, SpecParser, StorageParser};
use fencelock::spec::StorageSpec;

pub(crate) const EXAMPLES: &str = "  fencelock chaos --spawn redis --faults pause,kill,partition --duration 30s
  fencelock chaos --spawn redlock:5 --persistence none --faults pause,kill
  fencelock chaos --backend 'postgres://postgres@127.0.0.1/test?backend=advisory&schema=fencelock_advisory' --faults pause,terminate,partition
  fencelock chaos --spawn redis --faults pause,kill --duration 10s --report chaos-report
  fencelock chaos --spawn zookeeper:3 --faults pause,kill,partition --ttl 2s
  fencelock chaos --spawn etcd:3 --faults pause,kill,partition --ttl 1s   (built with --features etcd)
  fencelock chaos --spawn redis --workload semaphore --permits 2 --faults pause,kill
  fencelock chaos --spawn redis --workload election --faults pause,partition
  fencelock chaos --backend memory:// --workload rwlock --duration 10s
  fencelock chaos --spawn redis --workload composite --members 2 --faults pause,kill,partition
";

/// Permits of the semaphore workload when `--permits` is not given.
const DEFAULT_PERMITS: u16 = 2;

/// Keys per set of the composite workload when `--members` is not given.
const DEFAULT_MEMBERS: u16 = 2;

/// `--workload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum WorkloadArg {
    /// The exclusive lock: increment one counter under each grant's fence.
    Lock,
    /// A semaphore of --permits permits: each holder increments its slot's counter under the
    /// slot's fence.
    Semaphore,
    /// Leader election: the leader increments a leader-only counter with its term as the
    /// fence (leadership held with the watchdog, lost under pauses).
    Election,
    /// A read/write lock: even workers write (increment), odd workers read twice under the
    /// shared read fence. Needs a backend with shared locks (memory://).
    Rwlock,
    /// Composite locks: each worker takes --members overlapping keys with one lock_all and
    /// increments each key's counter under that key's own fence.
    Composite,
}

/// `--persistence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PersistenceArg {
    /// AOF with appendfsync always: counters survive kill -9.
    Always,
    /// No persistence: a killed node comes back with its token counters gone.
    None,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend spec, the URL of servers you run; or memory://, whose workers are then threads
    /// of this process (the pause fault stops a thread's whole runtime; no other fault
    /// applies).
    #[arg(
        long,
        env = BACKEND_ENV,
        hide_env_values = true,
        required_unless_present_any = ["spawn", "spawn_redis", "spawn_etcd"],
        value_parser = SpecParser
    )]
    pub(crate) backend: Option<Spec>,
    /// Start N servers of SCHEME instead (redis: one server; redlock:N, etcd:N, zookeeper:N),
    /// through the backend's own spawner, so that the kill fault can kill -9 and restart
    /// them on their data; --backend and FENCELOCK_BACKEND are then not used. Each kill takes
    /// a minority of the servers. The backend keeps the counter on the same servers when they
    /// keep what they acknowledged, else on a persistent server of its own that is never
    /// killed. etcd leases last at least 1s: give --ttl 1s or more.
    #[arg(
        long,
        value_name = "SCHEME[:N]",
        conflicts_with_all = ["spawn_redis", "spawn_etcd"],
        value_parser = parse_spawn
    )]
    spawn: Option<SpawnArg>,
    /// Start N redis-server processes: the same as --spawn redis (N = 1) or --spawn redlock:N.
    #[arg(
        long,
        value_name = "N",
        hide = true,
        value_parser = clap::value_parser!(u16).range(1..=64)
    )]
    spawn_redis: Option<u16>,
    /// Start an etcd cluster of N members: the same as --spawn etcd:N.
    #[arg(
        long,
        value_name = "N",
        hide = true,
        conflicts_with = "spawn_redis",
        value_parser = clap::value_parser!(u16).range(1..=7)
    )]
    spawn_etcd: Option<u16>,
    /// Keep the workers' counters in this storage instead of the lock service's own: a
    /// storage spec (s3://bucket/prefix?endpoint=http://host:port&region=..&access_key_id=..&secret_access_key=..,
    /// in a build with the object-store feature) or any backend's storage (redis://, postgres://...).
    /// The partition fault puts a proxy in front of it too.
    #[arg(long, value_name = "SPEC", value_parser = StorageParser)]
    storage: Option<StorageSpec>,
    /// Persistence of the spawned servers, where the backend has a choice (redis, redlock).
    #[arg(long, value_enum, default_value = "always")]
    persistence: PersistenceArg,
    /// Worker processes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=256))]
    workers: u16,
    /// Length of the fenced run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Length of the negative control run [default: a third of --duration, at least 5s, at
    /// most --duration]. A control that has lost no update by then goes on until its first
    /// lost update, up to the longer of this and --duration.
    #[arg(long, value_parser = parse_duration)]
    control_duration: Option<Duration>,
    /// What the workers do: which lock kind they take and the counters they keep under it.
    #[arg(long, value_enum, default_value = "lock")]
    workload: WorkloadArg,
    /// Permits of the semaphore workload, fewer than --workers [default: 2].
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u16).range(1..=255))]
    permits: Option<u16>,
    /// Keys in each worker's set for the composite workload, out of one more counters, so
    /// that every two sets overlap [default: 2].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(2..=i64::from(fencelock_chaos::MAX_MEMBERS)))]
    members: Option<u16>,
    /// Faults to inject, comma separated: pause, kill, partition, terminate.
    #[arg(long, value_delimiter = ',', default_value = "pause", value_parser = parse_fault)]
    faults: Vec<FaultKind>,
    /// Lease ttl of the workers' locks (never renewed).
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    ttl: Duration,
    /// Sleep between each cycle's read and write [default: ttl / 10].
    #[arg(long, value_parser = parse_duration)]
    work: Option<Duration>,
    /// The longest a worker waits for one storage or lock call before counting it unknown.
    #[arg(long, default_value = "1s", value_parser = parse_duration, hide = true)]
    op_timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Write a report page into DIR: index.html (self-contained: the table, a time line per
    /// worker, latency plots, fenced run and control side by side) and history.jsonl.
    #[arg(long, value_name = "DIR")]
    report: Option<PathBuf>,
    /// Write every storage operation of both runs, with invoke and complete times, as JSON
    /// lines to FILE, for other history checkers.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// States the history checker may visit per key before its verdict is "unknown: search
    /// budget exceeded".
    #[arg(
        long,
        value_name = "N",
        default_value_t = fencelock_chaos::linearizability::DEFAULT_STATE_BUDGET,
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    search_budget: usize,
}

/// `--spawn SCHEME[:N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SpawnArg {
    scheme: String,
    nodes: usize,
}

/// The most servers one `--spawn` starts.
const MAX_SPAWNED: usize = 64;

fn parse_spawn(text: &str) -> Result<SpawnArg, String> {
    let (scheme, nodes) = match text.split_once(':') {
        Some((scheme, nodes)) => (scheme, Some(nodes)),
        None => (text, None),
    };
    let scheme = scheme.trim_end_matches("//");
    if scheme.is_empty() {
        return Err("give a scheme to spawn: redis, redlock:5, etcd:3, ...".to_owned());
    }
    let nodes = match nodes.filter(|n| !n.is_empty() && !n.starts_with('/')) {
        None => 1,
        Some(n) => match n.parse::<usize>() {
            Ok(n) if (1..=MAX_SPAWNED).contains(&n) => n,
            _ => {
                return Err(format!(
                    "{n:?} is not a number of servers: give 1 to {MAX_SPAWNED} ({scheme}:3)"
                ));
            }
        },
    };
    Ok(SpawnArg {
        scheme: scheme.to_ascii_lowercase(),
        nodes,
    })
}

fn parse_fault(text: &str) -> Result<FaultKind, String> {
    text.parse()
        .map_err(|e: fencelock_chaos::ChaosError| e.to_string())
}

impl Args {
    /// The run the arguments ask for.
    fn config(&self) -> Result<ChaosConfig, CliError> {
        let persistence = match self.persistence {
            PersistenceArg::Always => Persistence::Always,
            PersistenceArg::None => Persistence::None,
        };
        let spawn = match (&self.spawn, self.spawn_redis, self.spawn_etcd) {
            (Some(spawn), _, _) => Some(spawn.clone()),
            (None, Some(1), _) => Some(SpawnArg {
                scheme: "redis".to_owned(),
                nodes: 1,
            }),
            (None, Some(nodes), _) => Some(SpawnArg {
                scheme: "redlock".to_owned(),
                nodes: usize::from(nodes),
            }),
            (None, None, Some(members)) => Some(SpawnArg {
                scheme: "etcd".to_owned(),
                nodes: usize::from(members),
            }),
            (None, None, None) => None,
        };
        let target = match (spawn, &self.backend) {
            (Some(SpawnArg { scheme, nodes }), _) => {
                // Checked here, so that a scheme that cannot spawn is an input error before
                // anything starts.
                fencelock::spec::spawner(&scheme).map_err(|e| CliError::Input(e.to_string()))?;
                Target::Spawn {
                    scheme,
                    nodes,
                    persistence,
                }
            }
            (None, Some(spec)) => Target::Backend(Box::new(spec.spec().clone())),
            (None, None) => {
                return Err(CliError::Input(format!(
                    "give --backend SPEC (or set {BACKEND_ENV}) or --spawn SCHEME[:N]"
                )));
            }
        };
        self.with_workload(target)
    }

    /// The run on `target` with the workload and faults of the arguments.
    fn with_workload(&self, target: Target) -> Result<ChaosConfig, CliError> {
        let mut config = ChaosConfig::new(target);
        config.storage.clone_from(&self.storage);
        config.workers = self.workers;
        config.duration = self.duration;
        config.control_duration = self.control_duration;
        config.faults.clone_from(&self.faults);
        if self.permits.is_some() && self.workload != WorkloadArg::Semaphore {
            return Err(CliError::Input(
                "--permits applies to --workload semaphore only".to_owned(),
            ));
        }
        if self.members.is_some() && self.workload != WorkloadArg::Composite {
            return Err(CliError::Input(
                "--members applies to --workload composite only".to_owned(),
            ));
        }
        config.workload = match self.workload {
            WorkloadArg::Lock => Workload::Lock,
            WorkloadArg::Semaphore => Workload::Semaphore {
                permits: self.permits.unwrap_or(DEFAULT_PERMITS),
            },
            WorkloadArg::Election => Workload::Election,
            WorkloadArg::Rwlock => Workload::RwLock,
            WorkloadArg::Composite => Workload::Composite {
                members: self.members.unwrap_or(DEFAULT_MEMBERS),
            },
        };
        config.ttl = self.ttl;
        config.work = self.work;
        config.op_timeout = self.op_timeout;
        config.search_budget = self.search_budget;
        Ok(config)
    }
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let config = args.config()?;
    // Found out before a long run, not after it.
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::io(
                format!("cannot create the report directory {}", dir.display()),
                e,
            )
        })?;
    }
    let launcher = WorkerLauncher::current_exe(["worker"])?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |p: &Progress| {
        if tty {
            eprint!("\r\x1b[2K{p}");
        } else {
            eprintln!("{p}");
        }
    };
    let mut signals = Signals::install()?;
    let report = tokio::select! {
        report = fencelock_chaos::run(&config, &launcher, &mut progress) => report,
        signal = signals.recv() => {
            // Dropping the run kills its workers and the servers it started.
            eprintln!("\nfencelock: {signal}: chaos stopped its workers and servers");
            return Ok(Exit::Signal(signal as i32));
        }
    };
    if tty {
        eprintln!();
    }
    let report = report?;
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    if let Some(dir) = &args.report {
        report.write_report_dir(dir).map_err(|e| {
            CliError::io(format!("cannot write the report into {}", dir.display()), e)
        })?;
        eprintln!(
            "fencelock chaos: report page {}",
            dir.join("index.html").display()
        );
    }
    if let Some(file) = &args.history {
        let cannot = |e| CliError::io(format!("cannot write the history to {}", file.display()), e);
        let mut out = std::io::BufWriter::new(std::fs::File::create(file).map_err(cannot)?);
        report.write_history(&mut out).map_err(cannot)?;
        out.flush().map_err(cannot)?;
    }
    Ok(match report.outcome {
        Outcome::Pass => Exit::Success,
        Outcome::Violations => Exit::Violations,
        Outcome::ControlFoundNothing => Exit::ControlFoundNothing,
    })
}

/// `fencelock worker`: one chaos worker process.
pub(crate) async fn worker() -> Result<Exit, CliError> {
    fencelock_chaos::serve_worker().await?;
    Ok(Exit::Success)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    fn chaos_args(line: &[&str]) -> Args {
        let cli = Cli::try_parse_from(line).unwrap();
        match cli.command {
            Command::Chaos(args) => args,
            other => panic!("{other:?}"),
        }
    }

    fn spawned(scheme: &str, nodes: usize, persistence: Persistence) -> Target {
        Target::Spawn {
            scheme: scheme.to_owned(),
            nodes,
            persistence,
        }
    }

    #[test]
    fn the_help_defaults_are_the_library_defaults() {
        let args = chaos_args(&["fencelock", "chaos", "--spawn", "redis"]);
        let expected = ChaosConfig::new(Target::spawn("redis", 1));
        assert_eq!(args.config().unwrap(), expected);
    }

    #[test]
    fn spawning_wins_over_a_backend() {
        let args = chaos_args(&[
            "fencelock",
            "chaos",
            "--spawn",
            "redlock:3",
            "--persistence",
            "none",
            "--backend",
            "redis://127.0.0.1:1",
        ]);
        assert_eq!(
            args.config().unwrap().target,
            spawned("redlock", 3, Persistence::None)
        );
    }

    #[test]
    fn the_older_spawn_flags_mean_what_they_meant() {
        let one = chaos_args(&["fencelock", "chaos", "--spawn-redis", "1"]);
        assert_eq!(
            one.config().unwrap().target,
            spawned("redis", 1, Persistence::Always)
        );
        let five = chaos_args(&["fencelock", "chaos", "--spawn-redis", "5"]);
        assert_eq!(
            five.config().unwrap().target,
            spawned("redlock", 5, Persistence::Always)
        );
        let both = [
            "fencelock",
            "chaos",
            "--spawn",
            "redis",
            "--spawn-redis",
            "1",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn a_spawn_that_cannot_be_served_is_refused_before_anything_starts() {
        for (spec, says) in [
            ("memory", "cannot start servers"),
            ("nosuch:3", "unknown scheme"),
            ("redis:0", "not a number of servers"),
            ("redis:x", "not a number of servers"),
            ("redis:65", "1 to 64"),
            (":3", "give a scheme"),
        ] {
            let err = match Cli::try_parse_from(["fencelock", "chaos", "--spawn", spec]) {
                Err(e) => e.to_string(),
                Ok(cli) => match cli.command {
                    Command::Chaos(args) => args.config().unwrap_err().to_string(),
                    other => panic!("{other:?}"),
                },
            };
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn workloads_are_named_and_permits_go_with_the_semaphore() {
        let args = chaos_args(&[
            "fencelock",
            "chaos",
            "--backend",
            "memory://",
            "--workload",
            "semaphore",
            "--permits",
            "3",
        ]);
        assert_eq!(
            args.config().unwrap().workload,
            Workload::Semaphore { permits: 3 }
        );
        for (name, workload) in [
            ("lock", Workload::Lock),
            ("election", Workload::Election),
            ("rwlock", Workload::RwLock),
            ("composite", Workload::Composite { members: 2 }),
        ] {
            let args = chaos_args(&["fencelock", "chaos", "--spawn", "redis", "--workload", name]);
            assert_eq!(args.config().unwrap().workload, workload);
        }
        let wide = chaos_args(&[
            "fencelock",
            "chaos",
            "--spawn",
            "redis",
            "--workload",
            "composite",
            "--members",
            "4",
        ]);
        assert_eq!(
            wide.config().unwrap().workload,
            Workload::Composite { members: 4 }
        );
        let alone = [
            "fencelock",
            "chaos",
            "--spawn",
            "redis",
            "--workload",
            "composite",
        ];
        for members in ["1", "17"] {
            let args = [&alone[..], &["--members", members]].concat();
            assert!(Cli::try_parse_from(args).is_err(), "--members {members}");
        }
        let stray = chaos_args(&["fencelock", "chaos", "--spawn", "redis", "--members", "2"]);
        let err = stray.config().unwrap_err();
        assert!(
            err.to_string().contains("--workload composite only"),
            "{err}"
        );
        let junk = [
            "fencelock",
            "chaos",
            "--spawn",
            "redis",
            "--workload",
            "queue",
        ];
        assert!(Cli::try_parse_from(junk).is_err());
        let default = chaos_args(&[
            "fencelock",
            "chaos",
            "--backend",
            "memory://",
            "--workload",
            "semaphore",
        ]);
        assert_eq!(
            default.config().unwrap().workload,
            Workload::Semaphore { permits: 2 }
        );
        let stray = chaos_args(&["fencelock", "chaos", "--spawn", "redis", "--permits", "2"]);
        let err = stray.config().unwrap_err();
        assert!(
            err.to_string().contains("--workload semaphore only"),
            "{err}"
        );
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn spawn_etcd_names_the_members() {
        let args = chaos_args(&["fencelock", "chaos", "--spawn-etcd", "3", "--ttl", "1s"]);
        assert_eq!(
            args.config().unwrap().target,
            spawned("etcd", 3, Persistence::Always)
        );
        let both = [
            "fencelock",
            "chaos",
            "--spawn-etcd",
            "3",
            "--spawn-redis",
            "1",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn spawn_etcd_without_the_feature_says_which_feature() {
        let args = chaos_args(&["fencelock", "chaos", "--spawn", "etcd:3"]);
        let err = args.config().unwrap_err();
        assert!(err.to_string().contains("`etcd` feature"), "{err}");
    }
}
