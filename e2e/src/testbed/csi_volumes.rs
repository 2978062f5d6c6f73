//! The process kubelet's CSI volumes: what a kubelet does for a Pod's CSI inline volumes,
//! over the real gRPC protocols, so the agent's CSI driver is exercised as on a node.
//!
//! - Registration: the driver's registration socket in the host's plugin-registration
//!   directory is found, `GetInfo` answered (type, name, a 1.x version), `NodeGetInfo`
//!   asked on the endpoint it names, and the verdict sent back with
//!   `NotifyRegistrationStatus`, as the kubelet's plugin watcher does.
//! - Before a Pod's containers start, each CSI volume is published at the kubelet's own
//!   target path (`<kubelet root>/pods/<uid>/volumes/kubernetes.io~csi/<volume>/mount`,
//!   its parent made first) with the Pod named in the volume context (`podInfoOnMount`,
//!   `ephemeral: "true"`); a failure holds the Pod back, retried as a kubelet retries.
//! - After its processes stopped, each volume is unpublished.
//!
//! Processes have no mount namespace here, so "the container's mount" of a volume is a
//! short symlink to the target (`<views>/<uid>/<volume>`): the kubelet's target paths are
//! longer than a Unix socket address may be, and a worker connects through the link.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use hcomm_kubelet::csi::{
    AccessMode, AccessModeKind, AccessType, CsiNodeClient, MountVolume, NodePublishVolumeRequest,
    NodeUnpublishVolumeRequest, RegistrationClient, VolumeCapability, context,
};
use k8s_openapi::api::core::v1::Pod;
use sha2::{Digest, Sha256};

use super::launch;

/// Each call to a plugin (connect included) ends within this.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// One CSI inline volume of a Pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiVolume {
    /// The volume's name in the Pod spec.
    pub name: String,
    /// Its driver.
    pub driver: String,
    /// `readOnly`.
    pub read_only: bool,
    /// `volumeAttributes`.
    pub attributes: BTreeMap<String, String>,
}

