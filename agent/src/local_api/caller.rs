//! Who is calling the local API, and may they: the Pod a connecting process belongs to
//! (from `SO_PEERCRED`'s pid and that process's `/proc/<pid>/cgroup`, where the kubelet
//! puts every container of a Pod below a `pod<uid>` cgroup) and the decision whether that
//! caller may use a given socket. Parsing and deciding are pure and unit-tested; only
//! [`identify`] reads `/proc`.
//!
//! Why cgroups: a Pod's socket is reachable only through the Pod's own mount, but a
//! mount is not an identity (a process of another Pod that got hold of the path or of a
//! passed descriptor would otherwise act as the Pod). The kubelet names each Pod's cgroup
//! after its UID in both drivers' spellings: cgroupfs `/kubepods/burstable/pod<uid>/…` and
//! systemd `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/…`
//! (a cgroup namespace may prefix `/../..`; the component is still there).

use std::path::Path;

/// The Pod a caller was found in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallerPod {
    /// Its cgroup names this Pod UID.
    Pod(String),
    /// Its cgroup names no Pod: a process of the node itself (an admin's tool, a test).
    Node,
    /// Who it is could not be told, and why.
    Unidentified(String),
}

/// Which socket a connection came in on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The node socket: node processes only.
    Node,
    /// The socket of the Pod with this UID.
    Pod { uid: String },
}

/// How strictly callers are identified (`--local-api-callers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallerCheck {
    /// Every connection's caller must be identified: on a Pod's socket as that Pod, on the
    /// node socket as a node process. Needs the agent in the host PID namespace.
    #[default]
    Strict,
    /// Only the socket's file mode and `--allowed-uid` restrict callers: for an agent that
    /// cannot see the workers' pids. Logged loudly at start.
    Unchecked,
}

/// A refused connection: the named reason is sent to the caller as its error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("CallerUidNotAllowed: uid {uid:?} not allowed")]
    UidNotAllowed { uid: Option<u32> },
    #[error(
        "CallerIsAnotherPod: this socket belongs to Pod {socket}, the caller runs in Pod {caller}"
    )]
    AnotherPod { socket: String, caller: String },
    #[error("CallerNotInPod: this socket belongs to Pod {socket}, the caller runs in no Pod")]
    NotInPod { socket: String },
    #[error(
        "CallerInPodOnNodeSocket: the node socket is for node processes, the caller runs in Pod {caller}; use the Pod's own socket"
    )]
    PodOnNodeSocket { caller: String },
    #[error("CallerUnidentified: {why}")]
    Unidentified { why: String },
}

impl Refusal {
    /// A short fixed name, for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Refusal::UidNotAllowed { .. } => "CallerUidNotAllowed",
            Refusal::AnotherPod { .. } => "CallerIsAnotherPod",
            Refusal::NotInPod { .. } => "CallerNotInPod",
            Refusal::PodOnNodeSocket { .. } => "CallerInPodOnNodeSocket",
            Refusal::Unidentified { .. } => "CallerUnidentified",
        }
    }
}

/// Whether `s` is a Kubernetes UID as the API server writes it (lowercase RFC 4122 text):
/// only such a string becomes a directory name or matches a cgroup.
pub fn is_pod_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The Pod UID one cgroup path component names, in either driver's spelling.
fn uid_in_component(component: &str) -> Option<String> {
    let c = component.strip_suffix(".slice").unwrap_or(component);
    let candidate = match c.strip_prefix("pod") {
        Some(rest) => rest,
        None => &c[c.rfind("-pod")? + 4..],
    };
    let uid = candidate.replace('_', "-").to_ascii_lowercase();
    is_pod_uid(&uid).then_some(uid)
}

/// The Pod named by a `/proc/<pid>/cgroup` file: `Ok(None)` when no line names one,
/// an error when lines name different Pods.
pub fn pod_uid_from_cgroup(contents: &str) -> Result<Option<String>, String> {
    let mut found: Option<String> = None;
    for line in contents.lines() {
        // hierarchy-id:controllers:path — the path may itself hold ':'.
        let Some(path) = line.splitn(3, ':').nth(2) else {
            continue;
        };
        for uid in path.split('/').filter_map(uid_in_component) {
            match &found {
                Some(f) if *f != uid => {
                    return Err(format!("the caller's cgroups name two Pods, {f} and {uid}"));
                }
                _ => found = Some(uid),
            }
        }
    }
    Ok(found)
}

