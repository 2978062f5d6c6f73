//! Choosing an endpoint: least requests in flight among the ready ones, ties broken by a
//! rotating start so equal endpoints share the load evenly (round robin when idle).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::endpoints::Endpoint;

/// Spreads requests over the ready endpoints published on a watch channel (by a
/// [`super::follow::Follower`], or a fixed set in tests).
#[derive(Clone)]
pub struct Balancer {
    ready: watch::Receiver<Vec<Endpoint>>,
    inflight: Arc<Mutex<HashMap<Endpoint, u64>>>,
    turn: Arc<AtomicUsize>,
}

/// Counts one request in flight to an endpoint until dropped.
pub struct Pick {
    pub endpoint: Endpoint,
    inflight: Arc<Mutex<HashMap<Endpoint, u64>>>,
}

impl Drop for Pick {
    fn drop(&mut self) {
        let mut m = lock(&self.inflight);
        if let Some(n) = m.get_mut(&self.endpoint) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(&self.endpoint);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Balancer {
    pub fn new(ready: watch::Receiver<Vec<Endpoint>>) -> Balancer {
        Balancer {
            ready,
            inflight: Arc::default(),
            turn: Arc::default(),
        }
    }

    /// A fixed set of endpoints (tests, or a static backend list).
    pub fn fixed(endpoints: Vec<Endpoint>) -> Balancer {
        // The sender is dropped: a closed watch channel still reads its last value.
        Balancer::new(watch::channel(endpoints).1)
    }

    /// The ready endpoints now.
    pub fn ready(&self) -> Vec<Endpoint> {
        self.ready.borrow().clone()
    }

    /// Waits until at least one endpoint is ready (the caller bounds it); false if none
    /// is and none can come (the publisher is gone).
    pub async fn wait_ready(&self) -> bool {
        let mut rx = self.ready.clone();
        rx.wait_for(|v| !v.is_empty()).await.is_ok()
    }

    /// The ready endpoint with the fewest requests in flight, preferring ones not in
    /// `avoid` (already tried by this request); `None` when nothing is ready.
    pub fn pick(&self, avoid: &[Endpoint]) -> Option<Pick> {
        let ready = self.ready.borrow().clone();
        if ready.is_empty() {
            return None;
        }
        let fresh: Vec<&Endpoint> = ready.iter().filter(|e| !avoid.contains(e)).collect();
        let pool: Vec<&Endpoint> = if fresh.is_empty() {
            ready.iter().collect()
        } else {
            fresh
        };
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        let mut m = lock(&self.inflight);
        let best = (0..pool.len())
            .map(|i| pool[(start + i) % pool.len()])
            .min_by_key(|e| m.get(*e).copied().unwrap_or(0))
            .cloned()
            .expect("pool is not empty");
        *m.entry(best.clone()).or_insert(0) += 1;
        Some(Pick {
            endpoint: best,
            inflight: Arc::clone(&self.inflight),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(n: u8) -> Endpoint {
        Endpoint {
            address: format!("10.0.0.{n}"),
            port: 8080,
            pod: Some(format!("p{n}")),
        }
    }

    #[test]
    fn the_least_loaded_fresh_endpoint_is_picked() {
        let b = Balancer::fixed(vec![ep(1), ep(2), ep(3)]);
        let p1 = b.pick(&[]).unwrap();
        let p2 = b.pick(&[]).unwrap();
        let p3 = b.pick(&[]).unwrap();
        let mut seen = vec![
            p1.endpoint.clone(),
            p2.endpoint.clone(),
            p3.endpoint.clone(),
        ];
        seen.sort();
        assert_eq!(
            seen,
            vec![ep(1), ep(2), ep(3)],
            "idle endpoints share evenly"
        );
        drop(p2);
        let again = b.pick(&[]).unwrap();
        assert_eq!(
            again.endpoint,
            seen_of(&[&p1, &p3]),
            "the one with 0 in flight"
        );
        let avoid = b.pick(&[ep(1), ep(2)]).unwrap();
        assert_eq!(avoid.endpoint, ep(3), "tried endpoints are avoided");
        let all = b.pick(&[ep(1), ep(2), ep(3)]);
        assert!(all.is_some(), "when all were tried any may be retried");
        assert!(Balancer::fixed(vec![]).pick(&[]).is_none());
    }

    /// The endpoint of the three not held by `held`.
    fn seen_of(held: &[&Pick]) -> Endpoint {
        [ep(1), ep(2), ep(3)]
            .into_iter()
            .find(|e| held.iter().all(|p| p.endpoint != *e))
            .unwrap()
    }
}
