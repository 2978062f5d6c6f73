//! Simulated communicators: the root-info rendezvous and the collectives.
//!
//! Rendezvous: `HcclGetRootInfo` binds a listener on this rank's device IP and puts its
//! address in the blob. In `HcclCommInitRootInfo`, rank 0 (which must be the process that made
//! the blob, as HCCL's root) accepts the other ranks until `HCCL_CONNECT_TIMEOUT`; each of
//! them connects *from* its own device IP and announces rank, world size and device IP. Rank 0
//! refuses a foreign rendezvous id, a different world size, a duplicate or out-of-range rank
//! and a device IP that is not the connection's source address, then answers everyone with
//! one `HcclResult`; a rank that goes away mid-init fails it for all.
//!
//! Collectives: every rank sends its header (sequence number, op, count, type, reduce op,
//! root) and data to rank 0, which checks the headers match (a mismatch is a violation and
//! fails the op on every rank, it is never silently combined), computes each rank's result
//! and sends it back. The exchange runs on the stream's thread, reads the send buffer when it
//! starts and writes the receive buffer when it ends; until then both are pinned.
//!
//! Size: the rendezvous (both halves) and the collective exchange (both halves) share the
//! communicator's state; split, each half would reach into the other's.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{IpAddr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::codes::*;
use crate::faults::settings;
use crate::memory;
use crate::reduce::{element_size, reduce};
use crate::stream::Stream;
use crate::violation;
use crate::wire::{self, Cursor, RootInfo, WireError};

/// Collective kinds, as carried in the header.
pub const ALL_REDUCE: u8 = 1;
pub const ALL_GATHER: u8 = 2;
pub const REDUCE_SCATTER: u8 = 3;
pub const BROADCAST: u8 = 4;
pub const REDUCE: u8 = 5;
pub const BARRIER: u8 = 6;

fn kind_name(kind: u8) -> &'static str {
    match kind {
        ALL_REDUCE => "HcclAllReduce",
        ALL_GATHER => "HcclAllGather",
        REDUCE_SCATTER => "HcclReduceScatter",
        BROADCAST => "HcclBroadcast",
        REDUCE => "HcclReduce",
        _ => "HcclBarrier",
    }
}

/// How long `HcclCommDestroy` waits for aborted work to stop before answering `HCCL_E_AGAIN`.
const DESTROY_WAIT: Duration = Duration::from_secs(2);
/// The address a rank with the `wrong_device_ip` fault announces (TEST-NET-1).
const WRONG_IP: [u8; 4] = [192, 0, 2, 1];
/// Exit status of a process killed by the `die_in_init` fault.
const DIE_STATUS: i32 = 86;

/// One collective as launched on one rank.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub kind: u8,
    pub count: u64,
    pub dtype: u32,
    pub redop: u32,
    pub root: u32,
    pub send: usize,
    pub send_len: usize,
    pub recv: usize,
    pub recv_len: usize,
}

enum Link {
    Solo,
    /// Rank 0: connections to ranks 1..n, in rank order.
    Hub(Vec<TcpStream>),
    Leaf(TcpStream),
}

/// One communicator of this process.
pub struct Comm {
    pub rank: u32,
    pub nranks: u32,
    pub device: i32,
    exec_timeout: Option<Duration>,
    link: Mutex<Link>,
    abort: AtomicBool,
    broken: AtomicBool,
    in_flight: AtomicUsize,
    async_error: AtomicI32,
    seq: AtomicU64,
}

static NEXT_ID: AtomicUsize = AtomicUsize::new(1);
static COMMS: Mutex<Option<HashMap<usize, Arc<Comm>>>> = Mutex::new(None);
static ROOTS: Mutex<Option<HashMap<u64, TcpListener>>> = Mutex::new(None);
/// Collectives started by this process (the `hang_op` fault counts them).
static OPS_STARTED: AtomicU64 = AtomicU64::new(0);
/// Collectives completed by this process (the `async_error` fault counts them).
static OPS_DONE: AtomicU64 = AtomicU64::new(0);

/// The communicator behind a handle.
pub fn get(id: usize) -> Option<Arc<Comm>> {
    COMMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()?
        .get(&id)
        .cloned()
}

