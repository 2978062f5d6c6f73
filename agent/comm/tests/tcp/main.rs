//! End-to-end tests of the TCP backend: every rank is a task in this process, each with its
//! own endpoint on 127.0.0.1 (plus one test with real processes). Every test is bounded.

mod admission;
mod collectives;
mod elastic;
mod failures;
mod processes;
mod support;
