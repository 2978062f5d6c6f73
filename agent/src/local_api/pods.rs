//! One local-API socket per member Pod, opened when the agent adopts the member and closed
//! when its Pod is gone. The server behind it acts on that Pod only
//! ([`super::server::Serves::Pod`]) and checks every caller's cgroup. Where the socket is
//! depends on how the operator gave the Pod its local-API volume
//! (`hcomm_crds::local_api`):
//! - CSI: the kubelet publishes the Pod's volume at a target directory ([`PodSockets::publish`]),
//!   and the socket is served there; the container's mount holds that directory only;
//! - hostPath: `<dir>/<pod uid>/agent.sock`, the operator mounting only that Pod's directory
//!   (`subPathExpr: $(HCOMM_POD_UID)`).
//!
//! A published target is recorded in `<dir>/<pod uid>.csi-target`, because the kubelet
//! publishes a volume once and never again for a running Pod: an agent that restarts
//! reads the records back and serves each Pod's socket where its container looks.
//!
//! Directories outlive a restart of the agent: the container's mount holds the directory
//! itself, so removing and re-creating it while the Pod runs would leave the worker looking
//! at a deleted directory. Only the socket file is replaced; a directory goes when its Pod
//! ends (hostPath) or its volume is unpublished (CSI).
//!
//! Sockets are bound through `/proc/self/fd/<dir fd>/agent.sock`: the directory is opened
//! with `O_NOFOLLOW | O_DIRECTORY` first (a symlink in its place is refused, and nothing
//! can swap it between the check and the bind), and the kubelet's target paths are longer
//! than a Unix socket address may be (108 bytes).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::caller::is_pod_uid;
use super::csi_target::{self, CsiTarget};
use super::hub::Hub;
use super::server::{Access, PodIdentity, Serves, serve};
use crate::error::{Error, Result};
use hcomm_crds::local_api::SOCKET_FILE;

/// The suffix of a published target's record in the sockets directory.
const RECORD_SUFFIX: &str = ".csi-target";

struct Open {
    generation: u64,
    id: PodIdentity,
    /// Stops the socket's server when sent or dropped; None once its volume is unpublished.
    stop: Option<oneshot::Sender<()>>,
    /// The directory its socket is in, while served.
    at: Option<PathBuf>,
}

#[derive(Default)]
struct Inner {
    generation: u64,
    /// Pod key → its open socket.
    open: HashMap<String, Open>,
    /// Pod UID → the directory the kubelet published its local-API volume at.
    published: HashMap<String, PathBuf>,
}

/// The Pod sockets of this node.
pub struct PodSockets {
    dir: PathBuf,
    hub: Hub,
    access: Access,
    inner: Mutex<Inner>,
}

/// Proof of one `open`: only its holder closes that socket (a later open of the same Pod
/// replaces it and is not closed by the earlier holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    key: String,
    generation: u64,
}

