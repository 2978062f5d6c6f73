//! Starting the components in dependency order.
//!
//! etcd → kube-apiserver → kube-controller-manager and kube-scheduler →
//! kwok, each awaited before the next depends on it. The [`ControlPlane`] is
//! built before the first process starts, so an error anywhere drops it and
//! stops what already runs.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

use super::assets::{self, Needs};
use super::certs::{FRONT_PROXY_CLIENT, Pki};
use super::cluster::{KWOK_NODE_ANNOTATION, KWOK_NODE_VALUE};
use super::error::{Error, Result};
use super::health::{anonymous_client, http_get, kube_get, wait_healthy};
use super::kubeconfig::{self, https_url};
use super::process::Supervised;
use super::statedir;
use super::{Component, ControlPlane, ControlPlaneOptions};

/// The Service IP range (the `kubernetes` Service takes its first address).
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
/// Pod IPs that kwok hands out.
const POD_CIDR: &str = "10.244.0.0/16";
/// The issuer of ServiceAccount tokens.
const SA_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Controllers that later work needs: ServiceAccounts and their tokens,
/// garbage collection of owned objects, namespaces, EndpointSlices, HPA,
/// workload controllers (the agent is a DaemonSet), PDBs, and node lifecycle.
const CONTROLLERS: &str = "serviceaccount-token-controller,serviceaccount-controller,\
garbage-collector-controller,namespace-controller,endpoints-controller,\
endpointslice-controller,endpointslice-mirroring-controller,\
horizontal-pod-autoscaler-controller,replicaset-controller,deployment-controller,\
daemonset-controller,statefulset-controller,job-controller,disruption-controller,\
node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller,\
root-ca-certificate-publisher-controller,clusterrole-aggregation-controller";

pub(super) async fn start(options: ControlPlaneOptions) -> Result<ControlPlane> {
    let binaries = find_binaries(&options).await?;
    let (state_dir, owns_state_dir) = match &options.state_dir {
        Some(dir) => (dir.clone(), false),
        None => {
            statedir::reap_stale();
            (statedir::fresh(), true)
        }
    };
    std::fs::create_dir_all(state_dir.join("logs"))
        .map_err(Error::io("create state dir", &state_dir))?;
    let state_dir = state_dir
        .canonicalize()
        .map_err(Error::io("resolve state dir", &state_dir))?;
    let bind = options.bind_address;
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // Where clients reach the apiserver: an unspecified bind means "all", so use loopback.
    let reach = if bind.is_unspecified() {
        loopback
    } else {
        bind
    };
    let pki = Pki::generate(&state_dir.join("pki"), reach)?;
    let [
        etcd_port,
        etcd_peer_port,
        apiserver_port,
        kcm_port,
        scheduler_port,
        kwok_port,
    ] = free_ports([loopback, loopback, bind, loopback, loopback, loopback])?;
    let server = https_url(reach, apiserver_port);

    let admin = kubeconfig::build(&server, &pki.ca_cert, &pki.admin);
    let kubeconfig_path = state_dir.join("admin.kubeconfig");
    kubeconfig::write(&kubeconfig_path, &admin)?;

    let mut cp = ControlPlane {
        state_dir,
        owns_state_dir,
        server,
        kubeconfig_path,
        kubeconfig: admin,
        pki,
        binaries,
        processes: Vec::new(),
        components: Vec::new(),
    };
    let timeout = options.start_timeout;

    // etcd.
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
    let etcd_args = vec![
        "--name=default".to_owned(),
        format!("--data-dir={}", cp.state_dir.join("etcd").display()),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=default={peer_url}"),
        // Test data need not survive a power cut; fsync dominates apiserver latency.
        "--unsafe-no-fsync=true".to_owned(),
        "--log-level=warn".to_owned(),
    ];
    let etcd_bin = cp.binaries.etcd.clone();
    let etcd = cp.spawn(
        "etcd",
        &etcd_bin,
        &etcd_args,
        &[],
        format!("{etcd_url}/health"),
    )?;
    let etcd_addr = SocketAddr::from((loopback, etcd_port));
    wait_healthy(etcd, timeout, || async move {
        let body = http_get(etcd_addr, "/health").await?;
        if body.contains("\"health\":\"true\"") {
            Ok(())
        } else {
            Err(format!("unhealthy: {}", body.trim()))
        }
    })
    .await?;

    // kube-apiserver.
    let pki = cp.pki.clone();
    let mut apiserver_args = vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--bind-address={bind}"),
        format!("--advertise-address={reach}"),
        format!("--secure-port={apiserver_port}"),
        format!("--cert-dir={}", cp.state_dir.join("apiserver").display()),
        format!("--tls-cert-file={}", pki.serving.cert.display()),
        format!("--tls-private-key-file={}", pki.serving.key.display()),
        format!("--client-ca-file={}", pki.ca_cert.display()),
        format!("--service-account-issuer={SA_ISSUER}"),
        format!(
            "--service-account-key-file={}",
            pki.service_account_pub.display()
        ),
        format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key.display()
        ),
        format!("--service-cluster-ip-range={SERVICE_CIDR}"),
        "--authorization-mode=Node,RBAC".to_owned(),
        "--allow-privileged=true".to_owned(),
        "--profiling=false".to_owned(),
        // The aggregation layer, as kubeadm sets it up: extension API servers
        // (`external.metrics.k8s.io` from KEDA) get requests the apiserver authenticated,
        // with the user in these headers, over a client certificate of the front-proxy CA.
        format!(
            "--requestheader-client-ca-file={}",
            pki.front_proxy_ca.display()
        ),
        format!("--requestheader-allowed-names={FRONT_PROXY_CLIENT}"),
        "--requestheader-username-headers=X-Remote-User".to_owned(),
        "--requestheader-group-headers=X-Remote-Group".to_owned(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".to_owned(),
        format!(
            "--proxy-client-cert-file={}",
            pki.front_proxy_client.cert.display()
        ),
        format!(
            "--proxy-client-key-file={}",
            pki.front_proxy_client.key.display()
        ),
        // No kube-proxy here: the aggregator dials an APIService's endpoint addresses,
        // not its Service's cluster IP.
        "--enable-aggregator-routing=true".to_owned(),
    ];
    if !options.controllers {
        // Without the ServiceAccount controller no `default` ServiceAccount
        // appears, and the admission plugin would refuse every Pod.
        apiserver_args.push("--disable-admission-plugins=ServiceAccount".to_owned());
    }
    let apiserver_bin = cp.binaries.kube_apiserver.clone();
    let server = cp.server.clone();
    let admin_client = cp.client().await?;
    let apiserver = cp.spawn(
        "kube-apiserver",
        &apiserver_bin,
        &apiserver_args,
        &[],
        format!("{server}/readyz"),
    )?;
    wait_healthy(apiserver, timeout, || {
        let client = admin_client.clone();
        async move { kube_get(&client, "/readyz").await.map(drop) }
    })
    .await?;

    if options.controllers {
        start_controllers(&mut cp, &pki, kcm_port, scheduler_port, timeout).await?;
        // Pods are refused until the ServiceAccount controller made `default`.
        cp.wait_for_default_service_account(timeout).await?;
    }
    if let Some(kwok) = cp.binaries.kwok.clone() {
        let cidr = options.pod_cidr.as_deref().unwrap_or(POD_CIDR);
        start_kwok(&mut cp, &kwok, kwok_port, cidr, timeout).await?;
    }
    info!(server = %cp.server, kubeconfig = %cp.kubeconfig_path.display(), "control plane ready");
    Ok(cp)
}

