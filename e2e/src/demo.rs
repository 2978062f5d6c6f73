//! What `cargo demo` does, as a library so a test can run it too (on loopback hosts, the
//! path a user without root gets): bring up the testbed, apply the prefill/decode
//! example, put load on both pools through the reference router, scale decode
//! 2 → 4 → 2 with `kubectl scale`, print progress and a per-member timeline, clean up,
//! and return the one-line [`Summary`].

use std::time::{Duration, Instant};

pub mod autoscale;

use crate::testbed::ranktables::RankTableRecorder;
use crate::testbed::{self, HostsMode, LoadOptions, LoadStats, Result, Testbed, TestbedOptions};

const NAMESPACE: &str = "default";
/// The seed of the demo's weights; the example manifests carry its digest (256 MiB).
pub const WEIGHTS_SEED: u64 = 1;
/// How long a pool may take to reach its size.
const POOL_WAIT: Duration = Duration::from_secs(180);

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Simulated hosts (at least 4: prefill 2 + decode 4 members on 2 devices each).
    pub hosts: usize,
    /// Size of the generated weights set.
    pub weights_mib: u64,
    /// How long to hold each state under load before the next step.
    pub hold: Duration,
    /// Network namespaces, or loopback addresses (not root, or asked for).
    pub hosts_mode: HostsMode,
    /// Where to write the member timeline as an SVG chart, if anywhere.
    pub timeline_svg: Option<std::path::PathBuf>,
    /// Both pools' `comm.backend`. `hccl` runs on the HCCL conformance simulator installed
    /// as the hosts' CANN runtime (namespace hosts only).
    pub backend: hcomm_crds::Backend,
    /// Scale decode with an autoscaler on load instead of `kubectl scale`
    /// ([`autoscale`]; namespace hosts only).
    pub autoscale: bool,
    /// Where `autoscale` writes its chart of the chain (load, metric, desired, Ready).
    pub autoscale_plot: Option<std::path::PathBuf>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            hosts: 4,
            weights_mib: 256,
            hold: Duration::from_secs(5),
            hosts_mode: HostsMode::NamespacesOrLoopback,
            timeline_svg: None,
            backend: hcomm_crds::Backend::Tcp,
            autoscale: false,
            autoscale_plot: None,
        }
    }
}

/// The demo's result: the last line it prints, for scripts.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The data path the answers came from, as the members reported it: `tcp`, `hccl`,
    /// or `mixed(...)` with the count of each.
    pub backend: String,
    /// Requests answered, both pools.
    pub served: u64,
    /// Requests that failed after every retry.
    pub failed: u64,
    /// Answers whose weights digest was not the group's.
    pub wrong_digest: u64,
    /// `kubectl scale` 2 → 4 until 4 members are Ready.
    pub scale_out: Duration,
    /// `kubectl scale` 4 → 2 until the victims are drained and gone.
    pub scale_in: Duration,
    /// With `--autoscale`: the sizes the HPA took decode to, up and back.
    pub hpa: Option<(i32, i32)>,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "backend={} served={} failed={} wrong_digest={} scale_out_s={:.2} scale_in_s={:.2}",
            self.backend,
            self.served,
            self.failed,
            self.wrong_digest,
            self.scale_out.as_secs_f64(),
            self.scale_in.as_secs_f64()
        )?;
        if let Some((to, back)) = self.hpa {
            write!(f, " hpa_scaled_to={to} hpa_scaled_back_to={back}")?;
        }
        Ok(())
    }
}

/// Progress lines on stdout, stamped with the time since the demo began.
#[derive(Debug, Clone, Copy)]
pub struct Clock(Instant);

