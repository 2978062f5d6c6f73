//! The member driver: watches the Pods on this node (field selector `spec.nodeName`) that
//! carry `hcomm.io/group`, and runs one [`super::task::run_member`] per member, feeding it
//! the Pod's latest [`MemberSpec`] (None once the Pod is deleted), and publishes which
//! groups have a member here ([`Context::groups_here`], for the group watches and weights
//! cleanup). Malformed Pods are skipped, not fatal.
//!
//! When the agent stops, its member tasks are aborted, not told their Pods are gone: the
//! Pods keep running (a new agent adopts them), so nothing a Pod's end undoes — its socket
//! directory, its published-volume record, its place in the domain — may be undone then.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use hcomm_crds::contract::LABEL_GROUP;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::spec::{MemberSpec, from_pod};
use super::task::run_member;
use crate::config::Context;

/// Server-side timeout of the member Pod watch (see [`run`]).
const WATCH_TIMEOUT_SECS: u32 = 30;

/// Runs until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()>) {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    // The server ends each watch after WATCH_TIMEOUT_SECS and the watcher resumes from its
    // resourceVersion; a connection that died silently (the node cut off from the API
    // server and back) is then noticed within that time plus kube's idle margin, not the
    // default ~5 minutes during which new member Pods would go unseen.
    let cfg = watcher::Config::default()
        .fields(&format!("spec.nodeName={}", ctx.cfg.node_name))
        .labels(LABEL_GROUP)
        .timeout(WATCH_TIMEOUT_SECS);
    let mut stream = watcher(api, cfg).boxed();
    let mut members: HashMap<String, watch::Sender<Option<MemberSpec>>> = HashMap::new();
    // Every member task, so a stopping agent can abort them; ended ones are reaped as they end.
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut seen_in_init: HashSet<String> = HashSet::new();
    // Whether the node's Pods have been listed once: only then is an absent group absent.
    let mut listed = false;
    tokio::pin!(shutdown);
    loop {
        let ev = tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        match ev {
            Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod)) => {
                let Some(spec) = from_pod(&pod) else { continue };
                let key = spec.key();
                seen_in_init.insert(key.clone());
                match members.get(&key) {
                    Some(tx) if !tx.is_closed() => {
                        tx.send_if_modified(|cur| {
                            if cur.as_ref() == Some(&spec) {
                                false
                            } else {
                                *cur = Some(spec.clone());
                                true
                            }
                        });
                    }
                    _ => {
                        tracing::info!(pod = %key, group = %spec.group, "member found");
                        let (tx, rx) = watch::channel(Some(spec));
                        members.insert(key, tx);
                        tasks.spawn(run_member(ctx.clone(), rx));
                    }
                }
            }
            Ok(watcher::Event::Delete(pod)) => {
                if let Some(spec) = from_pod(&pod)
                    && let Some(tx) = members.remove(&spec.key())
                {
                    tx.send_replace(None);
                }
            }
            Ok(watcher::Event::Init) => seen_in_init.clear(),
            Ok(watcher::Event::InitDone) => {
                listed = true;
                let gone: Vec<String> = members
                    .keys()
                    .filter(|k| !seen_in_init.contains(*k))
                    .cloned()
                    .collect();
                for k in gone {
                    if let Some(tx) = members.remove(&k) {
                        tx.send_replace(None);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "pod watch error; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }
        if listed {
            publish_groups(&ctx, &members);
        }
    }
    tasks.shutdown().await;
}

/// Publishes the groups of the member Pods on this node (only when they changed).
fn publish_groups(ctx: &Context, members: &HashMap<String, watch::Sender<Option<MemberSpec>>>) {
    let groups: BTreeSet<(String, String)> = members
        .values()
        .filter_map(|tx| {
            let spec = tx.borrow();
            spec.as_ref()
                .map(|s| (s.namespace.clone(), s.group.clone()))
        })
        .collect();
    ctx.groups_here.send_if_modified(|cur| {
        let changed = cur.as_ref() != Some(&groups);
        if changed {
            *cur = Some(groups);
        }
        changed
    });
}