async fn start_controllers(
    cp: &mut ControlPlane,
    pki: &Pki,
    kcm_port: u16,
    scheduler_port: u16,
    timeout: std::time::Duration,
) -> Result<()> {
    let kcm_kubeconfig = cp.state_dir.join("controller-manager.kubeconfig");
    kubeconfig::write(
        &kcm_kubeconfig,
        &kubeconfig::build(&cp.server, &pki.ca_cert, &pki.controller_manager),
    )?;
    let scheduler_kubeconfig = cp.state_dir.join("scheduler.kubeconfig");
    kubeconfig::write(
        &scheduler_kubeconfig,
        &kubeconfig::build(&cp.server, &pki.ca_cert, &pki.scheduler),
    )?;

    let common = |kubeconfig: &Path, port: u16| {
        vec![
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--authentication-kubeconfig={}", kubeconfig.display()),
            format!("--authorization-kubeconfig={}", kubeconfig.display()),
            "--bind-address=127.0.0.1".to_owned(),
            format!("--secure-port={port}"),
            format!("--tls-cert-file={}", pki.serving.cert.display()),
            format!("--tls-private-key-file={}", pki.serving.key.display()),
            "--leader-elect=false".to_owned(),
            "--profiling=false".to_owned(),
        ]
    };
    let mut kcm_args = common(&kcm_kubeconfig, kcm_port);
    kcm_args.extend([
        format!("--controllers={CONTROLLERS}"),
        // Each controller acts as its own ServiceAccount, as in kubeadm clusters.
        "--use-service-account-credentials=true".to_owned(),
        format!(
            "--service-account-private-key-file={}",
            pki.service_account_key.display()
        ),
        format!("--root-ca-file={}", pki.ca_cert.display()),
        // The HPA controller looks every 2 s rather than 15: an autoscaler test then
        // waits for KEDA's and the group's reaction, not for the next sync.
        "--horizontal-pod-autoscaler-sync-period=2s".to_owned(),
    ]);
    let scheduler_args = common(&scheduler_kubeconfig, scheduler_port);

    let kcm_url = https_url(IpAddr::V4(Ipv4Addr::LOCALHOST), kcm_port);
    let scheduler_url = https_url(IpAddr::V4(Ipv4Addr::LOCALHOST), scheduler_port);
    let kcm_bin = cp
        .binaries
        .kube_controller_manager
        .clone()
        .ok_or(Error::MissingBinary {
            binary: "kube-controller-manager",
            reason: "not resolved".to_owned(),
        })?;
    let scheduler_bin = cp
        .binaries
        .kube_scheduler
        .clone()
        .ok_or(Error::MissingBinary {
            binary: "kube-scheduler",
            reason: "not resolved".to_owned(),
        })?;
    // Start both, then wait for each: they come up in parallel.
    cp.spawn(
        "kube-controller-manager",
        &kcm_bin,
        &kcm_args,
        &[],
        format!("{kcm_url}/healthz"),
    )?;
    cp.spawn(
        "kube-scheduler",
        &scheduler_bin,
        &scheduler_args,
        &[],
        format!("{scheduler_url}/healthz"),
    )?;
    let count = cp.processes.len();
    for (index, url) in [(count - 2, kcm_url), (count - 1, scheduler_url)] {
        let client = anonymous_client(&url, &pki.ca_cert)?;
        wait_healthy(&mut cp.processes[index], timeout, || {
            let client = client.clone();
            async move { kube_get(&client, "/healthz").await.map(drop) }
        })
        .await?;
    }
    Ok(())
}

