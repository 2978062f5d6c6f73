//! `--log-format text|json`: the operator's log lines on stdout, as text for people or as
//! one JSON object per line for log pipelines. JSON lines carry the current span and the
//! list of spans with their fields — the reconcile span's `namespace`, `group` and `epoch`
//! — so a collector can filter by group or epoch without parsing messages.

use clap::ValueEnum;
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

/// Installs the global subscriber: `RUST_LOG`, else `info,kube=warn`, in `format`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,kube=warn".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .init(),
    }
}