impl Clock {
    /// Starts the clock now.
    pub fn start() -> Clock {
        Clock(Instant::now())
    }
    /// Prints one progress line.
    pub fn say(&self, what: impl std::fmt::Display) {
        println!("[{:>6.1}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// Runs the demo with the programs already built (see `testbed::binaries`).
pub async fn run(options: &DemoOptions, clock: &Clock) -> Result<Summary> {
    clock.say(format!(
        "starting {} simulated hosts, a control plane, the chart's RBAC, agents and the operator",
        options.hosts
    ));
    let bed = Testbed::start(TestbedOptions {
        hosts: options.hosts,
        hosts_mode: options.hosts_mode,
        hccl_runtime: options.backend == hcomm_crds::Backend::Hccl,
        ..Default::default()
    })
    .await?;
    if bed.hccl_runtime().is_some() {
        clock.say(
            "backend hccl: the HCCL conformance simulator is every host's CANN runtime \
             (a test double: its ranks run on host memory over the hosts' NPU fabric)",
        );
    }
    if !bed.hosts().is_isolated() {
        clock.say(
            "hosts on loopback addresses (no network namespaces: not root, or --loopback): no \
             isolation, no link faults; Kubernetes refuses loopback addresses in EndpointSlices, \
             so the router follows the Pods' readiness instead",
        );
    }
    clock.say(format!(
        "up: {} (API server {}); logs in {}",
        bed.hosts()
            .hosts()
            .iter()
            .map(|h| format!("{} data {} mgmt {}", h.name(), h.data_ip(), h.mgmt_ip()))
            .collect::<Vec<_>>()
            .join(", "),
        bed.control_plane().server_url(),
        bed.dir().join("logs").display()
    ));
    // With HCOMM_E2E_KEEP_STATE, every published rank table is kept for inspection.
    let recorder = if bed.keeps_state() {
        println!("state_dir={}", bed.dir().display());
        Some(RankTableRecorder::start(
            bed.client().await?,
            NAMESPACE,
            bed.dir().join("ranktables"),
        )?)
    } else {
        None
    };
    let result = pools(&bed, options, clock).await;
    if let Some(r) = &recorder {
        clock.say(format!(
            "kept {} rank-table version(s) in {}",
            r.written(),
            r.dir().display()
        ));
    }
    drop(recorder);
    clock.say("cleaning up");
    bed.stop().await;
    result
}

async fn pools(bed: &Testbed, args: &DemoOptions, clock: &Clock) -> Result<Summary> {
    let models = bed.dir().join("models/demo-v1");
    let digest = testbed::weights::generate(&models, args.weights_mib, WEIGHTS_SEED)?;
    clock.say(format!(
        "model weights: {} MiB at {} ({digest})",
        args.weights_mib,
        models.display()
    ));
    let timeline = testbed::Timeline::start(bed.client().await?, NAMESPACE);
    let comm = testbed::CommPatch {
        backend: args.backend,
        ..Default::default()
    };
    let applied = bed.apply_examples_on(&models, &digest, &comm)?;
    clock.say(format!("kubectl apply -f examples/:\n{}", indent(&applied)));
    for (pool, n) in [("prefill", 2), ("decode", 2)] {
        let members = bed.wait_pool_ready(NAMESPACE, pool, n, POOL_WAIT).await?;
        clock.say(format!("{pool}: {} members Ready: {}", n, names(&members)));
    }
    clock.say(format!(
        "kubectl get hcg:\n{}",
        indent(&bed.kubectl(&["get", "hcg", "-n", NAMESPACE])?)
    ));
    let load = |service: &str| LoadOptions {
        service: service.into(),
        namespace: NAMESPACE.into(),
        concurrency: 4,
        tokens: 5,
        expect_digests: vec![digest.clone()],
    };
    let prefill_load = bed.start_load(&load("prefill"))?;
    let decode_load = bed.start_load(&load("decode"))?;
    clock.say("load running on both pools through the router (4 in flight each)");
    tokio::time::sleep(args.hold).await;
    report(clock, "decode", &decode_load.latest());

    let (scale_out, scale_in, hpa) = if args.autoscale {
        let run = autoscale::run(bed, clock, &digest, 4, args.hold).await?;
        println!("\nthe autoscaling chain, sampled every 0.5 s (seconds since it was up):");
        print!("{}", autoscale::render_table(&run.samples));
        println!();
        if let Some(path) = &args.autoscale_plot {
            let title = "cargo demo --autoscale: load → Prometheus → KEDA → HPA → decode";
            std::fs::write(path, autoscale::render_svg(title, &run.samples))
                .map_err(testbed::Error::io(format!("write {}", path.display())))?;
            clock.say(format!("the chain's chart written to {}", path.display()));
        }
        (
            run.scale_out,
            run.scale_in,
            Some((run.scaled_to, run.scaled_back_to)),
        )
    } else {
        let (out, inward) = scale_by_hand(bed, clock, args.hold, &decode_load).await?;
        (out, inward, None)
    };

    let decode = decode_load.stop().await?;
    let prefill = prefill_load.stop().await?;
    report(clock, "decode", &decode);
    report(clock, "prefill", &prefill);
    let marks = timeline.members();
    println!("\ntimeline (seconds since the pools were applied; phase start (duration)):");
    print!(
        "{}",
        testbed::timeline::render(&marks, |pod| {
            let s = decode.by_pod.get(pod).or_else(|| prefill.by_pod.get(pod));
            s.map(|s| {
                format!(
                    "served={} refused_draining={} errors={}",
                    s.served, s.refused_draining, s.errors
                )
            })
            .unwrap_or_default()
        })
    );
    println!();
    if let Some(path) = &args.timeline_svg {
        let title =
            "cargo demo: decode 2 → 4 → 2 under load (seconds since the pools were applied)";
        std::fs::write(path, testbed::timeline_svg::render_svg(title, &marks))
            .map_err(testbed::Error::io(format!("write {}", path.display())))?;
        clock.say(format!("timeline chart written to {}", path.display()));
    }
    let served = decode.served + prefill.served;
    let failed = decode.failed + prefill.failed;
    let wrong = decode.wrong_digest + prefill.wrong_digest;
    let mut by_comm = decode.by_comm.clone();
    for (k, n) in &prefill.by_comm {
        *by_comm.entry(k.clone()).or_default() += n;
    }
    if let Some(rt) = bed.hccl_runtime() {
        let violations = rt.violations();
        if !violations.is_empty() {
            return Err(testbed::Error::HcclViolations(violations));
        }
    }
    Ok(Summary {
        backend: comm_summary(&by_comm),
        served,
        failed,
        wrong_digest: wrong,
        scale_out,
        scale_in,
        hpa,
    })
}

/// decode 2 → 4 → 2 with `kubectl scale`; returns the time to 4 Ready and back to 2.
async fn scale_by_hand(
    bed: &Testbed,
    clock: &Clock,
    hold: Duration,
    decode_load: &testbed::LoadRun,
) -> Result<(Duration, Duration)> {
    clock.say("kubectl scale hcg/decode --replicas=4");
    let t = Instant::now();
    bed.scale("decode", 4)?;
    let members = bed
        .wait_pool_ready(NAMESPACE, "decode", 4, POOL_WAIT)
        .await?;
    let scale_out = t.elapsed();
    clock.say(format!(
        "decode: 4 members Ready after {:.2}s: {}",
        scale_out.as_secs_f64(),
        names(&members)
    ));
    tokio::time::sleep(hold).await;
    report(clock, "decode", &decode_load.latest());

    clock.say("kubectl scale hcg/decode --replicas=2");
    let t = Instant::now();
    bed.scale("decode", 2)?;
    let members = bed
        .wait_pool_ready(NAMESPACE, "decode", 2, POOL_WAIT)
        .await?;
    bed.wait_members(NAMESPACE, "decode", 2, Duration::from_secs(120))
        .await?;
    let scale_in = t.elapsed();
    clock.say(format!(
        "decode: back to 2 after {:.2}s (victims drained, then deleted): {}",
        scale_in.as_secs_f64(),
        names(&members)
    ));
    tokio::time::sleep(hold).await;
    Ok((scale_out, scale_in))
}

/// `hccl` when every answer came from a member serving on HCCL (likewise `tcp`), else each
/// backend with its count.
fn comm_summary(by_comm: &std::collections::BTreeMap<String, u64>) -> String {
    match by_comm.keys().collect::<Vec<_>>().as_slice() {
        [] => "none".to_owned(),
        [only] => (*only).clone(),
        _ => format!(
            "mixed({})",
            by_comm
                .iter()
                .map(|(k, n)| format!("{k}:{n}"))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

fn report(clock: &Clock, pool: &str, s: &LoadStats) {
    clock.say(format!(
        "{pool}: served={} failed={} wrong_digest={} retried={} per member: {}",
        s.served,
        s.failed,
        s.wrong_digest,
        s.retried,
        s.by_pod
            .iter()
            .map(|(p, st)| format!("{p}={}", st.served))
            .collect::<Vec<_>>()
            .join(" ")
    ));
}

fn names(members: &[testbed::MemberPod]) -> String {
    members
        .iter()
        .map(|m| format!("{}@{}(rank {})", m.name, m.node, m.rank))
        .collect::<Vec<_>>()
        .join(", ")
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("          {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
