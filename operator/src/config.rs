//! Operator settings from command-line flags, with environment variables as fallback.
//!
//! `--metrics-addr` / `HCOMM_METRICS_ADDR` (default `0.0.0.0:8080`), `--namespace` /
//! `HCOMM_NAMESPACE` (default: all namespaces), `--lease-namespace` / `HCOMM_LEASE_NAMESPACE`
//! (default `POD_NAMESPACE`, else `default`), `--lease-name` / `HCOMM_LEASE_NAME` (default
//! `hcomm-operator`), `--identity` / `HCOMM_IDENTITY` (default `POD_NAME`, else
//! `HOSTNAME`, else `hcomm-operator-<pid>`), `--link-stale-seconds` /
//! `HCOMM_LINK_STALE_SECONDS` (default 180: older link tests count as unknown),
//! `--link-slow-millis` / `HCOMM_LINK_SLOW_MILLIS` (default 20: slower probes degrade the
//! link). The API server comes from `KUBECONFIG` or the in-cluster service account, as
//! `kube::Config::infer` finds it.

use std::net::SocketAddr;

use k8s_openapi::jiff::SignedDuration;

use crate::error::{Error, Result};
use crate::links::LinkPolicy;

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
}

const USAGE: &str = "usage: hcomm-operator [--metrics-addr ADDR] [--namespace NS] \
[--lease-namespace NS] [--lease-name NAME] [--identity ID] [--link-stale-seconds S] \
[--link-slow-millis MS]";

impl Config {
    /// Parses `args` (without the program name); `env` looks up environment variables.
    pub fn parse(
        args: impl IntoIterator<Item = String>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self> {
        let mut flags: Vec<(String, String)> = Vec::new();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            if arg == "--help" || arg == "-h" {
                return Err(Error::Config(USAGE.into()));
            }
            let Some(flag) = arg.strip_prefix("--") else {
                return Err(Error::Config(format!(
                    "unexpected argument {arg:?}; {USAGE}"
                )));
            };
            let (key, value) = match flag.split_once('=') {
                Some((k, v)) => (k.to_owned(), v.to_owned()),
                None => {
                    let value = args
                        .next()
                        .ok_or_else(|| Error::Config(format!("--{flag} needs a value")))?;
                    (flag.to_owned(), value)
                }
            };
            flags.push((key, value));
        }
        let get = |flag: &str, var: &str| {
            flags
                .iter()
                .rev()
                .find(|(k, _)| k == flag)
                .map(|(_, v)| v.clone())
                .or_else(|| env(var))
                .filter(|v| !v.is_empty())
        };
        for (key, _) in &flags {
            if ![
                "metrics-addr",
                "namespace",
                "lease-namespace",
                "lease-name",
                "identity",
                "link-stale-seconds",
                "link-slow-millis",
            ]
            .contains(&key.as_str())
            {
                return Err(Error::Config(format!("unknown flag --{key}; {USAGE}")));
            }
        }
        let metrics = get("metrics-addr", "HCOMM_METRICS_ADDR").unwrap_or("0.0.0.0:8080".into());
        let metrics_addr = metrics
            .parse()
            .map_err(|e| Error::Config(format!("--metrics-addr {metrics:?}: {e}")))?;
        let positive = |flag: &str, var: &str, default: i64| -> Result<i64> {
            match get(flag, var) {
                None => Ok(default),
                Some(v) => v.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                    Error::Config(format!("--{flag} {v:?}: expected a positive integer"))
                }),
            }
        };
        let defaults = LinkPolicy::default();
        let links = LinkPolicy {
            stale_after: SignedDuration::from_secs(positive(
                "link-stale-seconds",
                "HCOMM_LINK_STALE_SECONDS",
                defaults.stale_after.as_secs(),
            )?),
            slow_after: SignedDuration::from_millis(positive(
                "link-slow-millis",
                "HCOMM_LINK_SLOW_MILLIS",
                defaults.slow_after.as_millis() as i64,
            )?),
        };
        Ok(Self {
            links,
            metrics_addr,
            namespace: get("namespace", "HCOMM_NAMESPACE"),
            lease_namespace: get("lease-namespace", "HCOMM_LEASE_NAMESPACE")
                .or_else(|| env("POD_NAMESPACE"))
                .unwrap_or_else(|| "default".into()),
            lease_name: get("lease-name", "HCOMM_LEASE_NAME")
                .unwrap_or_else(|| "hcomm-operator".into()),
            identity: get("identity", "HCOMM_IDENTITY")
                .or_else(|| env("POD_NAME"))
                .or_else(|| env("HOSTNAME"))
                .unwrap_or_else(|| format!("hcomm-operator-{}", std::process::id())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn flags_win_over_environment_and_defaults_fill_the_rest() {
        let env = |k: &str| (k == "HCOMM_LEASE_NAME").then(|| "from-env".to_owned());
        let config = Config::parse(
            args(&[
                "--metrics-addr=127.0.0.1:9",
                "--identity",
                "me",
                "--namespace",
                "ns",
            ]),
            env,
        )
        .unwrap();
        assert_eq!(config.metrics_addr.port(), 9);
        assert_eq!(config.identity, "me");
        assert_eq!(config.namespace.as_deref(), Some("ns"));
        assert_eq!(config.lease_name, "from-env");
        assert_eq!(config.lease_namespace, "default");
    }

    #[test]
    fn link_thresholds_come_from_flags_or_environment_and_must_be_positive() {
        let env = |k: &str| (k == "HCOMM_LINK_SLOW_MILLIS").then(|| "5".to_owned());
        let config = Config::parse(args(&["--link-stale-seconds=60"]), env).unwrap();
        assert_eq!(config.links.stale_after, SignedDuration::from_secs(60));
        assert_eq!(config.links.slow_after, SignedDuration::from_millis(5));
        let defaults = Config::parse(args(&[]), |_| None).unwrap();
        assert_eq!(defaults.links, LinkPolicy::default());
        assert!(Config::parse(args(&["--link-slow-millis", "0"]), |_| None).is_err());
        assert!(Config::parse(args(&["--link-stale-seconds", "x"]), |_| None).is_err());
    }

    #[test]
    fn unknown_flags_are_refused() {
        assert!(Config::parse(args(&["--bogus", "1"]), |_| None).is_err());
    }
}
