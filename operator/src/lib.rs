//! hcomm-operator: turns each `HcommGroup` into member Pods that can serve, and changes
//! membership without stopping the members that serve.
//!
//! Data flow of one reconcile (see [`reconcile`]): [`observe`] fetches the group's Pods,
//! every member Pod's devices, the `HcommNode` inventories and the recorded rank table;
//! [`planner`] (pure) decides joiners, drains, deletions, ranks and the epoch; [`apply`]
//! writes Pods ([`pod_builder`]), drain requests and the rank table ([`rank_table`]);
//! [`status`] reports members, topology and conditions (link health judged by [`links`]
//! from the agents' `HcommNode` link tests); [`events`] publishes what changed.
//! [`leader`] makes sure only one replica acts; [`metrics`] serves Prometheus metrics and
//! the health endpoints, `/readyz` answering from [`readiness`].

pub mod affinity;
pub mod allocation;
pub mod api_timing;
pub mod apply;
pub mod backoff;
pub mod cache;
pub mod config;
pub mod context;
pub mod create_failures;
pub mod disruption;
pub mod error;
pub mod events;
pub mod finalizer;
pub mod group_secret;
pub mod isolation;
pub mod leader;
pub mod links;
pub mod metrics;
pub mod observe;
pub mod pdb;
pub mod phase;
pub mod planner;
pub mod pod_builder;
pub mod pod_index;
pub mod podgroup;
pub mod rank_table;
pub mod readiness;
pub mod recently;
pub mod reconcile;
pub mod revision;
pub mod revision_history;
pub mod status;
pub mod status_writer;
pub mod status_written;
pub mod telemetry;
pub mod trim;
pub mod watches;

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use hcomm_crds::contract::{LABEL_GROUP, LABEL_MANAGED_BY, MANAGER_NAME};
use hcomm_crds::{HcommGroup, HcommNode};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{info, warn};

pub use config::Config;
pub use error::{Error, Result};

use context::Context;
use leader::Elector;
use metrics::Metrics;
use readiness::{Readiness, Role};

/// Runs the operator: metrics server, leader election, and — while leader — the
/// `HcommGroup` controller. Returns on SIGTERM/SIGINT (after releasing the Lease) or with
/// [`Error::LeaseLost`] when leadership is lost.
pub async fn run(config: Config) -> Result<()> {
    let metrics = Arc::new(Metrics::new());
    let client = timed_client(&metrics).await.map_err(Error::kube(
        "build client from KUBECONFIG or in-cluster config",
    ))?;
    let readiness = Arc::new(Readiness::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let listener = tokio::net::TcpListener::bind(config.metrics_addr)
        .await
        .map_err(|source| Error::Server {
            addr: config.metrics_addr.to_string(),
            source,
        })?;
    info!(addr = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "serving metrics");
    let server = tokio::spawn(metrics::serve(
        listener,
        metrics.clone(),
        readiness.clone(),
        stopped(stop_rx),
    ));

    let elector = Elector::new(
        client.clone(),
        &config.lease_namespace,
        &config.lease_name,
        &config.identity,
    );
    let result = lead(
        client,
        &config,
        metrics.clone(),
        &readiness,
        &elector,
        shutdown_signal(),
    )
    .await;
    metrics.leader.set(0);
    readiness.set(Role::Starting);
    elector.release().await;
    let _ = stop_tx.send(true);
    if let Ok(Err(error)) = server.await {
        warn!(%error, "metrics server stopped with an error");
    }
    result
}

/// The client from KUBECONFIG or the in-cluster config, every call timed into
/// `metrics.api_requests` (`api_timing`).
async fn timed_client(metrics: &Metrics) -> kube::Result<Client> {
    let config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&api_timing::ApiTimingLayer::new(
            metrics.api_requests.clone(),
        ))
        .build())
}

