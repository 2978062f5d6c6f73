//! A stand-in node agent for the worker library's Python tests: the REAL agent's local API
//! server (`hcomm_agent::local_api::server`, one Pod socket per member, as the agent lays
//! them out) and its REAL per-epoch placement (`hcomm_agent::local_api::bootstrap`), with
//! the member tasks replaced by commands on stdin, so a test plays the operator's and the
//! member tasks' part and checks what the worker reported.
//!
//! Commands, one per line; each answers one line on stdout:
//! - `pod <name>` → `socket <path>`: a member Pod and its socket.
//! - `epoch <E> <pod> <pod>...` → `ok`: the pods, in rank order, form epoch E (each gets
//!   its assignment with the worker placement, then an `epoch_changed` notice).
//! - `drain <pod>` → `ok`: a `drain_requested` notice.
//! - `show <pod>` → `{"in_flight":..,"load":..,"serving":..}`: what the worker reported.
//! - `quit`.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Parser;
use hcomm_agent::local_api::bootstrap::{WorkerPlan, worker_comm};
use hcomm_agent::local_api::caller::CallerCheck;
use hcomm_agent::local_api::server::{self, Access, PodIdentity, Serves};
use hcomm_agent::local_api::{Assignment, Hub, Notice};
use std::io::BufRead;

const NAMESPACE: &str = "test";
const GROUP: &str = "g";

#[derive(Parser)]
struct Args {
    /// Where the Pod sockets go (`<dir>/<uid>/agent.sock`).
    #[arg(long)]
    dir: PathBuf,
    /// Control port base on 127.0.0.1: member of rank r sits at base + r (its worker at
    /// base + r + 64).
    #[arg(long)]
    port_base: u16,
    /// The group's secret.
    #[arg(long, default_value = "local-agent-secret")]
    secret: String,
    /// `tcp` or `hccl`.
    #[arg(long, default_value = "tcp")]
    backend: String,
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The servers run on the runtime's worker threads; the main thread reads the commands
/// (blocking on stdin, which only it does).
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let hub = Hub::default();
    let backend = match args.backend.as_str() {
        "tcp" => hcomm_crds::Backend::Tcp,
        "hccl" => hcomm_crds::Backend::Hccl,
        other => bail!("unknown backend {other}"),
    };
    let spec = hcomm_crds::CommSpec {
        backend,
        connect_timeout_seconds: 10,
        op_timeout_seconds: 10,
        ..Default::default()
    };
    let mut stops: HashMap<String, tokio::sync::oneshot::Sender<()>> = HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["pod", name] => {
                let uid = format!("uid-{name}");
                let path = args.dir.join(&uid).join(hcomm_crds::local_api::SOCKET_FILE);
                let listener = server::bind(&path).context("bind")?;
                let key = format!("{NAMESPACE}/{name}");
                hub.slot(&key);
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                stops.insert(key, tx);
                let serves = Serves::Pod(PodIdentity {
                    namespace: NAMESPACE.into(),
                    name: (*name).into(),
                    uid,
                });
                // The test process is not in a Pod's cgroup: the peer-credential check
                // has its own tests in the agent.
                let access = Access {
                    callers: CallerCheck::Unchecked,
                    ..Access::default()
                };
                tokio::spawn(server::serve(
                    listener,
                    hub.clone(),
                    access,
                    serves,
                    async {
                        let _ = rx.await;
                    },
                ));
                say(&format!("socket {}", path.display()));
            }
            ["epoch", epoch, pods @ ..] => {
                let epoch: u64 = epoch.parse()?;
                let world = pods.len() as u32;
                let at =
                    |r: u16| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), args.port_base + r);
                for (rank, pod) in pods.iter().enumerate() {
                    let plan = WorkerPlan {
                        namespace: NAMESPACE,
                        group: GROUP,
                        epoch,
                        rank: rank as u32,
                        world,
                        control_root: at(0),
                        control_own: at(rank as u16),
                    };
                    let comm = worker_comm(&plan, args.secret.as_bytes(), &spec)?;
                    let key = format!("{NAMESPACE}/{pod}");
                    hub.slot(&key).assignment.send_replace(Some(Assignment {
                        group: GROUP.into(),
                        rank: rank as u32,
                        world,
                        local_ranks: 1,
                        epoch,
                        comm: Some(comm),
                        ..Default::default()
                    }));
                    hub.notify(&key, Notice::EpochChanged { epoch });
                }
                say("ok");
            }
            ["drain", pod] => {
                hub.notify(
                    &format!("{NAMESPACE}/{pod}"),
                    Notice::DrainRequested { deadline: None },
                );
                say("ok");
            }
            ["show", pod] => {
                let slot = hub
                    .get(&format!("{NAMESPACE}/{pod}"))
                    .context("no such pod")?;
                let shown = serde_json::json!({
                    "in_flight": *slot.inflight.borrow(),
                    "load": *slot.load.borrow(),
                    "serving": *slot.serving.borrow(),
                });
                say(&shown.to_string());
            }
            ["quit"] => break,
            _ => say(&format!("error unknown command: {line}")),
        }
    }
    for (_, stop) in stops {
        let _ = stop.send(());
    }
    Ok(())
}
