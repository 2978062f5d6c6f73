//! What the operator's `/readyz` answers, and why.
//!
//! A leader is ready once the caches its controller acts on (the `HcommGroup` and
//! `HcommNode` reflector stores) have synced: before that it would plan from an empty
//! picture. A standby is ready once it has read the leader Lease (it reaches the API server
//! with its credentials): it keeps no caches — it starts its controller, and syncs them,
//! when it takes over — and a Deployment's rolling update must be able to count a healthy
//! standby as available, or `helm upgrade` of a two-replica operator would stall. The body
//! says which of the two it is. [`verdict`] is the pure decision; [`Readiness`] holds the
//! state the server and the election loop share.

use std::sync::Mutex;

/// Where this replica stands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Role {
    /// No election round has reached the API server yet.
    #[default]
    Starting,
    /// Another replica holds the Lease (`holder`, empty when released).
    Standby {
        /// The holder seen last.
        holder: String,
    },
    /// This replica leads; `synced` once its caches are.
    Leader {
        /// Whether the controller's reflector stores have synced.
        synced: bool,
    },
}

/// `/readyz`'s answer for `role`: (ready, body).
pub fn verdict(role: &Role) -> (bool, String) {
    match role {
        Role::Starting => (
            false,
            "not ready: the leader Lease has not been read yet\n".into(),
        ),
        Role::Standby { holder } => (
            true,
            format!(
                "ok: standby (leader: {}); starts its controller on takeover\n",
                if holder.is_empty() { "none" } else { holder }
            ),
        ),
        Role::Leader { synced: false } => (false, "not ready: leader, caches syncing\n".into()),
        Role::Leader { synced: true } => (true, "ok: leader, caches synced\n".into()),
    }
}

/// The shared readiness state.
#[derive(Debug, Default)]
pub struct Readiness {
    role: Mutex<Role>,
}

impl Readiness {
    /// Records where this replica stands.
    pub fn set(&self, role: Role) {
        *self.role.lock().unwrap_or_else(|e| e.into_inner()) = role;
    }

    /// The current answer: (ready, body).
    pub fn verdict(&self) -> (bool, String) {
        verdict(&self.role.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leader_is_ready_only_once_its_caches_synced() {
        let (ready, body) = verdict(&Role::Leader { synced: false });
        assert!(!ready, "{body}");
        let (ready, body) = verdict(&Role::Leader { synced: true });
        assert!(ready && body.contains("leader"), "{body}");
    }

    #[test]
    fn a_standby_is_ready_and_names_the_leader_but_not_before_the_lease_was_read() {
        assert!(!verdict(&Role::Starting).0);
        let (ready, body) = verdict(&Role::Standby {
            holder: "op-a".into(),
        });
        assert!(
            ready && body.contains("standby") && body.contains("op-a"),
            "{body}"
        );
        let readiness = Readiness::default();
        assert!(!readiness.verdict().0);
        readiness.set(Role::Leader { synced: true });
        assert!(readiness.verdict().0);
    }
}
