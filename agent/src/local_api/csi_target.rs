//! Which CSI publish requests the agent's local-API driver accepts (pure, unit-tested).
//!
//! The kubelet publishes an ephemeral inline volume at
//! `<kubelet root>/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount` and, because
//! the `CSIDriver` has `podInfoOnMount`, names the Pod in the volume context. The agent runs
//! as root and creates a directory and a socket at that path, so the path is untrusted
//! input like any other: it must have exactly that shape below the configured kubelet
//! root (no `..`, no `.`, no doubled `/`), and the UID in it must be the Pod the context
//! names. Anything else is refused before a directory is touched.

use std::path::{Path, PathBuf};

use hcomm_kubelet::csi::context;

use super::caller::is_pod_uid;
use super::server::PodIdentity;

/// The kubelet's directory for a CSI volume's files, between the Pod UID and the volume name.
const CSI_VOLUMES: [&str; 2] = ["volumes", "kubernetes.io~csi"];
/// The last component of a CSI publish target.
const MOUNT: &str = "mount";

/// A publish target that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiTarget {
    /// The Pod whose volume it is.
    pub uid: String,
    /// The volume's name in the Pod spec.
    pub volume: String,
    /// The target directory.
    pub path: PathBuf,
}

/// Why a publish or unpublish request is refused; the text reaches the kubelet's event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetRefusal {
    #[error(
        "CsiTargetOutsideKubelet: target path {path:?} is not <{root}>/pods/<pod uid>/volumes/kubernetes.io~csi/<volume>/mount"
    )]
    Shape { path: String, root: String },
    #[error(
        "CsiNotEphemeral: the {driver} driver serves ephemeral inline volumes only (volume context {key}={value:?}); a PersistentVolume cannot name it"
    )]
    NotEphemeral {
        driver: &'static str,
        key: &'static str,
        value: Option<String>,
    },
    #[error(
        "CsiPodMismatch: the volume context names Pod UID {context:?}, the target path belongs to {path}"
    )]
    PodMismatch {
        context: Option<String>,
        path: String,
    },
    #[error(
        "CsiPodUnnamed: the volume context lacks {key} (is podInfoOnMount off in the CSIDriver?)"
    )]
    PodUnnamed { key: &'static str },
    #[error("CsiBlockVolume: the local-API volume is a directory; a block volume cannot be served")]
    Block,
    #[error(
        "CsiNotReadOnly: the local-API volume is published read-only only (set readOnly: true), so no worker can replace its socket"
    )]
    NotReadOnly,
}

/// `path` checked against the shape above, below `kubelet_root`.
pub fn parse(kubelet_root: &Path, path: &str) -> Result<CsiTarget, TargetRefusal> {
    let shape = || TargetRefusal::Shape {
        path: path.chars().take(512).collect(),
        root: kubelet_root.display().to_string(),
    };
    let root = kubelet_root
        .to_str()
        .ok_or_else(shape)?
        .trim_end_matches('/');
    let rest = path
        .strip_prefix(root)
        .and_then(|r| r.strip_prefix("/pods/"))
        .ok_or_else(shape)?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [uid, v, csi, volume, mount] = parts[..] else {
        return Err(shape());
    };
    if !is_pod_uid(uid) || [v, csi] != CSI_VOLUMES || mount != MOUNT || !is_dns_label(volume) {
        return Err(shape());
    }
    Ok(CsiTarget {
        uid: uid.to_owned(),
        volume: volume.to_owned(),
        path: PathBuf::from(path),
    })
}

/// What a publish request asks for, as far as the checks go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publish<'a> {
    /// Where.
    pub target_path: &'a str,
    /// The volume context (the Pod's identity with `podInfoOnMount`).
    pub context: &'a std::collections::BTreeMap<String, String>,
    /// A block volume was asked for.
    pub block: bool,
    /// The volume is published read-only.
    pub read_only: bool,
}

/// The Pod a publish request is for: the target's shape, a read-only ephemeral filesystem
/// volume, and the context's Pod (named, and the UID the path has).
pub fn publish_for(
    kubelet_root: &Path,
    request: Publish<'_>,
) -> Result<(CsiTarget, PodIdentity), TargetRefusal> {
    let Publish {
        target_path,
        context,
        block,
        read_only,
    } = request;
    let target = parse(kubelet_root, target_path)?;
    if block {
        return Err(TargetRefusal::Block);
    }
    if !read_only {
        return Err(TargetRefusal::NotReadOnly);
    }
    let ephemeral = context.get(context::EPHEMERAL);
    if ephemeral.map(String::as_str) != Some("true") {
        return Err(TargetRefusal::NotEphemeral {
            driver: hcomm_crds::local_api::CSI_DRIVER,
            key: context::EPHEMERAL,
            value: ephemeral.cloned(),
        });
    }
    let uid = context.get(context::POD_UID);
    if uid != Some(&target.uid) {
        return Err(TargetRefusal::PodMismatch {
            context: uid.cloned(),
            path: target.uid.clone(),
        });
    }
    let named = |key: &'static str| {
        context
            .get(key)
            .filter(|v| !v.is_empty() && v.len() <= 253)
            .cloned()
            .ok_or(TargetRefusal::PodUnnamed { key })
    };
    let id = PodIdentity {
        namespace: named(context::POD_NAMESPACE)?,
        name: named(context::POD_NAME)?,
        uid: target.uid.clone(),
    };
    Ok((target, id))
}

