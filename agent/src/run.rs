//! `hcomm-agent run`: wires the parts together — inventory refresh and `HcommNode`
//! publishing, the link-probe server and the weights chunk server on the data address, the
//! local worker API, metrics, the member driver (weight sync through
//! [`EngineSyncer`] into the node's [`WeightStore`]) and the health probes — and shuts them down on SIGTERM/Ctrl-C.
//! The metrics server (with `/livez` and `/readyz`, see [`crate::probes`]) starts first, so
//! a starting agent is live and says what it still lacks before it is ready.

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
use tokio::sync::watch;

use crate::config::{AgentConfig, Context};
use crate::error::{Error, Result};
use crate::inventory;
use crate::local_api::caller::CallerCheck;
use crate::local_api::server::{self as api_server, Serves};
use crate::member::weights_authority::KubeAuthority;
use crate::member::weights_sync::EngineSyncer;
use crate::probes::Probes;
use crate::weights::{ChunkServer, CurrentLink, GroupSecret, ServerConfig, WeightStore, gc};

async fn refresh_inventory(ctx: &Context) -> Result<()> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let labels = match nodes.get_opt(&ctx.cfg.node_name).await {
        Ok(Some(n)) => n.metadata.labels.unwrap_or_default(),
        _ => Default::default(),
    };
    let topo = inventory::topology_from(&ctx.cfg.topology, &labels);
    let inv = inventory::collect(&ctx.cfg.sources, topo).await;
    *ctx.inventory.write().await = inv;
    inventory::publish::publish_known(ctx).await
}

async fn inventory_loop(ctx: Arc<Context>) {
    let mut tick = tokio::time::interval(ctx.cfg.inventory_interval);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(e) = refresh_inventory(&ctx).await {
            tracing::warn!(error = %e, category = e.category(), "inventory refresh failed");
        }
    }
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Runs the agent until a shutdown signal.
pub async fn run(cfg: AgentConfig) -> Result<()> {
    let client = kube::Client::try_default()
        .await
        .map_err(Error::kube("connect to the API server"))?;
    // One weight store per node: what the chunk server serves is what the syncer installs.
    let store = WeightStore::open(&cfg.weights_root).map_err(|e| {
        Error::Config(format!(
            "open the weight store {} (--weights-dir): {e}",
            cfg.weights_root.display()
        ))
    })?;
    if cfg.probe_secret.as_slice() == crate::config::INSECURE_DEFAULT_SECRET {
        tracing::warn!(
            "running with the built-in, public shared secret (--insecure-default-secret): \
             any host can answer link probes, and a group without a Secret falls back to one derived from its UID; for development and tests only"
        );
    }
    // Weights connections authenticate with each group's own secret, and serve a group
    // only its own set (`member::weights_authority`).
    let group_secrets = Arc::new(crate::group_secrets::GroupSecrets::new(
        client.clone(),
        cfg.secrets_namespace.clone(),
        cfg.group_secret_dir.clone(),
        cfg.probe_secret.as_slice() == crate::config::INSECURE_DEFAULT_SECRET,
    ));
    if cfg.secrets_namespace.is_none() && cfg.group_secret_dir.is_none() {
        tracing::warn!(
            "no --secrets-namespace (POD_NAMESPACE): group secrets cannot be read; members will be refused with GroupSecretMissing"
        );
    }
    let mut syncer = EngineSyncer::new(
        store.clone(),
        cfg.weights_port,
        GroupSecret::new(Vec::new()),
    );
    syncer.secrets = group_secrets.clone();
    syncer.source_roots = cfg.weights_source_roots.clone();
    tracing::info!(roots = ?syncer.source_roots.roots(), "local weight sources allowed below (none: peers only)");
    let mut ctx = Context::new(cfg, client, Arc::new(syncer));
    ctx.group_secrets = group_secrets.clone();
    let ctx = Arc::new(ctx);
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    // Health endpoints first: /livez answers, and /readyz says what is missing, while the
    // agent registers its node.
    let groups_known = ctx.groups_here.subscribe();
    let probes = Arc::new(Probes::new(move || groups_known.borrow().is_some()));
    let heartbeat = tokio::spawn({
        let probes = probes.clone();
        async move { probes.heartbeat().await }
    });
    let metrics_l = crate::metrics::bind(ctx.cfg.metrics_addr)
        .await
        .map_err(Error::io(format!(
            "bind metrics on {}",
            ctx.cfg.metrics_addr
        )))?;
    let metrics_task = tokio::spawn(crate::metrics::serve(
        metrics_l,
        ctx.metrics.clone(),
        probes.clone(),
        stopped(),
    ));
    // The first inventory must exist before members are verified against it.
    let mut first = refresh_inventory(&ctx).await;
    for _ in 0..5 {
        if first.is_ok() {
            break;
        }
        tracing::warn!(error = ?first.as_ref().err(), "initial inventory publish failed; retrying");
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        first = refresh_inventory(&ctx).await;
    }
    first?;
    probes.set_registered();
    let data_ip = ctx
        .inventory
        .read()
        .await
        .data_nic(&ctx.cfg.node_nic_rule())
        .map(|c| c.ip)
        .ok_or_else(|| {
            Error::Config("no data interface found on this node (see --data-address)".into())
        })?;
    tracing::info!(node = %ctx.cfg.node_name, %data_ip, "agent starting");

    let probe_addr = SocketAddr::new(data_ip, ctx.cfg.probe_port);
    let probe_l = tokio::net::TcpListener::bind(probe_addr)
        .await
        .map_err(Error::io(format!("bind link probe on {probe_addr}")))?;
    let probe_task = tokio::spawn(crate::nic::probe::serve(
        probe_l,
        ctx.cfg.probe_secret.clone(),
        ctx.cfg.node_name.clone(),
        ctx.metrics.listeners.probe.clone(),
        stopped(),
    ));
    let weights_addr = SocketAddr::new(data_ip, ctx.cfg.weights_port);
    let weights_l = tokio::net::TcpListener::bind(weights_addr)
        .await
        .map_err(Error::io(format!(
            "bind weights chunk server on {weights_addr}"
        )))?;
    tracing::info!(%weights_addr, store = %store.root().display(), "serving weights");
    let gc_task = ctx
        .cfg
        .weights_gc_grace
        .map(|grace| tokio::spawn(weights_gc_loop(ctx.clone(), store.clone(), grace)));
    let weights_task = tokio::spawn(ChunkServer::serve_with_stats(
        weights_l,
        store,
        ServerConfig {
            verify_on_read: ctx.cfg.weights_verify_on_serve,
            admission: Some(ctx.metrics.listeners.weights.clone()),
            ..ServerConfig::with_authority(Arc::new(KubeAuthority::new(
                ctx.client.clone(),
                group_secrets,
            )))
        },
        ctx.metrics.weights_server.clone(),
        stopped(),
    ));
    let api_l = api_server::bind(&ctx.cfg.socket_path)?;
    if ctx.cfg.local_api_callers == CallerCheck::Unchecked {
        tracing::warn!(
            "--local-api-callers=unchecked: local-API callers are not identified; any process \
             that can open a Pod's socket acts as that Pod (for agents outside the host PID \
             namespace only)"
        );
    }
    tracing::info!(node_socket = %ctx.cfg.socket_path.display(), pod_sockets = %ctx.cfg.pod_sockets_dir.display(), callers = ?ctx.cfg.local_api_callers, "local API");
    probes.set_api_bound();
    let api_task = tokio::spawn(api_server::serve(
        api_l,
        ctx.hub.clone(),
        ctx.cfg.local_api_access(),
        Serves::Node,
        stopped(),
    ));
    let csi_server = match &ctx.cfg.local_api_csi {
        Some(csi) => {
            let driver = crate::local_api::csi::LocalApiDriver::new(
                ctx.pod_sockets.clone(),
                ctx.cfg.kubelet_root_dir.clone(),
                ctx.cfg.node_name.clone(),
            );
            let server = crate::local_api::csi::serve(csi, driver).await?;
            tracing::info!(socket = %csi.socket.display(), registration = %csi.registration_socket().display(), kubelet_root = %ctx.cfg.kubelet_root_dir.display(), "local-API CSI driver");
            Some(server)
        }
        None => None,
    };
    let inv_task = tokio::spawn(inventory_loop(ctx.clone()));
    let health_task = tokio::spawn(crate::health::probe_loop(ctx.clone()));
    let group_watch = tokio::spawn({
        let ctx = ctx.clone();
        async move {
            let here = ctx.groups_here.subscribe();
            crate::member::nudge::watch_groups(ctx.client.clone(), &ctx.nudges, here).await
        }
    });
    let driver = tokio::spawn(crate::member::driver::run(ctx.clone(), stopped()));

    shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    inv_task.abort();
    heartbeat.abort();
    health_task.abort();
    group_watch.abort();
    if let Some(t) = gc_task {
        t.abort();
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), driver).await;
    // The member tasks' last Events (a drain, a failure) say why they stopped.
    if !ctx.events.flush(std::time::Duration::from_secs(2)).await {
        tracing::warn!("events still queued at exit were not all written within 2 s");
    }
    let _ = tokio::join!(probe_task, api_task, metrics_task, weights_task);
    if let Some(server) = csi_server {
        server.shutdown(std::time::Duration::from_secs(2)).await;
    }
    let _ = std::fs::remove_file(&ctx.cfg.socket_path);
    Ok(())
}

