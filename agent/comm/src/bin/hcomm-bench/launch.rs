//! Launcher mode: one local process per rank (the same binary in `worker` mode), for every
//! world size asked for. Rank 0's output (the rows) is passed through; a failing rank stops
//! the run and the launcher ends the other ranks it started.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::Args;

/// Ends the children still running (only the processes this launcher started, by id).
struct Ranks(Vec<Child>);

impl Drop for Ranks {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

pub fn run(args: &Args) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find own executable: {e}"))?;
    for &n in &args.ranks {
        println!(
            "# hcomm TCP backend, {n} ranks as processes on {}, dtype {}",
            args.bind, args.dtype
        );
        let dir = std::env::temp_dir().join(format!("hcomm-bench-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let root_file = dir.join("root-info");
        let _ = std::fs::remove_file(&root_file);
        let mut ranks = Ranks(Vec::new());
        for r in 0..n {
            let mut cmd = Command::new(&exe);
            cmd.arg("worker")
                .args(["--rank", &r.to_string(), "--world", &n.to_string()])
                .arg("--root-info-file")
                .arg(&root_file)
                .args(&args.passthrough)
                .stdin(Stdio::null())
                .stdout(if r == 0 {
                    Stdio::inherit()
                } else {
                    Stdio::null()
                });
            ranks
                .0
                .push(cmd.spawn().map_err(|e| format!("starting rank {r}: {e}"))?);
        }
        let deadline = Instant::now() + Duration::from_secs(3600);
        loop {
            let mut done = 0;
            for (r, c) in ranks.0.iter_mut().enumerate() {
                match c.try_wait() {
                    Ok(Some(st)) if st.success() => done += 1,
                    Ok(Some(st)) => {
                        return Err(format!(
                            "{n} ranks: rank {r} failed ({st}); see its stderr above"
                        ));
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("rank {r}: {e}")),
                }
            }
            if done == n {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("{n} ranks: still running after an hour"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