/// How long a leader stopped by a signal waits for the statuses and then the Events its
/// last reconciles queued (each): they say what it did, and the next leader will not say
/// it again.
const EVENT_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// Becomes leader, then runs the controller until leadership is lost or `shutdown`
/// completes. The renewal is polled first (`biased`): a leader resumed after a pause
/// longer than the renew deadline steps down before its controller is polled again. A
/// leader stopped by `shutdown` writes its queued statuses and Events first (at most
/// [`EVENT_FLUSH`] each), before the Lease is released; one that lost the Lease writes
/// nothing more (another replica may be leading): its queued statuses and Events are
/// dropped with its context.
async fn lead(
    client: Client,
    config: &Config,
    metrics: Arc<Metrics>,
    readiness: &Readiness,
    elector: &Elector,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let mut shutdown = std::pin::pin!(shutdown);
    let ctx = tokio::select! {
        () = &mut shutdown => return Ok(()),
        ctx = become_leader(client, config, metrics, readiness, elector) => Arc::new(ctx),
    };
    let result = tokio::select! {
        biased;
        lost = elector.keep() => Err(lost),
        () = controller(ctx.clone(), |synced| readiness.set(Role::Leader { synced })) => Ok(()),
        () = &mut shutdown => Ok(()),
    };
    if result.is_ok() && !ctx.status_writer.flush(EVENT_FLUSH).await {
        warn!(
            "group statuses still waiting when the operator stopped leading were not all written within {EVENT_FLUSH:?}"
        );
    }
    if result.is_ok() && !ctx.events.flush(EVENT_FLUSH).await {
        warn!(
            "Events still queued when the operator stopped leading were not all written within {EVENT_FLUSH:?}"
        );
    }
    result
}

/// Waits for the Lease, then builds the leader's context (after sweeping the Secrets of
/// groups that no longer exist).
async fn become_leader(
    client: Client,
    config: &Config,
    metrics: Arc<Metrics>,
    readiness: &Readiness,
    elector: &Elector,
) -> Context {
    elector
        .acquire(|holder| {
            readiness.set(holder.map_or(Role::Starting, |holder| Role::Standby {
                holder: holder.to_owned(),
            }))
        })
        .await;
    metrics.leader.set(1);
    readiness.set(Role::Leader { synced: false });
    let mut ctx = Context::new(client, metrics, config.namespace.clone(), &config.identity);
    ctx.links = config.links;
    ctx.local_api_volume = config.local_api_volume;
    // The release namespace: the Lease's, as the chart sets it.
    ctx.secrets_namespace = config.lease_namespace.clone();
    match group_secret::sweep(
        &ctx.client,
        &ctx.secrets_namespace,
        ctx.namespace.as_deref(),
    )
    .await
    {
        Ok(n) => info!(
            deleted = n,
            "swept the Secrets of groups that no longer exist"
        ),
        Err(error) => {
            warn!(%error, "sweeping group Secrets failed; retried at the next leadership")
        }
    }
    ctx
}