/// Removes the weights links of groups that left this node, the versions no link has
/// pointed at and the fetches stopped part-way that none resumed, each after `grace`
/// (see `weights::gc`),
/// looking every quarter of the grace (between 1 s and 1 min).
async fn weights_gc_loop(ctx: Arc<Context>, store: WeightStore, grace: std::time::Duration) {
    use std::time::{Duration, Instant};
    let every = (grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut cleanup = Some(gc::Cleanup::new(grace));
    loop {
        tokio::time::sleep(every).await;
        let (store, mut c) = (store.clone(), cleanup.take().expect("returned below"));
        let groups = ctx.groups_here.subscribe();
        let pass = tokio::task::spawn_blocking(move || {
            let groups_here = || {
                let here = groups.borrow();
                here.as_ref().map(|gs| {
                    gs.iter()
                        .filter_map(|(ns, g)| CurrentLink::group(ns, g).ok())
                        .collect()
                })
            };
            let r = gc::collect(&store, &mut c, Instant::now(), &groups_here);
            (c, r)
        })
        .await;
        let Ok((c, result)) = pass else {
            tracing::error!("weights cleanup panicked; cleanup stopped");
            return;
        };
        cleanup = Some(c);
        match result {
            Ok(removed) => {
                for link in removed.links {
                    tracing::info!(link = %link.relative().display(), ?grace, "removed the weights link of a group with no member on this node within the grace period");
                    ctx.metrics.weights_links_removed.inc();
                }
                for set in removed.versions {
                    tracing::info!(%set, ?grace, "removed a weights version no link used within the grace period");
                    ctx.metrics.weights_versions_removed.inc();
                }
                for set in removed.partials {
                    tracing::info!(%set, ?grace, "removed a weights fetch stopped part-way that no fetch resumed within the grace period");
                    ctx.metrics.weights_partials_removed.inc();
                }
            }
            Err(e) => tracing::warn!(error = %e, "weights cleanup failed; trying again later"),
        }
    }
}
