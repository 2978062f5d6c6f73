//! Deterministic pseudo-random weights sets (`hcomm-agent weights generate`), for demos,
//! benchmarks and tests: the same size, seed and file count give the same bytes, hence
//! the same manifest digest, on every machine and every build.
//!
//! The bytes are a counter-based stream (the SplitMix64 output function over
//! `key + (n + 1) · 0x9E3779B97F4A7C15`, `key` derived from the seed and the file index),
//! written little-endian. It is defined here rather than taken from `rand` because `rand`
//! does not promise stable streams across versions, and a published digest must not
//! change with a dependency bump. It is not cryptographic; it only has to be fast and
//! incompressible-looking (so transfers and hashing are measured on realistic data).
//!
//! Layout: `shard-00001-of-0000K.bin` … (K = `files`), sizes differing by at most one
//! byte, summing to exactly `size`; mode 0644 set explicitly (the mode is part of the
//! manifest, so the umask must not change the digest).

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::error::{Result, WeightsError, io_at};

const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
/// Largest accepted file count (keeps names and directory listings sane).
pub const MAX_FILES: usize = 99_999;
/// Write granularity.
const BLOCK: usize = 1 << 20;

/// What to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateSpec {
    /// Total bytes over all files.
    pub size: u64,
    pub seed: u64,
    /// Number of shard files, 1..=[`MAX_FILES`].
    pub files: usize,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The byte stream of one file: word `n` is `mix(key + (n + 1) · GOLDEN)`.
struct Stream {
    state: u64,
}

impl Stream {
    fn new(seed: u64, file: usize) -> Stream {
        Stream {
            state: mix(seed ^ mix((file as u64).wrapping_add(1).wrapping_mul(GOLDEN))),
        }
    }

    /// Fills `buf` (a multiple of 8 bytes, except possibly the file's last block).
    fn fill(&mut self, buf: &mut [u8]) {
        let mut words = buf.chunks_exact_mut(8);
        for w in &mut words {
            self.state = self.state.wrapping_add(GOLDEN);
            w.copy_from_slice(&mix(self.state).to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            self.state = self.state.wrapping_add(GOLDEN);
            let n = tail.len();
            tail.copy_from_slice(&mix(self.state).to_le_bytes()[..n]);
        }
    }
}

/// File names and sizes of a spec (pure).
pub fn layout(spec: &GenerateSpec) -> Result<Vec<(String, u64)>> {
    if spec.files == 0 || spec.files > MAX_FILES {
        return Err(WeightsError::Invalid(format!(
            "--files {} outside 1..={MAX_FILES}",
            spec.files
        )));
    }
    let k = spec.files as u64;
    Ok((0..spec.files)
        .map(|i| {
            let size = spec.size / k + u64::from((i as u64) < spec.size % k);
            (format!("shard-{:05}-of-{:05}.bin", i + 1, spec.files), size)
        })
        .collect())
}

/// Writes the set into `dir` (created; must be empty or absent, so nothing foreign ends up
/// in the manifest). Returns the files written. Blocking.
pub fn generate(dir: &Path, spec: &GenerateSpec) -> Result<Vec<PathBuf>> {
    let files = layout(spec)?;
    fs::create_dir_all(dir).map_err(io_at("create directory", dir))?;
    if fs::read_dir(dir)
        .map_err(io_at("read directory", dir))?
        .next()
        .is_some()
    {
        return Err(WeightsError::Invalid(format!(
            "{} is not empty; generate into an empty or new directory",
            dir.display()
        )));
    }
    let mut buf = vec![0u8; BLOCK];
    let mut out = Vec::with_capacity(files.len());
    for (i, (name, size)) in files.into_iter().enumerate() {
        let path = dir.join(name);
        let mut f = File::create(&path).map_err(io_at("create", &path))?;
        let mut stream = Stream::new(spec.seed, i);
        let mut left = size;
        while left > 0 {
            let n = left.min(BLOCK as u64) as usize;
            stream.fill(&mut buf[..n]);
            f.write_all(&buf[..n]).map_err(io_at("write", &path))?;
            left -= n as u64;
        }
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .map_err(io_at("chmod", &path))?;
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::manifest::MIN_CHUNK_SIZE;
    use crate::weights::manifest_digest;

    fn temp(label: &str) -> PathBuf {
        crate::weights::test_dirs::fresh("generate", label)
    }

    #[test]
    fn sizes_split_evenly_and_sum_to_the_total() {
        let l = layout(&GenerateSpec {
            size: 10,
            seed: 0,
            files: 3,
        })
        .unwrap();
        assert_eq!(
            l,
            [
                ("shard-00001-of-00003.bin".to_owned(), 4),
                ("shard-00002-of-00003.bin".to_owned(), 3),
                ("shard-00003-of-00003.bin".to_owned(), 3)
            ]
        );
        for files in [0, MAX_FILES + 1] {
            assert!(
                layout(&GenerateSpec {
                    size: 1,
                    seed: 0,
                    files
                })
                .is_err()
            );
        }
    }

    #[test]
    fn the_same_spec_gives_the_same_bytes_and_another_seed_other_bytes() {
        let tmp = temp("det");
        let spec = GenerateSpec {
            size: (3 << 20) + 13,
            seed: 42,
            files: 2,
        };
        generate(&tmp.join("a"), &spec).unwrap();
        generate(&tmp.join("b"), &spec).unwrap();
        generate(&tmp.join("c"), &GenerateSpec { seed: 43, ..spec }).unwrap();
        let d = |x: &str| manifest_digest(&tmp.join(x), MIN_CHUNK_SIZE).unwrap();
        assert_eq!(d("a"), d("b"));
        assert_ne!(d("a"), d("c"));
        let first = fs::read(tmp.join("a/shard-00001-of-00002.bin")).unwrap();
        let second = fs::read(tmp.join("a/shard-00002-of-00002.bin")).unwrap();
        assert_eq!(first.len() + second.len(), (3 << 20) + 13);
        assert_ne!(first[..4096], second[..4096], "files get different streams");
        // The stream is pinned: a published digest must never change.
        generate(
            &tmp.join("pinned"),
            &GenerateSpec {
                size: 1000,
                seed: 1,
                files: 2,
            },
        )
        .unwrap();
        // Pinned as the v1 (SHA-256) digest it was published as before BLAKE3.
        let v1 = crate::weights::Manifest::build_with(
            &tmp.join("pinned"),
            MIN_CHUNK_SIZE,
            crate::weights::ChunkHash::Sha256,
        )
        .unwrap();
        assert_eq!(
            v1.digest().to_string(),
            "sha256:44c497aafbce2fb4dfe4dc57982817f999499f848dcb4f000bfe1c764c87365e"
        );
        assert!(generate(&tmp.join("a"), &spec).is_err(), "not empty");
        let mode = fs::metadata(tmp.join("a/shard-00001-of-00002.bin"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o644);
        let _ = fs::remove_dir_all(&tmp);
    }
}
