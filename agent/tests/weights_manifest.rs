//! The manifest's canonical serialization is a function of the directory's content: the
//! same content gives the same digest, any change of a byte, a name or a mode gives
//! another; the first members refuse a source directory that does not match the digest.

mod weights_support;

use std::os::unix::fs::PermissionsExt;

use hcomm_agent::weights::{ChunkHash, Manifest, WeightStore, WeightsError, manifest_digest};
use rand::{Rng, SeedableRng, rngs::StdRng};
use weights_support::*;

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

#[test]
fn the_same_content_in_another_directory_has_the_same_digest() {
    let a = TempDir::new("m-a");
    let b = TempDir::new("m-b");
    generate_set(a.path(), 3, 7);
    copy_dir(a.path(), b.path());
    let m = Manifest::build(a.path(), CHUNK).unwrap();
    assert_eq!(m.digest(), manifest_digest(b.path(), CHUNK).unwrap());
    assert_eq!(
        m.digest(),
        manifest_digest(a.path(), CHUNK).unwrap(),
        "stable on rebuild"
    );
    assert_eq!(Manifest::parse(&m.canonical_bytes()).unwrap(), m);
    assert_eq!(
        m.total_bytes(),
        3 * MIB as u64 + br#"{"layers": 2}"#.len() as u64
    );
}

#[test]
fn any_byte_change_anywhere_changes_the_digest() {
    let dir = TempDir::new("m-flip");
    generate_set(dir.path(), 2, 11);
    let original = digest_of(dir.path());
    let files = [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "tokenizer/vocab.bin",
        "config.json",
    ];
    let mut rng = StdRng::seed_from_u64(99);
    for round in 0..24 {
        let path = dir.path().join(files[round % files.len()]);
        let mut data = std::fs::read(&path).unwrap();
        let pos = rng.random_range(0..data.len());
        let bit = 1u8 << rng.random_range(0..8);
        data[pos] ^= bit;
        std::fs::write(&path, &data).unwrap();
        assert_ne!(digest_of(dir.path()), original, "flip at {path:?}[{pos}]");
        data[pos] ^= bit;
        std::fs::write(&path, &data).unwrap();
        assert_eq!(digest_of(dir.path()), original, "restored");
    }
}

#[test]
fn names_sizes_modes_and_chunk_size_are_part_of_the_digest() {
    let dir = TempDir::new("m-meta");
    generate_set(dir.path(), 1, 3);
    let original = digest_of(dir.path());
    let p = dir.path().join("config.json");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert_ne!(digest_of(dir.path()), original, "mode");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(digest_of(dir.path()), original);
    std::fs::rename(&p, dir.path().join("config2.json")).unwrap();
    assert_ne!(digest_of(dir.path()), original, "name");
    std::fs::rename(dir.path().join("config2.json"), &p).unwrap();
    std::fs::write(dir.path().join("EMPTY"), b"x").unwrap();
    assert_ne!(digest_of(dir.path()), original, "size");
    std::fs::write(dir.path().join("EMPTY"), b"").unwrap();
    assert_eq!(digest_of(dir.path()), original);
    assert_ne!(
        manifest_digest(dir.path(), CHUNK / 2).unwrap(),
        original,
        "chunk size"
    );
}

#[test]
fn symlinks_are_refused_in_a_weights_set() {
    let dir = TempDir::new("m-link");
    generate_set(dir.path(), 1, 3);
    std::os::unix::fs::symlink("config.json", dir.path().join("link.json")).unwrap();
    let e = Manifest::build(dir.path(), CHUNK).unwrap_err();
    assert_eq!(e.category(), "invalid", "{e}");
}

#[test]
fn first_members_refuse_a_source_directory_that_does_not_match_the_digest() {
    let src = TempDir::new("m-src");
    let root = TempDir::new("m-store");
    generate_set(src.path(), 2, 5);
    let good = digest_of(src.path());
    let store = WeightStore::open(root.path()).unwrap();
    let wrong = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
        .parse()
        .unwrap();
    let e = store.import_dir(src.path(), &wrong, CHUNK).unwrap_err();
    assert!(matches!(e, WeightsError::DigestMismatch { .. }), "{e}");
    assert_eq!(e.category(), "digest_mismatch");
    assert_eq!(store.current().unwrap(), None, "nothing installed");
    store.import_dir(src.path(), &good, CHUNK).unwrap();
    assert_installed(&store, good);
    // A reopened store knows the installed set.
    let again = WeightStore::open(root.path()).unwrap();
    assert!(again.is_complete(&good));
}

/// A digest says nothing of how its chunks were hashed: the first members' import
/// accepts a SHA-256 (v1) digest, as every version before BLAKE3 printed, and a BLAKE3
/// (v2) one for the same directory, and each installs the manifest that hashes to it.
#[test]
fn first_members_import_a_source_under_either_chunk_hash() {
    let src = TempDir::new("m-hash-src");
    generate_set(src.path(), 2, 5);
    for hash in ChunkHash::ALL {
        let root = TempDir::new(&format!("m-hash-{hash}"));
        let want = Manifest::build_with(src.path(), CHUNK, hash).unwrap();
        let store = WeightStore::open(root.path()).unwrap();
        store.import_dir(src.path(), &want.digest(), CHUNK).unwrap();
        assert_installed(&store, want.digest());
        let bytes = store.manifest_bytes(&want.digest()).unwrap();
        assert_eq!(Manifest::parse(&bytes).unwrap().chunk_hash(), hash);
    }
}
