//! The CSI v1 messages a node plugin of an ephemeral inline volume needs, written by hand
//! as prost structs.
//!
//! Why by hand, and why only these: as for PodResources (see [`crate::proto`]), protoc and
//! a build script stay off every machine, and a plugin without controller, staging,
//! stats or expansion only ever sees the Identity service and four Node methods. Field
//! numbers are those of `csi.proto` v1.9.0 (package `csi.v1`); prost skips fields it does
//! not know, so whatever newer kubelets add decodes as before. The tests below check wire
//! bytes against those numbers.

use std::collections::BTreeMap;

/// `GetPluginInfoRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPluginInfoRequest {}

/// Who the plugin is.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPluginInfoResponse {
    /// The driver name (the CSIDriver object's name, in domain notation).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Opaque to the kubelet.
    #[prost(string, tag = "2")]
    pub vendor_version: String,
    /// Opaque to the kubelet.
    #[prost(btree_map = "string, string", tag = "3")]
    pub manifest: BTreeMap<String, String>,
}

/// `GetPluginCapabilitiesRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPluginCapabilitiesRequest {}

/// What the plugin offers beyond the Node service.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct GetPluginCapabilitiesResponse {
    /// Empty for a node-only plugin (no controller service).
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<PluginCapability>,
}

/// One plugin capability. The proto's `oneof type { Service service = 1;
/// VolumeExpansion volume_expansion = 2; }`: only `service` is modelled (an unset field
/// encodes as nothing, so a one-member oneof and an optional message share their bytes).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PluginCapability {
    /// A service the plugin provides.
    #[prost(message, optional, tag = "1")]
    pub service: Option<PluginServiceCapability>,
}

/// `PluginCapability.Service`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PluginServiceCapability {
    /// A [`PluginServiceType`].
    #[prost(enumeration = "PluginServiceType", tag = "1")]
    pub r#type: i32,
}

/// `PluginCapability.Service.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
pub enum PluginServiceType {
    /// `UNKNOWN`.
    Unknown = 0,
    /// `CONTROLLER_SERVICE`.
    ControllerService = 1,
    /// `VOLUME_ACCESSIBILITY_CONSTRAINTS`.
    VolumeAccessibilityConstraints = 2,
    /// `GROUP_CONTROLLER_SERVICE`.
    GroupControllerService = 3,
}

/// `ProbeRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ProbeRequest {}

/// Whether the plugin is ready.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ProbeResponse {
    /// Unset means ready, as the spec says.
    #[prost(message, optional, tag = "1")]
    pub ready: Option<BoolValue>,
}

/// `google.protobuf.BoolValue`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct BoolValue {
    /// The value.
    #[prost(bool, tag = "1")]
    pub value: bool,
}

/// `NodeGetCapabilitiesRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeGetCapabilitiesRequest {}

/// The optional Node methods the plugin implements.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeGetCapabilitiesResponse {
    /// Empty for a plugin that only publishes (no STAGE_UNSTAGE_VOLUME, so the kubelet
    /// calls NodePublishVolume directly; no VOLUME_MOUNT_GROUP).
    #[prost(message, repeated, tag = "1")]
    pub capabilities: Vec<NodeServiceCapability>,
}

/// One Node capability: the proto's `oneof type { RPC rpc = 1; }`, modelled as an
/// optional message (same bytes, see [`PluginCapability`]).
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeServiceCapability {
    /// An optional method the Node service implements.
    #[prost(message, optional, tag = "1")]
    pub rpc: Option<NodeRpcCapability>,
}

/// `NodeServiceCapability.RPC`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeRpcCapability {
    /// A [`NodeRpcType`].
    #[prost(enumeration = "NodeRpcType", tag = "1")]
    pub r#type: i32,
}

/// `NodeServiceCapability.RPC.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
pub enum NodeRpcType {
    /// `UNKNOWN`.
    Unknown = 0,
    /// `STAGE_UNSTAGE_VOLUME`.
    StageUnstageVolume = 1,
    /// `GET_VOLUME_STATS`.
    GetVolumeStats = 2,
    /// `EXPAND_VOLUME`.
    ExpandVolume = 3,
    /// `VOLUME_CONDITION`.
    VolumeCondition = 4,
    /// `SINGLE_NODE_MULTI_WRITER`.
    SingleNodeMultiWriter = 5,
    /// `VOLUME_MOUNT_GROUP`.
    VolumeMountGroup = 6,
}

/// `NodeGetInfoRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeGetInfoRequest {}

