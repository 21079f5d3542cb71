//! `fencelock chaos`: the arguments of a `fencelock-chaos` run, its progress on stderr and its
//! report on stdout; and `fencelock worker`, the process each chaos worker runs.

use std::io::IsTerminal;
use std::time::Duration;

use fencelock_chaos::{
    ChaosConfig, FaultKind, Outcome, Persistence, Progress, Target, WorkerLauncher,
};

use crate::args::parse_duration;
use crate::error::CliError;
use crate::exit::Exit;
use crate::signals::Signals;
use crate::spec::{BACKEND_ENV, Spec, SpecParser};

pub(crate) const EXAMPLES: &str = "  fencelock chaos --spawn-redis 1 --faults pause,kill,partition --duration 30s
  fencelock chaos --spawn-redis 5 --persistence none --faults pause,kill
  fencelock chaos --backend 'postgres://postgres@127.0.0.1/test?backend=advisory' --faults pause,terminate,partition
";

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
    /// Backend spec of servers you run: redis://, redlock://, postgres://...?backend=lease|advisory,
    /// mysql://. memory:// is refused: it cannot be shared between worker processes.
    #[arg(
        long,
        env = BACKEND_ENV,
        hide_env_values = true,
        required_unless_present = "spawn_redis",
        value_parser = SpecParser
    )]
    pub(crate) backend: Option<Spec>,
    /// Start N redis-server processes instead (N = 1: redis://, N > 1: redlock://), so that the
    /// kill fault can kill -9 and restart them; --backend and FENCELOCK_BACKEND are then not
    /// used. The counter lives on a separate persistent node that is never killed, unless there
    /// is one node with --persistence always.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    spawn_redis: Option<u16>,
    /// Persistence of the spawned lock nodes.
    #[arg(long, value_enum, default_value = "always", requires = "spawn_redis")]
    persistence: PersistenceArg,
    /// Worker processes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=256))]
    workers: u16,
    /// Length of the fenced run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Length of the negative control run [default: a third of --duration, at least 5s, at
    /// most --duration].
    #[arg(long, value_parser = parse_duration)]
    control_duration: Option<Duration>,
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
}

fn parse_fault(text: &str) -> Result<FaultKind, String> {
    text.parse()
        .map_err(|e: fencelock_chaos::ChaosError| e.to_string())
}

impl Args {
    /// The run the arguments ask for.
    fn config(&self) -> Result<ChaosConfig, CliError> {
        let target = match (self.spawn_redis, &self.backend) {
            (Some(nodes), _) => Target::SpawnRedis {
                nodes: usize::from(nodes),
                persistence: match self.persistence {
                    PersistenceArg::Always => Persistence::Always,
                    PersistenceArg::None => Persistence::None,
                },
            },
            (None, Some(spec)) => Target::Backend(Box::new(spec.spec().clone())),
            (None, None) => {
                return Err(CliError::Input(format!(
                    "give --backend SPEC (or set {BACKEND_ENV}), or --spawn-redis N"
                )));
            }
        };
        let mut config = ChaosConfig::new(target);
        config.workers = self.workers;
        config.duration = self.duration;
        config.control_duration = self.control_duration;
        config.faults.clone_from(&self.faults);
        config.ttl = self.ttl;
        config.work = self.work;
        config.op_timeout = self.op_timeout;
        Ok(config)
    }
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let config = args.config()?;
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

    #[test]
    fn the_help_defaults_are_the_library_defaults() {
        let args = chaos_args(&["fencelock", "chaos", "--spawn-redis", "1"]);
        let expected = ChaosConfig::new(Target::SpawnRedis {
            nodes: 1,
            persistence: Persistence::Always,
        });
        assert_eq!(args.config().unwrap(), expected);
    }

    #[test]
    fn spawning_wins_over_a_backend() {
        let args = chaos_args(&[
            "fencelock",
            "chaos",
            "--spawn-redis",
            "3",
            "--persistence",
            "none",
            "--backend",
            "redis://127.0.0.1:1",
        ]);
        assert_eq!(
            args.config().unwrap().target,
            Target::SpawnRedis {
                nodes: 3,
                persistence: Persistence::None
            }
        );
    }
}
