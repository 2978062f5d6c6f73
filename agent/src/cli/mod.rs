//! The `hcomm-agent` command line (clap): three subcommands, each in its own module, that
//! turn flags into what the library runs — [`run::RunArgs`] into the
//! [`AgentConfig`](crate::config::AgentConfig), [`diagnose::DiagnoseCli`] into
//! [`DiagnoseArgs`](crate::diagnose::DiagnoseArgs), [`weights::WeightsCommand`] into the
//! offline weights tools. `hcomm-agent <command> --help` documents every flag; the chart
//! (`charts/hcomm/templates/agent-daemonset.yaml`) and the e2e testbed pass them.
//!
//! Sizes take units (`4MiB`, `1GB`, see [`parse_size`]). A repeated flag takes its last
//! value, except the ones that collect (`--allowed-uid`, `--log-path`).

pub mod diagnose;
pub mod log_format;
pub mod run;
pub mod secret;
pub mod weights;

use clap::{Parser, Subcommand};

pub use secret::CHART_SECRET_PATH;

/// The whole command line.
#[derive(Debug, Parser)]
#[command(
    name = "hcomm-agent",
    version,
    about = "hcomm node agent: inventory, NIC and link checks, weight sync, drain, diagnose",
    propagate_version = true,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: log_format::LogArgs,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the node agent (the chart's DaemonSet runs this).
    Run(Box<run::RunArgs>),
    /// Check this node's NICs, links, devices and member state, and print a table.
    Diagnose(Box<diagnose::DiagnoseCli>),
    /// Offline tools around weights sets.
    #[command(subcommand)]
    Weights(weights::WeightsCommand),
}

/// Parses a byte count: digits with an optional unit `B`, `KiB`, `MiB`, `GiB`, `TiB`
/// (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000), e.g. `256MiB` (pure).
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// [`parse_size`] as a clap value parser.
fn size(s: &str) -> Result<u64, String> {
    parse_size(s).ok_or_else(|| format!("{s:?} is not a byte count (e.g. 4194304, 4MiB, 1GB)"))
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Parses `line` (split on whitespace) after the program name.
    pub(super) fn parse(line: &str) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("hcomm-agent").chain(line.split_whitespace()))
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_renders_its_help_and_answers_version() {
        let mut cli = Cli::command();
        let top = cli.render_long_help().to_string();
        for sub in ["run", "diagnose", "weights"] {
            assert!(top.contains(sub), "{sub} missing:\n{top}");
        }
        for path in [
            "run",
            "diagnose",
            "weights",
            "weights manifest",
            "weights generate",
        ] {
            for flag in ["--help", "--version"] {
                let e = parse(&format!("{path} {flag}")).unwrap_err();
                let kind = if flag == "--help" {
                    clap::error::ErrorKind::DisplayHelp
                } else {
                    clap::error::ErrorKind::DisplayVersion
                };
                assert_eq!(e.kind(), kind, "{path} {flag}");
                assert_eq!(e.exit_code(), 0, "{path} {flag}");
            }
        }
    }

    #[test]
    fn unknown_commands_and_no_command_are_errors() {
        let e = parse("explode").unwrap_err();
        assert!(e.to_string().contains("explode"), "{e}");
        assert_eq!(
            parse("").unwrap_err().kind(),
            clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("256MiB"), Some(256 << 20));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("1GB"), Some(1_000_000_000));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        for bad in ["", "MiB", "1.5GiB", "-1", "12XB", "99999999999TiB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
