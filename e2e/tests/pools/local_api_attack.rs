//! One tenant's worker goes after another Pod's local API (issue 17, point 4): a process
//! running in a prefill member's Pod cgroup connects to a serving decode member's own
//! socket on the real agent and tries to open its readiness gate (`serving`), end its
//! drain (`report_inflight 0`), watch it and read its assignment; it then names the
//! decode member on its own Pod's socket and on the node socket. Every call is refused
//! with its named error (`CallerIsAnotherPod` naming the attacker's Pod, `ForeignPod`,
//! `CallerInPodOnNodeSocket`); the victim keeps serving and no request fails.
//!
//! The testbed has no mount namespaces, so every socket path is reachable here: what this
//! shows is the agent refusing the caller by its credentials (`SO_PEERCRED` → pid → Pod
//! cgroup). What keeps a real worker from even reaching another Pod's socket, or from
//! replacing its own, is the Pod's mount (the Pod's own directory only, read-only); that
//! the operator builds exactly that mount is checked here on the API object.
//!
//! The attacker is this test process, moved into the prefill member's cgroup for the few
//! milliseconds of each connection (the agent reads the caller's cgroup at accept) and
//! moved back after; the move goes through `cgroup.procs`, as the testbed's kubelet puts
//! each Pod's processes in their cgroup.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use hcomm_crds::local_api::{CSI_DRIVER, MOUNT_DIR};
use hcomm_e2e::testbed::examples::NAMESPACE as NS;
use hcomm_e2e::testbed::{ExamplePools, MemberPod};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;

use crate::check;

/// How long one refused call may take to answer.
const ANSWER: Duration = Duration::from_secs(5);

