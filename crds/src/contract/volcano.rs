//! What hcomm writes for the Volcano scheduler when a group asks for gang scheduling
//! (`spec.scheduling.podGroup`): a `scheduling.volcano.sh/v1beta1` `PodGroup` per group,
//! and on each member Pod the annotation that names it.
//!
//! These names are Volcano's (its `apis` repository: `scheduling/v1beta1` types, and
//! `KubeGroupNameAnnotationKey`), not ours. hcomm reaches the PodGroup as a dynamic object
//! (no Volcano crate): only the fields below are written.

/// The API group of Volcano's PodGroup.
pub const API_GROUP: &str = "scheduling.volcano.sh";
/// The API version of Volcano's PodGroup that hcomm writes.
pub const API_VERSION: &str = "v1beta1";
/// The kind.
pub const KIND: &str = "PodGroup";
/// The resource's plural (its URL path and RBAC name).
pub const PLURAL: &str = "podgroups";
/// Pod annotation naming the Pod's PodGroup; Volcano schedules the Pods of one PodGroup
/// as a gang.
pub const ANNOTATION_GROUP_NAME: &str = "scheduling.k8s.io/group-name";

/// The PodGroup of group `group`: the group's own name (one PodGroup per group, in its
/// namespace, owned by it).
pub fn pod_group_name(group: &str) -> String {
    group.to_owned()
}
