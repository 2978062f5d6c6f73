//! The example prefill and decode pools (`examples/*-pool.yaml`) running under steady load
//! on a testbed: the state every pool scenario starts from. Scenarios share one
//! [`ExamplePools`] when they run together, and each states the pool sizes it needs
//! ([`ExamplePools::decode_at`]) instead of relying on what the previous one left.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    LoadOptions, LoadRun, LoadStats, MemberPod, Result, Testbed, TestbedOptions, Timeline, weights,
};

/// The namespace the examples live in.
pub const NAMESPACE: &str = "default";
/// How long a pool may take to reach a size.
pub const POOL_WAIT: Duration = Duration::from_secs(120);
/// Size and seed of the examples' first weights version.
const WEIGHTS_MIB: u64 = 64;
const WEIGHTS_SEED: u64 = 1;

/// A testbed with both example pools at 2 members, Ready, each under load.
pub struct ExamplePools {
    /// The installation.
    pub bed: Testbed,
    /// Where the first weights version lives, and its digest.
    pub models: PathBuf,
    /// `sha256:<hex>` of [`ExamplePools::models`].
    pub digest: String,
    /// Every member's lifecycle marks since the pools were applied.
    pub timeline: Timeline,
    /// Load on the prefill pool, expecting [`ExamplePools::digest`].
    pub prefill_load: LoadRun,
    /// Load on the decode pool (a scenario may swap it for one accepting more digests).
    pub decode_load: LoadRun,
    /// The prefill members as they first became Ready (prefill is never scaled).
    pub prefill: Vec<MemberPod>,
}

impl ExamplePools {
    /// Starts a testbed of `hosts` hosts, applies the examples, waits for both pools to be
    /// Ready at 2 members, and starts load on both until every member has served.
    pub async fn start(hosts: usize) -> Result<ExamplePools> {
        Self::start_with(hosts, &CommPatch::default()).await
    }

    /// [`ExamplePools::start`] with the pools' `comm` patched; `backend: hccl` installs the
    /// HCCL simulator as the hosts' runtime.
    pub async fn start_with(hosts: usize, comm: &CommPatch) -> Result<ExamplePools> {
        let bed = Testbed::start(TestbedOptions {
            hosts,
            hccl_runtime: comm.backend == hcomm_crds::Backend::Hccl,
            ..Default::default()
        })
        .await?;
        let models = bed.dir().join("models/v1");
        let digest = weights::generate(&models, WEIGHTS_MIB, WEIGHTS_SEED)?;
        let timeline = Timeline::start(bed.client().await?, NAMESPACE);
        bed.apply_examples_on(&models, &digest, comm)?;
        let prefill = bed
            .wait_pool_ready(NAMESPACE, "prefill", 2, POOL_WAIT)
            .await?;
        let decode = bed
            .wait_pool_ready(NAMESPACE, "decode", 2, POOL_WAIT)
            .await?;
        let prefill_load = bed.start_load(&Self::load_options("prefill", &digest))?;
        let decode_load = bed.start_load(&Self::load_options("decode", &digest))?;
        decode_load
            .wait_served(&decode, 5, Duration::from_secs(30))
            .await?;
        prefill_load
            .wait_served(&prefill, 5, Duration::from_secs(30))
            .await?;
        Ok(ExamplePools {
            bed,
            models,
            digest,
            timeline,
            prefill_load,
            decode_load,
            prefill,
        })
    }

    /// The load the scenarios put on a pool: 4 requests in flight, 3 tokens each.
    pub fn load_options(service: &str, digest: &str) -> LoadOptions {
        LoadOptions {
            service: service.into(),
            namespace: NAMESPACE.into(),
            concurrency: 4,
            tokens: 3,
            expect_digests: vec![digest.to_owned()],
        }
    }

    /// Scales decode to `n` (a no-op when it is there) and waits until exactly `n`
    /// members exist and are Ready, then returns them.
    pub async fn decode_at(&self, n: usize) -> Result<Vec<MemberPod>> {
        self.bed.scale("decode", n as u32)?;
        self.bed
            .wait_members(NAMESPACE, "decode", n, POOL_WAIT)
            .await?;
        self.bed
            .wait_pool_ready(NAMESPACE, "decode", n, POOL_WAIT)
            .await
    }

    /// Stops both loads and the testbed; returns the loads' final stats, (decode,
    /// prefill), for a whole-run check.
    pub async fn stop(self) -> Result<(LoadStats, LoadStats)> {
        let ExamplePools {
            bed,
            prefill_load,
            decode_load,
            ..
        } = self;
        let decode = decode_load.stop().await;
        let prefill = prefill_load.stop().await;
        bed.stop().await;
        Ok((decode?, prefill?))
    }
}

/// How the example pools' `comm` is changed (the default changes nothing: the examples
/// say `backend: tcp`; note that the API's own default, `Backend::default()`, is `hccl`).
#[derive(Debug, Clone)]
pub struct CommPatch {
    /// `comm.backend`; `hccl` also raises `connectTimeoutSeconds` to HCCL's 120 s floor,
    /// which the API server enforces.
    pub backend: hcomm_crds::Backend,
    /// `comm.opTimeoutSeconds`, when set (the examples leave the default).
    pub op_timeout_seconds: Option<u32>,
}

impl Default for CommPatch {
    fn default() -> Self {
        CommPatch {
            backend: hcomm_crds::Backend::Tcp,
            op_timeout_seconds: None,
        }
    }
}

impl CommPatch {
    /// The manifest text with the patch applied.
    pub(crate) fn apply(&self, text: &str) -> String {
        let mut out = Vec::new();
        for line in text.lines() {
            let trimmed = line.trim_start();
            let indent = &line[..line.len() - trimmed.len()];
            if trimmed.starts_with("backend:") && self.backend == hcomm_crds::Backend::Hccl {
                out.push(format!("{indent}backend: hccl"));
            } else if trimmed.starts_with("connectTimeoutSeconds:")
                && self.backend == hcomm_crds::Backend::Hccl
            {
                out.push(format!("{indent}connectTimeoutSeconds: 120"));
            } else {
                out.push(line.to_owned());
            }
            if trimmed.starts_with("connectTimeoutSeconds:")
                && let Some(s) = self.op_timeout_seconds
            {
                out.push(format!("{indent}opTimeoutSeconds: {s}"));
            }
        }
        out.join("\n")
    }
}
