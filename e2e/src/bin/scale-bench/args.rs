//! The command line of `cargo scale-bench` (clap): how many simulated nodes, which total
//! member counts, spread over how many groups, and how fast the played agents answer.
//! Values are checked here, so a run never starts on a matrix it cannot place.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// NPUs each simulated node advertises (an Atlas 800T A2's eight).
pub const NPUS_PER_NODE: u32 = 8;

/// `cargo scale-bench`: the operator at many members and groups (issue 20, point 1).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "scale-bench",
    about = "The operator's cost at 100 to 1,000 members and up to 50 groups, on a real \
             control plane with kwok Nodes and a driver playing the node agents",
    long_about = "Starts etcd, kube-apiserver, kube-scheduler, kube-controller-manager and kwok; \
                  creates --nodes kwok Nodes advertising 8 huawei.com/Ascend910 each, with the \
                  HcommNode their agents would publish; runs the real hcomm-operator (built by \
                  cargo); and plays every node's agent and device plugin. For each total in \
                  --sizes, --groups groups of size/groups members are brought up at half size, \
                  one group is scaled to full size alone, scaled back, then every group is \
                  scaled to full size at once (the storm). The last line is for scripts."
)]
pub struct Args {
    /// Total members at each measured size (summed over the groups), ascending.
    #[arg(long, value_delimiter = ',', default_value = "100,300,1000")]
    pub sizes: Vec<u32>,
    /// Groups the members of each size are spread over.
    #[arg(long, default_value_t = 50)]
    pub groups: u32,
    /// Simulated (kwok) Nodes, each with 8 NPUs.
    #[arg(long, default_value_t = 200)]
    pub nodes: u32,
    /// NPUs (ranks) per member.
    #[arg(long, default_value_t = 1)]
    pub devices_per_member: u32,
    /// How long the played agent takes from a member Pod running with its allocation to
    /// writing its conditions (verified, weights synced, joined, ready), in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub agent_delay_ms: u64,
    /// The groups' `scaling.maxJoining` (members joining at once); unset, the CRD's default.
    #[arg(long)]
    pub max_joining: Option<u32>,
    /// Writes the played agents and device plugin have in flight at once, all nodes
    /// together (one client plays them all; real agents each write their own).
    #[arg(long, default_value_t = 32)]
    pub agent_writes_in_flight: usize,
    /// How often each played agent republishes its HcommNode status (as the real agent's
    /// inventory loop does); 0 never.
    #[arg(long, default_value_t = 10)]
    pub node_publish_s: u64,
    /// Length of the quiet window over which steady-state list calls are counted.
    #[arg(long, default_value_t = 20)]
    pub steady_s: u64,
    /// Deadline of each measured phase, in seconds.
    #[arg(long, default_value_t = 600)]
    pub phase_timeout_s: u64,
    /// Where the Markdown table goes (in addition to stdout).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Do not run `cargo build --bins` for the operator first.
    #[arg(long)]
    pub no_build: bool,
}

impl Args {
    /// Parses and checks `argv` (without the program name).
    pub fn parse_from_argv(argv: &[String]) -> Result<Args, clap::Error> {
        let args = Args::try_parse_from(
            std::iter::once("scale-bench".to_owned()).chain(argv.iter().cloned()),
        )?;
        if let Err(message) = args.check() {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("{message}\n"),
            ));
        }
        Ok(args)
    }

    /// Why these values cannot be run, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.sizes.is_empty()
            || self.groups == 0
            || self.nodes == 0
            || self.agent_writes_in_flight == 0
        {
            return Err(
                "--sizes, --groups, --nodes and --agent-writes-in-flight must be positive".into(),
            );
        }
        if !matches!(self.devices_per_member, 1 | 2 | 4 | 8) {
            return Err(
                "--devices-per-member must be 1, 2, 4 or 8 (one node holds a member)".into(),
            );
        }
        for &size in &self.sizes {
            if size < 2 * self.groups || size % self.groups != 0 {
                return Err(format!(
                    "size {size} must be a multiple of --groups {} with at least 2 members a group",
                    self.groups
                ));
            }
            let per_node = NPUS_PER_NODE / self.devices_per_member;
            if size > self.nodes * per_node {
                return Err(format!(
                    "size {size} needs {} nodes at {per_node} members a node; --nodes is {}",
                    size.div_ceil(per_node),
                    self.nodes
                ));
            }
        }
        Ok(())
    }

    /// Members a group has at `size`.
    pub fn per_group(&self, size: u32) -> u32 {
        size / self.groups
    }

    pub fn agent_delay(&self) -> Duration {
        Duration::from_millis(self.agent_delay_ms)
    }

    pub fn phase_timeout(&self) -> Duration {
        Duration::from_secs(self.phase_timeout_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(list: &[&str]) -> Result<Args, clap::Error> {
        Args::parse_from_argv(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn the_defaults_are_the_issues_matrix() {
        let a = parse(&[]).unwrap();
        assert_eq!(
            (a.sizes.as_slice(), a.groups, a.nodes),
            (&[100, 300, 1000][..], 50, 200)
        );
        assert_eq!(a.per_group(1000), 20);
        assert_eq!((a.max_joining, a.agent_writes_in_flight), (None, 32));
        assert!(parse(&["--agent-writes-in-flight", "0"]).is_err());
    }

    #[test]
    fn max_joining_goes_into_the_groups_manifests_only_when_set() {
        let scaling =
            |m: Option<u32>| crate::phases::manifest("g", 2, 1, m)["spec"]["scaling"].clone();
        assert!(scaling(None).get("maxJoining").is_none());
        assert_eq!(scaling(Some(10))["maxJoining"], 10);
    }

    #[test]
    fn sizes_that_cannot_be_spread_or_placed_are_refused() {
        assert!(parse(&["--sizes", "10", "--groups", "3"]).is_err());
        assert!(
            parse(&["--sizes", "4", "--groups", "4"]).is_err(),
            "one member a group"
        );
        let e = parse(&["--sizes", "100", "--groups", "2", "--nodes", "10"]).unwrap_err();
        assert!(e.to_string().contains("needs 13 nodes"), "{e}");
        assert!(parse(&["--sizes", "10", "--groups", "2", "--nodes", "10"]).is_ok());
        assert!(
            parse(&[
                "--devices-per-member",
                "3",
                "--sizes",
                "10",
                "--groups",
                "2"
            ])
            .is_err()
        );
    }
}
