//! Measures one rank against any [`Communicator`]: warm-up, timed loop, slowest-rank time,
//! and a checked iteration counting wrong elements (nccl-tests' `#wrong`).

use std::time::Instant;

use hcomm_comm::{CommError, Communicator, DataType, ReduceOp};

use crate::plan::{self, Op, Row};

/// What one rank measures.
#[derive(Debug, Clone)]
pub struct Settings {
    pub ops: Vec<Op>,
    pub sizes: Vec<usize>,
    pub budget: usize,
    pub max_iters: usize,
    pub dtype: DataType,
}

/// Writes `v` (a small integer, exact in every type) into element `i`.
fn put(buf: &mut [u8], dtype: DataType, i: usize, v: f64) {
    let at = i * dtype.size();
    let dst = &mut buf[at..at + dtype.size()];
    match dtype {
        DataType::F32 => dst.copy_from_slice(&(v as f32).to_ne_bytes()),
        DataType::F64 => dst.copy_from_slice(&v.to_ne_bytes()),
        DataType::F16 => dst.copy_from_slice(&half::f16::from_f64(v).to_ne_bytes()),
        DataType::BF16 => dst.copy_from_slice(&half::bf16::from_f64(v).to_ne_bytes()),
        DataType::I8 => dst.copy_from_slice(&(v as i8).to_ne_bytes()),
        DataType::U8 => dst.copy_from_slice(&(v as u8).to_ne_bytes()),
        DataType::I32 => dst.copy_from_slice(&(v as i32).to_ne_bytes()),
        DataType::I64 => dst.copy_from_slice(&(v as i64).to_ne_bytes()),
    }
}

fn get(buf: &[u8], dtype: DataType, i: usize) -> f64 {
    let at = i * dtype.size();
    let b = &buf[at..at + dtype.size()];
    match dtype {
        DataType::F32 => f32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
        DataType::F64 => f64::from_ne_bytes(b.try_into().unwrap_or_default()),
        DataType::F16 => half::f16::from_ne_bytes(b.try_into().unwrap_or_default()).to_f64(),
        DataType::BF16 => half::bf16::from_ne_bytes(b.try_into().unwrap_or_default()).to_f64(),
        DataType::I8 => i8::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
        DataType::U8 => u8::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
        DataType::I32 => i32::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
        DataType::I64 => i64::from_ne_bytes(b.try_into().unwrap_or_default()) as f64,
    }
}

/// Fills `buf` with `f(element index)`.
fn fill(buf: &mut [u8], dtype: DataType, f: impl Fn(usize) -> f64) {
    for i in 0..buf.len() / dtype.size() {
        put(buf, dtype, i, f(i));
    }
}

fn count_wrong(buf: &[u8], dtype: DataType, f: impl Fn(usize) -> f64) -> u64 {
    (0..buf.len() / dtype.size())
        .filter(|i| get(buf, dtype, *i) != f(*i))
        .count() as u64
}

/// Buffers of one (op, size) case, filled with the check pattern.
struct Case {
    op: Op,
    send: Vec<u8>,
    recv: Vec<u8>,
    block: usize, // elements per rank block (gather/scatter/all-to-all)
}

impl Case {
    fn new(op: Op, bytes: usize, n: usize, rank: usize, dtype: DataType) -> Self {
        let elems = bytes / dtype.size();
        let block = elems / n;
        let mut c = match op {
            Op::AllReduce | Op::Broadcast => Case {
                op,
                send: vec![0; bytes],
                recv: Vec::new(),
                block,
            },
            Op::AllGather => Case {
                op,
                send: vec![0; block * dtype.size()],
                recv: vec![0; bytes],
                block,
            },
            Op::ReduceScatter => Case {
                op,
                send: vec![0; bytes],
                recv: vec![0; block * dtype.size()],
                block,
            },
            Op::AllToAll => Case {
                op,
                send: vec![0; bytes],
                recv: vec![0; bytes],
                block,
            },
        };
        c.reset(rank, dtype);
        c
    }

