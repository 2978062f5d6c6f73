//! The node's cgroup tree: `/<node>` below the root of every hierarchy, the kubelet's
//! `cgroupRoot` (its Pods go below it) and, in `/<node>/runtime`, the kubelet and
//! containerd themselves — and so every containerd shim, which starts in containerd's
//! cgroup. Stopping the node kills whatever is left anywhere in the tree, so no container
//! outlives its node whatever state containerd was in.
//!
//! This sandbox has cgroups v1 (hybrid): one hierarchy per controller plus the unified
//! one; the tree is made in each, and `cpuset` needs its `cpus` and `mems` copied from the
//! parent before anything can join.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{Error, Result};

/// How long [`NodeCgroup::kill_all`] keeps killing before it gives up on a straggler.
const KILL_DEADLINE: Duration = Duration::from_secs(10);

/// A node's cgroup in every hierarchy.
#[derive(Debug)]
pub struct NodeCgroup {
    name: String,
    hierarchies: Vec<PathBuf>,
}

impl NodeCgroup {
    /// Makes `/<name>` and `/<name>/runtime` in every mounted hierarchy.
    pub fn create(name: &str) -> Result<NodeCgroup> {
        let hierarchies = hierarchies()?;
        let cg = NodeCgroup {
            name: name.to_owned(),
            hierarchies,
        };
        for h in &cg.hierarchies {
            for dir in [h.join(name), h.join(name).join("runtime")] {
                std::fs::create_dir_all(&dir).map_err(Error::io("create cgroup", &dir))?;
                inherit_cpuset(&dir)?;
            }
        }
        Ok(cg)
    }

    /// The kubelet's `cgroupRoot`.
    pub fn root(&self) -> String {
        format!("/{}", self.name)
    }

    /// Moves process `pid` into `/<name>/runtime` in every hierarchy.
    pub fn enter_runtime(&self, pid: u32) -> Result<()> {
        for h in &self.hierarchies {
            let procs = h.join(&self.name).join("runtime").join("cgroup.procs");
            std::fs::write(&procs, pid.to_string()).map_err(Error::io("join cgroup", &procs))?;
        }
        Ok(())
    }

    /// SIGKILLs every process anywhere in the tree until none is left (or the deadline
    /// passes), then removes the tree's folders, deepest first.
    pub fn kill_all(&self) {
        let deadline = Instant::now() + KILL_DEADLINE;
        loop {
            let pids: Vec<i32> = self
                .hierarchies
                .iter()
                .flat_map(|h| procs_below(&h.join(&self.name)))
                .collect();
            if pids.is_empty() || Instant::now() > deadline {
                break;
            }
            for pid in pids {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        for h in &self.hierarchies {
            remove_tree(&h.join(&self.name));
        }
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// Every cgroup hierarchy's mount point, from `/proc/self/mountinfo`.
fn hierarchies() -> Result<Vec<PathBuf>> {
    let path = Path::new("/proc/self/mountinfo");
    let info = std::fs::read_to_string(path).map_err(Error::io("read", path))?;
    Ok(info
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            matches!(fstype, "cgroup" | "cgroup2")
                .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .collect())
}

/// A new cpuset cgroup has no CPUs and no memory nodes; nothing can join it until it has
/// its parent's.
fn inherit_cpuset(dir: &Path) -> Result<()> {
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let own = dir.join(file);
        if !own.exists() {
            continue;
        }
        let parent = dir.parent().map(|p| p.join(file)).unwrap_or_default();
        let value = std::fs::read_to_string(&parent).map_err(Error::io("read", &parent))?;
        if std::fs::read_to_string(&own)
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            std::fs::write(&own, value.trim()).map_err(Error::io("write", &own))?;
        }
    }
    Ok(())
}

/// The processes in `dir` and every cgroup below it.
fn procs_below(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            pids.extend(procs_below(&entry.path()));
        }
    }
    pids
}

/// Removes a cgroup and every cgroup below it (cgroup folders go with `rmdir` only).
fn remove_tree(dir: &Path) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&entry.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}