/// The `HcommGroup` controller: groups, their Pods, and every `HcommNode` change (new
/// capacity, or a new link test: any group may be waiting for capacity, so every group is
/// looked at) trigger reconciles; a reconcile also requeues itself for the moment its
/// newest link results turn stale. Runs until its future is dropped (shutdown or lost
/// leadership); reconciles are idempotent, so stopping mid-way is safe. `on_synced(true)`
/// is called once the `HcommGroup` and `HcommNode` stores have their first full list.
pub async fn controller(ctx: Arc<Context>, on_synced: impl Fn(bool)) {
    let client = ctx.client.clone();
    let (groups, pods, tables): (Api<HcommGroup>, Api<Pod>, Api<ConfigMap>) = match &ctx.namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client.clone(), ns),
        ),
        None => (
            Api::all(client.clone()),
            Api::all(client.clone()),
            Api::all(client.clone()),
        ),
    };
    let nodes: Api<HcommNode> = Api::all(client.clone());
    // The member Pods: one watch fills the index and the store reconciles read (`cache`,
    // `pod_index`; the index first, so it is never behind the store) and triggers them,
    // both updated before each trigger is handed on.
    let (pod_index, mut pod_index_writer) = pod_index::index();
    let (pod_store, pod_writer) = reflector::store();
    let pod_events = reflector::reflector(
        pod_writer,
        watcher(pods, watcher::Config::default().labels(LABEL_GROUP))
            .default_backoff()
            .modify(trim::object)
            .inspect_ok(move |event| pod_index_writer.apply(event)),
    )
    .touched_objects();
    // Only changes that can move a plan or a condition wake every group: agents republish
    // their HcommNode every few seconds (issue 20: 200 nodes kept 50 groups reconciling
    // without pause, seconds behind a scale request).
    let mut relevant = watches::NodeChanges::new(ctx.links);
    let (node_store, node_writer) = reflector::store();
    let node_changes = reflector::reflector(
        node_writer,
        watcher(nodes, watcher::Config::default())
            .default_backoff()
            .modify(trim::object),
    )
    .applied_objects()
    .filter_map(move |node| {
        let changed = node.ok().filter(|n| relevant.changed(n)).map(|_| ());
        async move { changed }
    });
    // A Node cordoned (`kubectl drain`) or uncordoned: its members move (`disruption`).
    let mut cordons = disruption::CordonChanges::default();
    let (kube_node_store, kube_node_writer) = reflector::store();
    let cordon_changes = reflector::reflector(
        kube_node_writer,
        watcher(Api::<Node>::all(client), watcher::Config::default())
            .default_backoff()
            .modify(trim::node),
    )
    .applied_objects()
    .filter_map(move |node| {
        let changed = node.ok().filter(|n| cordons.changed(n)).map(|_| ());
        async move { changed }
    });
    // The rank tables: reconciles read them from this store (`cache::TableWrites`); a table
    // deleted or changed by anyone but this process wakes its group, which writes it again.
    let writes = ctx.table_writes.clone();
    let (table_store, table_writer) = reflector::store();
    let table_changes = reflector::reflector(
        table_writer,
        watcher(
            tables,
            watcher::Config::default().labels(&rank_table_selector()),
        )
        .default_backoff()
        .modify(trim::object),
    )
    .filter_map(move |event| {
        let foreign = match event {
            Ok(watcher::Event::Delete(table)) => Some(Ok(table)),
            Ok(watcher::Event::Apply(table)) if !writes.own_echo(&table) => Some(Ok(table)),
            _ => None,
        };
        async move { foreign }
    });
    let controller = Controller::new(groups, watcher::Config::default());
    let group_store = controller.store();
    // Reconciles read these from now on; they go when this controller stops.
    let _caches = ctx.caches.install(cache::Caches {
        pods: pod_store,
        pod_index,
        groups: group_store.clone(),
        hcomm_nodes: node_store.clone(),
        nodes: kube_node_store,
        rank_tables: table_store,
    });
    let run = controller
        .owns_stream(pod_events)
        .owns_stream(table_changes)
        .reconcile_all_on(futures::stream::select(node_changes, cordon_changes))
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile attempt ended with an error");
            }
        });
    let synced = async {
        if synced(&group_store).await && synced(&node_store).await {
            info!("controller caches synced");
            on_synced(true);
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        () = run => {}
        () = synced => {}
    }
}

/// The rank-table ConfigMaps' label selector: the operator's, of some group.
fn rank_table_selector() -> String {
    format!("{LABEL_MANAGED_BY}={MANAGER_NAME},{LABEL_GROUP}")
}

/// Whether `store` received its first full list (false: its writer is gone).
async fn synced<K>(store: &Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store.wait_until_ready().await.is_ok()
}

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return ctrl_c.await.unwrap_or_default(),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    info!("shutdown signal received");
}
