//! The hcomm API (`hcomm.io/v1alpha1`): the types users write (`HcommGroup`), the types the
//! node agents publish (`HcommNode`), and the contract between operator, agent and worker:
//! label, annotation and condition names and the workers' environment ([`contract`]), the
//! HCCL rank table ([`rank_table`]) and the local worker API ([`local_api`]).
//!
//! Everything here is declared once, in Rust; the CRD YAML under `crds/` is generated from
//! these types by `cargo crdgen` and a test fails when the two drift apart. This crate has
//! no runtime: it is shared by the operator, the agent and the tests.

pub mod conditions;
pub mod contract;
pub mod group;
pub mod local_api;
pub mod node;
pub mod rank_table;

pub use group::{
    Algorithm, Backend, CommSpec, GroupPhase, HcommGroup, HcommGroupSpec, HcommGroupStatus,
    MemberPhase, MemberStatus, RankRange, Role, RollingUpdate, ScalingSpec, ScalingStrategy,
    TopologyEntry, UpdateStrategy, WeightsSpec,
};
pub use node::{
    DeviceHealth, DeviceInventory, HcommNode, HcommNodeSpec, HcommNodeStatus, LinkTestResult,
    NicInventory, NicRole, SoftwareVersions, TopologyLabels,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every hcomm resource.
pub const API_GROUP: &str = "hcomm.io";
/// The one served and stored version.
pub const API_VERSION: &str = "v1alpha1";
/// `apiVersion` of every hcomm object: `hcomm.io/v1alpha1`.
pub const API_GROUP_VERSION: &str = "hcomm.io/v1alpha1";

/// Every CRD this crate defines, in install order.
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![group_crd(), HcommNode::crd()]
}

/// The `HcommGroup` CRD, with the descriptions inside the embedded Pod template removed.
///
/// The full `PodTemplateSpec` schema keeps validation exact, but its field descriptions
/// would make the CRD over 500 KB, past the 256 KB limit of client-side `kubectl apply`
/// (its last-applied annotation). `kubectl explain pods` documents those fields anyway;
/// controller-gen's `maxDescLen=0` makes the same trade.
pub fn group_crd() -> CustomResourceDefinition {
    let crd = HcommGroup::crd();
    let mut value = serde_json::to_value(&crd).expect("a CRD serializes to JSON");
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            let template = version.pointer_mut(
                "/schema/openAPIV3Schema/properties/spec/properties/template/properties",
            );
            if let Some(template) = template {
                strip_descriptions(template);
            }
        }
    }
    serde_json::from_value(value).expect("stripping descriptions keeps a valid CRD")
}

fn strip_descriptions(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if map.get("description").is_some_and(|d| d.is_string()) {
                map.remove("description");
            }
            map.values_mut().for_each(strip_descriptions);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// The file name under `crds/` (and `charts/hcomm/crds/`) that holds a CRD's YAML.
pub fn crd_file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// The YAML document committed for a CRD: a generated-file header followed by the CRD.
pub fn crd_yaml(crd: &CustomResourceDefinition) -> Result<String, serde_yaml::Error> {
    let body = serde_yaml::to_string(crd)?;
    Ok(format!(
        "# Generated from the Rust types in crds/src by `cargo crdgen`. Do not edit.\n{body}"
    ))
}
