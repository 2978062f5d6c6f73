//! The agent as the kubelet's CSI node plugin for one kind of volume: the local-API
//! directory of a member Pod (driver `hcomm_crds::local_api::CSI_DRIVER`, ephemeral inline
//! volumes only). Why CSI and not a hostPath: Pod Security `baseline` refuses every
//! hostPath volume, and tenants' namespaces enforce it; a CSI inline volume is allowed, and
//! the kubelet names the Pod to the driver, so each Pod's volume holds its own socket and
//! nothing else.
//!
//! The kubelet finds the driver through the registration socket in its plugin-registration
//! directory (the agent plays the node-driver-registrar's part, so no sidecar image is
//! needed), then calls `NodePublishVolume` before the Pod's containers start and
//! `NodeUnpublishVolume` after they stopped. Both requests are checked
//! ([`super::csi_target`]) before the agent touches a directory; the sockets themselves are
//! [`super::pods::PodSockets`]'.

use std::path::PathBuf;
use std::sync::Arc;

use hcomm_kubelet::Status;
use hcomm_kubelet::csi::{
    AccessType, NodePlugin, NodePluginServer, NodePublishVolumeRequest, NodeUnpublishVolumeRequest,
};

use super::csi_target;
use super::pods::PodSockets;
use crate::config::CsiDriverConfig;
use crate::error::{Error, Result};

/// The driver: publishes Pods' local-API volumes into [`PodSockets`].
pub struct LocalApiDriver {
    sockets: Arc<PodSockets>,
    kubelet_root: PathBuf,
    node: String,
}

impl LocalApiDriver {
    pub fn new(sockets: Arc<PodSockets>, kubelet_root: PathBuf, node: String) -> LocalApiDriver {
        LocalApiDriver {
            sockets,
            kubelet_root,
            node,
        }
    }
}

impl NodePlugin for LocalApiDriver {
    fn driver_name(&self) -> &str {
        hcomm_crds::local_api::CSI_DRIVER
    }

    fn vendor_version(&self) -> &str {
        env!("CARGO_PKG_VERSION")
    }

    fn node_id(&self) -> &str {
        &self.node
    }

    fn publish(&self, request: NodePublishVolumeRequest) -> std::result::Result<(), Status> {
        let block = request
            .volume_capability
            .as_ref()
            .is_some_and(|c| matches!(c.access_type, Some(AccessType::Block(_))));
        let asked = csi_target::Publish {
            target_path: &request.target_path,
            context: &request.volume_context,
            block,
            read_only: request.readonly,
        };
        let (target, id) =
            csi_target::publish_for(&self.kubelet_root, asked).map_err(|refusal| {
                tracing::warn!(target_path = %request.target_path, %refusal, "CSI publish refused");
                Status::invalid_argument(refusal.to_string())
            })?;
        self.sockets.publish(&target, &id).map_err(|e| {
            tracing::error!(pod = %id.key(), error = %e, "cannot publish the Pod's local-API volume");
            Status::internal(e.to_string())
        })?;
        tracing::info!(pod = %id.key(), target = %target.path.display(), "published the Pod's local-API volume");
        Ok(())
    }

    fn unpublish(&self, request: NodeUnpublishVolumeRequest) -> std::result::Result<(), Status> {
        let target = csi_target::parse(&self.kubelet_root, &request.target_path).map_err(|r| {
            tracing::warn!(target_path = %request.target_path, refusal = %r, "CSI unpublish refused");
            Status::invalid_argument(r.to_string())
        })?;
        self.sockets.unpublish(&target).map_err(|e| {
            tracing::error!(target = %target.path.display(), error = %e, "cannot unpublish a local-API volume");
            Status::internal(e.to_string())
        })?;
        tracing::info!(target = %target.path.display(), "unpublished a local-API volume");
        Ok(())
    }

    fn registration_status(&self, registered: bool, error: &str) {
        if registered {
            tracing::info!(
                driver = hcomm_crds::local_api::CSI_DRIVER,
                "the kubelet registered the local-API CSI driver"
            );
        } else {
            tracing::error!(driver = hcomm_crds::local_api::CSI_DRIVER, %error, "the kubelet refused to register the local-API CSI driver; member Pods cannot start on this node");
        }
    }
}

/// Serves the driver on `cfg`'s sockets until the returned server is shut down.
pub async fn serve(cfg: &CsiDriverConfig, driver: LocalApiDriver) -> Result<NodePluginServer> {
    let registration = cfg.registration_socket();
    hcomm_kubelet::csi::serve_node_plugin(&cfg.socket, Some(&registration), Arc::new(driver))
        .await
        .map_err(|e| Error::Config(format!("cannot serve the local-API CSI driver: {e}")))
}