    /// The check pattern: rank r contributes r+1 (all-to-all: 10(r+1)+destination).
    fn reset(&mut self, rank: usize, dtype: DataType) {
        let r = rank as f64;
        match self.op {
            Op::AllToAll => {
                let b = self.block.max(1);
                fill(&mut self.send, dtype, |i| 10.0 * (r + 1.0) + (i / b) as f64)
            }
            _ => fill(&mut self.send, dtype, |_| r + 1.0),
        }
    }

    async fn run<C: Communicator>(&mut self, comm: &C, dtype: DataType) -> Result<(), CommError> {
        match self.op {
            Op::AllReduce => comm.all_reduce(&mut self.send, dtype, ReduceOp::Sum).await,
            Op::AllGather => comm.all_gather(&self.send, &mut self.recv).await,
            Op::ReduceScatter => {
                comm.reduce_scatter(&self.send, &mut self.recv, dtype, ReduceOp::Sum)
                    .await
            }
            Op::Broadcast => comm.broadcast(&mut self.send, 0).await,
            Op::AllToAll => comm.all_to_all(&self.send, &mut self.recv).await,
        }
    }

    fn wrong(&self, n: usize, rank: usize, dtype: DataType) -> u64 {
        let total = (n * (n + 1) / 2) as f64;
        let b = self.block.max(1);
        match self.op {
            Op::AllReduce => count_wrong(&self.send, dtype, |_| total),
            Op::Broadcast => count_wrong(&self.send, dtype, |_| 1.0),
            Op::AllGather => count_wrong(&self.recv, dtype, |i| (i / b) as f64 + 1.0),
            Op::ReduceScatter => count_wrong(&self.recv, dtype, |_| total),
            Op::AllToAll => count_wrong(&self.recv, dtype, |i| {
                10.0 * ((i / b) as f64 + 1.0) + rank as f64
            }),
        }
    }
}

async fn max_over_ranks<C: Communicator>(comm: &C, v: f64) -> Result<f64, CommError> {
    let mut b = v.to_ne_bytes();
    comm.all_reduce(&mut b, DataType::F64, ReduceOp::Max)
        .await?;
    Ok(f64::from_ne_bytes(b))
}

async fn sum_over_ranks<C: Communicator>(comm: &C, v: u64) -> Result<u64, CommError> {
    let mut b = (v as i64).to_ne_bytes();
    comm.all_reduce(&mut b, DataType::I64, ReduceOp::Sum)
        .await?;
    Ok(i64::from_ne_bytes(b) as u64)
}

/// Runs every (op, size) of `s` on this rank; `emit` gets each row (identical on all ranks).
pub async fn run<C: Communicator>(
    comm: &C,
    s: &Settings,
    mut emit: impl FnMut(Row),
) -> Result<(), CommError> {
    let (n, rank) = (comm.world_size(), comm.rank());
    for &op in &s.ops {
        for &size in &s.sizes {
            let bytes = op.effective_bytes(size, n, s.dtype);
            if bytes == 0 {
                continue;
            }
            let mut case = Case::new(op, bytes, n, rank, s.dtype);
            for _ in 0..plan::warmup(size) {
                case.run(comm, s.dtype).await?;
            }
            let k = plan::iters(size, s.budget, s.max_iters);
            comm.barrier().await?;
            let t0 = Instant::now();
            for _ in 0..k {
                case.run(comm, s.dtype).await?;
            }
            let seconds = max_over_ranks(comm, t0.elapsed().as_secs_f64() / k as f64).await?;
            case.reset(rank, s.dtype);
            case.run(comm, s.dtype).await?;
            let wrong = sum_over_ranks(comm, case.wrong(n, rank, s.dtype)).await?;
            emit(Row {
                op,
                bytes,
                dtype: s.dtype,
                world: n,
                seconds,
                wrong,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_patterns_round_trip_through_every_data_type() {
        for d in DataType::ALL {
            let mut b = vec![0u8; 4 * d.size()];
            fill(&mut b, d, |i| 10.0 * 8.0 + i as f64);
            assert_eq!(count_wrong(&b, d, |i| 80.0 + i as f64), 0, "{d}");
            assert_eq!(count_wrong(&b, d, |_| 80.0), 3, "{d}");
        }
    }
}
