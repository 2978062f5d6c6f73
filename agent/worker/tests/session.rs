//! The Rust API against the agent's own local API server and worker placement, in
//! process: the epoch rules seen from an engine, and an `hccl` placement on a node without
//! the Ascend runtime.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use hcomm_agent::local_api::bootstrap::{WorkerPlan, worker_comm};
use hcomm_agent::local_api::caller::CallerCheck;
use hcomm_agent::local_api::server::{self, Access, PodIdentity, Serves};
use hcomm_agent::local_api::{Assignment, Hub};
use hcomm_worker::{AgentClient, Error, Session};

struct Bed {
    hub: Hub,
    dir: PathBuf,
    base: u16,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let dir = std::env::temp_dir().join(format!("hcomm-worker-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A control-port base whose worker ports (+64, +65) are free now.
        let base = loop {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let b = probe.local_addr().unwrap().port();
            drop(probe);
            let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
            if b < 60000 && free(b + 64) && free(b + 65) {
                break b;
            }
        };
        Bed {
            hub: Hub::default(),
            dir,
            base,
        }
    }

    fn session(&self, pod: &str) -> Session {
        let uid = format!("uid-{pod}");
        let path = self.dir.join(&uid).join(hcomm_crds::local_api::SOCKET_FILE);
        let listener = server::bind(&path).unwrap();
        self.hub.slot(&format!("test/{pod}"));
        let serves = Serves::Pod(PodIdentity {
            namespace: "test".into(),
            name: pod.into(),
            uid,
        });
        let access = Access {
            callers: CallerCheck::Unchecked,
            ..Access::default()
        };
        tokio::spawn(server::serve(
            listener,
            self.hub.clone(),
            access,
            serves,
            std::future::pending(),
        ));
        Session::new(AgentClient {
            socket: path,
            pod: pod.into(),
            namespace: Some("test".into()),
            timeout: Duration::from_secs(5),
        })
    }

    fn place(&self, epoch: u64, pods: &[&str], backend: hcomm_crds::Backend) {
        let at = |r: u16| SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), self.base + r);
        let spec = hcomm_crds::CommSpec {
            backend,
            connect_timeout_seconds: 5,
            op_timeout_seconds: 5,
            ..Default::default()
        };
        for (rank, pod) in pods.iter().enumerate() {
            let plan = WorkerPlan {
                namespace: "test",
                group: "g",
                epoch,
                rank: rank as u32,
                world: pods.len() as u32,
                control_root: at(0),
                control_own: at(rank as u16),
            };
            let comm = worker_comm(&plan, b"secret", &spec).unwrap();
            self.hub
                .slot(&format!("test/{pod}"))
                .assignment
                .send_replace(Some(Assignment {
                    group: "g".into(),
                    epoch,
                    comm: Some(comm),
                    ..Default::default()
                }));
        }
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_serve_an_epoch_only_after_the_switch_and_an_old_placement_is_never_rebuilt() {
    let bed = Bed::new("tcp");
    let (a, b) = (bed.session("w-0"), bed.session("w-1"));
    let refused = a.prepare(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(refused, Error::Timeout { .. }), "{refused}");
    bed.place(1, &["w-0", "w-1"], hcomm_crds::Backend::Tcp);
    let wait = Duration::from_secs(20);
    let (ea, eb) = tokio::join!(a.prepare(wait), b.prepare(wait));
    assert_eq!((ea.unwrap(), eb.unwrap()), (1, 1));
    assert_eq!(a.epochs(), (None, Some(1)));
    let mut buf = [1.0f32];
    assert!(matches!(
        a.all_reduce_sum_f32(&mut buf).await.unwrap_err(),
        Error::Epoch(_)
    ));
    assert_eq!(a.switch().await.unwrap(), 1);
    assert_eq!(b.switch().await.unwrap(), 1);
    let (mut x, mut y) = ([1.0f32, 2.0], [3.0f32, 4.0]);
    let (ra, rb) = tokio::join!(a.all_reduce_sum_f32(&mut x), b.all_reduce_sum_f32(&mut y));
    ra.unwrap();
    rb.unwrap();
    assert_eq!((x, y), ([4.0, 6.0], [4.0, 6.0]));
    // The agent still shows epoch 1: nothing newer to build, and the wait is bounded.
    let idle = a.prepare(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(idle, Error::Timeout { .. }), "{idle}");
    a.leave().await;
    b.leave().await;
    assert_eq!(a.epochs(), (None, None));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hccl_placement_on_a_node_without_the_ascend_runtime_fails_at_once_naming_what_it_searched()
 {
    assert!(
        std::env::var_os("ASCEND_HOME_PATH").is_none(),
        "this test is about a node without the Ascend runtime (ASCEND_HOME_PATH is set)"
    );
    let bed = Bed::new("hccl");
    let a = bed.session("w-0");
    // World 2 with the peer absent: a failure that waited for the rendezvous would take
    // twice the connect timeout (10 s); the runtime check comes first.
    bed.place(1, &["w-0", "w-1"], hcomm_crds::Backend::Hccl);
    let started = std::time::Instant::now();
    let e = a.prepare(Duration::from_secs(20)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "{e}");
    assert!(matches!(e, Error::Hccl(_)), "{e}");
    assert_eq!(e.code(), 6);
    let message = e.to_string();
    assert!(
        message.contains(".so could not be loaded") && message.contains("ASCEND_HOME_PATH"),
        "{message}"
    );
    assert_eq!(a.epochs(), (None, None), "nothing prepared");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_whose_epoch_the_agent_supersedes_is_dropped_at_once_not_at_its_deadline() {
    let bed = Bed::new("superseded");
    let a = bed.session("w-0");
    // Epoch 1 names a second member that never comes (it went on to epoch 2): the build
    // would wait out twice the 5 s connect timeout.
    bed.place(1, &["w-0", "w-1"], hcomm_crds::Backend::Tcp);
    let started = std::time::Instant::now();
    let building = a.prepare(Duration::from_secs(20));
    let supersede = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        bed.place(2, &["w-0"], hcomm_crds::Backend::Tcp);
    };
    let (built, ()) = tokio::join!(building, supersede);
    let e = built.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Epoch(hcomm_worker::epochs::EpochRefusal::Superseded { epoch: 1, newer: 2 })
        ),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "dropped when epoch 2 appeared, not at the build's deadline: {:?}",
        started.elapsed()
    );
    // The newer epoch builds as usual.
    assert_eq!(a.prepare(Duration::from_secs(20)).await.unwrap(), 2);
    assert_eq!(a.switch().await.unwrap(), 2);
    let mut one = [1.0f32];
    a.all_reduce_sum_f32(&mut one).await.unwrap();
    assert_eq!((one[0], a.serving_world().unwrap()), (1.0, 1));
    a.leave().await;
}
