//! The hcomm API against a real kube-apiserver: the CRDs install, the examples are
//! accepted and shown with their printer columns, bad input is refused by the API server
//! with a message naming the field and the rule, and `kubectl scale` works through the
//! scale subresource. Every client here is the real `kubectl`.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use anyhow::{Context, Result, bail};
use hcomm_crds::HcommGroup;
use hcomm_e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

const EXAMPLE: &str = include_str!("../../examples/decode-pool.yaml");

/// One control plane for every case in this file: starting one per case would spend most
/// of the test's time on etcd and the apiserver.
async fn control_plane() -> Result<ControlPlane> {
    let options = ControlPlaneOptions {
        controllers: false,
        kwok: Some(false),
        ..Default::default()
    };
    let cp = ControlPlane::start(options)
        .await
        .context("starting the control plane")?;
    cp.install_crds(&hcomm_crds::all_crds())
        .await
        .context("installing the CRDs")?;
    Ok(cp)
}

fn run(mut command: Command, stdin: Option<&str>) -> Result<Output> {
    command.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().context("spawning kubectl")?;
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .context("kubectl stdin")?
            .write_all(input.as_bytes())?;
    }
    Ok(child.wait_with_output()?)
}

fn kubectl(cp: &ControlPlane, args: &[&str], stdin: Option<&str>) -> Result<Output> {
    let mut command = cp.kubectl();
    command.args(args).args(["--request-timeout", "20s"]);
    run(command, stdin)
}

fn stdout_of(cp: &ControlPlane, args: &[&str]) -> Result<String> {
    let out = kubectl(cp, args, None)?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// The decode example's HcommGroup (its first document; a Service follows) as JSON,
/// renamed, with `mutate` applied.
fn manifest(name: &str, mutate: impl FnOnce(&mut Value)) -> Result<String> {
    use serde::Deserialize as _;
    let first = serde_yaml::Deserializer::from_str(EXAMPLE)
        .next()
        .context("the example has no document")?;
    let mut value = Value::deserialize(first)?;
    value["metadata"]["name"] = json!(name);
    mutate(&mut value);
    Ok(serde_json::to_string(&value)?)
}

/// A bad manifest and the words the API server's refusal must contain.
struct BadCase {
    name: &'static str,
    mutate: fn(&mut Value),
    expected: &'static [&'static str],
}

