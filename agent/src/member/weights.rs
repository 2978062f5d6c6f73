//! The seam to weight sync: the member task calls a [`WeightsSyncer`]; the real
//! implementation lives in `crate::weights` (written separately) and is plugged in by
//! `run`. Until then [`DeclaredSourceOnly`] accepts a group without weights and a local
//! source directory as-is (no chunk transfer, no digest check) — it never pretends a
//! remote source was synced.

use std::future::Future;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;

use hcomm_crds::WeightsSpec;

/// What a sync is asked to do.
#[derive(Debug, Clone)]
pub struct WeightsRequest {
    pub namespace: String,
    pub group: String,
    pub pod: String,
    pub node: String,
    pub spec: Option<WeightsSpec>,
    /// Where the verified weights must land (atomically).
    pub dest: PathBuf,
    /// The verified data interface and its address.
    pub interface: String,
    pub local_ip: IpAddr,
    /// Peer nodes (name, data address) that may hold the weights.
    pub peers: Vec<(String, String)>,
    pub epoch: u64,
}

/// A finished sync.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightsOutcome {
    /// Where the worker reads the weights.
    pub path: Option<PathBuf>,
    pub bytes: u64,
    pub seconds: f64,
    pub message: String,
}

/// A boxed future of a sync.
pub type SyncFuture<'a> = Pin<Box<dyn Future<Output = Result<WeightsOutcome, String>> + Send + 'a>>;

/// Brings a member's weights in place and verified.
pub trait WeightsSyncer: Send + Sync {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a>;
}

/// Placeholder until `crate::weights` provides the real syncer.
#[derive(Debug, Default, Clone, Copy)]
pub struct DeclaredSourceOnly;

impl WeightsSyncer for DeclaredSourceOnly {
    fn sync<'a>(&'a self, req: &'a WeightsRequest) -> SyncFuture<'a> {
        Box::pin(async move {
            let Some(spec) = &req.spec else {
                return Ok(WeightsOutcome {
                    path: None,
                    bytes: 0,
                    seconds: 0.0,
                    message: "the group declares no weights".into(),
                });
            };
            let src = PathBuf::from(&spec.source);
            if src.is_dir() {
                Ok(WeightsOutcome {
                    path: Some(src),
                    bytes: 0,
                    seconds: 0.0,
                    message: format!(
                        "weights {} read in place from {}",
                        spec.version, spec.source
                    ),
                })
            } else {
                Err(format!(
                    "weights source {} is not a local directory and peer sync is not available in this build",
                    spec.source
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(spec: Option<WeightsSpec>) -> WeightsRequest {
        WeightsRequest {
            namespace: "ns".into(),
            group: "g".into(),
            pod: "p".into(),
            node: "n".into(),
            spec,
            dest: "/tmp/x".into(),
            interface: "lo".into(),
            local_ip: "127.0.0.1".parse().unwrap(),
            peers: vec![],
            epoch: 1,
        }
    }

    #[tokio::test]
    async fn no_weights_declared_is_synced_and_a_remote_source_is_refused() {
        assert!(DeclaredSourceOnly.sync(&req(None)).await.is_ok());
        let spec = WeightsSpec {
            source: "https://example/w".into(),
            version: "v1".into(),
            digest: "sha256:00".into(),
        };
        assert!(
            DeclaredSourceOnly
                .sync(&req(Some(spec)))
                .await
                .unwrap_err()
                .contains("not a local directory")
        );
        let spec = WeightsSpec {
            source: "/".into(),
            version: "v1".into(),
            digest: "sha256:00".into(),
        };
        assert_eq!(
            DeclaredSourceOnly
                .sync(&req(Some(spec)))
                .await
                .unwrap()
                .path,
            Some("/".into())
        );
    }
}
