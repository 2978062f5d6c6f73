//! The command line of `cargo scaleout-bench` (clap): what to measure, at which link
//! rates, and where the report goes. Values are checked here, so the benchmark itself
//! never starts on a matrix it cannot run.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// How the group grows (`spec.scaling.strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Strategy {
    Incremental,
    Rebuild,
    /// Incremental with `scaling.standby: k`: the k joiners are warm standby members
    /// before the scale request, which then only opens their readiness gates.
    Standby,
}

impl Strategy {
    /// `incremental`/`inc` or `rebuild`/`reb`, any case.
    pub fn parse(s: &str) -> Result<Strategy, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "incremental" | "inc" => Ok(Strategy::Incremental),
            "rebuild" | "reb" => Ok(Strategy::Rebuild),
            "standby" | "sby" => Ok(Strategy::Standby),
            other => Err(format!(
                "unknown strategy {other:?} (incremental, rebuild, standby)"
            )),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Incremental => "incremental",
            Strategy::Rebuild => "rebuild",
            Strategy::Standby => "standby",
        }
    }
    /// The CRD's spelling.
    pub fn crd(self) -> &'static str {
        match self {
            Strategy::Incremental | Strategy::Standby => "Incremental",
            Strategy::Rebuild => "Rebuild",
        }
    }
    /// The report's word: the CRD's strategy, or what the standby case adds to it.
    pub fn label(self) -> &'static str {
        match self {
            Strategy::Standby => "Incremental, from a warm standby",
            s => s.crd(),
        }
    }
    /// The group-name part.
    pub fn short(self) -> &'static str {
        match self {
            Strategy::Incremental => "inc",
            Strategy::Rebuild => "reb",
            Strategy::Standby => "sby",
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The raw link measurement between two hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LinkCheck {
    /// iperf3 if installed, else the built-in TCP blast.
    Auto,
    Iperf3,
    /// A built-in TCP blast.
    Blast,
    /// No raw link measurement.
    None,
}

/// `cargo scaleout-bench [options]`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "scaleout-bench",
    bin_name = "cargo scaleout-bench",
    version,
    about = "Scale-out time (scale request → all members Ready) for k joiners, Incremental vs \
             Rebuild, against the floor weights ÷ link rate. Needs root.",
    long_about = "Scale-out time (scale request → all members Ready) for k joiners, Incremental \
                  vs Rebuild, against the floor weights ÷ link rate, on simulated hosts (network \
                  namespaces, tc htb on every data link) with the real control plane, operator \
                  and agents. Needs root.",
    args_override_self = true
)]
pub struct Args {
    /// Weights set size in MiB.
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub size_mib: u64,
    /// Data link rate per host and direction; with several, the whole matrix runs at
    /// each, the links reshaped in between.
    #[arg(long = "rate-mbit", value_name = "LIST", value_delimiter = ',',
          default_values_t = [2000], value_parser = rate)]
    pub rates: Vec<u32>,
    /// Joiner counts (1 to 16); hosts = 1 + the largest.
    #[arg(long, value_name = "LIST", value_delimiter = ',', default_values_t = [1, 2, 4],
          value_parser = joiners)]
    pub joiners: Vec<usize>,
    /// incremental, rebuild, standby (incremental served from k warm standby members),
    /// any of them.
    #[arg(long, value_name = "LIST", value_delimiter = ',',
          default_values_t = [Strategy::Incremental, Strategy::Rebuild],
          value_parser = Strategy::parse)]
    pub strategies: Vec<Strategy>,
    /// Runs of each (strategy, joiners) pair; the targets are judged on their median.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Rewrite the scaleout section of FILE (e.g. docs/benchmarks.md).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Raw link measurement between two hosts.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = LinkCheck::Auto)]
    pub link_check: LinkCheck,
    /// Limit of every wait, in seconds.
    #[arg(long = "timeout-secs", value_name = "S", default_value_t = 300)]
    pub timeout_secs: u64,
    /// The groups' comm.connectTimeoutSeconds (1 to 600). The agents give a domain's
    /// initialisation twice that; with Rebuild, members whose weights are already local
    /// wait in Joining for the ones still syncing, so a sync longer than that fails the
    /// join and rebuilds again.
    #[arg(long = "connect-timeout-secs", value_name = "S", default_value_t = 120,
          value_parser = clap::value_parser!(u32).range(1..=600))]
    pub connect_timeout_s: u32,
    /// Keep each run's weights (source and host stores) until the end.
    #[arg(long)]
    pub keep_weights: bool,
    /// Write each run's member timeline (old and new members, seconds since the scale
    /// request) as an SVG chart into DIR.
    #[arg(long, value_name = "DIR")]
    pub timeline_svg: Option<PathBuf>,
    /// Do not build agent/operator/worker/router first (when run by cargo).
    #[arg(long)]
    pub no_build: bool,
}