fn bad_cases() -> Vec<BadCase> {
    vec![
        BadCase {
            name: "negative-replicas",
            mutate: |v| v["spec"]["replicas"] = json!(-1),
            expected: &["spec.replicas", "greater than or equal to 0"],
        },
        BadCase {
            name: "three-devices",
            mutate: |v| v["spec"]["devicesPerMember"] = json!(3),
            expected: &[
                "spec.devicesPerMember",
                "devicesPerMember must be one of 1, 2, 4, 8, 16",
            ],
        },
        BadCase {
            name: "thirty-two-devices",
            mutate: |v| v["spec"]["devicesPerMember"] = json!(32),
            expected: &["spec.devicesPerMember", "must be one of 1, 2, 4, 8, 16"],
        },
        BadCase {
            name: "unknown-role",
            mutate: |v| v["spec"]["role"] = json!("training"),
            expected: &[
                "spec.role",
                "Unsupported value: \"training\"",
                "\"prefill\"",
                "\"decode\"",
            ],
        },
        BadCase {
            name: "unknown-backend",
            mutate: |v| v["spec"]["comm"]["backend"] = json!("nccl"),
            expected: &[
                "spec.comm.backend",
                "Unsupported value: \"nccl\"",
                "\"hccl\"",
                "\"tcp\"",
            ],
        },
        BadCase {
            name: "ifname-with-space",
            mutate: |v| v["spec"]["comm"]["socketIfname"] = json!("eth 0"),
            expected: &[
                "spec.comm.socketIfname",
                "comma-separated list of interface names",
            ],
        },
        BadCase {
            name: "ifname-empty-entry",
            mutate: |v| v["spec"]["comm"]["socketIfname"] = json!("eth0,,eth1"),
            expected: &[
                "spec.comm.socketIfname",
                "comma-separated list of interface names",
            ],
        },
        BadCase {
            name: "ifname-caret-in-middle",
            mutate: |v| v["spec"]["comm"]["socketIfname"] = json!("eth0,^lo"),
            expected: &["spec.comm.socketIfname", "optionally starting with ^"],
        },
        BadCase {
            name: "ifname-too-long",
            mutate: |v| v["spec"]["comm"]["socketIfname"] = json!("averyverylongifname0"),
            expected: &["spec.comm.socketIfname", "each 1-15"],
        },
        BadCase {
            name: "zero-drain",
            mutate: |v| v["spec"]["scaling"]["drainTimeoutSeconds"] = json!(0),
            expected: &[
                "spec.scaling.drainTimeoutSeconds",
                "greater than or equal to 1",
            ],
        },
        BadCase {
            name: "negative-drain",
            mutate: |v| v["spec"]["scaling"]["drainTimeoutSeconds"] = json!(-30),
            expected: &[
                "spec.scaling.drainTimeoutSeconds",
                "greater than or equal to 1",
            ],
        },
        BadCase {
            name: "drain-over-a-day",
            mutate: |v| v["spec"]["scaling"]["drainTimeoutSeconds"] = json!(86401),
            expected: &[
                "spec.scaling.drainTimeoutSeconds",
                "less than or equal to 86400",
            ],
        },
        BadCase {
            name: "negative-standby",
            mutate: |v| v["spec"]["scaling"]["standby"] = json!(-1),
            expected: &["spec.scaling.standby", "greater than or equal to 0"],
        },
        BadCase {
            name: "standby-over-64",
            mutate: |v| v["spec"]["scaling"]["standby"] = json!(65),
            expected: &["spec.scaling.standby", "less than or equal to 64"],
        },
        BadCase {
            name: "digest-without-prefix",
            mutate: |v| v["spec"]["weights"]["digest"] = json!("0".repeat(64)),
            expected: &[
                "spec.weights.digest",
                "'sha256:' followed by 64 lowercase hex digits",
            ],
        },
        BadCase {
            name: "digest-too-short",
            mutate: |v| {
                v["spec"]["weights"]["digest"] = json!(format!("sha256:{}", "a".repeat(63)))
            },
            expected: &[
                "spec.weights.digest",
                "'sha256:' followed by 64 lowercase hex digits",
            ],
        },
        BadCase {
            name: "digest-uppercase",
            mutate: |v| {
                v["spec"]["weights"]["digest"] = json!(format!("sha256:{}", "A".repeat(64)))
            },
            expected: &["spec.weights.digest", "64 lowercase hex digits"],
        },
        BadCase {
            name: "max-below-replicas",
            mutate: |v| {
                v["spec"]["replicas"] = json!(5);
                v["spec"]["maxReplicas"] = json!(4);
            },
            expected: &[
                "spec.maxReplicas",
                "maxReplicas must be greater than or equal to replicas",
            ],
        },
        BadCase {
            name: "no-containers",
            mutate: |v| v["spec"]["template"]["spec"]["containers"] = json!([]),
            expected: &["spec.template", "must list at least one container"],
        },
        BadCase {
            name: "hccl-connect-below-hccls-range",
            mutate: |v| {
                v["spec"]["comm"]["backend"] = json!("hccl");
                v["spec"]["comm"]["connectTimeoutSeconds"] = json!(60);
            },
            expected: &[
                "spec.comm.connectTimeoutSeconds",
                "between 120 and 7200 with backend hccl",
            ],
        },
        BadCase {
            name: "hccl-connect-above-hccls-range",
            mutate: |v| {
                v["spec"]["comm"]["backend"] = json!("hccl");
                v["spec"]["comm"]["connectTimeoutSeconds"] = json!(7201);
            },
            expected: &[
                "spec.comm.connectTimeoutSeconds",
                "less than or equal to 7200",
            ],
        },
        BadCase {
            name: "tcp-connect-above-its-range",
            mutate: |v| v["spec"]["comm"]["connectTimeoutSeconds"] = json!(601),
            expected: &[
                "spec.comm.connectTimeoutSeconds",
                "between 1 and 600 with backend tcp",
            ],
        },
        BadCase {
            name: "negative-exec-timeout",
            mutate: |v| v["spec"]["comm"]["execTimeoutSeconds"] = json!(-1),
            expected: &["spec.comm.execTimeoutSeconds", "greater than or equal to 0"],
        },
        BadCase {
            name: "zero-buffer",
            mutate: |v| v["spec"]["comm"]["bufferSizeMb"] = json!(0),
            expected: &["spec.comm.bufferSizeMb", "greater than or equal to 1"],
        },
        BadCase {
            name: "unknown-bootstrap",
            mutate: |v| v["spec"]["comm"]["bootstrap"] = json!("Ranktable"),
            expected: &[
                "spec.comm.bootstrap",
                "Unsupported value: \"Ranktable\"",
                "\"RootInfo\"",
                "\"RankTable\"",
            ],
        },
        BadCase {
            name: "resource-without-domain",
            mutate: |v| v["spec"]["npu"]["resourceName"] = json!("Ascend910"),
            expected: &[
                "spec.npu.resourceName",
                "must be an extended resource name 'domain/name'",
            ],
        },
        BadCase {
            name: "http-weights-source",
            mutate: |v| v["spec"]["weights"]["source"] = json!("https://hub.example/m1"),
            expected: &[
                "spec.weights.source",
                "http(s) sources are not supported yet",
            ],
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_enforces_the_hcomm_api() -> Result<()> {
    let cp = tokio::time::timeout(std::time::Duration::from_secs(240), control_plane())
        .await
        .context("control plane did not start within 240 s")??;

    // The examples are accepted as written.
    for example in [
        "decode-pool.yaml",
        "prefill-pool.yaml",
        "ascend/vllm-ascend-decode.yaml",
    ] {
        let path = format!("{}/../examples/{example}", env!("CARGO_MANIFEST_DIR"));
        stdout_of(&cp, &["apply", "-f", &path])?;
    }

    // `kubectl get hcg` shows the printer columns, and the short name works.
    let table = stdout_of(&cp, &["get", "hcg", "-n", "default"])?;
    let header = table.lines().next().unwrap_or_default();
    for column in [
        "NAME", "ROLE", "DESIRED", "READY", "STANDBY", "EPOCH", "REVISION", "UPDATED", "PHASE",
        "AGE",
    ] {
        assert!(
            header.contains(column),
            "column {column} missing from `kubectl get hcg`:\n{table}"
        );
    }
    let decode = table
        .lines()
        .find(|l| l.starts_with("decode "))
        .context("decode row")?;
    let cells: Vec<&str> = decode.split_whitespace().collect();
    assert_eq!(&cells[..3], ["decode", "decode", "2"], "row: {decode}");

    // Defaults are applied by the API server from the schema.
    let stored: Value =
        serde_json::from_str(&stdout_of(&cp, &["get", "hcg", "prefill", "-o", "json"])?)?;
    assert_eq!(stored["spec"]["scaling"]["strategy"], "Incremental");
    assert_eq!(stored["spec"]["scaling"]["maxUnavailable"], 1);
    assert_eq!(stored["spec"]["scaling"]["standby"], 0);
    assert_eq!(stored["spec"]["comm"]["opTimeoutSeconds"], 120);
    assert_eq!(stored["spec"]["comm"]["execTimeoutSeconds"], 1836);
    assert_eq!(stored["spec"]["comm"]["bufferSizeMb"], 200);
    assert_eq!(stored["spec"]["comm"]["bootstrap"], "RootInfo");
    assert_eq!(
        stored["spec"]["npu"]["resourceName"],
        hcomm_crds::contract::ascend::RESOURCE_ASCEND910
    );

    // Every bad manifest is refused, with a message that names the field and the rule,
    // and nothing is stored.
    let mut failures = Vec::new();
    for case in bad_cases() {
        let name = format!("bad-{}", case.name);
        let body = manifest(&name, case.mutate)?;
        let out = kubectl(&cp, &["apply", "-f", "-"], Some(&body))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            failures.push(format!("{}: accepted, but must be refused", case.name));
            continue;
        }
        for want in case.expected {
            if !stderr.contains(want) {
                failures.push(format!(
                    "{}: refusal lacks {want:?}; kubectl said:\n{stderr}",
                    case.name
                ));
            }
        }
        let get = kubectl(&cp, &["get", "hcg", &name], None)?;
        if get.status.success() {
            failures.push(format!("{}: refused but stored anyway", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    // Valid edge values are accepted: zero replicas, exact and excluding NIC lists.
    for (name, ifname, replicas) in [
        ("zero", "=data0", 0),
        ("exclude", "^lo,docker", 1),
        ("both", "^=eth0,eth1", 1),
    ] {
        let body = manifest(name, |v| {
            v["spec"]["replicas"] = json!(replicas);
            v["spec"]["comm"]["socketIfname"] = json!(ifname);
        })?;
        let out = kubectl(&cp, &["apply", "-f", "-"], Some(&body))?;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // An hccl group that says nothing about its timeouts is accepted: the default connect
    // timeout is HCCL's own (120 s), inside the range the hccl rule demands.
    let body = manifest("hccl-defaults", |v| {
        v["spec"]["comm"] = json!({"backend": "hccl"})
    })?;
    let out = kubectl(&cp, &["apply", "-f", "-"], Some(&body))?;
    assert!(
        out.status.success(),
        "hccl-defaults: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Value = serde_json::from_str(&stdout_of(
        &cp,
        &["get", "hcg", "hccl-defaults", "-o", "json"],
    )?)?;
    assert_eq!(stored["spec"]["comm"]["connectTimeoutSeconds"], 120);

    // `kubectl scale` goes through the scale subresource and changes spec.replicas.
    stdout_of(&cp, &["scale", "hcg/decode", "--replicas=3"])?;
    let replicas = stdout_of(
        &cp,
        &["get", "hcg", "decode", "-o", "jsonpath={.spec.replicas}"],
    )?;
    assert_eq!(replicas.trim(), "3");
    let scale: Value = serde_json::from_str(&stdout_of(
        &cp,
        &[
            "get",
            "--raw",
            "/apis/hcomm.io/v1alpha1/namespaces/default/hcommgroups/decode/scale",
        ],
    )?)?;
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 3);

    // Scaling past maxReplicas is refused by the same rule as a direct edit.
    let out = kubectl(&cp, &["scale", "hcg/decode", "--replicas=9"], None)?;
    assert!(
        !out.status.success(),
        "scaling past maxReplicas must be refused"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("maxReplicas must be greater than or equal to replicas")
    );

    // The HPA controller's way: GET /scale, then PUT /scale with the new replica count
    // and the resourceVersion it read (optimistic concurrency, as the controller does).
    let client = cp.client().await?;
    let groups: Api<HcommGroup> = Api::namespaced(client, "default");
    let mut scale = groups.get_scale("decode").await?;
    assert_eq!(scale.spec.as_ref().and_then(|s| s.replicas), Some(3));
    scale.spec.get_or_insert_with(Default::default).replicas = Some(5);
    let written = groups
        .replace_scale("decode", &PostParams::default(), &scale)
        .await?;
    assert_eq!(written.spec.and_then(|s| s.replicas), Some(5));
    assert_eq!(groups.get("decode").await?.spec.replicas, 5);
    // A PUT with the stale resourceVersion is a conflict, not a lost update.
    scale.spec.get_or_insert_with(Default::default).replicas = Some(4);
    let stale = groups
        .replace_scale("decode", &PostParams::default(), &scale)
        .await;
    assert!(
        matches!(&stale, Err(kube::Error::Api(status)) if status.code == 409),
        "a stale /scale PUT must conflict: {stale:?}"
    );

    // `kubectl explain` shows the field docs written for cluster users.
    let explain = stdout_of(&cp, &["explain", "hcommgroup.spec.comm.socketIfname"])?;
    assert!(
        explain.contains(hcomm_crds::contract::env::SOCKET_IFNAME),
        "{explain}"
    );

    cp.stop()?;
    Ok(())
}