impl PodSockets {
    /// Sockets below `dir` (`--pod-sockets-dir`), served from `hub` with `access`; the
    /// published targets recorded there that still lie below `kubelet_root` are restored.
    pub fn new(dir: PathBuf, hub: Hub, access: Access, kubelet_root: &Path) -> PodSockets {
        let published = restore_records(&dir, kubelet_root);
        PodSockets {
            dir,
            hub,
            access,
            inner: Mutex::new(Inner {
                published,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The socket of the Pod with `uid`, on the host: in its published volume if it has
    /// one, else in its hostPath directory.
    pub fn socket_of(&self, uid: &str) -> PathBuf {
        self.location(&self.lock(), uid).join(SOCKET_FILE)
    }

    fn location(&self, inner: &Inner, uid: &str) -> PathBuf {
        match inner.published.get(uid) {
            Some(target) => target.clone(),
            None => self.dir.join(uid),
        }
    }

    /// Opens (or re-opens) the socket of Pod `id` and creates its hub slot. Must run
    /// inside the agent's runtime.
    pub fn open(&self, id: PodIdentity) -> Result<Ticket> {
        if !is_pod_uid(&id.uid) {
            return Err(Error::InvalidMember {
                pod: id.key(),
                reason: format!("UID {:?} is not a Kubernetes UID", id.uid),
            });
        }
        // Under the lock: a publish of the same Pod meanwhile must see this socket to move
        // it, or this must see the publish.
        let mut inner = self.lock();
        let at = self.location(&inner, &id.uid);
        if !inner.published.contains_key(&id.uid) {
            std::fs::create_dir_all(&self.dir)
                .map_err(Error::io(format!("create {}", self.dir.display())))?;
            create_private_dir(&at)?;
        }
        let stop = self.serve_in(&id, &at)?;
        let key = id.key();
        self.hub.slot(&key);
        inner.generation += 1;
        let generation = inner.generation;
        // A previous server of this Pod stops when its sender is dropped here.
        inner.open.insert(
            key.clone(),
            Open {
                generation,
                id,
                stop: Some(stop),
                at: Some(at),
            },
        );
        Ok(Ticket { key, generation })
    }

    /// Binds the socket in `dir` and serves Pod `id` on it until the returned sender goes.
    fn serve_in(&self, id: &PodIdentity, dir: &Path) -> Result<oneshot::Sender<()>> {
        let listener = bind_in(dir)?;
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(serve(
            listener,
            self.hub.clone(),
            self.access.clone(),
            Serves::Pod(id.clone()),
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(stop)
    }

    /// Closes the socket `ticket` opened (if no later open replaced it): its server and
    /// connections stop and the socket file goes; with `pod_gone`, its hostPath directory
    /// too. A published volume's directory and record stay until the kubelet unpublishes
    /// it. A stopping agent's member tasks close without `pod_gone` (see
    /// `member::driver`): their Pods live on and a container's mount holds the directory.
    pub fn close(&self, ticket: &Ticket, pod_gone: bool) {
        let mut inner = self.lock();
        if inner.open.get(&ticket.key).map(|o| o.generation) != Some(ticket.generation) {
            return;
        }
        let Some(o) = inner.open.remove(&ticket.key) else {
            return;
        };
        drop(o.stop);
        if let Some(at) = &o.at {
            remove_socket(at);
        }
        if pod_gone {
            // Only when empty: anything else in it is not ours to delete.
            let _ = std::fs::remove_dir(self.dir.join(&o.id.uid));
        }
    }

    /// Pod keys with an open socket.
    pub fn keys(&self) -> Vec<String> {
        self.lock().open.keys().cloned().collect()
    }

    fn record(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}{RECORD_SUFFIX}"))
    }

    /// The kubelet published Pod `id`'s local-API volume at `target` (already checked by
    /// [`csi_target::publish_for`]): the directory is made, recorded, and the Pod's socket
    /// moves there if it is open. Idempotent, as CSI requires.
    pub fn publish(&self, target: &CsiTarget, id: &PodIdentity) -> Result<()> {
        let mut inner = self.lock();
        create_private_dir(&target.path)?;
        std::fs::create_dir_all(&self.dir)
            .map_err(Error::io(format!("create {}", self.dir.display())))?;
        write_record(&self.record(&target.uid), &target.path)?;
        inner
            .published
            .insert(target.uid.clone(), target.path.clone());
        let Some(o) = inner.open.get_mut(&id.key()) else {
            return Ok(());
        };
        if o.id.uid != target.uid || o.at.as_deref() == Some(target.path.as_path()) {
            return Ok(());
        }
        let stop = self.serve_in(&o.id, &target.path)?;
        if let Some(old) = o.at.replace(target.path.clone()) {
            remove_socket(&old);
        }
        o.stop = Some(stop);
        Ok(())
    }

    /// The kubelet unpublished the volume at `target`: its socket stops and goes, then its
    /// directory (which must then be empty). Idempotent: an unknown target is no error.
    pub fn unpublish(&self, target: &CsiTarget) -> Result<()> {
        let mut inner = self.lock();
        if inner.published.get(&target.uid) == Some(&target.path) {
            inner.published.remove(&target.uid);
            let _ = std::fs::remove_file(self.record(&target.uid));
        }
        for o in inner.open.values_mut() {
            if o.at.as_deref() == Some(target.path.as_path()) {
                o.stop = None;
                o.at = None;
            }
        }
        remove_socket(&target.path);
        match std::fs::remove_dir(&target.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(format!("remove {}", target.path.display()))(e)),
        }
    }
}

/// The published targets recorded in `dir`, each re-checked against `kubelet_root` (a
/// record that fails is ignored and logged: the agent will not serve below it).
fn restore_records(dir: &Path, kubelet_root: &Path) -> HashMap<String, PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return HashMap::new();
    };
    let mut published = HashMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(uid) = name.to_str().and_then(|n| n.strip_suffix(RECORD_SUFFIX)) else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        match csi_target::parse(kubelet_root, text.trim_end()) {
            // Gone while no agent ran (the kubelet has given up on it): nothing to serve.
            Ok(t) if t.uid == uid && !t.path.is_dir() => {
                let _ = std::fs::remove_file(entry.path());
            }
            Ok(t) if t.uid == uid => {
                published.insert(t.uid, t.path);
            }
            Ok(_) | Err(_) => {
                tracing::warn!(record = %entry.path().display(), "ignoring a published-volume record that is not this Pod's kubelet target");
            }
        }
    }
    published
}

/// Writes `target` into `record`, atomically (a crash leaves the old record or the new).
fn write_record(record: &Path, target: &Path) -> Result<()> {
    let tmp = record.with_extension("tmp");
    std::fs::write(&tmp, format!("{}\n", target.display()))
        .map_err(Error::io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, record).map_err(Error::io(format!("rename to {}", record.display())))
}

/// Creates `dir` if absent (its parent must exist: a kubelet's target is not made up here;
/// never re-created: see the module docs)
/// and makes it `0755`: a Pod's workers may run as any user and must reach the socket.
fn create_private_dir(dir: &Path) -> Result<()> {
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io(format!("create {}", dir.display()))(e)),
    }
    let d = open_dir(dir)?;
    d.set_permissions(std::fs::Permissions::from_mode(0o755))
        .map_err(Error::io(format!("chmod {}", dir.display())))
}