/// A DNS-1123 label, as a Pod's volume names are.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-'))
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const UID: &str = "0b9f4c1e-2d3a-4b5c-8d7e-9f0a1b2c3d4e";
    const OTHER: &str = "11111111-2222-4333-8444-555555555555";

    fn target(uid: &str) -> String {
        format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~csi/hcomm-agent-api/mount")
    }

    fn ctx(uid: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (context::POD_NAME.into(), "decode-0-e1".into()),
            (context::POD_NAMESPACE.into(), "team-a".into()),
            (context::POD_UID.into(), uid.into()),
            (context::EPHEMERAL.into(), "true".into()),
        ])
    }

    fn req<'a>(path: &'a str, context: &'a BTreeMap<String, String>) -> Publish<'a> {
        Publish {
            target_path: path,
            context,
            block: false,
            read_only: true,
        }
    }

    fn root() -> &'static Path {
        Path::new("/var/lib/kubelet")
    }

    #[test]
    fn the_kubelets_own_target_for_the_named_pod_is_accepted() {
        let (t, id) = publish_for(root(), req(&target(UID), &ctx(UID))).unwrap();
        assert_eq!(t.uid, UID);
        assert_eq!(t.volume, "hcomm-agent-api");
        assert_eq!(t.path, PathBuf::from(target(UID)));
        assert_eq!(id.key(), "team-a/decode-0-e1");
        assert_eq!(id.uid, UID);
        // A root given with a trailing slash means the same.
        assert!(parse(Path::new("/var/lib/kubelet/"), &target(UID)).is_ok());
    }

    #[test]
    fn any_other_path_is_refused_by_its_shape() {
        let bad = [
            "/etc".to_owned(),
            "relative/pods".to_owned(),
            format!(
                "/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/v/mount/../../../../../etc"
            ),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/../mount"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/./mount"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/v/mount/"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi//mount"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir/v/mount"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/v/data"),
            format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~csi/V_1/mount"),
            format!("/var/lib/kubelet//pods/{UID}/volumes/kubernetes.io~csi/v/mount"),
            format!("/var/lib/kubeletx/pods/{UID}/volumes/kubernetes.io~csi/v/mount"),
            "/var/lib/kubelet/pods/not-a-uid/volumes/kubernetes.io~csi/v/mount".to_owned(),
            format!("/other/pods/{UID}/volumes/kubernetes.io~csi/v/mount"),
        ];
        for path in bad {
            let e = parse(root(), &path).unwrap_err();
            assert!(matches!(e, TargetRefusal::Shape { .. }), "{path}: {e}");
            assert!(e.to_string().starts_with("CsiTargetOutsideKubelet"), "{e}");
        }
    }

    #[test]
    fn a_context_for_another_pod_a_persistent_block_or_writable_volume_is_refused() {
        let e = publish_for(root(), req(&target(UID), &ctx(OTHER))).unwrap_err();
        assert!(matches!(e, TargetRefusal::PodMismatch { .. }), "{e}");

        let mut persistent = ctx(UID);
        persistent.insert(context::EPHEMERAL.into(), "false".into());
        let e = publish_for(root(), req(&target(UID), &persistent)).unwrap_err();
        assert!(e.to_string().starts_with("CsiNotEphemeral"), "{e}");

        let mut no_info = ctx(UID);
        no_info.remove(context::EPHEMERAL);
        assert!(publish_for(root(), req(&target(UID), &no_info)).is_err());

        let mut unnamed = ctx(UID);
        unnamed.remove(context::POD_NAME);
        let e = publish_for(root(), req(&target(UID), &unnamed)).unwrap_err();
        assert_eq!(
            e,
            TargetRefusal::PodUnnamed {
                key: context::POD_NAME
            }
        );

        let (path, context) = (target(UID), ctx(UID));
        let block = Publish {
            block: true,
            ..req(&path, &context)
        };
        assert_eq!(
            publish_for(root(), block).unwrap_err(),
            TargetRefusal::Block
        );
        let writable = Publish {
            read_only: false,
            ..req(&path, &context)
        };
        let e = publish_for(root(), writable).unwrap_err();
        assert!(e.to_string().starts_with("CsiNotReadOnly"), "{e}");
    }
}
