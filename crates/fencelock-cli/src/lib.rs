//! The `fencelock` command as a library: the argument definitions ([`Cli`]) and [`run`], which
//! carries a parsed command out and returns its exit code. The binary is `src/main.rs`, one
//! call of [`main_with`].
//!
//! A backend written outside this repository gets every subcommand (`run`, `inspect`,
//! `elect`, `advance-token`, `bench`, `chaos`) with a binary of its own that registers its
//! schemes:
//!
//! ```no_run
//! # mod my_backend { pub const SCHEMES: &[fencelock::spec::Scheme] = &[]; }
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     fencelock_cli::main_with(my_backend::SCHEMES).await
//! }
//! ```
//!
//! The chaos workers are this same binary started again, so they know the same schemes.
//!
//! Each subcommand lives in its own module and returns an [`Exit`] or a [`CliError`]; exit codes
//! are defined once in [`exit`], and every subcommand's `--help` lists its codes from there.
#![warn(missing_docs)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use fencelock::spec::Scheme;

mod advance_token;
mod args;
mod bench;
mod chaos;
mod child;
mod demo;
mod duration;
mod elect;
mod error;
pub mod exit;
mod inspect;
mod run;
mod signals;
mod spec;
mod tether;
mod wait_budget;
pub mod warnings;

pub use error::CliError;
pub use exit::Exit;
use exit::{Sub, after_help};
pub use spec::{BACKEND_ENV, Spec};

/// Distributed locks with fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a paused client's stale write refused by the fence, and the same run without
    /// fencing ending in a lost update.
    #[command(after_help = after_help(Sub::Demo, demo::EXAMPLES))]
    Demo(demo::Args),
    /// Take a lock, run a command while holding it (renewing the lease), release when it exits.
    ///
    /// The command sees FENCELOCK_KEY, FENCELOCK_TOKEN and FENCELOCK_OWNER in its environment;
    /// it should present the token to whatever it writes. If the lease is lost while the
    /// command runs, the command gets SIGTERM, then SIGKILL after --grace.
    #[command(after_help = after_help(Sub::Run, run::EXAMPLES))]
    Run(run::Args),
    /// Campaign for leadership of a key and run a command while leader.
    ///
    /// The term (the lock's token) is in FENCELOCK_TOKEN and FENCELOCK_TERM; the command
    /// should present it with everything it writes, so a deposed leader is refused. If
    /// leadership is lost while the command runs, the command gets SIGTERM, then SIGKILL after
    /// --grace.
    #[command(after_help = after_help(Sub::Elect, elect::EXAMPLES))]
    Elect(elect::Args),
    /// Show a lock's holder (or read phase, or permits, or leader), token and time left, its
    /// queue where the backend lists one, and the backend's capabilities.
    #[command(after_help = after_help(Sub::Inspect, inspect::EXAMPLES))]
    Inspect(inspect::Args),
    /// Raise a key's token counter so that the next grant carries a token above N.
    ///
    /// After a lock server lost its counters (a Redis restart without persistence), grants
    /// repeat old tokens and the fenced storage refuses them as stale. Raising the counter past
    /// the storage's fence heals this. The counter never goes down: a floor below it changes
    /// nothing.
    #[command(after_help = after_help(Sub::AdvanceToken, advance_token::EXAMPLES))]
    AdvanceToken(advance_token::Args),
    /// Measure a backend against the raw baseline on the same server: acquire + release, fenced
    /// write, hand-off, extend and contended throughput, as p50, p99, ops/s and ratios.
    #[command(after_help = after_help(Sub::Bench, bench::EXAMPLES))]
    Bench(bench::Args),
    /// Inject faults (paused holders, killed servers, partitions, ended sessions) into worker
    /// processes sharing a counter, check that fencing lost nothing, and show that the same run
    /// without fencing does lose updates.
    #[command(after_help = after_help(Sub::Chaos, chaos::EXAMPLES))]
    Chaos(chaos::Args),
    /// Print a completion script for a shell on stdout.
    ///
    /// bash: `fencelock completions bash > /etc/bash_completion.d/fencelock`; zsh: into a file
    /// `_fencelock` on `$fpath`; fish: `fencelock completions fish >
    /// ~/.config/fish/completions/fencelock.fish`. Exit code 0, or 2 for an unknown shell.
    Completions {
        /// The shell: bash, zsh, fish (also elvish, powershell).
        shell: clap_complete::Shell,
    },
    /// One chaos worker process (started by `fencelock chaos`, configured through stdin).
    #[command(hide = true)]
    Worker,
    /// The command of `run` or `elect`, tied to the fencelock that started it (started by
    /// them, never by hand).
    #[command(hide = true)]
    Tether(tether::Args),
}

impl Command {
    /// The backend spec the subcommand was given, if any.
    fn spec(&self) -> Option<&Spec> {
        match self {
            Command::Demo(args) => Some(&args.backend.backend),
            Command::Run(args) => args.backend.backend.as_ref(),
            Command::Elect(args) => args.backend.backend.as_ref(),
            Command::Inspect(args) => args.backend.backend.as_ref(),
            Command::AdvanceToken(args) => args.backend.backend.as_ref(),
            Command::Bench(args) => Some(&args.backend.backend),
            Command::Chaos(args) => args.backend.as_ref(),
            Command::Worker | Command::Tether(_) | Command::Completions { .. } => None,
        }
    }
}

/// Registers `schemes` beside the built-in ones, parses the process's command line (its help
/// lists every registered scheme) and carries it out. A scheme that cannot be registered (its
/// name is taken) is reported and exits with the usage code.
pub async fn main_with(schemes: &[Scheme]) -> ExitCode {
    for scheme in schemes {
        if let Err(e) = fencelock::spec::register(*scheme) {
            eprintln!("fencelock: {e}");
            return Exit::Usage.into();
        }
    }
    run(parse()).await
}

