//! Shared fixtures: worlds of communicators on loopback and reference data.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hcomm_comm::tcp::{BindSpec, CommConfig, Endpoint, EndpointConfig, RootInfo, TcpComm};
use hcomm_comm::{Algorithm, DataType, ReduceOp};

pub const SECRET: &[u8] = b"group-secret-for-tests";
/// Upper bound for any test scenario.
pub const SCENARIO: Duration = Duration::from_secs(30);

pub fn ep_cfg() -> EndpointConfig {
    let mut c = EndpointConfig::new(BindSpec::loopback(), SECRET.to_vec());
    c.connect_timeout = Duration::from_secs(3);
    c
}

pub fn cfg(n: usize, r: usize, root: RootInfo, epoch: u64) -> CommConfig {
    let mut c = CommConfig::new(n, r, root, epoch);
    c.group = "test".into();
    c.algorithm = Some(Algorithm::Auto);
    c.init_timeout = Duration::from_secs(10);
    c.op_timeout = Duration::from_secs(10);
    // Tiny segments so that small test buffers exercise the pipelining.
    c.segment_bytes = 64;
    c
}

pub async fn endpoints(n: usize) -> Vec<Arc<Endpoint>> {
    let mut eps = Vec::new();
    for _ in 0..n {
        eps.push(Endpoint::bind(ep_cfg()).await.expect("bind"));
    }
    eps
}

/// `n` communicators at `epoch`, built concurrently.
pub async fn world_with(
    n: usize,
    epoch: u64,
    tweak: impl Fn(&mut CommConfig),
) -> Vec<Arc<TcpComm>> {
    let eps = endpoints(n).await;
    let root = eps[0].create_root_info();
    let inits = eps.into_iter().enumerate().map(|(r, ep)| {
        let mut c = cfg(n, r, root, epoch);
        tweak(&mut c);
        TcpComm::init_on(ep, c)
    });
    let comms = tokio::time::timeout(SCENARIO, futures::future::try_join_all(inits))
        .await
        .expect("init within the scenario limit")
        .expect("init");
    comms.into_iter().map(Arc::new).collect()
}

pub async fn world(n: usize) -> Vec<Arc<TcpComm>> {
    world_with(n, 1, |_| {}).await
}

/// Runs `f` on every rank as its own task; panics if any does not finish in time.
pub async fn on_all<F, Fut, T>(comms: &[Arc<TcpComm>], f: F) -> Vec<T>
where
    F: Fn(Arc<TcpComm>) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = comms.iter().map(|c| tokio::spawn(f(c.clone()))).collect();
    let all = futures::future::join_all(tasks);
    tokio::time::timeout(SCENARIO, all)
        .await
        .expect("every rank finishes within the scenario limit")
        .into_iter()
        .map(|r| r.expect("rank task panicked"))
        .collect()
}

/// Deterministic small integers, exactly representable in every type.
pub fn values(rank: usize, count: usize, dtype: DataType, op: ReduceOp) -> Vec<i64> {
    (0..count)
        .map(|i| match op {
            ReduceOp::Prod => 1 + ((rank + i) % 2) as i64,
            _ => {
                let v = ((rank * 31 + i * 17) % 5) as i64;
                if dtype == DataType::U8 { v } else { v - 2 }
            }
        })
        .collect()
}

pub fn encode(dtype: DataType, v: &[i64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * dtype.size());
    for &x in v {
        match dtype {
            DataType::F32 => out.extend_from_slice(&(x as f32).to_ne_bytes()),
            DataType::F64 => out.extend_from_slice(&(x as f64).to_ne_bytes()),
            DataType::F16 => out.extend_from_slice(&half::f16::from_f64(x as f64).to_ne_bytes()),
            DataType::BF16 => out.extend_from_slice(&half::bf16::from_f64(x as f64).to_ne_bytes()),
            DataType::I8 => out.push(x as i8 as u8),
            DataType::U8 => out.push(x as u8),
            DataType::I32 => out.extend_from_slice(&(x as i32).to_ne_bytes()),
            DataType::I64 => out.extend_from_slice(&x.to_ne_bytes()),
        }
    }
    out
}

/// Reference reduction over ranks computed in i64 (wrapping where the type wraps).
pub fn reference(n: usize, count: usize, dtype: DataType, op: ReduceOp) -> Vec<u8> {
    let per: Vec<Vec<i64>> = (0..n).map(|r| values(r, count, dtype, op)).collect();
    let out: Vec<i64> = (0..count)
        .map(|i| {
            let it = per.iter().map(|v| v[i]);
            match op {
                ReduceOp::Sum => it.sum(),
                ReduceOp::Prod => it.product(),
                ReduceOp::Min => it.min().unwrap_or(0),
                ReduceOp::Max => it.max().unwrap_or(0),
            }
        })
        .collect();
    encode(dtype, &out)
}

/// Bytes that differ per rank and position.
pub fn pattern(rank: usize, len: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (rank * 131 + i * 7 + salt * 13) as u8)
        .collect()
}
