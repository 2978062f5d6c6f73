//! hcomm's proving ground: a real local Kubernetes control plane (`controlplane`, behind
//! `cargo devcluster`), simulated hosts in Linux network namespaces (`hosts`), the Helm
//! chart as installed in tests (`chart`), a whole installation with the example pools
//! under load (`testbed`), the test harness that reports tests this machine cannot run as
//! ignored and shares one fixture between scenarios (`harness`), and Prometheus' own
//! linter for metrics (`promtool`, built from a pinned release). Tests of every crate use
//! it; it depends on no hcomm runtime crate, so it can never be what it tests.

pub mod bench;
pub mod chart;
pub mod controlplane;
pub mod demo;
pub mod diagram;
pub mod harness;
pub mod hosts;
pub mod promtool;
pub mod realnode;
pub mod testbed;