/// The command line of this process, parsed against [`command`] (exits with clap's message
/// and code on a usage error, or after printing help).
pub fn parse() -> Cli {
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let typed = matches.subcommand().is_some_and(|(_, sub)| {
        sub.try_get_raw("backend").is_ok()
            && sub.value_source("backend") == Some(clap::parser::ValueSource::CommandLine)
    });
    if typed && cli.command.spec().is_some_and(Spec::password_in_text) {
        eprintln!("{ARGV_PASSWORD_WARNING}");
    }
    cli
}

/// Printed when `--backend` on the command line carries a password.
pub const ARGV_PASSWORD_WARNING: &str = "fencelock: warning: the --backend spec carries a \
    password, which every user of this machine can read in the process list while fencelock \
    runs; put the spec in a file only you can read and pass --backend @FILE (or \
    FENCELOCK_BACKEND=@FILE)";

/// The command-line definition, with the schemes registered in this process (see
/// [`fencelock::spec::register`]) listed in the help of every `--backend`: their names in
/// the short help (`-h`), each with its summary in the long help (`--help`) and after the
/// top-level help. Nothing lists a scheme by hand, so a registered one is never missing.
pub fn command() -> clap::Command {
    let schemes = fencelock::spec::schemes();
    let scheme_names = schemes.list();
    let width = schemes
        .iter()
        .map(|scheme| scheme.name.len() + 3)
        .max()
        .unwrap_or(0);
    let list: Vec<String> = schemes
        .iter()
        .map(|scheme| {
            format!(
                "  {:<width$}  {}",
                format!("{}://", scheme.name),
                scheme.summary
            )
        })
        .collect();
    let listing = format!("Backend specs this build reads:\n{}", list.join("\n"));
    let mut cli = Cli::command();
    let names: Vec<String> = cli
        .get_subcommands()
        .filter(|sub| sub.get_arguments().any(|arg| arg.get_id() == "backend"))
        .map(|sub| sub.get_name().to_owned())
        .collect();
    for name in names {
        let listing = listing.clone();
        let scheme_names = scheme_names.clone();
        cli = cli.mut_subcommand(name, move |sub| {
            sub.mut_arg("backend", move |arg| {
                let short = arg.get_help().map(ToString::to_string).unwrap_or_default();
                let long = arg
                    .get_long_help()
                    .map(ToString::to_string)
                    .unwrap_or_else(|| short.clone());
                let short = short.trim_end_matches('.');
                let long = long.trim_end_matches('.');
                arg.help(format!("{short}. One of: {scheme_names}."))
                    .long_help(format!("{long}.\n\n{listing}"))
            })
        });
    }
    cli.after_help(listing)
}

/// Carries out a parsed command line: prints what the subcommand prints, and any error as one
/// `fencelock: ...` line on stderr (passwords hidden). Returns the exit code.
pub async fn run(cli: Cli) -> ExitCode {
    let spec = cli.command.spec().cloned();
    let outcome = match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Elect(args) => elect::run(args).await,
        Command::Inspect(args) => inspect::run(args).await,
        Command::AdvanceToken(args) => advance_token::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Worker => chaos::worker().await,
        Command::Tether(args) => tether::exec(args),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut command(), "fencelock", &mut std::io::stdout());
            Ok(Exit::Success)
        }
    };
    match outcome {
        Ok(exit) => exit.into(),
        Err(e) => {
            let message = e.to_string();
            let message = match &spec {
                Some(spec) => spec.redact(&message),
                None => message,
            };
            eprintln!("fencelock: {message}");
            e.exit().into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    /// Every subcommand that takes `--backend` lists every registered scheme in its short
    /// help, and each with its summary in its long help.
    #[test]
    fn the_backend_help_lists_every_registered_scheme() {
        let mut cli = command();
        let names: Vec<String> = cli
            .get_subcommands()
            .filter(|sub| sub.get_arguments().any(|arg| arg.get_id() == "backend"))
            .map(|sub| sub.get_name().to_owned())
            .collect();
        for name in [
            "demo",
            "run",
            "elect",
            "inspect",
            "advance-token",
            "bench",
            "chaos",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} takes no --backend");
        }
        let schemes = fencelock::spec::schemes();
        for name in names {
            let sub = cli.find_subcommand_mut(&name).unwrap();
            // Lines may be wrapped anywhere between words.
            let words = |text: String| text.split_whitespace().collect::<Vec<_>>().join(" ");
            let short = words(sub.render_help().to_string());
            let long = words(sub.render_long_help().to_string());
            for scheme in schemes.iter() {
                let url = format!("{}://", scheme.name);
                assert!(short.contains(&url), "{name} -h lacks {url}: {short}");
                let entry = words(format!("{url} {}", scheme.summary));
                assert!(long.contains(&entry), "{name} --help lacks {entry}: {long}");
            }
        }
    }

    #[test]
    fn every_subcommand_help_lists_its_exit_codes() {
        let mut cli = Cli::command();
        for (name, sub) in [
            ("demo", Sub::Demo),
            ("run", Sub::Run),
            ("elect", Sub::Elect),
            ("inspect", Sub::Inspect),
            ("advance-token", Sub::AdvanceToken),
            ("bench", Sub::Bench),
            ("chaos", Sub::Chaos),
        ] {
            let help = cli
                .find_subcommand_mut(name)
                .unwrap()
                .render_long_help()
                .to_string();
            for (exit, meaning) in exit::documented(sub) {
                assert!(help.contains(meaning), "{name}: {meaning}\n{help}");
                let _ = exit;
            }
        }
    }
}
