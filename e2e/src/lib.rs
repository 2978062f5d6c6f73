//! hcomm's proving ground: a real local Kubernetes control plane (`controlplane`, behind
//! `cargo devcluster`), simulated hosts in Linux network namespaces (`hosts`), the Helm chart as installed
//! in tests (`chart`), and
//! Prometheus' own linter for metrics (`promtool`). Tests of every crate use it; it
//! depends on no hcomm runtime crate, so it can never be what it tests.

pub mod chart;
pub mod controlplane;
pub mod demo;
pub mod hosts;
pub mod promtool;
pub mod testbed;
