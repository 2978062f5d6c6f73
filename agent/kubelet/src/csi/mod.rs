//! The CSI node plugin side of an ephemeral inline volume, and the kubelet's plugin
//! registration that finds it.
//!
//! The agent serves a node plugin (`server`, behind the `csi-node` feature) that the
//! kubelet registers and calls to publish a volume into a Pod; the e2e testbed plays the
//! kubelet with the clients ([`client`], always compiled). Only the messages such a plugin
//! sees are modelled ([`proto`] for CSI v1, [`registration`] for plugin registration v1).

pub mod client;
pub mod proto;
pub mod registration;
#[cfg(feature = "csi-node")]
pub mod server;

pub use client::{CsiError, CsiNodeClient, RegistrationClient};
pub use proto::{
    AccessMode, AccessModeKind, AccessType, BlockVolume, MountVolume, NodePublishVolumeRequest,
    NodeUnpublishVolumeRequest, VolumeCapability,
};
pub use registration::{PLUGIN_TYPE_CSI, PluginInfo};
#[cfg(feature = "csi-node")]
pub use server::{NodePlugin, NodePluginServer, serve_node_plugin};

/// The `volume_context` keys the kubelet adds to a `NodePublishVolume` when the CSIDriver
/// has `podInfoOnMount: true`: who the volume is for.
pub mod context {
    /// The Pod's name.
    pub const POD_NAME: &str = "csi.storage.k8s.io/pod.name";
    /// The Pod's namespace.
    pub const POD_NAMESPACE: &str = "csi.storage.k8s.io/pod.namespace";
    /// The Pod's UID.
    pub const POD_UID: &str = "csi.storage.k8s.io/pod.uid";
    /// The Pod's service account.
    pub const SERVICE_ACCOUNT_NAME: &str = "csi.storage.k8s.io/serviceAccount.name";
    /// `"true"` for an inline ephemeral volume, `"false"` for a persistent one.
    pub const EPHEMERAL: &str = "csi.storage.k8s.io/ephemeral";
}
