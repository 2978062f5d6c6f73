//! The kubelet's plugin registration v1 messages, written by hand as prost structs.
//!
//! How registration goes: a plugin puts a socket in the kubelet's
//! `/var/lib/kubelet/plugins_registry/`; the kubelet's plugin watcher sees it, calls
//! `GetInfo` there, checks the answer (type, name, versions), calls `NodeGetInfo` on the
//! CSI endpoint the answer names, and reports its verdict with `NotifyRegistrationStatus`.
//! Field numbers are those of kubernetes `staging/src/k8s.io/kubelet/pkg/apis/
//! pluginregistration/v1/api.proto` (package `pluginregistration`, service `Registration`).

/// `InfoRequest {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct InfoRequest {}

/// What a plugin says it is.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PluginInfo {
    /// [`PLUGIN_TYPE_CSI`] for a CSI driver (`DevicePlugin` or `DRAPlugin` for others).
    #[prost(string, tag = "1")]
    pub r#type: String,
    /// For CSI, the driver name.
    #[prost(string, tag = "2")]
    pub name: String,
    /// For CSI, the path of the CSI socket as the kubelet sees it; empty means the
    /// registration socket itself.
    #[prost(string, tag = "3")]
    pub endpoint: String,
    /// The CSI versions the plugin speaks; the kubelet picks the highest it knows.
    #[prost(string, repeated, tag = "4")]
    pub supported_versions: Vec<String>,
}

/// The kubelet's verdict.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RegistrationStatus {
    /// True when the kubelet registered the plugin.
    #[prost(bool, tag = "1")]
    pub plugin_registered: bool,
    /// Why not, when it did not; empty otherwise.
    #[prost(string, tag = "2")]
    pub error: String,
}

/// `RegistrationStatusResponse {}`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct RegistrationStatusResponse {}

/// The plugin type of a CSI driver, as the kubelet's CSI handler is registered under.
pub const PLUGIN_TYPE_CSI: &str = "CSIPlugin";

/// The CSI versions a plugin of this crate reports (the kubelet accepts 1.x).
pub const SUPPORTED_VERSIONS: &[&str] = &["1.0.0"];

/// The gRPC method paths (`/<package>.<service>/<method>`).
pub mod path {
    /// `Registration.GetInfo`.
    pub const GET_INFO: &str = "/pluginregistration.Registration/GetInfo";
    /// `Registration.NotifyRegistrationStatus`.
    pub const NOTIFY_REGISTRATION_STATUS: &str =
        "/pluginregistration.Registration/NotifyRegistrationStatus";
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn wire_bytes_match_the_proto_field_numbers() {
        let info = PluginInfo {
            r#type: "t".into(),
            name: "n".into(),
            endpoint: "e".into(),
            supported_versions: vec!["v".into()],
        };
        let expected: &[u8] = &[
            0x0a, 1, b't', // 1: type
            0x12, 1, b'n', // 2: name
            0x1a, 1, b'e', // 3: endpoint
            0x22, 1, b'v', // 4: supported_versions
        ];
        assert_eq!(info.encode_to_vec(), expected);
        assert_eq!(PluginInfo::decode(expected).unwrap(), info);
        let status = RegistrationStatus {
            plugin_registered: true,
            error: "x".into(),
        };
        assert_eq!(status.encode_to_vec(), [0x08, 1, 0x12, 1, b'x']);
    }
}
