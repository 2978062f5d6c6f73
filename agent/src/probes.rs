//! The agent's liveness (`/livez`) and readiness (`/readyz`), served beside `/metrics`.
//!
//! Liveness means the runtime still runs its tasks: a heartbeat task ticks every
//! [`BEAT_EVERY`], and `/livez` fails once the last beat is older than [`STALL_AFTER`]
//! (worker threads blocked or starved while the HTTP server still answers). Restarting is
//! the cure for that, and only for that: liveness never depends on the API server.
//!
//! Readiness means the agent can do its job on this node: its `HcommNode` is registered
//! (the operator places members by it), its member-Pod cache has its first full list (it
//! knows which members are here), and the local API socket the workers connect to is
//! bound. [`readiness`] and [`liveness`] are the pure decisions.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often the heartbeat task ticks.
pub const BEAT_EVERY: Duration = Duration::from_secs(1);
/// A heartbeat older than this means the runtime is stalled.
pub const STALL_AFTER: Duration = Duration::from_secs(30);

/// What readiness looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadyState {
    /// The `HcommNode` was published.
    pub registered: bool,
    /// The member-Pod watch delivered its first full list.
    pub synced: bool,
    /// The local API socket is bound.
    pub api_bound: bool,
}

/// `/readyz`'s answer: (ready, body naming what is missing).
pub fn readiness(state: ReadyState) -> (bool, String) {
    let missing: Vec<&str> = [
        (state.registered, "HcommNode not registered"),
        (state.synced, "member Pod cache not synced"),
        (state.api_bound, "local API socket not bound"),
    ]
    .into_iter()
    .filter_map(|(ok, what)| (!ok).then_some(what))
    .collect();
    if missing.is_empty() {
        (
            true,
            "ok: HcommNode registered, caches synced, local API bound\n".into(),
        )
    } else {
        (false, format!("not ready: {}\n", missing.join("; ")))
    }
}

/// `/livez`'s answer for a last heartbeat `age` ago.
pub fn liveness(age: Duration) -> (bool, String) {
    if age <= STALL_AFTER {
        (true, "ok\n".into())
    } else {
        (
            false,
            format!("runtime stalled: last heartbeat {}s ago\n", age.as_secs()),
        )
    }
}

/// The state the probes read, shared by the agent's tasks.
pub struct Probes {
    beat: Mutex<Instant>,
    registered: AtomicBool,
    api_bound: AtomicBool,
    synced: Box<dyn Fn() -> bool + Send + Sync>,
}

impl Probes {
    /// Probes whose cache readiness is `synced()`.
    pub fn new(synced: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Self {
            beat: Mutex::new(Instant::now()),
            registered: AtomicBool::new(false),
            api_bound: AtomicBool::new(false),
            synced: Box::new(synced),
        }
    }

    /// The `HcommNode` was published.
    pub fn set_registered(&self) {
        self.registered.store(true, Ordering::Relaxed);
    }

    /// The local API socket is bound.
    pub fn set_api_bound(&self) {
        self.api_bound.store(true, Ordering::Relaxed);
    }

    /// The current readiness answer.
    pub fn ready(&self) -> (bool, String) {
        readiness(ReadyState {
            registered: self.registered.load(Ordering::Relaxed),
            synced: (self.synced)(),
            api_bound: self.api_bound.load(Ordering::Relaxed),
        })
    }

    /// The current liveness answer.
    pub fn live(&self) -> (bool, String) {
        let beat = *self.beat.lock().unwrap_or_else(|e| e.into_inner());
        liveness(beat.elapsed())
    }

    /// Beats every [`BEAT_EVERY`] until dropped.
    pub async fn heartbeat(&self) {
        let mut tick = tokio::time::interval(BEAT_EVERY);
        loop {
            tick.tick().await;
            *self.beat.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        }
    }
}

impl std::fmt::Debug for Probes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probes")
            .field("ready", &self.ready())
            .field("live", &self.live())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_with_the_node_registered_the_cache_synced_and_the_socket_bound() {
        let all = ReadyState {
            registered: true,
            synced: true,
            api_bound: true,
        };
        assert!(readiness(all).0);
        let (ready, body) = readiness(ReadyState {
            synced: false,
            ..all
        });
        assert!(!ready && body.contains("cache not synced"), "{body}");
        let (ready, body) = readiness(ReadyState::default());
        assert!(!ready, "{body}");
        for part in ["HcommNode", "cache", "socket"] {
            assert!(body.contains(part), "{body}");
        }
    }

    #[test]
    fn live_until_the_heartbeat_is_older_than_the_stall_limit() {
        assert!(liveness(Duration::ZERO).0);
        assert!(liveness(STALL_AFTER).0);
        let (live, body) = liveness(STALL_AFTER + Duration::from_secs(1));
        assert!(!live && body.contains("stalled"), "{body}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_heartbeat_fails_liveness_and_a_beat_restores_it() {
        let probes = Probes::new(|| true);
        assert!(probes.live().0);
        tokio::time::advance(STALL_AFTER + BEAT_EVERY).await;
        assert!(!probes.live().0);
        let beating = tokio::time::timeout(BEAT_EVERY / 2, probes.heartbeat());
        let _ = beating.await;
        assert!(probes.live().0);
        assert!(!probes.ready().0);
        probes.set_registered();
        probes.set_api_bound();
        assert!(probes.ready().0);
    }
}