/// The device IP of logical device `device` (see [`crate::faults::Settings::device_ip`]);
/// a device without one cannot join anything.
fn device_ip(device: i32) -> Result<std::net::Ipv4Addr, i32> {
    settings().device_ip(device).map_err(|e| {
        eprintln!("hccl-sim: device {device}: {e}");
        HCCL_E_PARA
    })
}

/// `HcclGetRootInfo`: listen on this rank's device IP; the blob.
pub fn get_root_info(device: i32) -> Result<[u8; HCCL_ROOT_INFO_BYTES], i32> {
    let ip = device_ip(device)?;
    let listener = TcpListener::bind(SocketAddrV4::new(ip, 0)).map_err(|e| {
        eprintln!("hccl-sim: HcclGetRootInfo cannot listen on device IP {ip}: {e}");
        HCCL_E_TCP_CONNECT
    })?;
    let port = listener.local_addr().map_err(|_| HCCL_E_INTERNAL)?.port();
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let uid = h.finish();
    ROOTS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(uid, listener);
    Ok(RootInfo {
        uid,
        addr: SocketAddrV4::new(ip, port),
    }
    .encode())
}

/// `HcclCommInitRootInfo(Config)`: the new communicator's handle, or an `HcclResult`.
pub fn init(
    nranks: u32,
    blob: &[u8],
    rank: u32,
    device: i32,
    exec_override: Option<Option<Duration>>,
) -> Result<usize, i32> {
    let s = settings();
    let Some(root) = RootInfo::decode(blob) else {
        eprintln!("hccl-sim: HcclCommInitRootInfo: the root info was not made by HcclGetRootInfo");
        return Err(HCCL_E_PARA);
    };
    if nranks == 0 || rank >= nranks {
        eprintln!("hccl-sim: HcclCommInitRootInfo: rank {rank} of {nranks}");
        return Err(HCCL_E_PARA);
    }
    let deadline = Instant::now() + s.connect_timeout;
    let link = if rank == 0 {
        let listener = ROOTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .and_then(|m| m.remove(&root.uid));
        let Some(listener) = listener else {
            eprintln!(
                "hccl-sim: rank 0 must be the process that called HcclGetRootInfo for this \
                 root info (and may use it once)"
            );
            return Err(HCCL_E_PARA);
        };
        if s.die_in_init {
            eprintln!("hccl-sim: fault die_in_init: root rank exits mid-init");
            std::process::exit(DIE_STATUS);
        }
        if nranks == 1 {
            Link::Solo
        } else {
            Link::Hub(accept_ranks(&listener, root.uid, nranks, deadline)?)
        }
    } else {
        Link::Leaf(join_root(root, rank, nranks, device, deadline)?)
    };
    let comm = Arc::new(Comm {
        rank,
        nranks,
        device,
        exec_timeout: exec_override.unwrap_or(s.exec_timeout),
        link: Mutex::new(link),
        abort: AtomicBool::new(false),
        broken: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        async_error: AtomicI32::new(HCCL_SUCCESS),
        seq: AtomicU64::new(0),
    });
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    COMMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(id, comm);
    Ok(id)
}

fn welcome_all(peers: &mut [Option<TcpStream>], code: i32) {
    for p in peers.iter_mut().flatten() {
        let _ = wire::send(p, &code.to_le_bytes());
    }
}

