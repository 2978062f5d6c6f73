//! `hcomm-agent weights ...`: the offline tools around weights sets (see
//! [`crate::weights::tool`]).

use std::path::PathBuf;

use clap::{ArgAction, Subcommand};

use super::size;
use crate::weights::generate::GenerateSpec;
use crate::weights::{ChunkHash, DEFAULT_CHUNK_SIZE};

/// `hcomm-agent weights <tool>`.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum WeightsCommand {
    /// Print the digest `spec.weights.digest` must carry for DIR (or, --json, the
    /// canonical manifest, whose SHA-256 is that digest).
    Manifest {
        /// The weights directory.
        dir: PathBuf,
        /// Chunk size of the manifest. An agent imports a declared source whose digest was
        /// computed with the default (2 MiB) or the former default (4 MiB).
        #[arg(long, value_name = "N", value_parser = size, default_value_t = DEFAULT_CHUNK_SIZE)]
        chunk_size: u64,
        /// How the chunks are hashed: blake3 (an `hcomm-weights/v2` manifest; about a third
        /// of SHA-256's CPU per byte on x86-64) or sha256 (`hcomm-weights/v1`, the digest
        /// earlier versions printed). Agents verify either.
        #[arg(long, value_name = "HASH", default_value_t = ChunkHash::default())]
        chunk_hash: ChunkHash,
        /// Print the canonical manifest instead of its digest.
        #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true,
              default_value_t = false, default_missing_value = "true", value_name = "BOOL")]
        json: bool,
    },
    /// Write a deterministic pseudo-random set into DIR (empty or new) and print its digest.
    Generate {
        /// The output directory.
        dir: PathBuf,
        /// Total bytes over all files (units: 4096, 4KiB, 256MiB, 1GB).
        #[arg(long, value_name = "BYTES", value_parser = size)]
        size: u64,
        /// Seed of the byte stream: the same size and seed give the same digest.
        #[arg(long, value_name = "N")]
        seed: u64,
        /// Number of shard files.
        #[arg(long, value_name = "K", default_value_t = 4)]
        files: usize,
    },
}

impl WeightsCommand {
    /// What `generate` writes (None for `manifest`).
    pub fn generate_spec(&self) -> Option<GenerateSpec> {
        match self {
            WeightsCommand::Generate {
                size, seed, files, ..
            } => Some(GenerateSpec {
                size: *size,
                seed: *seed,
                files: *files,
            }),
            WeightsCommand::Manifest { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Command;
    use super::super::tests::parse;
    use super::*;

    fn weights(line: &str) -> Result<WeightsCommand, clap::Error> {
        match parse(&format!("weights {line}"))?.command {
            Command::Weights(w) => Ok(w),
            other => panic!("not weights: {other:?}"),
        }
    }

    #[test]
    fn weights_commands_parse_a_directory_and_their_flags() {
        assert_eq!(
            weights("manifest /w --chunk-size 1MiB --json --chunk-hash sha256").unwrap(),
            WeightsCommand::Manifest {
                dir: "/w".into(),
                chunk_size: 1 << 20,
                chunk_hash: ChunkHash::Sha256,
                json: true
            }
        );
        assert_eq!(
            weights("manifest --json=false /w").unwrap(),
            WeightsCommand::Manifest {
                dir: "/w".into(),
                chunk_size: DEFAULT_CHUNK_SIZE,
                chunk_hash: ChunkHash::Blake3,
                json: false
            }
        );
        let g = weights("generate /out --size 256MiB --seed 7 --files 2").unwrap();
        assert_eq!(
            g.generate_spec(),
            Some(GenerateSpec {
                size: 256 << 20,
                seed: 7,
                files: 2
            })
        );
        // What the e2e testbed runs (`testbed::weights::generate`).
        let g = weights("generate /models/m --size 268435456 --seed 1").unwrap();
        assert_eq!(g.generate_spec().unwrap().files, 4);
    }

    #[test]
    fn bad_weights_commands_are_errors_naming_what_is_wrong() {
        for (line, named) in [
            ("", "manifest"),
            ("manifest", "<DIR>"),
            ("manifest /a /b", "/b"),
            ("manifest /a --chunk-size big", "--chunk-size"),
            ("manifest /a --chunk-hash md5", "md5"),
            ("generate /out --seed 1", "--size"),
            ("generate /out --size 1MiB", "--seed"),
            ("generate /out --size 1MiB --seed 1 --bogus 2", "--bogus"),
            ("explode /x", "explode"),
        ] {
            let e = weights(line).unwrap_err().to_string();
            assert!(e.contains(named), "{line}: {e}");
        }
    }
}
