//! Operator settings: the command line ([`Args`], clap) with environment variables as
//! fallback, resolved into [`Config`].
//!
//! Every flag has an `HCOMM_*` variable (`--metrics-addr` / `HCOMM_METRICS_ADDR`, ...);
//! `hcomm-operator --help` lists them with their defaults. Beyond those, the lease
//! namespace falls back to `POD_NAMESPACE` and the identity to `POD_NAME`, then
//! `HOSTNAME`, then `hcomm-operator-<pid>`, which is what the chart's Deployment gives.
//! The API server comes from `KUBECONFIG` or the in-cluster service account, as
//! `kube::Config::infer` finds it.

use std::net::SocketAddr;

use clap::Parser;
use k8s_openapi::jiff::SignedDuration;

use crate::links::LinkPolicy;
use crate::pod_builder::LocalApiVolume;
use crate::telemetry::LogFormat;

/// Operator settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_addr: SocketAddr,
    /// Watch only this namespace (else all).
    pub namespace: Option<String>,
    /// Namespace of the leader Lease.
    pub lease_namespace: String,
    /// Name of the leader Lease.
    pub lease_name: String,
    /// This replica's identity in the Lease.
    pub identity: String,
    /// How link tests are judged for the `LinksHealthy` condition.
    pub links: LinkPolicy,
    /// How log lines are written.
    pub log_format: LogFormat,
    /// How member Pods get their local-API directory.
    pub local_api_volume: LocalApiVolume,
}

/// The `hcomm-operator` command line.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "hcomm-operator",
    version,
    about = "Kubernetes operator that reconciles HcommGroup resources",
    long_about = "Kubernetes operator that reconciles HcommGroup resources: plans members, ranks \
                  and epochs, owns member Pods, drives scale-out and drain. The API server comes \
                  from KUBECONFIG or the in-cluster service account.",
    args_override_self = true
)]
pub struct Args {
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, env = "HCOMM_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Watch only this namespace [default: all namespaces].
    #[arg(long, env = "HCOMM_NAMESPACE", value_name = "NS")]
    pub namespace: Option<String>,
    /// Namespace of the leader Lease [default: $POD_NAMESPACE, else `default`].
    #[arg(long, env = "HCOMM_LEASE_NAMESPACE", value_name = "NS")]
    pub lease_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(long, env = "HCOMM_LEASE_NAME", default_value = "hcomm-operator")]
    pub lease_name: String,
    /// This replica's identity in the Lease [default: $POD_NAME, else $HOSTNAME, else
    /// hcomm-operator-PID].
    #[arg(long, env = "HCOMM_IDENTITY", value_name = "ID")]
    pub identity: Option<String>,
    /// Link tests older than this count as unknown.
    #[arg(long, env = "HCOMM_LINK_STALE_SECONDS", value_name = "S",
          default_value_t = LinkPolicy::default().stale_after.as_secs(),
          value_parser = clap::value_parser!(i64).range(1..))]
    pub link_stale_seconds: i64,
    /// Probes slower than this degrade the link.
    #[arg(long, env = "HCOMM_LINK_SLOW_MILLIS", value_name = "MS",
          default_value_t = LinkPolicy::default().slow_after.as_millis() as i64,
          value_parser = clap::value_parser!(i64).range(1..))]
    pub link_slow_millis: i64,
    /// Log line format: text for people, json for log pipelines (span fields included).
    #[arg(long, value_enum, env = "HCOMM_LOG_FORMAT", default_value_t)]
    pub log_format: LogFormat,
    /// How member Pods get their agent's local-API socket: `csi` (the agent's CSI driver
    /// `local-api.hcomm.io`; member Pods pass Pod Security baseline) or `host-path` (for
    /// clusters without it; baseline refuses such Pods).
    #[arg(long, value_enum, env = "HCOMM_LOCAL_API_VOLUME", default_value_t)]
    pub local_api_volume: LocalApiVolume,
}