/// Rank 0's half of the rendezvous.
fn accept_ranks(
    listener: &TcpListener,
    uid: u64,
    nranks: u32,
    deadline: Instant,
) -> Result<Vec<TcpStream>, i32> {
    let never = AtomicBool::new(false);
    let mut peers: Vec<Option<TcpStream>> = (1..nranks).map(|_| None).collect();
    listener
        .set_nonblocking(true)
        .map_err(|_| HCCL_E_INTERNAL)?;
    let fail = |peers: &mut Vec<Option<TcpStream>>, code: i32, why: String| {
        eprintln!("hccl-sim: HcclCommInitRootInfo (rank 0) fails: {why}");
        welcome_all(peers, code);
        Err(code)
    };
    while peers.iter().any(Option::is_none) {
        if Instant::now() >= deadline {
            let missing: Vec<usize> = (1..nranks as usize)
                .filter(|r| peers[r - 1].is_none())
                .collect();
            return fail(
                &mut peers,
                HCCL_E_TIMEOUT,
                format!("ranks {missing:?} did not join within HCCL_CONNECT_TIMEOUT"),
            );
        }
        let (mut conn, from) = match listener.accept() {
            Ok(c) => c,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let _ = conn.set_nonblocking(false);
        let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
        let hello = match wire::recv(&mut conn, Some(deadline), &never) {
            Ok(h) => h,
            Err(WireError::Timeout) => continue,
            Err(_) => {
                return fail(
                    &mut peers,
                    HCCL_E_TCP_TRANSFER,
                    format!("a rank connecting from {from} went away before it said who it is"),
                );
            }
        };
        let mut c = Cursor(&hello);
        let (Some(their_uid), Some(r), Some(n), Some(ip)) = (c.u64(), c.u32(), c.u32(), c.u32())
        else {
            return fail(
                &mut peers,
                HCCL_E_PARA,
                format!("malformed hello from {from}"),
            );
        };
        if their_uid != uid {
            // Another rendezvous' rank: refuse it alone.
            let _ = wire::send(&mut conn, &HCCL_E_PARA.to_le_bytes());
            continue;
        }
        if n != nranks {
            return fail(
                &mut peers,
                HCCL_E_PARA,
                format!("rank {r} says the world has {n} ranks, rank 0 says {nranks}"),
            );
        }
        if r == 0 || r >= nranks || peers[r as usize - 1].is_some() {
            return fail(
                &mut peers,
                HCCL_E_PARA,
                format!("rank {r} is out of range or taken"),
            );
        }
        let announced = std::net::Ipv4Addr::from(ip.to_be_bytes());
        if from.ip() != IpAddr::V4(announced) {
            let _ = wire::send(&mut conn, &HCCL_E_TCP_CONNECT.to_le_bytes());
            return fail(
                &mut peers,
                HCCL_E_TCP_CONNECT,
                format!(
                    "rank {r} announced device IP {announced} but connects from {}: the rank \
                     table's device_ip must be the NIC's address",
                    from.ip()
                ),
            );
        }
        peers[r as usize - 1] = Some(conn);
    }
    welcome_all(&mut peers, HCCL_SUCCESS);
    Ok(peers.into_iter().flatten().collect())
}

/// A non-root rank's half: connect from our device IP, say who we are, wait for the verdict.
fn join_root(
    root: RootInfo,
    rank: u32,
    nranks: u32,
    device: i32,
    deadline: Instant,
) -> Result<TcpStream, i32> {
    let s = settings();
    let ip = device_ip(device)?;
    let never = AtomicBool::new(false);
    let mut conn = loop {
        match connect_from(ip, root.addr) {
            Ok(c) => break c,
            Err(ConnectError::Bind(e)) => {
                eprintln!("hccl-sim: rank {rank} cannot use device IP {ip}: {e}");
                return Err(HCCL_E_TCP_CONNECT);
            }
            Err(ConnectError::Connect(e)) => {
                if Instant::now() >= deadline {
                    eprintln!(
                        "hccl-sim: rank {rank} could not reach the root at {} within \
                         HCCL_CONNECT_TIMEOUT: {e}",
                        root.addr
                    );
                    return Err(HCCL_E_TCP_CONNECT);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    if s.die_in_init {
        eprintln!("hccl-sim: fault die_in_init: rank {rank} exits mid-init");
        std::process::exit(DIE_STATUS);
    }
    let announced = if s.wrong_device_ip {
        std::net::Ipv4Addr::from(WRONG_IP)
    } else {
        ip
    };
    let mut hello = Vec::new();
    hello.extend_from_slice(&root.uid.to_le_bytes());
    hello.extend_from_slice(&rank.to_le_bytes());
    hello.extend_from_slice(&nranks.to_le_bytes());
    hello.extend_from_slice(&u32::from_be_bytes(announced.octets()).to_le_bytes());
    let _ = conn.set_write_timeout(Some(Duration::from_secs(5)));
    wire::send(&mut conn, &hello).map_err(|_| HCCL_E_TCP_TRANSFER)?;
    match wire::recv(&mut conn, Some(deadline), &never) {
        // The verdict is one HcclResult and nothing else.
        Ok(v) if v.len() == 4 => match Cursor(&v).i32() {
            Some(HCCL_SUCCESS) => Ok(conn),
            Some(code) => Err(code),
            None => Err(HCCL_E_INTERNAL),
        },
        Ok(v) => {
            eprintln!(
                "hccl-sim: rank {rank}: the root answered the hello with {} bytes, not a verdict",
                v.len()
            );
            Err(HCCL_E_TCP_TRANSFER)
        }
        Err(WireError::Timeout) => Err(HCCL_E_TIMEOUT),
        Err(_) => {
            eprintln!("hccl-sim: rank {rank}: the root went away during the rendezvous");
            Err(HCCL_E_TCP_TRANSFER)
        }
    }
}

enum ConnectError {
    Bind(std::io::Error),
    Connect(std::io::Error),
}

fn connect_from(local: std::net::Ipv4Addr, to: SocketAddrV4) -> Result<TcpStream, ConnectError> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).map_err(ConnectError::Bind)?;
    sock.bind(&SocketAddr::V4(SocketAddrV4::new(local, 0)).into())
        .map_err(ConnectError::Bind)?;
    sock.connect_timeout(&SocketAddr::V4(to).into(), Duration::from_secs(1))
        .map_err(ConnectError::Connect)?;
    // A dead root's port on this host can be picked as our own source port: Linux then
    // connects the socket to itself (TCP simultaneous open), and we would read our own
    // hello back as the root's verdict. Nobody listens there, so it is a refusal.
    let (mine, theirs) = (sock.local_addr(), sock.peer_addr());
    if let (Ok(mine), Ok(theirs)) = (mine, theirs)
        && mine.as_socket() == theirs.as_socket()
    {
        return Err(ConnectError::Connect(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )));
    }
    Ok(sock.into())
}

/// `HcclCommDestroy`: stops the communicator's work, then forgets it. `HCCL_E_AGAIN` while
/// its collectives have not stopped yet (retry), `HCCL_E_PTR` for an unknown handle.
pub fn destroy(id: usize) -> i32 {
    let Some(comm) = get(id) else {
        violation::record(
            "invalid_comm",
            &format!("HcclCommDestroy({id:#x}): not a live communicator (destroyed twice?)"),
        );
        return HCCL_E_PTR;
    };
    comm.abort.store(true, Ordering::SeqCst);
    let until = Instant::now() + DESTROY_WAIT;
    while comm.in_flight.load(Ordering::SeqCst) > 0 {
        if Instant::now() >= until {
            return HCCL_E_AGAIN;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    if let Some(m) = COMMS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        m.remove(&id);
    }
    HCCL_SUCCESS
}

impl Comm {
    /// `HcclGetCommAsyncError`'s answer.
    pub fn async_error(&self) -> i32 {
        self.async_error.load(Ordering::SeqCst)
    }

    /// Enqueues `op` on `stream`; the `HcclResult` of the launch (the op's own outcome comes
    /// with stream synchronisation).
    pub fn launch(self: &Arc<Self>, op: Op, stream: &Stream) -> i32 {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let what = format!("{}#{seq} (rank {})", kind_name(op.kind), self.rank);
        for addr in [op.send, op.recv] {
            if addr != 0 {
                memory::pin(addr, &what);
            }
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let comm = Arc::clone(self);
        let task_what = what.clone();
        let finish = move |comm: &Comm, what: &str| {
            for addr in [op.send, op.recv] {
                if addr != 0 {
                    memory::unpin(addr, what);
                }
            }
            comm.in_flight.fetch_sub(1, Ordering::SeqCst);
        };
        let queued = stream.enqueue(Box::new(move || {
            let code = comm.execute(op, seq, &task_what);
            finish(&comm, &task_what);
            code
        }));
        if !queued {
            for addr in [op.send, op.recv] {
                if addr != 0 {
                    memory::unpin(addr, &what);
                }
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            return HCCL_E_PTR;
        }
        HCCL_SUCCESS
    }

    fn aborted(&self) -> bool {
        self.abort.load(Ordering::SeqCst)
    }

    /// Sleeps `d` unless aborted first; false when aborted.
    fn pause(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.aborted() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5).min(until - Instant::now()));
        }
        !self.aborted()
    }

    /// Runs one collective on the stream's thread; an `aclError`.
    fn execute(&self, op: Op, seq: u64, what: &str) -> i32 {
        let s = settings();
        let index = OPS_STARTED.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            return ACL_ERROR_RT_SUSPECT_REMOTE_ERROR;
        }
        if s.hang_op == Some(index) {
            eprintln!("hccl-sim: fault hang_op: {what} hangs until HcclCommDestroy");
            while !self.aborted() {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if let Some(d) = s.slow_op
            && !self.pause(d)
        {
            return ACL_ERROR_RT_DEVICE_TASK_ABORT;
        }
        if self.aborted() {
            return ACL_ERROR_RT_DEVICE_TASK_ABORT;
        }
        let data = if op.send_len == 0 {
            Vec::new()
        } else {
            match memory::read(op.send, op.send_len) {
                Ok(d) => d,
                Err(f) => {
                    violation::record(
                        "use_after_free",
                        &format!("{what} read its send buffer {:#x}: {f:?}", op.send),
                    );
                    return ACL_ERROR_RT_PARAM_INVALID;
                }
            }
        };
        let deadline = self.exec_timeout.map(|t| Instant::now() + t);
        let out = match self.exchange(op, seq, data, deadline) {
            Ok(out) => out,
            Err(code) => {
                self.broken.store(true, Ordering::SeqCst);
                return code;
            }
        };
        if self.aborted() {
            return ACL_ERROR_RT_DEVICE_TASK_ABORT;
        }
        if let Some(out) = &out
            && out.len() > op.recv_len
        {
            eprintln!(
                "hccl-sim: {what}: result of {} bytes for a {}-byte buffer",
                out.len(),
                op.recv_len
            );
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        if let Some(out) = out
            && !out.is_empty()
            && let Err(f) = memory::write(op.recv, &out)
        {
            violation::record(
                "use_after_free",
                &format!("{what} wrote its receive buffer {:#x}: {f:?}", op.recv),
            );
            return ACL_ERROR_RT_PARAM_INVALID;
        }
        let done = OPS_DONE.fetch_add(1, Ordering::SeqCst) + 1;
        if s.async_error_after == Some(done) {
            eprintln!("hccl-sim: fault async_error: HCCL_E_REMOTE from now on");
            self.async_error.store(HCCL_E_REMOTE, Ordering::SeqCst);
        }
        ACL_SUCCESS
    }

    fn header(op: &Op, seq: u64) -> Vec<u8> {
        let mut h = Vec::with_capacity(29);
        h.push(op.kind);
        h.extend_from_slice(&seq.to_le_bytes());
        h.extend_from_slice(&op.count.to_le_bytes());
        h.extend_from_slice(&op.dtype.to_le_bytes());
        h.extend_from_slice(&op.redop.to_le_bytes());
        h.extend_from_slice(&op.root.to_le_bytes());
        h
    }

    fn wire_code(e: WireError) -> i32 {
        match e {
            WireError::Timeout => ACL_ERROR_RT_TASK_TIMEOUT,
            WireError::Aborted => ACL_ERROR_RT_DEVICE_TASK_ABORT,
            WireError::Closed => ACL_ERROR_RT_SUSPECT_REMOTE_ERROR,
        }
    }

    /// This rank's result (`None`: this rank receives nothing) or an `aclError`.
    fn exchange(
        &self,
        op: Op,
        seq: u64,
        data: Vec<u8>,
        deadline: Option<Instant>,
    ) -> Result<Option<Vec<u8>>, i32> {
        const HEADER: usize = 29;
        let mut link = self.link.lock().unwrap_or_else(|e| e.into_inner());
        let mut mine = Self::header(&op, seq);
        mine.extend_from_slice(&data);
        match &mut *link {
            Link::Solo => Ok(results(&op, 1, vec![data])?.swap_remove(0)),
            Link::Leaf(hub) => {
                wire::send(hub, &mine).map_err(Self::wire_code)?;
                let reply = wire::recv(hub, deadline, &self.abort).map_err(Self::wire_code)?;
                let mut c = Cursor(&reply);
                let status = c.i32().ok_or(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR)?;
                let has = c.u8().ok_or(ACL_ERROR_RT_SUSPECT_REMOTE_ERROR)?;
                if status != ACL_SUCCESS {
                    return Err(status);
                }
                Ok((has == 1).then(|| c.rest()))
            }
            Link::Hub(peers) => {
                let mut frames = vec![mine];
                let mut failure = None;
                for (i, p) in peers.iter_mut().enumerate() {
                    match wire::recv(p, deadline, &self.abort) {
                        Ok(f) => frames.push(f),
                        Err(e) => {
                            eprintln!(
                                "hccl-sim: {} #{seq}: rank {} did not contribute: {e:?}",
                                kind_name(op.kind),
                                i + 1
                            );
                            failure = Some(Self::wire_code(e));
                            break;
                        }
                    }
                }
                let outcome = match failure {
                    Some(code) => Err(code),
                    None => {
                        let first = frames[0][..HEADER].to_vec();
                        if let Some(r) = frames
                            .iter()
                            .position(|f| f.len() < HEADER || f[..HEADER] != first[..])
                        {
                            violation::record(
                                "mismatched_collective",
                                &format!(
                                    "rank 0 launched {} #{seq} (count {}, dtype {}, op {}, root \
                                     {}) but rank {r} launched something else (header {:?})",
                                    kind_name(op.kind),
                                    op.count,
                                    op.dtype,
                                    op.redop,
                                    op.root,
                                    frames[r].get(..HEADER)
                                ),
                            );
                            Err(ACL_ERROR_RT_AICPU_EXCEPTION)
                        } else {
                            let parts = frames.into_iter().map(|f| f[HEADER..].to_vec()).collect();
                            results(&op, self.nranks as usize, parts)
                        }
                    }
                };
                match outcome {
                    Ok(mut per_rank) => {
                        for (i, p) in peers.iter_mut().enumerate() {
                            let mut reply = ACL_SUCCESS.to_le_bytes().to_vec();
                            match per_rank[i + 1].take() {
                                Some(v) => {
                                    reply.push(1);
                                    reply.extend_from_slice(&v);
                                }
                                None => reply.push(0),
                            }
                            wire::send(p, &reply).map_err(Self::wire_code)?;
                        }
                        Ok(per_rank.swap_remove(0))
                    }
                    Err(code) => {
                        for p in peers.iter_mut() {
                            let mut reply = code.to_le_bytes().to_vec();
                            reply.push(0);
                            let _ = wire::send(p, &reply);
                        }
                        Err(code)
                    }
                }
            }
        }
    }
}

/// Every rank's result of `op` from every rank's send data.
fn results(op: &Op, n: usize, parts: Vec<Vec<u8>>) -> Result<Vec<Option<Vec<u8>>>, i32> {
    let size = element_size(op.dtype).unwrap_or(1);
    Ok(match op.kind {
        ALL_REDUCE => vec![Some(reduce(&parts, op.dtype, op.redop)); n],
        ALL_GATHER => vec![Some(parts.concat()); n],
        REDUCE_SCATTER => {
            let all = reduce(&parts, op.dtype, op.redop);
            let block = op.count as usize * size;
            (0..n)
                .map(|r| Some(all[r * block..(r + 1) * block].to_vec()))
                .collect()
        }
        BROADCAST => vec![Some(parts[op.root as usize].clone()); n],
        REDUCE => {
            let all = reduce(&parts, op.dtype, op.redop);
            (0..n)
                .map(|r| (r == op.root as usize).then(|| all.clone()))
                .collect()
        }
        BARRIER => vec![None; n],
        _ => return Err(ACL_ERROR_RT_PARAM_INVALID),
    })
}
