//! One local-API socket per member Pod: `<dir>/<pod uid>/agent.sock`, opened when the
//! agent adopts the member and closed when its Pod is gone. The operator mounts only that
//! Pod's directory into the Pod (read-only, `subPathExpr: $(HCOMM_POD_UID)`), so a worker
//! can reach no other Pod's socket, and the server behind it acts on that Pod only
//! ([`super::server::Serves::Pod`]) and checks every caller's cgroup.
//!
//! The directory outlives a restart of the agent: the container's mount holds the
//! directory itself, so removing and re-creating it while the Pod runs would leave the
//! worker looking at a deleted directory. Only the socket file is replaced; the directory
//! goes when the member ends.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tokio::net::UnixListener;
use tokio::sync::oneshot;

use super::caller::is_pod_uid;
use super::hub::Hub;
use super::server::{Access, PodIdentity, Serves, serve};
use crate::error::{Error, Result};
use hcomm_crds::local_api::SOCKET_FILE;

struct Open {
    generation: u64,
    uid: String,
    stop: oneshot::Sender<()>,
}

/// The Pod sockets of this node.
pub struct PodSockets {
    dir: PathBuf,
    hub: Hub,
    access: Access,
    open: Mutex<(u64, HashMap<String, Open>)>,
}

/// Proof of one `open`: only its holder closes that socket (a later open of the same Pod
/// replaces it and is not closed by the earlier holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ticket {
    key: String,
    generation: u64,
}

impl PodSockets {
    /// Sockets below `dir` (`--pod-sockets-dir`), served from `hub` with `access`.
    pub fn new(dir: PathBuf, hub: Hub, access: Access) -> PodSockets {
        PodSockets {
            dir,
            hub,
            access,
            open: Mutex::new((0, HashMap::new())),
        }
    }

    /// The socket of the Pod with `uid`, on the host.
    pub fn socket_of(&self, uid: &str) -> PathBuf {
        self.dir.join(uid).join(SOCKET_FILE)
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
        let listener = bind_pod_socket(&self.dir, &id.uid)?;
        let key = id.key();
        self.hub.slot(&key);
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
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.0 += 1;
        let generation = open.0;
        // A previous server of this Pod stops when its sender is dropped here.
        open.1.insert(
            key.clone(),
            Open {
                generation,
                uid: id.uid,
                stop,
            },
        );
        Ok(Ticket { key, generation })
    }

    /// Closes the socket `ticket` opened (if no later open replaced it): its server and
    /// connections stop and the socket file goes; with `pod_gone`, its directory too.
    pub fn close(&self, ticket: &Ticket, pod_gone: bool) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if open.1.get(&ticket.key).map(|o| o.generation) != Some(ticket.generation) {
            return;
        }
        let Some(o) = open.1.remove(&ticket.key) else {
            return;
        };
        let _ = o.stop.send(());
        let _ = std::fs::remove_file(self.socket_of(&o.uid));
        if pod_gone {
            // Only when empty: anything else in it is not ours to delete.
            let _ = std::fs::remove_dir(self.dir.join(&o.uid));
        }
    }

    /// Pod keys with an open socket.
    pub fn keys(&self) -> Vec<String> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.1.keys().cloned().collect()
    }
}

/// Binds `<dir>/<uid>/agent.sock`: the directory is created if absent (never re-created:
/// see the module docs), a stale socket replaced, a symlink in its place refused. The
/// socket is `0666`: a Pod's workers may run as any user, and who may call is decided by
/// the directory mount and the caller check, not the file mode.
fn bind_pod_socket(dir: &Path, uid: &str) -> Result<UnixListener> {
    let pod_dir = dir.join(uid);
    std::fs::create_dir_all(&pod_dir)
        .map_err(Error::io(format!("create {}", pod_dir.display())))?;
    let meta = std::fs::symlink_metadata(&pod_dir)
        .map_err(Error::io(format!("stat {}", pod_dir.display())))?;
    if !meta.is_dir() {
        return Err(Error::Config(format!(
            "{} is not a directory (a symlink?); not serving a Pod socket there",
            pod_dir.display()
        )));
    }
    std::fs::set_permissions(&pod_dir, std::fs::Permissions::from_mode(0o755))
        .map_err(Error::io(format!("chmod {}", pod_dir.display())))?;
    let path = pod_dir.join(SOCKET_FILE);
    if std::fs::symlink_metadata(&path).is_ok() {
        std::fs::remove_file(&path)
            .map_err(Error::io(format!("remove stale {}", path.display())))?;
    }
    let l = UnixListener::bind(&path).map_err(Error::io(format!("bind {}", path.display())))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
        .map_err(Error::io(format!("chmod {}", path.display())))?;
    Ok(l)
}

#[cfg(test)]
#[path = "pods_tests.rs"]
mod tests;