/// The node as the plugin knows it; the kubelet records it in the CSINode object.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeGetInfoResponse {
    /// The node's identifier (here the Kubernetes node name).
    #[prost(string, tag = "1")]
    pub node_id: String,
    /// 0: no limit of the plugin's own.
    #[prost(int64, tag = "2")]
    pub max_volumes_per_node: i64,
    /// Where the node is; unset, as a plugin without topology constraints leaves it.
    #[prost(message, optional, tag = "3")]
    pub accessible_topology: Option<Topology>,
}

/// `Topology`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct Topology {
    /// Segments such as `{"zone": "z1"}`.
    #[prost(btree_map = "string, string", tag = "1")]
    pub segments: BTreeMap<String, String>,
}

/// `NodePublishVolume`: make the volume appear at `target_path` for one Pod.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodePublishVolumeRequest {
    /// The volume's id; for an inline ephemeral volume the kubelet makes one up per Pod
    /// and volume (`csi-<sha256>`).
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// From ControllerPublishVolume; empty without a controller.
    #[prost(btree_map = "string, string", tag = "2")]
    pub publish_context: BTreeMap<String, String>,
    /// From NodeStageVolume; empty without STAGE_UNSTAGE_VOLUME.
    #[prost(string, tag = "3")]
    pub staging_target_path: String,
    /// Where to publish; the kubelet has made its parent, the plugin makes the path.
    #[prost(string, tag = "4")]
    pub target_path: String,
    /// How the Pod will use the volume.
    #[prost(message, optional, tag = "5")]
    pub volume_capability: Option<VolumeCapability>,
    /// Publish read-only.
    #[prost(bool, tag = "6")]
    pub readonly: bool,
    /// Secrets (and service-account tokens when the CSIDriver asks for them there).
    #[prost(btree_map = "string, string", tag = "7")]
    pub secrets: BTreeMap<String, String>,
    /// The inline volume's attributes, plus the Pod's identity under the
    /// [`super::context`] keys when the CSIDriver has `podInfoOnMount`.
    #[prost(btree_map = "string, string", tag = "8")]
    pub volume_context: BTreeMap<String, String>,
}

/// `NodePublishVolumeResponse {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodePublishVolumeResponse {}

/// `NodeUnpublishVolume`: undo a publish; the plugin removes what it made at the path.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeUnpublishVolumeRequest {
    /// The volume's id, as published.
    #[prost(string, tag = "1")]
    pub volume_id: String,
    /// The path it was published at.
    #[prost(string, tag = "2")]
    pub target_path: String,
}

/// `NodeUnpublishVolumeResponse {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct NodeUnpublishVolumeResponse {}

/// How a volume is to be accessed.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct VolumeCapability {
    /// The proto's `oneof access_type`: a block device or a mounted filesystem.
    #[prost(oneof = "AccessType", tags = "1, 2")]
    pub access_type: Option<AccessType>,
    /// Who may access it.
    #[prost(message, optional, tag = "3")]
    pub access_mode: Option<AccessMode>,
}

/// `VolumeCapability.access_type`.
#[derive(Clone, PartialEq, ::prost::Oneof)]
pub enum AccessType {
    /// `BlockVolume block = 1`.
    #[prost(message, tag = "1")]
    Block(BlockVolume),
    /// `MountVolume mount = 2`.
    #[prost(message, tag = "2")]
    Mount(MountVolume),
}

/// `VolumeCapability.BlockVolume {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct BlockVolume {}

/// `VolumeCapability.MountVolume`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct MountVolume {
    /// The filesystem type; empty means unspecified.
    #[prost(string, tag = "1")]
    pub fs_type: String,
    /// Mount options (may hold secrets: never log them).
    #[prost(string, repeated, tag = "2")]
    pub mount_flags: Vec<String>,
    /// The group to mount as; only sent to plugins with VOLUME_MOUNT_GROUP.
    #[prost(string, tag = "3")]
    pub volume_mount_group: String,
}

/// `VolumeCapability.AccessMode`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct AccessMode {
    /// An [`AccessModeKind`].
    #[prost(enumeration = "AccessModeKind", tag = "1")]
    pub mode: i32,
}

/// `VolumeCapability.AccessMode.Mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
pub enum AccessModeKind {
    /// `UNKNOWN`.
    Unknown = 0,
    /// `SINGLE_NODE_WRITER` (what the kubelet sends for an inline volume).
    SingleNodeWriter = 1,
    /// `SINGLE_NODE_READER_ONLY`.
    SingleNodeReaderOnly = 2,
    /// `MULTI_NODE_READER_ONLY`.
    MultiNodeReaderOnly = 3,
    /// `MULTI_NODE_SINGLE_WRITER`.
    MultiNodeSingleWriter = 4,
    /// `MULTI_NODE_MULTI_WRITER`.
    MultiNodeMultiWriter = 5,
    /// `SINGLE_NODE_SINGLE_WRITER`.
    SingleNodeSingleWriter = 6,
    /// `SINGLE_NODE_MULTI_WRITER`.
    SingleNodeMultiWriter = 7,
}

