//! The test harness every hcomm integration test file that needs more than libtest gives
//! runs under (`harness = false` in its crate's `Cargo.toml`): named tests with what
//! they need from the machine, reported as IGNORED with the reason when the machine
//! lacks it (never as passed), and suites that share one fixture — started lazily by the
//! first test that runs, torn down after the last — running one test at a time.
//!
//! Built on `libtest-mimic`, so `cargo test` keeps working as with libtest: name
//! filters (`-- drain_under_load`, `--exact`, `--skip`), `--list`, `--ignored`,
//! `--include-ignored`, and the summary line `test result: ok. N passed; ...`.
//!
//! The one probe for "can this machine run network-namespace tests" lives here
//! ([`Needs::unmet`]); every test that needs root goes through it.

use std::sync::{Arc, Mutex, OnceLock};

use libtest_mimic::{Arguments, Completion, Conclusion, Failed, Trial};

/// What a test needs from the machine beyond a Rust toolchain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing: runs anywhere.
    Nothing,
    /// Network namespaces, veths and `tc` (root, or CAP_NET_ADMIN and CAP_SYS_ADMIN).
    NetworkNamespaces,
}

impl Needs {
    /// Why this machine cannot meet the need, or `None` when it can. Probed once per
    /// process: for namespaces, by really creating (and removing) one simulated host, so
    /// a container that grants the capabilities but not the mounts is found out too.
    pub fn unmet(self) -> Option<String> {
        match self {
            Needs::Nothing => None,
            Needs::NetworkNamespaces => {
                static PROBE: OnceLock<Option<String>> = OnceLock::new();
                PROBE
                    .get_or_init(|| {
                        crate::hosts::SimHosts::create(crate::hosts::SimHostsOptions::new(1))
                            .map(|hosts| hosts.teardown())
                            .err()
                            .map(|e| format!("needs root for network namespaces: {e}"))
                    })
                    .clone()
            }
        }
    }
}

/// The outcome of one test body: `Err` fails the test with the error's chain.
pub type Outcome = anyhow::Result<()>;

/// One named test.
pub struct Test {
    name: String,
    needs: Needs,
    body: Box<dyn FnOnce() -> Outcome + Send>,
}

impl Test {
    /// A test named `name` (a sentence about behaviour) that runs `body` when the
    /// machine meets `needs`, and is reported ignored with the reason otherwise.
    pub fn new(
        name: impl Into<String>,
        needs: Needs,
        body: impl FnOnce() -> Outcome + Send + 'static,
    ) -> Test {
        Test {
            name: name.into(),
            needs,
            body: Box::new(body),
        }
    }

    fn into_trial(self) -> Trial {
        let Test { name, needs, body } = self;
        Trial::ignorable_test(name, move || {
            if let Some(reason) = needs.unmet() {
                return Ok(Completion::ignored_with(reason));
            }
            body().map(|()| Completion::Completed).map_err(failed)
        })
    }
}

/// Runs `tests` as libtest would (arguments from the command line, parallel unless
/// `--test-threads` says otherwise) and returns the summary; call `.exit()` on it.
pub fn run(tests: Vec<Test>) -> Conclusion {
    libtest_mimic::run(
        &Arguments::from_args(),
        tests.into_iter().map(Test::into_trial).collect(),
    )
}

/// Runs `tests` one at a time, in the order given, whatever `--test-threads` says: for
/// tests that share machine-wide resources (a fixed port, a namespace name) or a
/// [`Shared`] fixture.
pub fn run_in_order(tests: Vec<Test>) -> Conclusion {
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    libtest_mimic::run(&args, tests.into_iter().map(Test::into_trial).collect())
}

/// Runs `test` on a fresh two-worker tokio runtime (what the integration tests use on
/// this 2-core budget), failing it when `deadline` passes first.
pub fn block_on(
    deadline: std::time::Duration,
    test: impl std::future::Future<Output = Outcome>,
) -> Outcome {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        tokio::time::timeout(deadline, test)
            .await
            .map_err(|_| anyhow::anyhow!("test deadline ({deadline:?})"))?
    })
}

/// A fixture several tests share: started by the first test that asks for it, handed to
/// one test at a time, and stopped by [`Shared::teardown`] after the last. A test that
/// fails (error or panic) takes the fixture down with it, so the next test starts from
/// a fresh one instead of inheriting a half-broken state.
pub struct Shared<T> {
    slot: Arc<Mutex<Option<T>>>,
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared {
            slot: self.slot.clone(),
        }
    }
}

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Shared {
            slot: Arc::new(Mutex::new(None)),
        }
    }
}

impl<T> Shared<T> {
    /// Runs `test` on the fixture, starting it with `start` if no fixture is up. On
    /// failure the fixture is handed to `stop` (or, after a panic, dropped).
    pub fn with<R>(
        &self,
        start: impl FnOnce() -> anyhow::Result<T>,
        stop: impl FnOnce(T),
        test: impl FnOnce(&mut T) -> anyhow::Result<R>,
    ) -> anyhow::Result<R> {
        let mut slot = self
            .slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut fixture = match slot.take() {
            Some(fixture) => fixture,
            None => start()?,
        };
        match test(&mut fixture) {
            Ok(value) => {
                *slot = Some(fixture);
                Ok(value)
            }
            Err(error) => {
                stop(fixture);
                Err(error)
            }
        }
    }

    /// Takes the fixture, if one is up, for the caller to stop.
    pub fn teardown(&self) -> Option<T> {
        self.slot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}

/// An error as libtest-mimic reports it: the whole `anyhow` chain.
fn failed(error: anyhow::Error) -> Failed {
    Failed::from(format!("{error:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_fixture_starts_once_and_is_replaced_after_a_failure() {
        let shared: Shared<u32> = Shared::default();
        let mut starts = 0;
        let mut stops = 0;
        let mut start = || {
            starts += 1;
            Ok(starts * 10)
        };
        assert_eq!(
            shared.with(&mut start, |_| stops += 1, |n| Ok(*n)).unwrap(),
            10
        );
        assert_eq!(
            shared.with(&mut start, |_| stops += 1, |n| Ok(*n)).unwrap(),
            10
        );
        assert!(
            shared
                .with(
                    &mut start,
                    |_| stops += 1,
                    |_| -> anyhow::Result<u32> { anyhow::bail!("broken") }
                )
                .is_err()
        );
        assert_eq!(
            shared.with(&mut start, |_| stops += 1, |n| Ok(*n)).unwrap(),
            20
        );
        assert_eq!(stops, 1);
        assert_eq!(shared.teardown(), Some(20));
        assert_eq!(shared.teardown(), None);
    }

    #[test]
    fn nothing_is_always_met() {
        assert_eq!(Needs::Nothing.unmet(), None);
    }
}
