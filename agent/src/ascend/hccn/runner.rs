//! Running `hccn_tool`: one call at a time on the node (the driver documents that the
//! tool does not support concurrent use; MindCluster serialises it behind a mutex too), so
//! every call in this process takes `TOOL_LOCK`; each call has a deadline that covers
//! waiting for the lock and the run, and a child past it is killed. Output is bounded.
//! The parsing is in [`super::output`].

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::Duration;

use hcomm_crds::node::NpuLink;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;

use super::output::{
    IpInfo, NetHealth, ParseError, PingResult, TlsState, parse_ip, parse_link, parse_net_health,
    parse_ping, parse_tls,
};

/// The tool's path on Ascend hosts (A2/A3 driver).
pub const DEFAULT_TOOL: &str = "/usr/local/Ascend/driver/tools/hccn_tool";

/// The most output read from one call; more is an error, not a truncated parse.
pub const MAX_OUTPUT: usize = 64 * 1024;

/// The node-wide lock: every `hccn_tool` call of this process holds it while it runs.
static TOOL_LOCK: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("hccn_tool not found at {path} (mount the driver's tools or set --hccn-tool)")]
    NotFound { path: PathBuf },
    #[error("cannot start {path}: {source}")]
    Spawn {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`{command}` waited for another hccn_tool call past its deadline")]
    Busy { command: String },
    #[error("`{command}` did not finish within {timeout:?} and was killed")]
    TimedOut { command: String, timeout: Duration },
    #[error("`{command}` printed more than {limit} bytes")]
    TooMuchOutput { command: String, limit: usize },
    #[error("`{command}` failed ({status}): {output}")]
    Failed {
        command: String,
        status: String,
        output: String,
    },
    #[error(transparent)]
    Parse(#[from] ParseError),
}

impl ToolError {
    /// A short fixed name for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            ToolError::NotFound { .. } => "not_found",
            ToolError::Spawn { .. } => "spawn",
            ToolError::Busy { .. } => "busy",
            ToolError::TimedOut { .. } => "timeout",
            ToolError::TooMuchOutput { .. } => "too_much_output",
            ToolError::Failed { .. } => "failed",
            ToolError::Parse(_) => "parse",
        }
    }
}

/// Reads a pipe to its end, but at most one byte past [`MAX_OUTPUT`].
async fn read_bounded(r: impl tokio::io::AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.take(MAX_OUTPUT as u64 + 1).read_to_end(&mut v).await?;
    Ok(v)
}

/// What a finished call printed.
struct Finished {
    success: bool,
    status: String,
    stdout: String,
    stderr: String,
}

/// `hccn_tool` at a path, each call bounded by `call_timeout` (and the caller's deadline).
#[derive(Debug, Clone)]
pub struct HccnTool {
    pub path: PathBuf,
    pub call_timeout: Duration,
}

impl HccnTool {
    pub fn new(path: impl Into<PathBuf>, call_timeout: Duration) -> HccnTool {
        HccnTool {
            path: path.into(),
            call_timeout,
        }
    }

    pub fn exists(&self) -> bool {
        Path::new(&self.path).is_file()
    }