/// `dir` opened as a directory, never through a symlink in its place.
fn open_dir(dir: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .map_err(|e| {
            Error::Config(format!(
                "{} is not a directory of this node (a symlink?): {e}; not serving a Pod socket there",
                dir.display()
            ))
        })
}

/// Binds `<dir>/agent.sock` through the directory's descriptor (see the module docs): a
/// stale socket is replaced, anything else in its place refused. The socket is `0666`: a
/// Pod's workers may run as any user, and who may call is decided by the mount and the
/// caller check, not the file mode.
fn bind_in(dir: &Path) -> Result<UnixListener> {
    let d = open_dir(dir)?;
    let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_FILE}", d.as_raw_fd()));
    let shown = dir.join(SOCKET_FILE);
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(&path)
            .map_err(Error::io(format!("remove stale {}", shown.display())))?,
        Ok(_) => {
            return Err(Error::Config(format!(
                "{} exists and is not a socket; not serving a Pod socket there",
                shown.display()
            )));
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(&path).map_err(Error::io(format!("bind {}", shown.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .map_err(Error::io(format!("chmod {}", shown.display())))?;
    Ok(l)
}

/// Removes `<dir>/agent.sock` if it is a socket (never anything else, never through a link).
fn remove_socket(dir: &Path) {
    let Ok(d) = open_dir(dir) else {
        return;
    };
    let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET_FILE}", d.as_raw_fd()));
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(&path);
    }
}

#[cfg(test)]
#[path = "pods_caller_tests.rs"]
mod caller_tests;
#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