impl Config {
    /// Resolves parsed flags; `env` looks up the fallbacks that are not a flag's own
    /// variable (`POD_NAMESPACE`, `POD_NAME`, `HOSTNAME`). Empty values count as unset,
    /// so `--namespace=` watches all namespaces.
    pub fn from_args(args: Args, env: impl Fn(&str) -> Option<String>) -> Self {
        let set = |v: Option<String>| v.filter(|v| !v.is_empty());
        let env = |k: &str| set(env(k));
        Config {
            metrics_addr: args.metrics_addr,
            namespace: set(args.namespace),
            lease_namespace: set(args.lease_namespace)
                .or_else(|| env("POD_NAMESPACE"))
                .unwrap_or_else(|| "default".into()),
            lease_name: set(Some(args.lease_name)).unwrap_or_else(|| "hcomm-operator".into()),
            identity: set(args.identity)
                .or_else(|| env("POD_NAME"))
                .or_else(|| env("HOSTNAME"))
                .unwrap_or_else(|| format!("hcomm-operator-{}", std::process::id())),
            links: LinkPolicy {
                stale_after: SignedDuration::from_secs(args.link_stale_seconds),
                slow_after: SignedDuration::from_millis(args.link_slow_millis),
            },
            log_format: args.log_format,
            local_api_volume: args.local_api_volume,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(list: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(std::iter::once("hcomm-operator").chain(list.iter().copied()))
    }

    fn config(list: &[&str], env: impl Fn(&str) -> Option<String>) -> Config {
        Config::from_args(parse(list).unwrap(), env)
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn the_default_port_is_the_charts() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/hcomm/values.yaml");
        let text = std::fs::read_to_string(path).unwrap();
        let values: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        let port = values["operator"]["metricsPort"].as_u64();
        assert_eq!(
            Some(u64::from(config(&[], |_| None).metrics_addr.port())),
            port
        );
    }

    #[test]
    fn the_charts_arguments_parse() {
        // operator-deployment.yaml, as `helm template` renders it with a watch namespace.
        let c = config(
            &[
                "--metrics-addr=0.0.0.0:8080",
                "--lease-namespace=hcomm-system",
                "--identity=hcomm-operator-7d9f-abcde",
                "--namespace=ai",
            ],
            |_| None,
        );
        assert_eq!(c.metrics_addr, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(c.lease_namespace, "hcomm-system");
        assert_eq!(c.identity, "hcomm-operator-7d9f-abcde");
        assert_eq!(c.namespace.as_deref(), Some("ai"));
        assert_eq!(c.lease_name, "hcomm-operator");
    }

    #[test]
    fn the_testbeds_arguments_parse() {
        let c = config(
            &[
                "--metrics-addr",
                "127.0.0.1:0",
                "--identity",
                "testbed",
                "--lease-namespace",
                "hcomm-system",
                "--lease-name",
                "hcomm-operator",
            ],
            |_| None,
        );
        assert_eq!(c.metrics_addr.port(), 0);
        assert_eq!((c.identity.as_str(), c.namespace), ("testbed", None));
    }

    #[test]
    fn flags_win_over_the_pod_environment_and_defaults_fill_the_rest() {
        let env = |k: &str| match k {
            "POD_NAMESPACE" => Some("pod-ns".to_owned()),
            "POD_NAME" => Some("pod-name".to_owned()),
            _ => None,
        };
        let c = config(&["--metrics-addr=127.0.0.1:9", "--identity", "me"], env);
        assert_eq!(c.metrics_addr.port(), 9);
        assert_eq!(c.identity, "me");
        assert_eq!(c.namespace, None);
        assert_eq!(c.lease_namespace, "pod-ns");
        assert_eq!(c.lease_name, "hcomm-operator");
        let c = config(&["--namespace="], |k| {
            (k == "HOSTNAME").then(|| "host".to_owned())
        });
        assert_eq!((c.namespace, c.identity.as_str()), (None, "host"));
        assert_eq!(c.lease_namespace, "default");
    }

    #[test]
    fn every_flag_falls_back_to_its_hcomm_variable() {
        let command = Args::command();
        for (flag, var) in [
            ("metrics-addr", "HCOMM_METRICS_ADDR"),
            ("namespace", "HCOMM_NAMESPACE"),
            ("lease-namespace", "HCOMM_LEASE_NAMESPACE"),
            ("lease-name", "HCOMM_LEASE_NAME"),
            ("identity", "HCOMM_IDENTITY"),
            ("link-stale-seconds", "HCOMM_LINK_STALE_SECONDS"),
            ("link-slow-millis", "HCOMM_LINK_SLOW_MILLIS"),
            ("log-format", "HCOMM_LOG_FORMAT"),
        ] {
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == Some(flag))
                .unwrap_or_else(|| panic!("--{flag} missing"));
            assert_eq!(arg.get_env().and_then(|v| v.to_str()), Some(var), "{flag}");
        }
    }

    #[test]
    fn link_thresholds_default_to_the_policy_and_must_be_positive() {
        let c = config(
            &["--link-stale-seconds=60", "--link-slow-millis", "5"],
            |_| None,
        );
        assert_eq!(c.links.stale_after, SignedDuration::from_secs(60));
        assert_eq!(c.links.slow_after, SignedDuration::from_millis(5));
        assert_eq!(config(&[], |_| None).links, LinkPolicy::default());
        for bad in [["--link-slow-millis", "0"], ["--link-stale-seconds", "x"]] {
            let e = parse(&bad).unwrap_err().to_string();
            assert!(e.contains(bad[0]), "{e}");
        }
    }

    #[test]
    fn unknown_flags_are_refused_by_name() {
        let e = parse(&["--bogus", "1"]).unwrap_err().to_string();
        assert!(e.contains("--bogus"), "{e}");
    }

    #[test]
    fn a_repeated_flag_takes_the_last_value() {
        let c = config(&["--identity=a", "--identity=b"], |_| None);
        assert_eq!(c.identity, "b");
    }

    #[test]
    fn help_renders_every_flag() {
        let help = Args::command().render_long_help().to_string();
        for flag in ["--metrics-addr", "--lease-namespace", "--link-slow-millis"] {
            assert!(help.contains(flag), "{help}");
        }
    }
}
