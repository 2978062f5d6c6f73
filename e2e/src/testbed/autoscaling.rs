//! The autoscaling chain a platform team runs, beside the testbed's control plane:
//! Prometheus scrapes the member Pods' `/metrics` (as the chart's PodMonitor does), KEDA's
//! operator turns a `ScaledObject` into an HPA and asks Prometheus for the metric, KEDA's
//! metrics server answers `external.metrics.k8s.io` through the apiserver's aggregation
//! layer, and the HPA controller in kube-controller-manager scales the `HcommGroup`
//! through its scale subresource. Every part is the real program, built from its pinned
//! Go module (`crate::controlplane::prometheus`, `crate::controlplane::keda`).
//!
//! What differs from a cluster is only where things run: processes in the root namespace
//! instead of Pods, so the `keda-metrics-apiserver` Service has no selector and one
//! EndpointSlice naming the address the apiserver itself listens on (the aggregator
//! dials endpoints: `--enable-aggregator-routing`, there being no kube-proxy), and KEDA
//! reaches Prometheus at `127.0.0.1`, not through a Service's DNS name.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::error::{Error, Result};
use super::{Testbed, stop_child};
use crate::controlplane::{KEDA_CRDS, KEDA_RBAC, free_ports, http_get, keda, prometheus};

mod hpa;
mod manifests;

pub use hpa::wait_hpa_reads;
pub use manifests::example_scaled_object;
use manifests::{aggregation_manifests, prometheus_config};

/// KEDA's namespace (its manifests' own).
pub const KEDA_NAMESPACE: &str = "keda";
/// Who KEDA's operator and metrics server act as (KEDA's manifests run both as it).
const KEDA_USER: &str = "system:serviceaccount:keda:keda-operator";
/// The metrics server's Service, which the APIService names.
const METRICS_SERVICE: &str = "keda-metrics-apiserver";
/// The aggregated API KEDA serves.
const EXTERNAL_METRICS_API: &str = "v1beta1.external.metrics.k8s.io";
/// How long the chain may take to come up (the APIService turning Available).
const START_DEADLINE: Duration = Duration::from_secs(90);
/// How often Prometheus scrapes the members: short, so the chain's lag in a test is
/// KEDA's and the HPA's, not the scrape's (a cluster scrapes every 15–30 s).
const SCRAPE_INTERVAL: &str = "1s";

/// The running chain. Dropping it unregisters the APIService (an aggregated API whose
/// server is gone fails every discovery of the cluster, which stalls namespace deletion
/// and garbage collection) and stops its processes; KEDA's CRDs, RBAC and namespace stay.
pub struct Autoscaling {
    prometheus: Option<Child>,
    keda_operator: Option<Child>,
    keda_adapter: Option<Child>,
    prometheus_addr: SocketAddr,
    /// kubectl and the admin kubeconfig, to unregister the APIService on drop.
    kubectl: (PathBuf, PathBuf),
}