async fn start_kwok(
    cp: &mut ControlPlane,
    kwok: &Path,
    port: u16,
    pod_cidr: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    let home = cp.state_dir.join("kwok");
    std::fs::create_dir_all(&home).map_err(Error::io("create kwok dir", &home))?;
    let stages = home.join("stages.yaml");
    std::fs::write(&stages, assets::KWOK_STAGES)
        .map_err(Error::io("write kwok stages", &stages))?;
    let args = vec![
        format!("--kubeconfig={}", cp.kubeconfig_path.display()),
        format!("--config={}", stages.display()),
        "--manage-all-nodes=false".to_owned(),
        format!("--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}"),
        // Nodes stay Ready through their Lease, renewed by kwok.
        "--node-lease-duration-seconds=40".to_owned(),
        format!("--cidr={pod_cidr}"),
        format!("--server-address=127.0.0.1:{port}"),
    ];
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // HOME: kwok also reads ~/.kwok/kwok.yaml, which must not leak in.
    let process = cp.spawn(
        "kwok",
        kwok,
        &args,
        &[("HOME", &home)],
        format!("http://{addr}/healthz"),
    )?;
    wait_healthy(process, timeout, || async move {
        http_get(addr, "/healthz").await.map(drop)
    })
    .await
}

impl ControlPlane {
    /// Spawns a component and records it; returns it for the health wait.
    fn spawn(
        &mut self,
        name: &'static str,
        binary: &Path,
        args: &[String],
        env: &[(&str, &Path)],
        health_url: String,
    ) -> Result<&mut Supervised> {
        let log = self.state_dir.join("logs").join(format!("{name}.log"));
        let process = Supervised::spawn(name, binary, args, env, log.clone())?;
        self.components.push(Component {
            name: name.to_owned(),
            pid: process.pid(),
            log,
            health_url,
        });
        self.processes.push(process);
        // Recorded at once, so a run killed before it can clean up (SIGKILL,
        // a test timeout) is found and stopped by the next `start`.
        self.state().save()?;
        Ok(self.processes.last_mut().expect("just pushed"))
    }
}

async fn find_binaries(options: &ControlPlaneOptions) -> Result<assets::Binaries> {
    let needs = Needs {
        controllers: options.controllers,
        kwok: options.kwok.unwrap_or(true),
    };
    let resolve = move |needs| async move {
        tokio::task::spawn_blocking(move || assets::resolve(needs))
            .await
            .unwrap_or_else(|join| {
                Err(Error::MissingBinary {
                    binary: "kube-apiserver",
                    reason: format!("binary lookup panicked: {join}"),
                })
            })
    };
    match resolve(needs).await {
        Err(error) if options.kwok.is_none() && needs.kwok => {
            warn!(%error, "kwok unavailable, starting without it");
            resolve(Needs {
                kwok: false,
                ..needs
            })
            .await
        }
        result => result,
    }
}

/// Picks free ports by binding port 0, all at once so they differ.
pub(crate) fn free_ports<const N: usize>(ips: [IpAddr; N]) -> Result<[u16; N]> {
    let listeners = ips
        .iter()
        .map(|ip| {
            TcpListener::bind((*ip, 0))
                .map_err(Error::io("bind a free port", PathBuf::from(ip.to_string())))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut ports = [0; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(Error::io("read bound port", PathBuf::new()))?
            .port();
    }
    Ok(ports)
}
