//! A process started inside a simulated host, killed when its guard drops so a failing
//! test never leaves listeners or senders running (namespace teardown kills stragglers
//! too, but only when the whole set of hosts goes).

use std::process::Child;

/// A child process running inside a [`super::SimHost`]; SIGKILLed and reaped on drop.
#[derive(Debug)]
pub struct HostProcess {
    child: Option<Child>,
    label: String,
}

impl HostProcess {
    pub(crate) fn new(child: Child, label: String) -> Self {
        HostProcess {
            child: Some(child),
            label,
        }
    }

    /// The command line and host, for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The process id (of the program itself: `ip netns exec` execs it).
    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or_default()
    }

    /// The underlying child (take its stdout, wait for it, ...).
    pub fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("child present until drop")
    }

    /// Stops the process as a kubelet stops a container: SIGTERM, up to `grace` for it to
    /// exit, then SIGKILL. Returns whether it exited on its own.
    pub fn stop(mut self, grace: std::time::Duration) -> bool {
        let Some(child) = self.child.take() else {
            return true;
        };
        stop_child(child, grace)
    }

    /// Gives up the guard: the caller now owns the process and its lifetime.
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("child present until drop")
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// SIGTERM, up to `grace` for the exit, then SIGKILL (`kill` the command: the workspace
/// forbids `unsafe`, so no libc). Returns whether it exited on its own.
pub(crate) fn stop_child(mut child: Child, grace: std::time::Duration) -> bool {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    let deadline = std::time::Instant::now() + grace;
    while std::time::Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}
