//! Container images made on this machine, without a registry: one layer holding the given
//! files (each ELF program with the shared libraries `ldd` names, symlinks resolved), an
//! image config with the entrypoint and environment, packed as a `docker save` archive
//! that `ctr images import` takes. Pure but for reading the files and running `ldd`, so
//! the archive's layout is tested byte for byte.
//!
//! Why not `docker build`: no registry is reachable here, so no `FROM` image can be had;
//! these images hold exactly what the testbed's Pods run and nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{Error, Result};
use super::mountns::run;

/// One image to build.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    /// `name:tag` as Pods name it (a reference without a registry is docker.io's, which is
    /// what the kubelet asks containerd for too).
    pub reference: String,
    /// The entrypoint (`command` in a Pod overrides it).
    pub entrypoint: Vec<String>,
    /// `KEY=value` environment.
    pub env: Vec<String>,
    /// (file on this machine, absolute path in the image).
    pub files: Vec<(PathBuf, String)>,
}

impl ImageSpec {
    /// An image whose files are `programs` (each at its path in the image) and every
    /// shared library they load, with `PATH` set.
    pub fn programs(reference: &str, programs: &[(PathBuf, &str)]) -> Result<ImageSpec> {
        let mut files: BTreeMap<String, PathBuf> = BTreeMap::new();
        for (program, at) in programs {
            files.insert((*at).to_owned(), program.clone());
            for lib in shared_libraries(program)? {
                files.insert(lib.display().to_string(), lib);
            }
        }
        Ok(ImageSpec {
            reference: reference.to_owned(),
            entrypoint: programs
                .first()
                .map(|(_, at)| vec![(*at).to_owned()])
                .unwrap_or_default(),
            env: vec!["PATH=/usr/local/bin:/usr/bin:/bin".to_owned()],
            files: files.into_iter().map(|(at, src)| (src, at)).collect(),
        })
    }

    /// Writes the image as a `docker save` archive at `out`.
    pub fn write_archive(&self, out: &Path) -> Result<()> {
        let mut entries = Vec::new();
        for (src, at) in &self.files {
            let data = std::fs::read(src).map_err(Error::io("read", src))?;
            let mode = std::fs::metadata(src)
                .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
                .map_err(Error::io("stat", src))?;
            entries.push(LayerFile {
                path: at.trim_start_matches('/').to_owned(),
                mode,
                data,
            });
        }
        let archive = docker_archive(self, entries);
        std::fs::write(out, archive).map_err(Error::io("write", out))
    }
}

/// One regular file of the layer.
struct LayerFile {
    path: String,
    mode: u32,
    data: Vec<u8>,
}

/// The archive `docker save` writes for a one-layer image: `<diff id>/layer.tar`, the
/// config as `<config digest>.json`, and `manifest.json` naming both with the tag.
fn docker_archive(spec: &ImageSpec, files: Vec<LayerFile>) -> Vec<u8> {
    let layer = layer_tar(files);
    let diff_id = hex::encode(Sha256::digest(&layer));
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": spec.entrypoint, "Env": spec.env},
        "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
    })
    .to_string()
    .into_bytes();
    let config_name = format!("{}.json", hex::encode(Sha256::digest(&config)));
    let layer_name = format!("{diff_id}/layer.tar");
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [spec.reference],
        "Layers": [layer_name],
    }])
    .to_string()
    .into_bytes();
    let mut tar = Tar::default();
    tar.dir(diff_id.as_str(), 0o755);
    tar.file(&layer_name, 0o644, &layer);
    tar.file(&config_name, 0o644, &config);
    tar.file("manifest.json", 0o644, &manifest);
    tar.finish()
}

/// The layer: every parent folder once, then the files, in path order; `/tmp` too.
fn layer_tar(mut files: Vec<LayerFile>) -> Vec<u8> {
    files.sort_by(|a, b| a.path.cmp(&b.path));
    let mut tar = Tar::default();
    let mut dirs = std::collections::BTreeSet::new();
    tar.dir("tmp", 0o1777);
    for f in &files {
        let mut parent = String::new();
        for part in f
            .path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map(|(_, p)| p)
            .unwrap_or(&[])
        {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(part);
            if dirs.insert(parent.clone()) {
                tar.dir(&parent, 0o755);
            }
        }
        tar.file(&f.path, f.mode, &f.data);
    }
    tar.finish()
}

/// A ustar writer: enough for regular files and folders with short names, owned by root,
/// dated at the epoch (so the same files give the same layer digest).
#[derive(Default)]
struct Tar(Vec<u8>);

impl Tar {
    fn dir(&mut self, path: &str, mode: u32) {
        self.entry(&format!("{path}/"), mode, b'5', &[]);
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, mode, b'0', data);
    }

    fn entry(&mut self, path: &str, mode: u32, kind: u8, data: &[u8]) {
        let mut h = [0u8; 512];
        let (prefix, name) = split_name(path);
        h[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut h[100..108], u64::from(mode));
        octal(&mut h[108..116], 0);
        octal(&mut h[116..124], 0);
        octal(&mut h[124..136], data.len() as u64);
        octal(&mut h[136..148], 0);
        h[148..156].fill(b' ');
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        octal(&mut h[148..155], sum);
        self.0.extend_from_slice(&h);
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
    }

    fn finish(mut self) -> Vec<u8> {
        self.0.extend([0u8; 1024]);
        self.0
    }
}

