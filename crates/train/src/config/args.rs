//! `train`'s command line: `--config` and `--resume` beside the run's configuration,
//! whose flags are [`Config`]'s own fields; and which flags were given, so that
//! [`Config::resolve`] lets only those win over the `--config` file.

use super::Config;
use clap::parser::ValueSource;
use clap::{ArgMatches, Parser};
use std::path::PathBuf;

/// Data-parallel training with compressed gradient exchange.
///
/// `train --workers 4 ...` starts 4 worker processes on this machine. With RANK,
/// WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GRADEX_TOKEN set, it runs as one worker of a
/// multi-node job instead (see docs/train.md).
#[derive(Parser, Debug)]
// Negative numbers are values (`--lr -0.1` is then refused as a rate, not read as a flag).
#[command(name = "train", version, allow_negative_numbers = true)]
pub struct Args {
    /// TOML file with any of the keys below (flag names with '_' for '-').
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Continue the run in --out from its last checkpoint.
    #[arg(long)]
    pub resume: bool,
    #[command(flatten)]
    pub run: Config,
}

/// Whether the flag of `id` (a `Config` field's name) was given on the command line,
/// rather than left at its default.
pub fn given_on_command_line(matches: &ArgMatches) -> impl Fn(&str) -> bool + '_ {
    move |id| {
        matches
            .ids()
            .any(|i| i.as_str() == id && matches.value_source(id) == Some(ValueSource::CommandLine))
    }
}