/// The CSI inline volumes of `pod`.
pub fn of(pod: &Pod) -> Vec<CsiVolume> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            let csi = v.csi.as_ref()?;
            Some(CsiVolume {
                name: v.name.clone(),
                driver: csi.driver.clone(),
                read_only: csi.read_only.unwrap_or(false),
                attributes: csi.volume_attributes.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// A Pod's published volumes, for their unpublish.
struct Published {
    host_root: PathBuf,
    volumes: Vec<CsiVolume>,
}

/// The CSI side of the process kubelet (shared by its tasks).
pub struct CsiVolumes {
    views: PathBuf,
    /// (kubelet root, driver) → the driver's registered endpoint.
    drivers: Mutex<HashMap<(PathBuf, String), PathBuf>>,
    /// Pod UID → what was published for it.
    published: Mutex<HashMap<String, Published>>,
}

impl CsiVolumes {
    /// Views of published volumes go below `views` (keep the path short: see the module docs).
    pub fn new(views: PathBuf) -> CsiVolumes {
        CsiVolumes {
            views,
            drivers: Mutex::new(HashMap::new()),
            published: Mutex::new(HashMap::new()),
        }
    }

    /// Publishes every CSI volume of `pod` on the host rooted at `host_root` and returns
    /// where its processes see each (volume name → view); Err says why the Pod cannot start
    /// yet.
    pub async fn publish(
        &self,
        pod: &Pod,
        node: &str,
        host_root: &Path,
    ) -> Result<BTreeMap<String, PathBuf>, String> {
        let volumes = of(pod);
        if volumes.is_empty() {
            return Ok(BTreeMap::new());
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let kubelet_root = launch::kubelet_root(host_root);
        let mut views = BTreeMap::new();
        for v in &volumes {
            let endpoint = self.endpoint(&kubelet_root, &v.driver, node).await?;
            let target = launch::csi_target(host_root, &uid, &v.name);
            let parent = target.parent().expect("a target has a parent");
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("create {}: {e}", parent.display()))?;
            let request = publish_request(pod, v, &target);
            let result = CsiNodeClient::new(&endpoint, CALL_DEADLINE)
                .node_publish(request)
                .await;
            if let Err(e) = result {
                // A kubelet forgets a driver whose socket went away and finds it again.
                self.forget(&kubelet_root, &v.driver);
                return Err(format!(
                    "MountVolume.SetUp failed for volume {:?}: {e}",
                    v.name
                ));
            }
            {
                let mut published = self.published.lock().expect("csi published");
                let p = published.entry(uid.clone()).or_insert_with(|| Published {
                    host_root: host_root.to_path_buf(),
                    volumes: Vec::new(),
                });
                p.volumes.retain(|p| p.name != v.name);
                p.volumes.push(v.clone());
            }
            views.insert(v.name.clone(), self.view(&uid, &v.name, &target)?);
        }
        Ok(views)
    }

    /// Unpublishes whatever was published for the Pod with `uid` (its processes stopped),
    /// logging what fails: a kubelet retries that in its next sync, the testbed only says so.
    pub async fn unpublish(&self, uid: &str) {
        let Some(p) = self.published.lock().expect("csi published").remove(uid) else {
            return;
        };
        let kubelet_root = launch::kubelet_root(&p.host_root);
        for v in &p.volumes {
            let target = launch::csi_target(&p.host_root, uid, &v.name);
            let endpoint = self
                .drivers
                .lock()
                .expect("csi drivers")
                .get(&(kubelet_root.clone(), v.driver.clone()))
                .cloned();
            let Some(endpoint) = endpoint else {
                tracing::warn!(%uid, volume = %v.name, "kubelet: the volume's driver is gone; not unpublished");
                continue;
            };
            let request = NodeUnpublishVolumeRequest {
                volume_id: volume_handle(uid, &v.name),
                target_path: target.display().to_string(),
            };
            match CsiNodeClient::new(&endpoint, CALL_DEADLINE)
                .node_unpublish(request)
                .await
            {
                Ok(()) => {
                    if let Some(parent) = target.parent() {
                        let _ = std::fs::remove_dir(parent);
                    }
                }
                Err(e) => {
                    tracing::warn!(%uid, volume = %v.name, error = %e, "kubelet: UnmountVolume.TearDown failed");
                }
            }
        }
        let _ = std::fs::remove_dir_all(self.views.join(uid));
    }

    /// The short link a Pod's processes use for a published volume.
    fn view(&self, uid: &str, volume: &str, target: &Path) -> Result<PathBuf, String> {
        let dir = self.views.join(uid);
        std::fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let link = dir.join(volume);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link)
            .map_err(|e| format!("link {}: {e}", link.display()))?;
        Ok(link)
    }

    fn forget(&self, kubelet_root: &Path, driver: &str) {
        self.drivers
            .lock()
            .expect("csi drivers")
            .remove(&(kubelet_root.to_path_buf(), driver.to_owned()));
    }

    /// The endpoint of `driver` on this host, registering it first if it is new.
    async fn endpoint(
        &self,
        kubelet_root: &Path,
        driver: &str,
        node: &str,
    ) -> Result<PathBuf, String> {
        let key = (kubelet_root.to_path_buf(), driver.to_owned());
        if let Some(e) = self.drivers.lock().expect("csi drivers").get(&key) {
            return Ok(e.clone());
        }
        let endpoint = register(kubelet_root, driver, node).await?;
        self.drivers
            .lock()
            .expect("csi drivers")
            .insert(key, endpoint.clone());
        Ok(endpoint)
    }
}

/// Registers `driver` from the host's plugin-registration directory, as the kubelet's
/// plugin watcher does; Err when no socket there is that driver (not registered yet).
async fn register(kubelet_root: &Path, driver: &str, node: &str) -> Result<PathBuf, String> {
    let dir = super::agent_args::csi_paths(kubelet_root).registration_dir;
    let not_found =
        || format!("driver name {driver} not found in the list of registered CSI drivers");
    let entries = std::fs::read_dir(&dir).map_err(|_| not_found())?;
    for entry in entries.flatten() {
        let socket = entry.path();
        let Ok(info) = RegistrationClient::new(&socket, CALL_DEADLINE)
            .get_info()
            .await
        else {
            continue;
        };
        if info.name != driver {
            continue;
        }
        let registration = RegistrationClient::new(&socket, CALL_DEADLINE);
        let verdict = check(&info, node).await;
        let _ = registration
            .notify(
                verdict.is_ok(),
                verdict.as_ref().err().map_or("", String::as_str),
            )
            .await;
        let endpoint = verdict?;
        tracing::info!(%driver, endpoint = %endpoint.display(), "kubelet: registered CSI driver");
        return Ok(endpoint);
    }
    Err(not_found())
}

/// The kubelet's checks of a plugin's `GetInfo` answer, then `NodeGetInfo` on its endpoint.
async fn check(info: &hcomm_kubelet::csi::PluginInfo, node: &str) -> Result<PathBuf, String> {
    if info.r#type != hcomm_kubelet::csi::PLUGIN_TYPE_CSI {
        return Err(format!("plugin type {:?} is not CSIPlugin", info.r#type));
    }
    if !info.supported_versions.iter().any(|v| v.starts_with("1.")) {
        return Err(format!(
            "none of the versions {:?} is supported",
            info.supported_versions
        ));
    }
    let endpoint = PathBuf::from(&info.endpoint);
    let node_info = CsiNodeClient::new(&endpoint, CALL_DEADLINE)
        .node_get_info()
        .await
        .map_err(|e| format!("NodeGetInfo: {e}"))?;
    if node_info.node_id != node {
        return Err(format!(
            "NodeGetInfo names node {:?}, this is {node:?}",
            node_info.node_id
        ));
    }
    Ok(endpoint)
}

/// The kubelet's `NodePublishVolume` for inline volume `v` of `pod` at `target`.
fn publish_request(pod: &Pod, v: &CsiVolume, target: &Path) -> NodePublishVolumeRequest {
    let meta = &pod.metadata;
    let uid = meta.uid.clone().unwrap_or_default();
    let mut volume_context = v.attributes.clone();
    let service_account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_default();
    for (k, value) in [
        (context::POD_NAME, meta.name.clone().unwrap_or_default()),
        (
            context::POD_NAMESPACE,
            meta.namespace.clone().unwrap_or_default(),
        ),
        (context::POD_UID, uid.clone()),
        (context::SERVICE_ACCOUNT_NAME, service_account),
        (context::EPHEMERAL, "true".to_owned()),
    ] {
        volume_context.insert(k.to_owned(), value);
    }
    NodePublishVolumeRequest {
        volume_id: volume_handle(&uid, &v.name),
        target_path: target.display().to_string(),
        volume_capability: Some(VolumeCapability {
            access_type: Some(AccessType::Mount(MountVolume::default())),
            access_mode: Some(AccessMode {
                mode: AccessModeKind::SingleNodeWriter as i32,
            }),
        }),
        readonly: v.read_only,
        volume_context,
        ..NodePublishVolumeRequest::default()
    }
}

/// The kubelet's handle of an inline volume: `csi-<sha256(pod uid + volume name)>`.
fn volume_handle(uid: &str, volume: &str) -> String {
    let digest = Sha256::digest(format!("{uid}{volume}").as_bytes());
    format!("csi-{}", hex::encode(digest))
}