/// A prefill member's process calling a decode member's socket (gate, drain, watch,
/// assignment), naming it on its own socket, and calling the node socket: each refused
/// with its named error; the decode member stays Ready and serving, no request fails.
///
/// Precondition: decode at 2 members, Ready, each having served.
pub async fn a_worker_calling_another_pods_local_api_is_refused_and_the_victim_keeps_serving(
    pools: &mut ExamplePools,
) -> Result<()> {
    let decode = pools.decode_at(2).await?;
    pools
        .decode_load
        .wait_served(&decode, 3, Duration::from_secs(30))
        .await?;
    let bed = &pools.bed;
    let before = pools.decode_load.latest();
    let victim = decode[0].clone();
    let attacker = pools.prefill.first().context("no prefill member")?.clone();
    let victim_host = host_index(&victim)?;
    let victim_socket = bed.pod_socket(&victim.uid);
    let attacker_socket = bed.pod_socket(&attacker.uid);
    let node_socket = bed.agent_socket(victim_host);
    for s in [&victim_socket, &attacker_socket, &node_socket] {
        ensure!(s.exists(), "no socket at {}", s.display());
    }

    // The attacker's Pod cgroup, from its worker process.
    let key = format!("{NS}/{}/", attacker.name);
    let pid = bed
        .workers()
        .into_iter()
        .find(|(k, _)| k.starts_with(&key))
        .and_then(|(_, p)| p.pid)
        .with_context(|| format!("no running process of {}", attacker.name))?;
    let cgroup = cgroup_dir(pid)?;
    ensure!(
        cgroup.ends_with(format!("pod{}", attacker.uid)),
        "{}'s worker (pid {pid}) is not in its Pod's cgroup but in {} — the testbed runs \
         without Pod cgroups, so its agents do not check callers",
        attacker.name,
        cgroup.display()
    );

    let v = &victim.name;
    let calls = [
        // Open the victim's readiness gate.
        (
            &victim_socket,
            format!(r#"{{"op":"serving","pod":"{v}"}}"#),
            "CallerIsAnotherPod",
        ),
        // End the victim's drain.
        (
            &victim_socket,
            format!(r#"{{"op":"report_inflight","pod":"{v}","n":0}}"#),
            "CallerIsAnotherPod",
        ),
        (
            &victim_socket,
            format!(r#"{{"op":"watch","pod":"{v}"}}"#),
            "CallerIsAnotherPod",
        ),
        (
            &victim_socket,
            format!(r#"{{"op":"assignment","pod":"{v}"}}"#),
            "CallerIsAnotherPod",
        ),
        // The attacker's own socket, naming the victim.
        (
            &attacker_socket,
            format!(r#"{{"op":"report_inflight","pod":"{v}","n":0}}"#),
            "ForeignPod",
        ),
        // The node socket is for node tools: refused to anyone in a Pod.
        (
            &node_socket,
            format!(r#"{{"op":"report_inflight","pod":"{v}","n":0}}"#),
            "CallerInPodOnNodeSocket",
        ),
    ];
    for (socket, line, named) in &calls {
        let answer = {
            let _inside = InCgroup::enter(&cgroup)?;
            call(socket, line)
        }?;
        ensure!(
            answer["ok"] == false,
            "{line} on {} was not refused: {answer}",
            socket.display()
        );
        let error = answer["error"].as_str().unwrap_or_default();
        ensure!(
            error.contains(named),
            "{line}: refused, but not {named}: {error}"
        );
        if *named == "CallerIsAnotherPod" {
            ensure!(
                error.contains(&attacker.uid),
                "the refusal does not name the attacker's Pod {}: {error}",
                attacker.uid
            );
        }
        eprintln!("local API attack: {line} → {error}");
    }

    // The operator mounts only the Pod's own directory, read-only (its CSI volume, which
    // the agent publishes for that Pod alone): in a real cluster the victim's socket is not
    // even in the attacker's file system, and nothing there can be replaced.
    let pods: Api<Pod> = Api::namespaced(bed.client().await?, NS);
    let spec = pods
        .get(&attacker.name)
        .await?
        .spec
        .context("no Pod spec")?;
    for c in &spec.containers {
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == MOUNT_DIR)
            .with_context(|| format!("{}: no mount at {MOUNT_DIR}", c.name))?;
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .with_context(|| format!("{}: no volume {}", c.name, mount.name))?;
        ensure!(
            mount.read_only == Some(true)
                && mount.sub_path.is_none()
                && mount.sub_path_expr.is_none()
                && volume.host_path.is_none()
                && volume
                    .csi
                    .as_ref()
                    .is_some_and(|csi| csi.driver == CSI_DRIVER),
            "{}: the local API mount is not the Pod's own read-only CSI volume: {mount:?} of {volume:?}",
            c.name
        );
    }

    // The victim still serves, nobody was replaced, no request failed.
    let after = bed.members(NS, "decode").await?;
    let names = |m: &[MemberPod]| m.iter().map(|m| m.name.clone()).collect::<Vec<_>>();
    ensure!(
        names(&after) == names(&decode),
        "decode members changed: {:?} → {:?}",
        names(&decode),
        names(&after)
    );
    ensure!(
        after.iter().all(|m| m.ready),
        "a decode member is not Ready: {after:?}"
    );
    // Requests keep being served after the attack (the load's counters move on).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let now = loop {
        let now = pools.decode_load.latest();
        if now.served > before.served {
            break now;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "decode stopped serving: {} requests before the attack, none since",
            before.served
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    check::clean(&now, "decode, local API attack")?;
    Ok(())
}

/// `host-<i>` → i.
fn host_index(m: &MemberPod) -> Result<usize> {
    m.node
        .trim_start_matches("host-")
        .parse()
        .with_context(|| format!("{} runs on {}, not a testbed host", m.name, m.node))
}

/// One request line and its answer (the agent answers a refused caller with one error
/// line and closes).
fn call(socket: &Path, line: &str) -> Result<serde_json::Value> {
    let mut s =
        UnixStream::connect(socket).with_context(|| format!("connect {}", socket.display()))?;
    s.set_read_timeout(Some(ANSWER))?;
    s.set_write_timeout(Some(ANSWER))?;
    // A refused caller may be cut off before its line is read: a failed write is fine,
    // the answer is what counts.
    let _ = s.write_all(format!("{line}\n").as_bytes());
    let mut answer = String::new();
    BufReader::new(s)
        .read_line(&mut answer)
        .with_context(|| format!("no answer to {line} within {ANSWER:?}"))?;
    serde_json::from_str(&answer).with_context(|| format!("answer {answer:?}"))
}

/// The cgroup v2 mount point, from this process's mount table.
fn cgroup2_mount() -> Result<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    info.lines()
        .find_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            (right.split_whitespace().next() == Some("cgroup2"))
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .context("no cgroup v2 hierarchy is mounted")
}

/// The cgroup directory of `pid` (cgroup v2: the `0::` line).
fn cgroup_dir(pid: u32) -> Result<PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .with_context(|| format!("pid {pid} has no cgroup v2 entry: {text}"))?;
    Ok(cgroup2_mount()?.join(rel.trim_start_matches('/')))
}

/// This process inside another cgroup until dropped; then back where it was.
struct InCgroup {
    home: PathBuf,
}

impl InCgroup {
    fn enter(dir: &Path) -> Result<InCgroup> {
        let home = cgroup_dir(std::process::id())?;
        move_to(dir)?;
        Ok(InCgroup { home })
    }
}

impl Drop for InCgroup {
    fn drop(&mut self) {
        if let Err(e) = move_to(&self.home) {
            eprintln!(
                "error: could not move back to {}: {e:#}",
                self.home.display()
            );
        }
    }
}

fn move_to(dir: &Path) -> Result<()> {
    let procs = dir.join("cgroup.procs");
    if let Err(e) = std::fs::write(&procs, std::process::id().to_string()) {
        bail!("move into {}: {e}", procs.display());
    }
    Ok(())
}
