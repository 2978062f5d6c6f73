//! A suite of scenarios on one shared pair of example pools ([`ExamplePools`]): the pools
//! suite (`e2e/tests/pools`) and the same pools on the HCCL simulator
//! (`e2e/tests/hccl_pools.rs`) run their scenarios this way.
//!
//! Why shared: starting a testbed with both pools Ready under load takes most of a
//! minute on two cores; one per scenario would cost the suite's budget many times over.
//! The pools come up at the first scenario, each scenario runs on them in order within
//! its deadline, and a failed scenario takes them down ([`Shared`]), so the next one
//! starts from fresh pools rather than a half-broken state.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use libtest_mimic::Conclusion;
use tokio::runtime::Runtime;

use super::{CommPatch, ExamplePools};
use crate::harness::{self, Needs, Shared, Test};

/// One scenario: it gets the pools at their size after the previous one, under load.
pub type Scenario =
    for<'a> fn(&'a mut ExamplePools) -> Pin<Box<dyn Future<Output = anyhow::Result<()>> + 'a>>;

/// How a suite's pools are started, and how long one scenario may take.
#[derive(Debug, Clone)]
pub struct Suite {
    /// Simulated hosts of the shared testbed.
    pub hosts: usize,
    /// The pools' `comm` (`backend: hccl` installs the HCCL simulator).
    pub comm: CommPatch,
    /// The deadline of one scenario.
    pub deadline: Duration,
}

impl Suite {
    /// Runs `scenarios` in order (a filter on the command line picks some), then hands
    /// the pools left after the last one to `whole_run` (which stops them and checks the
    /// whole run); its error counts as one more failure. Returns the summary; call
    /// `.exit()` on it.
    pub fn run(
        &self,
        scenarios: Vec<(&'static str, Scenario)>,
        whole_run: impl FnOnce(&Runtime, ExamplePools) -> anyhow::Result<()>,
    ) -> Conclusion {
        let rt = std::sync::Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime"),
        );
        let shared: Shared<ExamplePools> = Shared::default();
        let tests = scenarios
            .into_iter()
            .map(|(name, scenario)| {
                let (rt, shared, suite) = (rt.clone(), shared.clone(), self.clone());
                Test::new(name, Needs::NetworkNamespaces, move || {
                    suite.run_one(&rt, &shared, scenario)
                })
            })
            .collect();
        let mut summary = harness::run_in_order(tests);
        if let Some(pools) = shared.teardown()
            && let Err(error) = whole_run(&rt, pools)
        {
            eprintln!("error: after the last scenario: {error:#}");
            summary.num_failed += 1;
        }
        // Not dropped, which would wait for every task to reach a yield point: a task of
        // the stopped pools may not, and the process exits right after the summary.
        match std::sync::Arc::try_unwrap(rt) {
            Ok(rt) => rt.shutdown_background(),
            Err(rt) => std::mem::forget(rt),
        }
        summary
    }

    /// Runs one scenario on the shared pools, starting them first if none are up.
    fn run_one(
        &self,
        rt: &Runtime,
        shared: &Shared<ExamplePools>,
        scenario: Scenario,
    ) -> anyhow::Result<()> {
        let deadline = self.deadline;
        shared.with(
            || Ok(rt.block_on(ExamplePools::start_with(self.hosts, &self.comm))?),
            |pools| {
                eprintln!("logs: {}", pools.bed.dir().join("logs").display());
                let _ = rt.block_on(pools.stop());
            },
            |pools| {
                rt.block_on(async {
                    tokio::time::timeout(deadline, scenario(pools))
                        .await
                        .map_err(|_| anyhow::anyhow!("scenario deadline ({deadline:?})"))?
                })
            },
        )
    }
}
