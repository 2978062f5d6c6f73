//! `--log-format text|json` for the agent and the reference worker and router (which use
//! this crate): one line per event on stderr, as text for people or as JSON for log
//! pipelines. JSON lines carry the current span and the list of spans with their fields
//! (the member span's `group`, `pod`, `epoch` and `rank`), so a collector can filter by
//! group or epoch without parsing messages.

use clap::{Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum LogFormat {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object per line, with the span fields.
    Json,
}

/// The `--log-format` flag (global: accepted before or after a subcommand).
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct LogArgs {
    /// Log line format: text for people, json for log pipelines (span fields included).
    #[arg(
        long,
        value_enum,
        env = "HCOMM_LOG_FORMAT",
        default_value_t,
        global = true
    )]
    pub log_format: LogFormat,
}

/// Installs the global subscriber: `RUST_LOG`, else `default_filter`, in `format`, on
/// stderr.
pub fn init(format: LogFormat, default_filter: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        log: LogArgs,
    }

    #[test]
    fn the_format_defaults_to_text_and_refuses_unknown_names() {
        let parse =
            |args: &[&str]| Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()));
        assert_eq!(parse(&[]).unwrap().log.log_format, LogFormat::Text);
        assert_eq!(
            parse(&["--log-format", "json"]).unwrap().log.log_format,
            LogFormat::Json
        );
        let error = parse(&["--log-format=xml"]).unwrap_err().to_string();
        assert!(error.contains("xml"), "{error}");
    }
}