    async fn run(&self, args: &[String], deadline: Instant) -> Result<Finished, ToolError> {
        let deadline = deadline.min(Instant::now() + self.call_timeout);
        let command = format!("hccn_tool {}", args.join(" "));
        if !self.exists() {
            return Err(ToolError::NotFound {
                path: self.path.clone(),
            });
        }
        let Ok(_guard) = tokio::time::timeout_at(deadline, TOOL_LOCK.lock()).await else {
            return Err(ToolError::Busy { command });
        };
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&self.path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| ToolError::Spawn {
                path: self.path.clone(),
                source,
            })?;
        let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
            unreachable!("both pipes were requested")
        };
        // Both pipes are drained together; either one past the bound ends the call at once
        // (a flood on one would otherwise wait on the other's end until the deadline).
        let read = async {
            let mut o_fut = std::pin::pin!(read_bounded(out));
            let mut e_fut = std::pin::pin!(read_bounded(err));
            let (mut o, mut e) = (None, None);
            while o.is_none() || e.is_none() {
                let (slot, r) = tokio::select! {
                    r = &mut o_fut, if o.is_none() => (&mut o, r),
                    r = &mut e_fut, if e.is_none() => (&mut e, r),
                };
                let v = r?;
                if v.len() > MAX_OUTPUT {
                    return Ok(None);
                }
                *slot = Some(v);
            }
            Ok::<_, std::io::Error>(o.zip(e))
        };
        let (o, e) = match tokio::time::timeout_at(deadline, read).await {
            Ok(Ok(Some(oe))) => oe,
            Ok(Ok(None)) => {
                let _ = child.kill().await;
                return Err(ToolError::TooMuchOutput {
                    command,
                    limit: MAX_OUTPUT,
                });
            }
            Ok(Err(source)) => {
                let _ = child.kill().await;
                return Err(ToolError::Spawn {
                    path: self.path.clone(),
                    source,
                });
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(ToolError::TimedOut {
                    command,
                    timeout: deadline - started,
                });
            }
        };
        let status = match tokio::time::timeout_at(deadline, child.wait()).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(ToolError::Spawn {
                    path: self.path.clone(),
                    source,
                });
            }
            Err(_) => {
                let _ = child.kill().await;
                return Err(ToolError::TimedOut {
                    command,
                    timeout: deadline - started,
                });
            }
        };
        Ok(Finished {
            success: status.success(),
            status: status.to_string(),
            stdout: String::from_utf8_lossy(&o).into_owned(),
            stderr: String::from_utf8_lossy(&e).into_owned(),
        })
    }

    /// Runs `-i <device> <args> -g ...` and hands the output to `parse` when the tool
    /// succeeded (or, with `parse_on_failure`, whenever `parse` understands it: a failed
    /// ping may exit non-zero and still print its documented answer).
    async fn query<T>(
        &self,
        device: u32,
        args: &[&str],
        deadline: Instant,
        parse_on_failure: bool,
        parse: fn(&str) -> Result<T, ParseError>,
    ) -> Result<T, ToolError> {
        let mut full = vec!["-i".to_owned(), device.to_string()];
        full.extend(args.iter().map(|a| (*a).to_owned()));
        let f = self.run(&full, deadline).await?;
        if f.success {
            return Ok(parse(&f.stdout)?);
        }
        if parse_on_failure && let Ok(v) = parse(&f.stdout) {
            return Ok(v);
        }
        let output: String = format!("{}{}", f.stdout.trim(), f.stderr.trim())
            .chars()
            .take(300)
            .collect();
        Err(ToolError::Failed {
            command: format!("hccn_tool {}", full.join(" ")),
            status: f.status,
            output,
        })
    }

    pub async fn ip(&self, device: u32, deadline: Instant) -> Result<IpInfo, ToolError> {
        self.query(device, &["-ip", "-g"], deadline, false, parse_ip)
            .await
    }

    pub async fn link(&self, device: u32, deadline: Instant) -> Result<NpuLink, ToolError> {
        self.query(device, &["-link", "-g"], deadline, false, parse_link)
            .await
    }

    pub async fn net_health(&self, device: u32, deadline: Instant) -> Result<NetHealth, ToolError> {
        self.query(
            device,
            &["-net_health", "-g"],
            deadline,
            false,
            parse_net_health,
        )
        .await
    }

    pub async fn tls(&self, device: u32, deadline: Instant) -> Result<TlsState, ToolError> {
        self.query(device, &["-tls", "-g"], deadline, false, parse_tls)
            .await
    }

    pub async fn ping(
        &self,
        device: u32,
        address: Ipv4Addr,
        deadline: Instant,
    ) -> Result<PingResult, ToolError> {
        let addr = address.to_string();
        self.query(
            device,
            &["-ping", "-g", "address", &addr],
            deadline,
            true,
            parse_ping,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A shell script standing in for the tool (the tests' own, not a simulator).
    fn script(name: &str, body: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("hcomm-hccn-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("hccn_tool");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn later(s: u64) -> Instant {
        Instant::now() + Duration::from_secs(s)
    }

    #[tokio::test]
    async fn the_tool_gets_the_documented_arguments_and_its_answer_is_parsed() {
        let t = HccnTool::new(
            script(
                "args",
                r#"[ "$1 $2 $3 $4" = "-i 3 -link -g" ] && echo "link status: UP" && exit 0
[ "$1 $2 $3 $4 $5 $6" = "-i 3 -ping -g address 10.0.0.9" ] && echo "recv time out seq=0" && exit 1
echo "unexpected: $*"; exit 2"#,
            ),
            Duration::from_secs(10),
        );
        assert_eq!(t.link(3, later(10)).await.unwrap(), NpuLink::Up);
        let p = t
            .ping(3, "10.0.0.9".parse().unwrap(), later(10))
            .await
            .unwrap();
        assert!(!p.reached());
        let e = t.tls(3, later(10)).await.unwrap_err();
        assert!(
            matches!(&e, ToolError::Failed { output, .. } if output.contains("unexpected: -i 3 -tls -g")),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_missing_tool_is_not_found_naming_the_flag() {
        let t = HccnTool::new("/nonexistent/hccn_tool", Duration::from_secs(1));
        let e = t.ip(0, later(1)).await.unwrap_err();
        assert_eq!(e.category(), "not_found");
        assert!(e.to_string().contains("--hccn-tool"));
    }

    #[tokio::test]
    async fn a_hung_call_is_killed_at_its_deadline() {
        let t = HccnTool::new(script("hang", "exec sleep 30"), Duration::from_millis(300));
        let start = std::time::Instant::now();
        let e = t.link(0, later(10)).await.unwrap_err();
        assert_eq!(e.category(), "timeout", "{e}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn garbage_output_is_a_parse_error() {
        let t = HccnTool::new(script("garbage", "echo hello"), Duration::from_secs(5));
        let e = t.net_health(0, later(5)).await.unwrap_err();
        assert_eq!(e.category(), "parse", "{e}");
    }

    #[tokio::test]
    async fn endless_output_is_refused_not_buffered() {
        let t = HccnTool::new(
            script("flood", "yes ipaddr:1.2.3.4"),
            Duration::from_secs(10),
        );
        let e = t.ip(0, later(10)).await.unwrap_err();
        assert_eq!(e.category(), "too_much_output", "{e}");
    }

    #[tokio::test]
    async fn calls_never_overlap() {
        // Each call records its start and end; overlapping calls would interleave.
        let dir = std::env::temp_dir().join(format!("hcomm-hccn-{}-log", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let _ = std::fs::remove_file(&log);
        let t = HccnTool::new(
            script(
                "serial",
                &format!(
                    "echo start >> {l}; sleep 0.2; echo end >> {l}; echo 'link status: UP'",
                    l = log.display()
                ),
            ),
            Duration::from_secs(10),
        );
        let calls = (0..4).map(|d| {
            let t = t.clone();
            tokio::spawn(async move { t.link(d, later(10)).await })
        });
        for c in futures::future::join_all(calls).await {
            assert_eq!(c.unwrap().unwrap(), NpuLink::Up);
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8);
        for pair in lines.chunks(2) {
            assert_eq!(pair, ["start", "end"], "{text}");
        }
    }
}