impl Autoscaling {
    /// Starts Prometheus and KEDA for `bed` and waits until the apiserver serves
    /// `external.metrics.k8s.io` through KEDA. Needs namespace hosts: the aggregator
    /// must reach KEDA at a non-loopback address, which the EndpointSlice API requires.
    pub async fn start(bed: &Testbed) -> Result<Autoscaling> {
        let reach = apiserver_address(bed.control_plane().server_url())?;
        if reach.is_loopback() {
            return Err(Error::Unsupported(format!(
                "the autoscaling chain needs namespace hosts: the apiserver listens on \
                 {reach}, and an APIService's endpoints may not be loopback addresses"
            )));
        }
        let (keda_dir, prometheus_bin) = tokio::task::spawn_blocking(|| {
            Ok::<_, crate::controlplane::Error>((keda()?, prometheus()?))
        })
        .await
        .map_err(|e| Error::Unsupported(format!("building KEDA and Prometheus: {e}")))??;
        let dir = bed.dir().join("autoscaling");
        let certs = dir.join("keda-certs");
        let [
            prometheus_port,
            grpc_port,
            adapter_port,
            probe_port,
            metrics_port,
            adapter_metrics,
        ] = free_ports([
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([127, 0, 0, 1]),
            reach,
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([127, 0, 0, 1]),
        ])?;
        let prometheus_addr = SocketAddr::from(([127, 0, 0, 1], prometheus_port));
        let mut chain = Autoscaling {
            prometheus: None,
            keda_operator: None,
            keda_adapter: None,
            prometheus_addr,
            kubectl: (
                bed.control_plane().binaries().kubectl.clone(),
                bed.control_plane().kubeconfig_path().to_owned(),
            ),
        };

        // KEDA's gRPC link (operator ↔ metrics server) and the metrics server's serving
        // certificate: `ca.crt`, `tls.crt`, `tls.key` in one folder, as KEDA mounts them.
        let pki = bed.control_plane().pki();
        let pair = pki.issue(
            &certs,
            "tls",
            "keda",
            &[
                format!("DNS:{METRICS_SERVICE}.{KEDA_NAMESPACE}.svc"),
                format!("DNS:keda-operator.{KEDA_NAMESPACE}.svc"),
                "DNS:localhost".to_owned(),
                "IP:127.0.0.1".to_owned(),
                format!("IP:{reach}"),
            ],
        )?;
        std::fs::copy(&pki.ca_cert, certs.join("ca.crt")).map_err(Error::io("copy the CA"))?;

        bed.kubectl(&[
            "create",
            "namespace",
            KEDA_NAMESPACE,
            "--dry-run=client",
            "-o",
            "yaml",
        ])
        .and_then(|ns| bed.kubectl_apply(&ns))?;
        for manifests in [KEDA_CRDS, KEDA_RBAC] {
            bed.kubectl(&[
                "apply",
                "--server-side",
                "-f",
                &keda_dir.join(manifests).display().to_string(),
            ])?;
        }
        // KEDA acts as its ServiceAccount with the RBAC its release grants (the chain
        // proves those rules reach an HcommGroup's scale subresource); Prometheus, a
        // stand-in for the cluster's monitoring, as the admin.
        let keda_kubeconfig = crate::chart::kubeconfig_as(bed.control_plane(), KEDA_USER)?;
        let admin_kubeconfig = bed.control_plane().kubeconfig_path().to_owned();
        let keda_env = |cmd: &mut Command| {
            cmd.env("KUBECONFIG", &keda_kubeconfig)
                .env("POD_NAMESPACE", KEDA_NAMESPACE)
                .env("KEDA_CLUSTER_OBJECT_NAMESPACE", KEDA_NAMESPACE)
                // Every namespace (an empty list), as KEDA's default install watches.
                .env("WATCH_NAMESPACE", "");
        };
        let mut operator = Command::new(keda_dir.join("keda-operator"));
        keda_env(&mut operator);
        operator.args([
            "--leader-elect=false".to_owned(),
            format!("--cert-dir={}", certs.display()),
            format!("--metrics-service-bind-address=127.0.0.1:{grpc_port}"),
            format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            // The certificates are ours: KEDA neither makes nor patches them in.
            "--enable-cert-rotation=false".to_owned(),
            "--enable-webhook-patching=false".to_owned(),
            "--enable-apiservice-patching=false".to_owned(),
            "--zap-log-level=info".to_owned(),
        ]);
        chain.keda_operator = Some(spawn(bed, operator, "keda-operator")?);

        let mut adapter = Command::new(keda_dir.join("keda-adapter"));
        keda_env(&mut adapter);
        let kc = keda_kubeconfig.display().to_string();
        adapter.args([
            format!("--lister-kubeconfig={kc}"),
            format!("--authentication-kubeconfig={kc}"),
            format!("--authorization-kubeconfig={kc}"),
            format!("--bind-address={reach}"),
            format!("--secure-port={adapter_port}"),
            format!("--cert-dir={}", certs.display()),
            format!("--tls-cert-file={}", pair.cert.display()),
            format!("--tls-private-key-file={}", pair.key.display()),
            format!("--client-ca-file={}", certs.join("ca.crt").display()),
            format!("--metrics-service-address=127.0.0.1:{grpc_port}"),
            format!("--port={adapter_metrics}"),
        ]);
        chain.keda_adapter = Some(spawn(bed, adapter, "keda-adapter")?);

        let config = dir.join("prometheus.yml");
        std::fs::write(&config, prometheus_config(&admin_kubeconfig))
            .map_err(Error::io(format!("write {}", config.display())))?;
        let mut prometheus = Command::new(prometheus_bin);
        prometheus.args([
            format!("--config.file={}", config.display()),
            format!(
                "--storage.tsdb.path={}",
                dir.join("prometheus-data").display()
            ),
            format!("--web.listen-address={prometheus_addr}"),
        ]);
        chain.prometheus = Some(spawn(bed, prometheus, "prometheus")?);

        bed.kubectl_apply(&aggregation_manifests(
            reach,
            adapter_port,
            &std::fs::read(&pki.ca_cert).map_err(Error::io("read the CA"))?,
        ))?;
        chain.wait_ready(bed).await?;
        Ok(chain)
    }

    /// Prometheus' base URL, as a `ScaledObject`'s `serverAddress` names it.
    pub fn prometheus_url(&self) -> String {
        format!("http://{}", self.prometheus_addr)
    }

