//! From EndpointSlices (or, where those cannot hold the Pods' addresses, the Pods
//! themselves) to the endpoints a router may send to: the pure part of following a
//! Service, tested on its own.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;

/// The label that ties an EndpointSlice to its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The port name the router prefers (the example pools name their port `http`).
pub const PORT_NAME: &str = "http";

/// One ready backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Endpoint {
    /// IP address (or FQDN for an `FQDN` slice).
    pub address: String,
    pub port: u16,
    /// The backing Pod (`targetRef` of kind Pod), if the slice names it.
    pub pod: Option<String>,
}

impl Endpoint {
    /// `host:port` for a URL, bracketing IPv6 addresses.
    pub fn authority(&self) -> String {
        if self.address.contains(':') {
            format!("[{}]:{}", self.address, self.port)
        } else {
            format!("{}:{}", self.address, self.port)
        }
    }

    /// A short name for logs and records: the Pod, else the authority.
    pub fn label(&self) -> String {
        self.pod.clone().unwrap_or_else(|| self.authority())
    }
}

/// The ready endpoints of `slices`, sorted and without duplicates.
///
/// An endpoint counts when `conditions.ready` is true. Kubernetes documents an unset
/// `ready` as "interpret as true" (kube-proxy does), so unset counts as ready too; the
/// EndpointSlice controller always sets it, from the Pod's Ready condition — which for an
/// hcomm member includes the `hcomm.io/member-ready` readiness gate. Per the API, the
/// first address of an endpoint is the one consumers use. The port is the slice's port
/// named `http`, else its first; a slice without a usable port contributes nothing.
pub fn ready_endpoints(slices: &[EndpointSlice]) -> Vec<Endpoint> {
    let mut out = BTreeSet::new();
    for slice in slices {
        let ports = slice.ports.as_deref().unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some(PORT_NAME))
            .or_else(|| ports.first())
            .and_then(|p| p.port)
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p != 0);
        let Some(port) = port else {
            continue;
        };
        for ep in &slice.endpoints {
            let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
            let Some(address) = ep.addresses.first() else {
                continue;
            };
            if !ready {
                continue;
            }
            let pod = ep
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref().is_none_or(|k| k == "Pod"))
                .and_then(|r| r.name.clone());
            out.insert(Endpoint {
                address: address.clone(),
                port,
                pod,
            });
        }
    }
    out.into_iter().collect()
}

/// The ready endpoints among a Service's Pods, sorted and without duplicates: for
/// clusters (or test hosts) whose Pod addresses the EndpointSlice API refuses — it rejects
/// loopback addresses, which is what hosts simulated on `127.x` without root have.
///
/// A Pod counts when it is not being deleted, has an IP and its `Ready` condition is True
/// — the same readiness (with every readiness gate) that decides `conditions.ready` in a
/// slice. The port is `target`: a number, or the name of a container port.
pub fn ready_pod_endpoints(pods: &[Pod], target: &IntOrString) -> Vec<Endpoint> {
    let mut out = BTreeSet::new();
    for pod in pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        let Some(address) = status.and_then(|s| s.pod_ip.clone()) else {
            continue;
        };
        let port = match target {
            IntOrString::Int(n) => u16::try_from(*n).ok(),
            IntOrString::String(name) => pod
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))
                .and_then(|p| u16::try_from(p.container_port).ok()),
        };
        let Some(port) = port.filter(|p| *p != 0) else {
            continue;
        };
        if ready {
            out.insert(Endpoint {
                address,
                port,
                pod: pod.metadata.name.clone(),
            });
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ready_pods_count_with_their_named_port_and_deleted_or_unready_ones_do_not() {
        let pod = |name: &str, ip: Option<&str>, ready: &str, deleting: bool| -> Pod {
            let mut v = json!({
                "metadata": {"name": name},
                "spec": {"containers": [{"name": "worker",
                    "ports": [{"name": "metrics", "containerPort": 9090},
                              {"name": "http", "containerPort": 8080}]}]},
                "status": {"conditions": [{"type": "Ready", "status": ready}]}
            });
            if let Some(ip) = ip {
                v["status"]["podIP"] = json!(ip);
            }
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(v).unwrap()
        };
        let pods = [
            pod("d-1", Some("127.100.0.3"), "True", false),
            pod("d-0", Some("127.100.0.2"), "True", false),
            pod("d-2", Some("127.100.0.4"), "False", false),
            pod("d-3", Some("127.100.0.5"), "True", true),
            pod("d-4", None, "True", false),
        ];
        let named = ready_pod_endpoints(&pods, &IntOrString::String("http".into()));
        assert_eq!(
            named,
            vec![
                Endpoint {
                    address: "127.100.0.2".into(),
                    port: 8080,
                    pod: Some("d-0".into())
                },
                Endpoint {
                    address: "127.100.0.3".into(),
                    port: 8080,
                    pod: Some("d-1".into())
                },
            ]
        );
        let numbered = ready_pod_endpoints(&pods, &IntOrString::Int(9000));
        assert_eq!(numbered.len(), 2);
        assert!(numbered.iter().all(|e| e.port == 9000));
        assert!(ready_pod_endpoints(&pods, &IntOrString::String("grpc".into())).is_empty());
    }

    fn slice(v: serde_json::Value) -> EndpointSlice {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn only_ready_endpoints_count_with_the_http_port_and_their_pod() {
        let a = slice(json!({
            "metadata": {"name": "decode-abc", "labels": {SERVICE_NAME_LABEL: "decode"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9090}, {"name": "http", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true},
                 "targetRef": {"kind": "Pod", "name": "decode-1", "namespace": "default"}},
                {"addresses": ["10.0.0.1"], "conditions": {"ready": true, "serving": true},
                 "targetRef": {"kind": "Pod", "name": "decode-0"}},
                {"addresses": ["10.0.0.3"], "conditions": {"ready": false, "serving": true, "terminating": true},
                 "targetRef": {"kind": "Pod", "name": "decode-2"}},
                {"addresses": [], "conditions": {"ready": true}}
            ]
        }));
        let b = slice(json!({
            "metadata": {"name": "decode-def"},
            "addressType": "IPv6",
            "ports": [{"name": "grpc", "port": 9000}],
            "endpoints": [{"addresses": ["fd00::4"], "conditions": {}}]
        }));
        let c = slice(json!({
            "metadata": {"name": "decode-noport"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.9"], "conditions": {"ready": true}}]
        }));
        let dup = a.clone();
        let eps = ready_endpoints(&[a, b, c, dup]);
        assert_eq!(
            eps,
            vec![
                Endpoint {
                    address: "10.0.0.1".into(),
                    port: 8080,
                    pod: Some("decode-0".into())
                },
                Endpoint {
                    address: "10.0.0.2".into(),
                    port: 8080,
                    pod: Some("decode-1".into())
                },
                Endpoint {
                    address: "fd00::4".into(),
                    port: 9000,
                    pod: None
                },
            ]
        );
        assert_eq!(eps[2].authority(), "[fd00::4]:9000");
        assert_eq!(eps[2].label(), "[fd00::4]:9000");
        assert_eq!(eps[0].label(), "decode-0");
        assert!(ready_endpoints(&[]).is_empty());
    }
}
