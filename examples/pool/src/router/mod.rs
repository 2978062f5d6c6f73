//! The router: what a gateway or inference scheduler does with a pool.
//!
//! - [`endpoints`]: EndpointSlices → ready endpoints (pure, [`ready_endpoints`]).
//! - [`follow`]: a kube-runtime reflector on the Service's slices → a watch channel.
//! - [`balance`]: least-in-flight choice among the ready endpoints.
//! - [`client`]: one bounded HTTP/1 POST.
//! - [`dispatch`]: one request with the retry rule (503/reset → another endpoint).

pub mod balance;
pub mod client;
pub mod dispatch;
pub mod endpoints;
pub mod follow;

pub use balance::Balancer;
pub use client::HttpClient;
pub use dispatch::{Attempt, Dispatch, Dispatcher};
pub use endpoints::{Endpoint, ready_endpoints};
pub use follow::{Discovery, Follower, follow};
