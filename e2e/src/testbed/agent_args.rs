//! The `hcomm-agent run` command line of a simulated host's agent (pure): one builder for
//! the testbed ([`super::Testbed`]) and the agent's own integration tests
//! (`agent/tests/support`), so both start agents alike and a renamed flag is fixed in one
//! place.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::hosts::SimHost;

/// Everything a test agent is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentArgs {
    pub node_name: String,
    pub data_address: IpAddr,
    pub management_interface: String,
    /// Simulated devices the agent offers (`--cpu-devices`).
    pub cpu_devices: u32,
    /// The local worker API's socket.
    pub socket: PathBuf,
    pub metrics_addr: SocketAddr,
    pub weights_dir: PathBuf,
    pub weights_port: u16,
    pub probe_secret_file: PathBuf,
    pub health_interval: Duration,
    /// `--probe-port`; the agent's default when None.
    pub probe_port: Option<u16>,
    /// `--comm-port-base`; the agent's default when None.
    pub comm_port_base: Option<u16>,
    /// `--weights-gc-grace-secs`; the agent's default when None.
    pub weights_gc_grace: Option<Duration>,
    /// `--secrets-namespace`: where the groups' Secrets are (the chart's release
    /// namespace, where the operator makes them).
    pub secrets_namespace: Option<String>,
    /// `--weights-source-root`, once each: where local weight sources may be read.
    pub weights_source_roots: Vec<PathBuf>,
    /// The host's kubelet root directory: the agent serves its local-API CSI driver below
    /// it (`--kubelet-root-dir`, its `plugins/` and `plugins_registry/`), where the process
    /// kubelet finds and calls it. None: `--local-api-csi false` (no kubelet, and never the
    /// machine's own `/var/lib/kubelet`).
    pub kubelet_root: Option<PathBuf>,
    /// Appended as given (a test's own flags).
    pub extra: Vec<String>,
}

impl AgentArgs {
    /// The agent of host `h`: 2 devices, metrics on an ephemeral loopback port, weights
    /// served on 7512, health probes every second; the other ports and the weights grace
    /// are the agent's defaults.
    pub fn for_host(h: &SimHost, socket: &Path, weights_dir: &Path, secret_file: &Path) -> Self {
        AgentArgs {
            node_name: h.name().to_owned(),
            data_address: h.data_ip().into(),
            management_interface: h.mgmt_interface().to_owned(),
            cpu_devices: 2,
            socket: socket.to_path_buf(),
            metrics_addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
            weights_dir: weights_dir.to_path_buf(),
            weights_port: 7512,
            probe_secret_file: secret_file.to_path_buf(),
            health_interval: Duration::from_secs(1),
            probe_port: None,
            comm_port_base: None,
            weights_gc_grace: None,
            weights_source_roots: Vec::new(),
            secrets_namespace: Some(crate::chart::RELEASE_NAMESPACE.to_owned()),
            kubelet_root: None,
            extra: Vec::new(),
        }
    }

    /// Where the Pods' own sockets go: beside a node socket named as on a node
    /// (`…/agent.sock` → `…/pods`, where the hostPath the operator mounts resolves in the
    /// testbed), else `<socket>.pods` so tests' agents sharing a folder do not share it.
    pub fn pod_sockets_dir(&self) -> PathBuf {
        if self.socket.file_name() == Some(hcomm_crds::local_api::SOCKET_FILE.as_ref()) {
            self.socket.with_file_name("pods")
        } else {
            self.socket.with_extension("pods")
        }
    }

    /// The arguments after the program name, `run` first. Test timings are fixed: the
    /// Pod poll every 300 ms, retries after 500 ms, and any `/dev/shm` is enough.
    pub fn to_args(&self) -> Vec<String> {
        let mut out: Vec<String> = ["run"].map(String::from).to_vec();
        let mut flag = |name: &str, value: String| {
            out.push(format!("--{name}"));
            out.push(value);
        };
        flag("node-name", self.node_name.clone());
        flag("data-address", self.data_address.to_string());
        flag("management-interface", self.management_interface.clone());
        flag("cpu-devices", self.cpu_devices.to_string());
        flag("socket", self.socket.display().to_string());
        flag(
            "pod-sockets-dir",
            self.pod_sockets_dir().display().to_string(),
        );
        match &self.kubelet_root {
            Some(root) => {
                flag("kubelet-root-dir", root.display().to_string());
                let csi = csi_paths(root);
                flag("csi-socket", csi.socket.display().to_string());
                flag(
                    "kubelet-registration-dir",
                    csi.registration_dir.display().to_string(),
                );
            }
            None => flag("local-api-csi", "false".into()),
        }
        flag("metrics-addr", self.metrics_addr.to_string());
        flag("weights-dir", self.weights_dir.display().to_string());
        flag("weights-port", self.weights_port.to_string());
        flag(
            "probe-secret-file",
            self.probe_secret_file.display().to_string(),
        );
        flag(
            "health-interval-secs",
            self.health_interval.as_secs_f64().to_string(),
        );
        if let Some(p) = self.probe_port {
            flag("probe-port", p.to_string());
        }
        if let Some(p) = self.comm_port_base {
            flag("comm-port-base", p.to_string());
        }
        if let Some(g) = self.weights_gc_grace {
            flag("weights-gc-grace-secs", g.as_secs_f64().to_string());
        }
        if let Some(ns) = &self.secrets_namespace {
            flag("secrets-namespace", ns.clone());
        }
        for root in &self.weights_source_roots {
            flag("weights-source-root", root.display().to_string());
        }
        flag("poll-interval-ms", "300".into());
        flag("retry-backoff-ms", "500".into());
        flag("shm-min-bytes", "1".into());
        if self.data_address.is_loopback() {
            // Loopback hosts (`cargo demo --loopback`): their peers are loopback addresses.
            out.push("--allow-loopback-peers".into());
        }
        out.extend(self.extra.iter().cloned());
        out
    }
}