/// ustar's name (100 bytes) and prefix (155 bytes), split at a `/`.
fn split_name(path: &str) -> (&str, &str) {
    if path.len() <= 100 {
        return ("", path);
    }
    let cut = path[..path.len().min(156)]
        .rfind('/')
        .filter(|&i| path.len() - i - 1 <= 100)
        .expect("image paths are short");
    (&path[..cut], &path[cut + 1..])
}

/// `value` as zero-padded octal filling `field` but its last byte (NUL).
fn octal(field: &mut [u8], value: u64) {
    let digits = format!("{value:0width$o}", width = field.len() - 1);
    field[..digits.len()].copy_from_slice(digits.as_bytes());
    field[field.len() - 1] = 0;
}

/// The shared libraries `program` loads, as real files (a symlink such as the loader's
/// `/lib64/ld-linux-x86-64.so.2` would dangle in the image: it is put there as the file
/// it points at, under the path the program asks for).
fn shared_libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let text = match run("ldd", &[program.to_str().unwrap_or_default()]) {
        Ok(text) => text,
        // "not a dynamic executable": a static program needs nothing.
        Err(Error::Command { message, .. }) if message.contains("not a dynamic") => {
            return Ok(Vec::new());
        }
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|line| {
            let path = line.split_whitespace().find(|w| w.starts_with('/'))?;
            Some(PathBuf::from(path))
        })
        .collect())
}

/// A tar's entries as (path, type flag, size), for the tests.
#[cfg(test)]
fn entries_of(tar: &[u8]) -> Vec<(String, u8, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 512 <= tar.len() && tar[at] != 0 {
        let h = &tar[at..at + 512];
        let text = |r: std::ops::Range<usize>| {
            String::from_utf8_lossy(&h[r])
                .trim_end_matches('\0')
                .to_owned()
        };
        let size = usize::from_str_radix(text(124..135).trim(), 8).unwrap();
        let prefix = text(345..500);
        let name = text(0..100);
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        out.push((path, h[156], size));
        at += 512 + size.div_ceil(512) * 512;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            reference: "hcomm/example-worker:0.1.0".into(),
            entrypoint: vec!["/usr/local/bin/hcomm-worker".into()],
            env: vec!["PATH=/usr/local/bin".into()],
            files: Vec::new(),
        }
    }

    #[test]
    fn the_archive_is_what_docker_save_writes_for_one_layer() {
        let files = vec![LayerFile {
            path: "usr/local/bin/hcomm-worker".into(),
            mode: 0o755,
            data: b"#!".to_vec(),
        }];
        let archive = docker_archive(&spec(), files);
        let entries = entries_of(&archive);
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(names.len(), 4);
        assert!(names[1].ends_with("/layer.tar") && names[0] == format!("{}/", &names[1][..64]));
        assert_eq!(names[3], "manifest.json");
        // The manifest names the config and layer by digest, and the tag.
        let manifest_at = archive.len() - 1024 - 512; // the last entry's data block
        let manifest: serde_json::Value =
            serde_json::from_slice(archive[manifest_at..].split(|&b| b == 0).next().unwrap())
                .unwrap();
        assert_eq!(manifest[0]["RepoTags"][0], "hcomm/example-worker:0.1.0");
        assert_eq!(manifest[0]["Layers"][0], names[1]);
        assert_eq!(manifest[0]["Config"], names[2]);
    }

    #[test]
    fn the_layer_has_each_parent_folder_once_and_the_same_files_give_the_same_digest() {
        let files = || {
            vec![
                LayerFile {
                    path: "usr/local/bin/b".into(),
                    mode: 0o755,
                    data: vec![1; 700],
                },
                LayerFile {
                    path: "usr/local/bin/a".into(),
                    mode: 0o755,
                    data: vec![2; 3],
                },
            ]
        };
        let layer = layer_tar(files());
        let entries = entries_of(&layer);
        let names: Vec<&str> = entries.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "tmp/",
                "usr/",
                "usr/local/",
                "usr/local/bin/",
                "usr/local/bin/a",
                "usr/local/bin/b"
            ]
        );
        assert_eq!(entries[5], ("usr/local/bin/b".to_owned(), b'0', 700));
        assert_eq!(layer.len() % 512, 0);
        assert_eq!(layer, layer_tar(files()));
    }

    #[test]
    fn a_long_path_goes_into_the_prefix() {
        let long = format!("{}/{}", "d".repeat(120), "f".repeat(50));
        let mut tar = Tar::default();
        tar.file(&long, 0o644, b"x");
        assert_eq!(entries_of(&tar.finish())[0].0, long);
    }

    #[test]
    fn a_dynamic_program_brings_its_loader_and_libc() {
        let libs = shared_libraries(Path::new("/bin/sh")).unwrap();
        assert!(
            libs.iter().any(|l| l.to_string_lossy().contains("libc.so")),
            "{libs:?}"
        );
        assert!(
            libs.iter()
                .any(|l| l.to_string_lossy().contains("ld-linux")),
            "{libs:?}"
        );
    }
}
