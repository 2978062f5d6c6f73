//! `hccn-tool-sim`: the testbed's stand-in for Ascend's `hccn_tool` (see
//! `hcomm_e2e::hosts::hccn_sim`). Each simulated host has a wrapper at the real tool's
//! path that runs this with `--root <host root>`; never shipped.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(hcomm_e2e::hosts::hccn_sim::main_with(&args));
}