/// Where an agent whose kubelet root is `root` serves its CSI driver: as the chart puts
/// it on a node, below the kubelet's root.
pub struct CsiPaths {
    /// The CSI endpoint.
    pub socket: PathBuf,
    /// The kubelet's plugin-registration directory.
    pub registration_dir: PathBuf,
}

/// See [`CsiPaths`].
pub fn csi_paths(root: &Path) -> CsiPaths {
    CsiPaths {
        socket: root
            .join("plugins")
            .join(hcomm_crds::local_api::CSI_DRIVER)
            .join("csi.sock"),
        registration_dir: root.join("plugins_registry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> AgentArgs {
        AgentArgs {
            node_name: "host-1".into(),
            data_address: "198.18.0.11".parse().unwrap(),
            management_interface: "mgmt0".into(),
            cpu_devices: 2,
            socket: "/s.sock".into(),
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            weights_dir: "/w".into(),
            weights_port: 7512,
            probe_secret_file: "/secret".into(),
            health_interval: Duration::from_millis(500),
            probe_port: None,
            comm_port_base: None,
            weights_gc_grace: None,
            weights_source_roots: Vec::new(),
            secrets_namespace: Some("hcomm-system".into()),
            kubelet_root: None,
            extra: vec!["--weights-verify-on-serve".into(), "false".into()],
        }
    }

    /// The value after `flag`, if the flag is there.
    fn value<'a>(a: &'a [String], flag: &str) -> Option<&'a str> {
        let i = a.iter().position(|x| x == flag)?;
        a.get(i + 1).map(String::as_str)
    }

    #[test]
    fn every_flag_carries_its_value_and_the_extras_come_last() {
        let a = args().to_args();
        assert_eq!(a[0], "run");
        assert_eq!(value(&a, "--node-name"), Some("host-1"));
        assert_eq!(value(&a, "--data-address"), Some("198.18.0.11"));
        assert_eq!(value(&a, "--metrics-addr"), Some("127.0.0.1:0"));
        assert_eq!(value(&a, "--probe-secret-file"), Some("/secret"));
        assert_eq!(value(&a, "--health-interval-secs"), Some("0.5"));
        assert_eq!(value(&a, "--shm-min-bytes"), Some("1"));
        assert_eq!(value(&a, "--secrets-namespace"), Some("hcomm-system"));
        assert_eq!(a[a.len() - 2..], ["--weights-verify-on-serve", "false"]);
        // Flags and values alternate up to the extras.
        let flags = &a[1..a.len() - 2];
        assert!(
            flags
                .chunks(2)
                .all(|p| p[0].starts_with("--") && !p[1].starts_with("--"))
        );
    }

    #[test]
    fn the_csi_driver_is_off_without_a_kubelet_and_below_its_root_with_one() {
        let a = args().to_args();
        assert_eq!(value(&a, "--local-api-csi"), Some("false"));
        assert_eq!(value(&a, "--csi-socket"), None);
        let a = AgentArgs {
            kubelet_root: Some("/tb/host-1/var/lib/kubelet".into()),
            ..args()
        }
        .to_args();
        assert_eq!(value(&a, "--local-api-csi"), None, "on by default");
        assert_eq!(
            value(&a, "--kubelet-root-dir"),
            Some("/tb/host-1/var/lib/kubelet")
        );
        assert_eq!(
            value(&a, "--csi-socket"),
            Some("/tb/host-1/var/lib/kubelet/plugins/local-api.hcomm.io/csi.sock")
        );
        assert_eq!(
            value(&a, "--kubelet-registration-dir"),
            Some("/tb/host-1/var/lib/kubelet/plugins_registry")
        );
    }

    #[test]
    fn optional_ports_and_grace_appear_only_when_set() {
        let a = args().to_args();
        for f in [
            "--probe-port",
            "--comm-port-base",
            "--weights-gc-grace-secs",
        ] {
            assert_eq!(value(&a, f), None, "{f}");
        }
        let a = AgentArgs {
            probe_port: Some(7510),
            comm_port_base: Some(7600),
            weights_gc_grace: Some(Duration::from_secs(5)),
            ..args()
        }
        .to_args();
        assert_eq!(value(&a, "--probe-port"), Some("7510"));
        assert_eq!(value(&a, "--comm-port-base"), Some("7600"));
        assert_eq!(value(&a, "--weights-gc-grace-secs"), Some("5"));
    }
}
