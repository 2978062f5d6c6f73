//! Writes the CRD YAML generated from the Rust types into `crds/` and `charts/hcomm/crds/`, or with
//! `--check` fails when the committed files differ from what the types generate.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// `cargo crdgen [--check]`.
#[derive(Debug, Parser)]
#[command(
    name = "crdgen",
    bin_name = "cargo crdgen",
    version,
    about = "Generate the CRD YAML under crds/ and charts/hcomm/crds/ from the Rust types"
)]
struct Cli {
    /// Write nothing; fail when a committed file differs from what the types generate.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    // Help and version exit 0, a bad flag 2.
    let check = Cli::parse().check;
    let crds_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let chart_dir = crds_dir.join("../charts/hcomm/crds");
    let mut drift = Vec::new();
    for crd in hcomm_crds::all_crds() {
        let yaml = match hcomm_crds::crd_yaml(&crd) {
            Ok(yaml) => yaml,
            Err(err) => {
                eprintln!("cannot serialize CRD: {err}");
                return ExitCode::FAILURE;
            }
        };
        for dir in [&crds_dir, &chart_dir] {
            let path = dir.join(hcomm_crds::crd_file_name(&crd));
            let current = std::fs::read_to_string(&path).unwrap_or_default();
            if current == yaml {
                continue;
            }
            if check {
                drift.push(path);
            } else if let Err(err) = std::fs::write(&path, &yaml) {
                eprintln!("cannot write {}: {err}", path.display());
                return ExitCode::FAILURE;
            } else {
                println!("wrote {}", path.display());
            }
        }
    }
    if drift.is_empty() {
        ExitCode::SUCCESS
    } else {
        for path in drift {
            eprintln!("{} is out of date; run `cargo crdgen`", path.display());
        }
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn check_is_the_only_flag() {
        assert!(Cli::try_parse_from(["crdgen", "--check"]).unwrap().check);
        assert!(!Cli::try_parse_from(["crdgen"]).unwrap().check);
        let e = Cli::try_parse_from(["crdgen", "--chek"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--chek"), "{e}");
    }
}
