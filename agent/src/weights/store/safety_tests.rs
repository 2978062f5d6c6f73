//! Unit tests of what the store refuses to keep: leftover staging after every failure,
//! setuid bits, symlinks, and a complete set with a corrupt chunk.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::*;
use crate::weights::manifest::{MIN_CHUNK_SIZE, Manifest};
use crate::weights::source::{Refusal, SourceRoots};

fn temp(label: &str) -> PathBuf {
    crate::weights::test_dirs::fresh("store-safety", label)
}

/// A two-file set; returns its digest (as `hcomm-agent weights manifest` prints it).
fn make_set(dir: &Path) -> Digest {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("w.bin"), vec![3u8; 10_000]).unwrap();
    fs::write(dir.join("sub/config.json"), br#"{"layers": 2}"#).unwrap();
    Manifest::build(dir, MIN_CHUNK_SIZE).unwrap().digest()
}

fn staging_entries(store: &WeightStore) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(store.root().join("staging"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn versions(store: &WeightStore) -> usize {
    fs::read_dir(store.root().join("versions")).unwrap().count()
}

#[test]
fn a_digest_mismatch_leaves_no_staging_and_no_version() {
    let tmp = temp("mismatch");
    make_set(&tmp.join("src"));
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let wrong = Digest::of(b"not this set");
    let e = store
        .install_dir(&tmp.join("src"), &wrong, MIN_CHUNK_SIZE)
        .unwrap_err();
    assert!(matches!(e, WeightsError::DigestMismatch { .. }), "{e}");
    assert_eq!(staging_entries(&store), Vec::<String>::new());
    assert_eq!(versions(&store), 0);
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_refused_tree_leaves_no_staging_and_nothing_of_it_is_copied() {
    let tmp = temp("refused");
    let src = tmp.join("src");
    let d = make_set(&src);
    symlink("/etc/hostname", src.join("zz-link")).unwrap();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let source = SourceRoots::new([tmp.clone()]).unwrap().open(&src).unwrap();
    let e = store
        .install_source(&source, &d, &[MIN_CHUNK_SIZE])
        .unwrap_err();
    let WeightsError::SourceRefused(r) = e else {
        panic!("expected a refusal, got {e}")
    };
    assert_eq!((r.path, r.why), (src.join("zz-link"), Refusal::Symlink));
    assert_eq!(staging_entries(&store), Vec::<String>::new());
    assert_eq!(versions(&store), 0);
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn an_error_after_the_copy_leaves_no_staging() {
    // A name the manifest refuses (not UTF-8): the copy succeeds, building its manifest
    // fails; the copy is removed.
    use std::os::unix::ffi::OsStrExt;
    let tmp = temp("io-error");
    let src = tmp.join("src");
    make_set(&src);
    fs::write(src.join(std::ffi::OsStr::from_bytes(b"bad\xff")), b"x").unwrap();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let e = store
        .install_dir(&src, &Digest::of(b"x"), MIN_CHUNK_SIZE)
        .unwrap_err();
    assert!(matches!(e, WeightsError::Invalid(_)), "{e}");
    assert_eq!(staging_entries(&store), Vec::<String>::new());
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn setuid_setgid_sticky_and_write_bits_are_stripped_but_the_digest_is_the_sources() {
    let tmp = temp("setuid");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    for (name, mode) in [
        ("run.sh", 0o4755),
        ("g.bin", 0o2664),
        ("s.bin", 0o1600),
        ("w.bin", 0o666),
    ] {
        fs::write(src.join(name), name.as_bytes()).unwrap();
        fs::set_permissions(src.join(name), fs::Permissions::from_mode(mode)).unwrap();
    }
    let d = Manifest::build(&src, MIN_CHUNK_SIZE).unwrap().digest();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let version = store.install_dir(&src, &d, MIN_CHUNK_SIZE).unwrap();
    let mode = |n: &str| fs::metadata(version.join(n)).unwrap().permissions().mode() & 0o7777;
    assert_eq!(
        (mode("run.sh"), mode("g.bin"), mode("s.bin"), mode("w.bin")),
        (0o755, 0o644, 0o600, 0o644)
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn store_open_removes_stale_staging_but_keeps_a_resumable_fetch() {
    let tmp = temp("stale");
    let src = tmp.join("src");
    let d = make_set(&src);
    let root = tmp.join("store");
    {
        let store = WeightStore::open(&root).unwrap();
        // A resumable fetch: manifest on disk, staging/<hex>.
        let m = Manifest::build(&src, MIN_CHUNK_SIZE).unwrap();
        store.begin(m.clone(), m.canonical_bytes()).unwrap();
    }
    let staging = root.join("staging");
    fs::create_dir_all(staging.join(".import-abc-1-0/sub")).unwrap();
    fs::write(staging.join(".import-abc-1-0/sub/x"), b"half").unwrap();
    fs::create_dir_all(staging.join(format!("{REMOVING}x"))).unwrap();
    fs::create_dir_all(staging.join(Digest::of(b"no manifest").hex())).unwrap();
    fs::write(staging.join("stray"), b"?").unwrap();
    symlink("/etc", staging.join("link")).unwrap();
    let store = WeightStore::open(&root).unwrap();
    assert_eq!(staging_entries(&store), [d.hex()]);
    assert!(
        fs::metadata("/etc").unwrap().is_dir(),
        "the link was not followed"
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_version_holding_a_symlink_is_removed_at_open_and_never_served() {
    let tmp = temp("version-symlink");
    let src = tmp.join("src");
    let d = make_set(&src);
    let root = tmp.join("store");
    let version = {
        let store = WeightStore::open(&root).unwrap();
        store.install_dir(&src, &d, MIN_CHUNK_SIZE).unwrap()
    };
    fs::remove_file(version.join("sub/config.json")).unwrap();
    symlink("/etc/hostname", version.join("sub/config.json")).unwrap();
    let store = WeightStore::open(&root).unwrap();
    assert!(!store.is_complete(&d));
    assert!(!version.exists() && fs::symlink_metadata(&version).is_err());
    assert!(
        store
            .activate(&d, &CurrentLink::group("ns", "g").unwrap())
            .is_err()
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_chunk_is_never_read_through_a_symlink() {
    let tmp = temp("read-symlink");
    fs::create_dir_all(&tmp).unwrap();
    fs::write(tmp.join("real"), b"secret").unwrap();
    symlink(tmp.join("real"), tmp.join("link")).unwrap();
    let loc = |p: &str| ChunkLocation {
        path: tmp.join(p),
        offset: 0,
        len: 6,
        set: Digest::of(b"s"),
        index: 0,
        hash: Default::default(),
    };
    assert_eq!(read_chunk(&loc("real")).unwrap(), b"secret");
    assert!(read_chunk(&loc("link")).is_err());
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_forgotten_chunk_makes_the_set_incomplete_until_it_is_written_again() {
    let tmp = temp("forget");
    let src = tmp.join("src");
    let d = make_set(&src);
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let version = store.install_dir(&src, &d, MIN_CHUNK_SIZE).unwrap();
    let g = CurrentLink::group("ns", "g").unwrap();
    store.activate(&d, &g).unwrap();
    // The disk corrupts chunk 0 of w.bin; the chunk server finds it and forgets it.
    let w = version.join("w.bin");
    std::os::unix::fs::FileExt::write_all_at(
        &fs::OpenOptions::new().write(true).open(&w).unwrap(),
        &[9u8; 4096],
        0,
    )
    .unwrap();
    let set = store.set(&d).unwrap();
    let index = set
        .table
        .index_of(&crate::weights::ChunkHash::default().digest(&[3u8; 4096]))
        .unwrap();
    store.forget_chunk(&d, index);
    assert!(
        !store.is_complete(&d),
        "a set with a forgotten chunk is not complete"
    );
    assert!(!store.complete_versions().contains(&d));
    assert!(store.activate(&d, &g).is_err(), "nor activated as complete");
    // A sync fetches the missing chunk again: begin reopens the version's files.
    let m = Manifest::build(&src, MIN_CHUNK_SIZE).unwrap();
    let (set, have) = store.begin(m.clone(), m.canonical_bytes()).unwrap();
    assert_eq!(have, set.table.len() - 1);
    set.write_chunk(index, &[3u8; 4096]).unwrap();
    assert!(set.staged_chunk_matches(index).unwrap());
    assert_eq!(store.finalize(&set).unwrap(), version);
    assert!(store.is_complete(&d));
    assert_eq!(fs::read(&w).unwrap(), vec![3u8; 10_000]);
    assert_eq!(
        fs::metadata(&w).unwrap().permissions().mode() & 0o7777,
        0o644
    );
    assert_eq!(
        Manifest::build(&version, MIN_CHUNK_SIZE).unwrap().digest(),
        d
    );
    assert_eq!(store.current_of(&g).unwrap(), Some(d));
    let _ = fs::remove_dir_all(&tmp);
}

/// A fetch that stopped part-way keeps its staging for a resume while a fetch holds it;
/// once nobody does, it can be removed whole (staging, manifest, the set forgotten), also
/// after a restart, when it is on disk only; a version being repaired is never partial.
#[test]
fn a_partial_fetch_nobody_holds_is_removed_whole_and_a_held_one_never() {
    let tmp = temp("partial");
    let src = tmp.join("src");
    let d = make_set(&src);
    let m = Manifest::build(&src, MIN_CHUNK_SIZE).unwrap();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let (set, have) = store.begin(m.clone(), m.canonical_bytes()).unwrap();
    assert_eq!(have, 0);
    assert_eq!(store.partial_sets().unwrap(), BTreeSet::from([d]));
    // A fetch holds it: in use, and refused when asked for directly.
    assert_eq!(store.partial_sets_in_use(), BTreeSet::from([d]));
    assert!(!store.remove_partial(&d).unwrap());
    assert!(store.root().join("staging").join(d.hex()).is_dir());
    // The fetch failed and let go.
    drop(set);
    assert!(store.partial_sets_in_use().is_empty());
    assert!(store.remove_partial(&d).unwrap());
    assert_eq!(staging_entries(&store), Vec::<String>::new());
    assert!(!store.manifest_path(&d).exists());
    assert!(store.have(&d).is_none() && store.partial_sets().unwrap().is_empty());

    // After a restart the partial set is on disk only: still found and removed.
    let (set, _) = store.begin(m.clone(), m.canonical_bytes()).unwrap();
    drop(set);
    drop(store);
    let store = WeightStore::open(tmp.join("store")).unwrap();
    assert_eq!(store.partial_sets().unwrap(), BTreeSet::from([d]));
    assert!(store.partial_sets_in_use().is_empty());
    assert!(store.remove_partial(&d).unwrap());
    assert_eq!(staging_entries(&store), Vec::<String>::new());

    // A fetch after the removal starts afresh and completes.
    let (set, have) = store.begin(m.clone(), m.canonical_bytes()).unwrap();
    assert_eq!(have, 0);
    drop(set);
    store.install_dir(&src, &d, MIN_CHUNK_SIZE).unwrap();
    assert!(store.is_complete(&d));

    // The declared source was imported instead: the fetch's staging is a leftover, and
    // only it goes; the version, its manifest and the set stay.
    assert_eq!(store.partial_sets().unwrap(), BTreeSet::from([d]));
    assert!(store.remove_partial(&d).unwrap());
    assert_eq!(staging_entries(&store), Vec::<String>::new());
    assert!(store.is_complete(&d) && store.manifest_path(&d).exists());
    // A complete version with a forgotten chunk is repaired in `versions/`: not partial.
    store.forget_chunk(&d, 0);
    assert!(store.partial_sets().unwrap().is_empty());
    assert!(!store.remove_partial(&d).unwrap());
    assert!(store.version_dir(&d).is_dir() && store.manifest_path(&d).exists());
    let _ = fs::remove_dir_all(&tmp);
}