/// The Pod of the process `pid` (as `SO_PEERCRED` gave it), from `<proc_root>/<pid>/cgroup`.
pub fn identify(pid: Option<i32>, proc_root: &Path) -> CallerPod {
    let pid = match pid {
        Some(p) if p > 0 => p,
        _ => {
            return CallerPod::Unidentified(
                "the caller's pid is not visible to the agent (run the agent in the host PID namespace)"
                    .into(),
            );
        }
    };
    let path = proc_root.join(pid.to_string()).join("cgroup");
    match std::fs::read_to_string(&path) {
        Ok(text) => match pod_uid_from_cgroup(&text) {
            Ok(Some(uid)) => CallerPod::Pod(uid),
            Ok(None) => CallerPod::Node,
            Err(why) => CallerPod::Unidentified(why),
        },
        Err(e) => CallerPod::Unidentified(format!("read {}: {e}", path.display())),
    }
}

/// Whether a caller with `uid` found in `caller` may use the socket of `scope`.
pub fn authorize(
    scope: &Scope,
    uid: Option<u32>,
    allowed_uids: &[u32],
    caller: &CallerPod,
    check: CallerCheck,
) -> Result<(), Refusal> {
    if !allowed_uids.is_empty() && !uid.is_some_and(|u| allowed_uids.contains(&u)) {
        return Err(Refusal::UidNotAllowed { uid });
    }
    if check == CallerCheck::Unchecked {
        return Ok(());
    }
    match (scope, caller) {
        (_, CallerPod::Unidentified(why)) => Err(Refusal::Unidentified { why: why.clone() }),
        (Scope::Pod { uid }, CallerPod::Pod(c)) if c == uid => Ok(()),
        (Scope::Pod { uid }, CallerPod::Pod(c)) => Err(Refusal::AnotherPod {
            socket: uid.clone(),
            caller: c.clone(),
        }),
        (Scope::Pod { uid }, CallerPod::Node) => Err(Refusal::NotInPod {
            socket: uid.clone(),
        }),
        (Scope::Node, CallerPod::Node) => Ok(()),
        (Scope::Node, CallerPod::Pod(c)) => Err(Refusal::PodOnNodeSocket { caller: c.clone() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0b9f4c1e-2d3a-4b5c-8d7e-9f0a1b2c3d4e";
    const B: &str = "11111111-2222-4333-8444-555555555555";

    #[test]
    fn the_cgroupfs_spelling_names_the_pod() {
        let v2 = format!("0::/kubepods/burstable/pod{A}/3f1c0ffee\n");
        assert_eq!(pod_uid_from_cgroup(&v2).unwrap().as_deref(), Some(A));
        let guaranteed = format!("0::/kubepods/pod{A}/abc\n");
        assert_eq!(
            pod_uid_from_cgroup(&guaranteed).unwrap().as_deref(),
            Some(A)
        );
        let v1 = format!(
            "12:pids:/kubepods/besteffort/pod{A}/c1\n11:memory:/kubepods/besteffort/pod{A}/c1\n1:name=systemd:/\n"
        );
        assert_eq!(pod_uid_from_cgroup(&v1).unwrap().as_deref(), Some(A));
    }

    #[test]
    fn the_systemd_spelling_names_the_pod_with_underscores_turned_back() {
        let u = A.replace('-', "_");
        let text = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/cri-containerd-1234.scope\n"
        );
        assert_eq!(pod_uid_from_cgroup(&text).unwrap().as_deref(), Some(A));
        let guaranteed = format!("0::/kubepods.slice/kubepods-pod{u}.slice/crio-9.scope\n");
        assert_eq!(
            pod_uid_from_cgroup(&guaranteed).unwrap().as_deref(),
            Some(A)
        );
        // Seen from inside a cgroup namespace.
        let ns = format!("0::/../../kubepods-burstable-pod{u}.slice/cri-containerd-1.scope\n");
        assert_eq!(pod_uid_from_cgroup(&ns).unwrap().as_deref(), Some(A));
    }

    #[test]
    fn processes_outside_kubepods_belong_to_no_pod() {
        for text in [
            "0::/\n",
            "0::/system.slice/hcomm-agent.service\n",
            "4:memory:/process_api/4082ba4af65b3d26bb19c0fafef78df8\n0::/\n",
            "0::/user.slice/user-0.slice/session-3.scope\n",
            // Look-alikes that are not UIDs.
            "0::/kubepods/podcast/x\n0::/a/pod1234\n",
            "",
        ] {
            assert_eq!(pod_uid_from_cgroup(text).unwrap(), None, "{text:?}");
        }
    }

    #[test]
    fn cgroups_naming_two_pods_are_refused_as_ambiguous() {
        let text = format!("1:pids:/kubepods/pod{A}/c\n0::/kubepods/pod{B}/c\n");
        assert!(pod_uid_from_cgroup(&text).unwrap_err().contains("two Pods"));
    }

    #[test]
    fn uids_are_checked_for_shape() {
        assert!(is_pod_uid(A));
        assert!(!is_pod_uid(&A.to_uppercase()));
        assert!(!is_pod_uid("../../etc"));
        assert!(!is_pod_uid("0b9f4c1e-2d3a-4b5c-8d7e-9f0a1b2c3d4e-"));
        assert!(!is_pod_uid(""));
    }

    fn pod(uid: &str) -> Scope {
        Scope::Pod { uid: uid.into() }
    }

    #[test]
    fn a_pod_socket_serves_its_own_pod_only() {
        let strict = CallerCheck::Strict;
        let own = CallerPod::Pod(A.into());
        assert_eq!(authorize(&pod(A), Some(0), &[], &own, strict), Ok(()));
        let other = authorize(&pod(A), Some(0), &[], &CallerPod::Pod(B.into()), strict);
        assert!(matches!(other, Err(Refusal::AnotherPod { .. })));
        assert!(
            other
                .unwrap_err()
                .to_string()
                .starts_with("CallerIsAnotherPod")
        );
        assert!(matches!(
            authorize(&pod(A), Some(0), &[], &CallerPod::Node, strict),
            Err(Refusal::NotInPod { .. })
        ));
        assert!(matches!(
            authorize(
                &pod(A),
                Some(0),
                &[],
                &CallerPod::Unidentified("x".into()),
                strict
            ),
            Err(Refusal::Unidentified { .. })
        ));
    }

    #[test]
    fn the_node_socket_serves_node_processes_only() {
        let strict = CallerCheck::Strict;
        assert_eq!(
            authorize(&Scope::Node, Some(0), &[], &CallerPod::Node, strict),
            Ok(())
        );
        assert!(matches!(
            authorize(
                &Scope::Node,
                Some(0),
                &[],
                &CallerPod::Pod(A.into()),
                strict
            ),
            Err(Refusal::PodOnNodeSocket { .. })
        ));
    }

    #[test]
    fn the_uid_list_applies_in_every_mode_and_unchecked_skips_only_the_pod_check() {
        for check in [CallerCheck::Strict, CallerCheck::Unchecked] {
            let own = CallerPod::Pod(A.into());
            assert!(matches!(
                authorize(&pod(A), Some(1000), &[0], &own, check),
                Err(Refusal::UidNotAllowed { uid: Some(1000) })
            ));
            assert!(matches!(
                authorize(&pod(A), None, &[0], &own, check),
                Err(Refusal::UidNotAllowed { uid: None })
            ));
        }
        let other = CallerPod::Pod(B.into());
        assert_eq!(
            authorize(&pod(A), Some(0), &[], &other, CallerCheck::Unchecked),
            Ok(())
        );
    }

    #[test]
    fn a_pid_the_agent_cannot_see_or_read_is_unidentified() {
        assert!(matches!(
            identify(None, Path::new("/proc")),
            CallerPod::Unidentified(_)
        ));
        assert!(matches!(
            identify(Some(0), Path::new("/proc")),
            CallerPod::Unidentified(_)
        ));
        let dir = std::env::temp_dir().join(format!("hcomm-caller-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("42")).unwrap();
        std::fs::write(dir.join("42/cgroup"), format!("0::/kubepods/pod{A}/c\n")).unwrap();
        assert_eq!(identify(Some(42), &dir), CallerPod::Pod(A.into()));
        assert!(matches!(identify(Some(43), &dir), CallerPod::Unidentified(w) if w.contains("43")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