/// The gRPC method paths (`/<package>.<service>/<method>`).
pub mod path {
    /// `Identity.GetPluginInfo`.
    pub const GET_PLUGIN_INFO: &str = "/csi.v1.Identity/GetPluginInfo";
    /// `Identity.GetPluginCapabilities`.
    pub const GET_PLUGIN_CAPABILITIES: &str = "/csi.v1.Identity/GetPluginCapabilities";
    /// `Identity.Probe`.
    pub const PROBE: &str = "/csi.v1.Identity/Probe";
    /// `Node.NodeGetCapabilities`.
    pub const NODE_GET_CAPABILITIES: &str = "/csi.v1.Node/NodeGetCapabilities";
    /// `Node.NodeGetInfo`.
    pub const NODE_GET_INFO: &str = "/csi.v1.Node/NodeGetInfo";
    /// `Node.NodePublishVolume`.
    pub const NODE_PUBLISH_VOLUME: &str = "/csi.v1.Node/NodePublishVolume";
    /// `Node.NodeUnpublishVolume`.
    pub const NODE_UNPUBLISH_VOLUME: &str = "/csi.v1.Node/NodeUnpublishVolume";
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes as protoc encodes them, so a wrong tag here cannot go unnoticed.
    #[test]
    fn wire_bytes_match_the_proto_field_numbers() {
        let publish = NodePublishVolumeRequest {
            target_path: "t".into(),
            volume_context: BTreeMap::from([("k".into(), "v".into())]),
            ..Default::default()
        };
        let expected: &[u8] = &[
            0x22, 1, b't', // 4: target_path
            0x42, 6, // 8: volume_context, one map entry
            0x0a, 1, b'k', // 1: key
            0x12, 1, b'v', // 2: value
        ];
        assert_eq!(publish.encode_to_vec(), expected);
        assert_eq!(NodePublishVolumeRequest::decode(expected).unwrap(), publish);

        let publish = NodePublishVolumeRequest {
            volume_id: "i".into(),
            volume_capability: Some(VolumeCapability {
                access_type: Some(AccessType::Mount(MountVolume::default())),
                access_mode: Some(AccessMode {
                    mode: AccessModeKind::SingleNodeWriter as i32,
                }),
            }),
            readonly: true,
            ..Default::default()
        };
        let expected: &[u8] = &[
            0x0a, 1, b'i', // 1: volume_id
            0x2a, 6, // 5: volume_capability
            0x12, 0, // 2: access_type.mount, empty
            0x1a, 2, 0x08, 1, // 3: access_mode { 1: mode = SINGLE_NODE_WRITER }
            0x30, 1, // 6: readonly
        ];
        assert_eq!(publish.encode_to_vec(), expected);
        let block = VolumeCapability {
            access_type: Some(AccessType::Block(BlockVolume {})),
            access_mode: None,
        };
        assert_eq!(block.encode_to_vec(), [0x0a, 0], "1: access_type.block");

        let unpublish = NodeUnpublishVolumeRequest {
            volume_id: "i".into(),
            target_path: "t".into(),
        };
        assert_eq!(unpublish.encode_to_vec(), [0x0a, 1, b'i', 0x12, 1, b't']);
        let info = NodeGetInfoResponse {
            node_id: "n".into(),
            max_volumes_per_node: 3,
            accessible_topology: None,
        };
        assert_eq!(info.encode_to_vec(), [0x0a, 1, b'n', 0x10, 3]);
        let probe = ProbeResponse {
            ready: Some(BoolValue { value: true }),
        };
        assert_eq!(probe.encode_to_vec(), [0x0a, 2, 0x08, 1]);
        let caps = NodeGetCapabilitiesResponse {
            capabilities: vec![NodeServiceCapability {
                rpc: Some(NodeRpcCapability {
                    r#type: NodeRpcType::VolumeMountGroup as i32,
                }),
            }],
        };
        assert_eq!(caps.encode_to_vec(), [0x0a, 4, 0x0a, 2, 0x08, 6]);
        let plugin = GetPluginInfoResponse {
            name: "d".into(),
            vendor_version: "1".into(),
            manifest: BTreeMap::new(),
        };
        assert_eq!(plugin.encode_to_vec(), [0x0a, 1, b'd', 0x12, 1, b'1']);
    }
}