fn rate(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(r) if r > 0 => Ok(r),
        _ => Err(format!("{s:?}: comma-separated positive numbers")),
    }
}

fn joiners(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(k) if (1..=16).contains(&k) => Ok(k),
        _ => Err(format!(
            "{s:?}: comma-separated numbers, each between 1 and 16"
        )),
    }
}

impl Args {
    /// Parses `argv` (without the program name): joiner counts and strategies sorted and
    /// without repeats, as the matrix runs them.
    pub fn parse_from_argv(argv: &[String]) -> Result<Args, clap::Error> {
        let mut a = Args::try_parse_from(
            std::iter::once("scaleout-bench").chain(argv.iter().map(String::as_str)),
        )?;
        a.joiners.sort_unstable();
        a.joiners.dedup();
        a.strategies.sort_unstable();
        a.strategies.dedup();
        Ok(a)
    }

    /// Build the programs first (not with `--no-build`).
    pub fn build(&self) -> bool {
        !self.no_build
    }

    /// The limit of every wait.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs)
    }

    /// Hosts the testbed needs: the first member's and one per joiner.
    pub fn hosts(&self) -> usize {
        1 + self.joiners.iter().max().copied().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(line: &str) -> Result<Args, clap::Error> {
        let argv: Vec<String> = line.split_whitespace().map(String::from).collect();
        Args::parse_from_argv(&argv)
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_documented_matrix() {
        let a = parse("").unwrap();
        assert_eq!(a.size_mib, 1024);
        assert_eq!(a.rates, [2000]);
        assert_eq!(a.joiners, [1, 2, 4]);
        assert_eq!(a.strategies, [Strategy::Incremental, Strategy::Rebuild]);
        assert_eq!(a.link_check, LinkCheck::Auto);
        assert_eq!(a.timeout(), Duration::from_secs(300));
        assert_eq!(a.connect_timeout_s, 120);
        assert!(a.build() && !a.keep_weights && a.output.is_none());
        assert_eq!(a.hosts(), 5);
    }

    #[test]
    fn the_documented_commands_parse() {
        // docs/benchmarks.md
        let a = parse("--no-build --size-mib 1024 --rate-mbit 2000,500 --joiners 1,2,4 --output docs/benchmarks.md").unwrap();
        assert_eq!(a.rates, [2000, 500]);
        assert!(!a.build());
        assert_eq!(a.output, Some(PathBuf::from("docs/benchmarks.md")));
        let a = parse("--size-mib 1024 --rate-mbit 500 --joiners 2,4 --strategies rebuild --connect-timeout-secs 10").unwrap();
        assert_eq!(a.strategies, [Strategy::Rebuild]);
        assert_eq!((a.connect_timeout_s, a.hosts()), (10, 5));
    }

    #[test]
    fn lists_are_sorted_and_deduplicated_and_strategies_take_short_names() {
        let a = parse(
            "--joiners 4,1,4,2 --strategies REB,inc,rebuild --link-check none --keep-weights",
        )
        .unwrap();
        assert_eq!(a.joiners, [1, 2, 4]);
        assert_eq!(a.strategies, [Strategy::Incremental, Strategy::Rebuild]);
        assert_eq!(a.link_check, LinkCheck::None);
        assert!(a.keep_weights);
    }

    #[test]
    fn out_of_range_values_are_refused_naming_the_flag() {
        for (line, flag) in [
            ("--size-mib 0", "--size-mib"),
            ("--rate-mbit 2000,0", "--rate-mbit"),
            ("--rate-mbit x", "--rate-mbit"),
            ("--joiners 17", "--joiners"),
            ("--joiners 0", "--joiners"),
            ("--strategies fast", "--strategies"),
            ("--connect-timeout-secs 0", "--connect-timeout-secs"),
            ("--connect-timeout-secs 601", "--connect-timeout-secs"),
            ("--link-check ping", "--link-check"),
            ("--bogus", "--bogus"),
        ] {
            let e = parse(line).unwrap_err().to_string();
            assert!(e.contains(flag), "{line}: {e}");
        }
    }

    #[test]
    fn help_lists_every_option() {
        let help = Args::command().render_long_help().to_string();
        for flag in [
            "--size-mib",
            "--rate-mbit",
            "--joiners",
            "--strategies",
            "--output",
            "--link-check",
            "--timeout-secs",
            "--connect-timeout-secs",
            "--keep-weights",
            "--no-build",
        ] {
            assert!(help.contains(flag), "{flag} missing:\n{help}");
        }
    }
}