    /// The value of an instant PromQL query with a scalar or one-sample vector result;
    /// `None` when the vector is empty.
    pub async fn query(&self, promql: &str) -> Result<Option<f64>> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let body = http_get(self.prometheus_addr, &path)
            .await
            .map_err(|e| Error::Unsupported(format!("Prometheus query {promql:?}: {e}")))?;
        parse_query_value(&body)
            .map_err(|e| Error::Unsupported(format!("Prometheus query {promql:?}: {e}: {body}")))
    }

    async fn wait_ready(&mut self, bed: &Testbed) -> Result<()> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            self.ensure_running()?;
            let available = bed
                .kubectl(&[
                    "get",
                    "apiservice",
                    EXTERNAL_METRICS_API,
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
                ])
                .unwrap_or_default();
            let prometheus_up = http_get(self.prometheus_addr, "/-/ready").await.is_ok();
            if available.trim() == "True" && prometheus_up {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Timeout {
                    what: format!(
                        "the APIService {EXTERNAL_METRICS_API} Available (now {:?}) and \
                         Prometheus ready ({prometheus_up}); logs: {}",
                        available.trim(),
                        bed.dir().join("logs").display()
                    ),
                    after: START_DEADLINE,
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// An error naming the first of the chain's processes that exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        for (name, child) in [
            ("prometheus", &mut self.prometheus),
            ("keda-operator", &mut self.keda_operator),
            ("keda-adapter", &mut self.keda_adapter),
        ] {
            if let Some(c) = child
                && let Ok(Some(status)) = c.try_wait()
            {
                return Err(Error::Unsupported(format!(
                    "{name} exited ({status}); see its log in the testbed's logs folder"
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Autoscaling {
    fn drop(&mut self) {
        let (kubectl, kubeconfig) = &self.kubectl;
        let unregistered = Command::new(kubectl)
            .env("KUBECONFIG", kubeconfig)
            .args([
                "delete",
                "apiservice",
                EXTERNAL_METRICS_API,
                "--ignore-not-found",
            ])
            .args(["--timeout=30s"])
            .stdin(Stdio::null())
            .output();
        if let Ok(out) = &unregistered
            && !out.status.success()
        {
            tracing::warn!(
                stderr = %String::from_utf8_lossy(&out.stderr),
                "could not unregister {EXTERNAL_METRICS_API}"
            );
        }
        for child in [
            self.keda_operator.take(),
            self.keda_adapter.take(),
            self.prometheus.take(),
        ]
        .into_iter()
        .flatten()
        {
            stop_child(child, Duration::from_secs(5));
        }
    }
}

fn spawn(bed: &Testbed, mut cmd: Command, name: &str) -> Result<Child> {
    let log = bed.log_file(name)?;
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(Error::io(format!("{name} log")))?)
        .stderr(log)
        .spawn()
        .map_err(Error::io(format!("start {name} ({:?})", cmd.get_program())))
}

/// The host of an `https://host:port` URL.
fn apiserver_address(server: &str) -> Result<IpAddr> {
    server
        .trim_start_matches("https://")
        .rsplit_once(':')
        .and_then(|(host, _)| host.trim_matches(['[', ']']).parse().ok())
        .ok_or_else(|| Error::Unsupported(format!("no IP address in the apiserver URL {server}")))
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of a Prometheus instant-query answer (`resultType` scalar, or vector with at
/// most one sample).
fn parse_query_value(body: &str) -> std::result::Result<Option<f64>, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    if v["status"] != "success" {
        return Err(format!("status {}", v["status"]));
    }
    let data = &v["data"];
    let value = match data["resultType"].as_str() {
        Some("scalar") => &data["result"][1],
        Some("vector") => match data["result"].as_array().map(Vec::as_slice) {
            Some([]) => return Ok(None),
            Some([one]) => &one["value"][1],
            _ => return Err("more than one sample".into()),
        },
        other => return Err(format!("result type {other:?}")),
    };
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .map(Some)
        .ok_or_else(|| format!("not a number: {value}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_read_from_scalars_and_single_sample_vectors() {
        let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1.5,"6"]}}"#;
        assert_eq!(parse_query_value(scalar), Ok(Some(6.0)));
        let vector = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"2.5"]}]}}"#;
        assert_eq!(parse_query_value(vector), Ok(Some(2.5)));
        let empty = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(parse_query_value(empty), Ok(None));
        assert!(parse_query_value(r#"{"status":"error"}"#).is_err());
    }

    #[test]
    fn promql_is_percent_encoded() {
        assert_eq!(
            percent_encode(r#"sum(x{group="decode"})"#),
            "sum%28x%7Bgroup%3D%22decode%22%7D%29"
        );
    }

    #[test]
    fn the_apiserver_address_is_read_from_its_url() {
        assert_eq!(
            apiserver_address("https://198.19.3.1:6443").unwrap(),
            IpAddr::from([198, 19, 3, 1])
        );
        assert!(apiserver_address("https://localhost:6443").is_err());
    }
}
