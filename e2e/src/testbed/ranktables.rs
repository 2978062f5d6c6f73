//! A copy of every rank table the operator publishes, one file per ConfigMap version
//! (`<dir>/<configmap>-e<epoch>-rv<resourceVersion>.json`), so a user of
//! `HCOMM_E2E_KEEP_STATE=1 cargo demo` can read exactly what HCCL (or the TCP engine) was
//! given at each epoch — the table is rewritten in place, so without a copy each version
//! is gone once the next epoch is published.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use hcomm_crds::rank_table::{KEY_EPOCH, KEY_RANK_TABLE};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::task::JoinHandle;

use super::{Error, Result};

/// Records rank-table ConfigMaps of one namespace until dropped.
pub struct RankTableRecorder {
    dir: PathBuf,
    written: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl RankTableRecorder {
    /// Starts watching the ConfigMaps of `namespace`; copies go to `dir` (created).
    pub fn start(client: kube::Client, namespace: &str, dir: PathBuf) -> Result<Self> {
        std::fs::create_dir_all(&dir).map_err(Error::io("create the rank-table copy dir"))?;
        let written = Arc::new(AtomicUsize::new(0));
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let task = tokio::spawn(record(api, dir.clone(), written.clone()));
        Ok(RankTableRecorder { dir, written, task })
    }

    /// Where the copies are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many table versions were copied so far.
    pub fn written(&self) -> usize {
        self.written.load(Ordering::Relaxed)
    }
}

impl Drop for RankTableRecorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn record(api: Api<ConfigMap>, dir: PathBuf, written: Arc<AtomicUsize>) {
    let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Apply(cm) | Event::InitApply(cm)) => {
                let Some((name, text)) = copy_of(&cm) else {
                    continue;
                };
                match std::fs::write(dir.join(&name), text) {
                    Ok(()) => {
                        written.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, file = name, "rank-table copy not written")
                    }
                }
            }
            Ok(Event::Delete(_) | Event::Init | Event::InitDone) => {}
            Err(e) => {
                // The watcher retries at once on its next poll: pause, so a watch whose API
                // server is gone does not spin without yielding.
                tracing::debug!(error = %e, "rank-table copies: watch error (retrying)");
                tokio::time::sleep(super::timeline::WATCH_RETRY).await;
            }
        }
    }
}

/// The file name and contents of a rank-table ConfigMap's copy; None for other ConfigMaps.
fn copy_of(cm: &ConfigMap) -> Option<(String, String)> {
    let data = cm.data.as_ref()?;
    let table = data.get(KEY_RANK_TABLE)?;
    let name = cm.metadata.name.as_deref()?;
    let epoch = data.get(KEY_EPOCH).map(String::as_str).unwrap_or("unknown");
    let version = cm.metadata.resource_version.as_deref().unwrap_or("unknown");
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    Some((
        format!("{}-e{}-rv{}.json", safe(name), safe(epoch), safe(version)),
        table.clone(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cm(name: &str, data: &[(&str, &str)], rv: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.metadata.resource_version = Some(rv.into());
        c.data = Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        );
        c
    }

    #[test]
    fn a_rank_table_configmap_is_copied_under_its_name_epoch_and_version() {
        let c = cm(
            "decode-rank-table",
            &[(KEY_RANK_TABLE, "{\"version\":\"1.0\"}"), (KEY_EPOCH, "7")],
            "1234",
        );
        assert_eq!(
            copy_of(&c),
            Some((
                "decode-rank-table-e7-rv1234.json".to_owned(),
                "{\"version\":\"1.0\"}".to_owned()
            ))
        );
    }

    #[test]
    fn other_configmaps_and_odd_names_are_handled() {
        assert_eq!(
            copy_of(&cm("kube-root-ca.crt", &[("ca.crt", "x")], "1")),
            None
        );
        let c = cm("a/b", &[(KEY_RANK_TABLE, "{}")], "../9");
        assert_eq!(
            copy_of(&c).map(|(n, _)| n),
            Some("a_b-eunknown-rv___9.json".to_owned())
        );
    }
}
