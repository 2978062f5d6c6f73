//! Unit tests of the weight store.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::set::{EarlyFlush, FLUSH_EVERY};
use super::*;
use crate::weights::manifest::{MIN_CHUNK_SIZE, Manifest};

#[test]
fn an_early_flush_starts_once_enough_is_written_and_finishes_clean() {
    let dir = temp("early-flush");
    fs::create_dir_all(&dir).unwrap();
    let file = Arc::new(File::create(dir.join("w.bin")).unwrap());
    file.write_all_at(&[7u8; 4096], 0).unwrap();
    let flush = Arc::new(EarlyFlush::default());
    flush.wrote(FLUSH_EVERY - 1, std::slice::from_ref(&file));
    assert!(!flush.running.load(Ordering::Acquire), "not enough yet");
    assert_eq!(flush.unflushed.load(Ordering::Acquire), FLUSH_EVERY - 1);
    flush.wrote(1, std::slice::from_ref(&file));
    assert_eq!(
        flush.unflushed.load(Ordering::Acquire),
        0,
        "a flush took it"
    );
    // failure() waits for the flush to end.
    assert_eq!(flush.failure(), None);
    assert!(!flush.running.load(Ordering::Acquire));
    let _ = fs::remove_dir_all(&dir);
}

fn temp(label: &str) -> PathBuf {
    crate::weights::test_dirs::fresh("store", label)
}

/// A two-file set whose content depends on `fill`; returns its digest.
fn make_set(dir: &Path, fill: u8) -> Digest {
    fs::create_dir_all(dir.join("sub")).unwrap();
    fs::write(dir.join("w.bin"), vec![fill; 10_000]).unwrap();
    fs::write(dir.join("sub/config.json"), br#"{"layers": 2}"#).unwrap();
    Manifest::build(dir, MIN_CHUNK_SIZE).unwrap().digest()
}

fn versions(store: &WeightStore) -> usize {
    fs::read_dir(store.root().join("versions")).unwrap().count()
}

#[test]
fn each_group_has_its_own_link_and_equal_digests_share_one_copy() {
    let tmp = temp("groups");
    let (a, b) = (make_set(&tmp.join("a"), 1), make_set(&tmp.join("b"), 2));
    let store = WeightStore::open(tmp.join("store")).unwrap();
    store
        .install_dir(&tmp.join("a"), &a, MIN_CHUNK_SIZE)
        .unwrap();
    store
        .install_dir(&tmp.join("b"), &b, MIN_CHUNK_SIZE)
        .unwrap();
    let (g1, g2, g3) = (
        CurrentLink::group("ns", "g1").unwrap(),
        CurrentLink::group("ns", "g2").unwrap(),
        CurrentLink::group("other", "g1").unwrap(),
    );
    let p1 = store.activate(&a, &g1).unwrap();
    let p2 = store.activate(&b, &g2).unwrap();
    assert_eq!(p1, tmp.join("store/groups/ns_g1/current"));
    assert_eq!(p2, tmp.join("store/groups/ns_g2/current"));
    let read = |p: &Path| fs::read(p.join("w.bin")).unwrap()[0];
    assert_eq!((read(&p1), read(&p2)), (1, 2));

    // A third group with g1's digest: no second copy, and nobody else's link moves.
    let p3 = store.activate(&a, &g3).unwrap();
    assert_eq!(versions(&store), 2);
    assert_eq!(
        fs::canonicalize(&p3).unwrap(),
        fs::canonicalize(&p1).unwrap()
    );
    assert_eq!(fs::canonicalize(&p1).unwrap(), store.version_dir(&a));
    // Installing the same digest again is a no-op, not a copy.
    store
        .install_dir(&tmp.join("a"), &a, MIN_CHUNK_SIZE)
        .unwrap();
    assert_eq!(versions(&store), 2);
    // g2 moves to a: g1 and g3 stay where they were; the store-wide link is untouched.
    store.activate(&a, &g2).unwrap();
    assert_eq!(store.current_of(&g1).unwrap(), Some(a));
    assert_eq!(store.current_of(&g2).unwrap(), Some(a));
    assert_eq!(store.current_of(&g3).unwrap(), Some(a));
    store.activate(&b, &g2).unwrap();
    assert_eq!((read(&p1), read(&p2), read(&p3)), (1, 2, 1));
    assert_eq!(store.current().unwrap(), None);
    // No temporary links are left behind, and a reopened store sees the same links.
    let names: Vec<_> = fs::read_dir(tmp.join("store/groups/ns_g2"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [CURRENT_LINK]);
    let again = WeightStore::open(tmp.join("store")).unwrap();
    assert_eq!(again.current_of(&g1).unwrap(), Some(a));
    assert_eq!(again.current_of(&g2).unwrap(), Some(b));
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn only_a_complete_set_can_be_activated() {
    let tmp = temp("incomplete");
    let store = WeightStore::open(&tmp).unwrap();
    let g = CurrentLink::group("ns", "g").unwrap();
    assert!(store.activate(&Digest::of(b"unknown"), &g).is_err());
    assert!(!store.link_path(&g).exists());
    let _ = fs::remove_dir_all(&tmp);
}

/// One file of 3 MiB and 5 bytes: two chunks at the default size, one at the former.
fn make_big_set(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    let body: Vec<u8> = (0..(3 << 20) + 5).map(|i: u32| (i % 251) as u8).collect();
    fs::write(dir.join("w.bin"), body).unwrap();
}

fn imported_chunk_size(store: &WeightStore, d: &Digest) -> u64 {
    Manifest::parse(&store.manifest_bytes(d).unwrap())
        .unwrap()
        .chunk_size
}

#[test]
fn a_digest_of_either_import_chunk_size_imports_with_the_size_it_was_computed_with() {
    use crate::weights::manifest::{
        DEFAULT_CHUNK_SIZE, FORMER_DEFAULT_CHUNK_SIZE, IMPORT_CHUNK_SIZES,
    };
    let tmp = temp("chunk-sizes");
    make_big_set(&tmp.join("src"));
    for size in IMPORT_CHUNK_SIZES {
        let d = Manifest::build(&tmp.join("src"), size).unwrap().digest();
        let store = WeightStore::open(tmp.join(format!("store-{size}"))).unwrap();
        let source = SourceDir::trusted(&tmp.join("src")).unwrap();
        let version = store
            .install_source(&source, &d, &IMPORT_CHUNK_SIZES)
            .unwrap();
        assert_eq!(imported_chunk_size(&store, &d), size);
        assert_eq!(
            fs::read(version.join("w.bin")).unwrap().len(),
            (3 << 20) + 5
        );
    }
    assert_ne!(DEFAULT_CHUNK_SIZE, FORMER_DEFAULT_CHUNK_SIZE);
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_digest_of_no_import_chunk_size_is_refused_naming_the_default_sizes_digest() {
    use crate::weights::manifest::{DEFAULT_CHUNK_SIZE, IMPORT_CHUNK_SIZES};
    let tmp = temp("other-chunk-size");
    make_big_set(&tmp.join("src"));
    let one_mib = Manifest::build(&tmp.join("src"), 1 << 20).unwrap().digest();
    let default = Manifest::build(&tmp.join("src"), DEFAULT_CHUNK_SIZE)
        .unwrap()
        .digest();
    let store = WeightStore::open(tmp.join("store")).unwrap();
    let source = SourceDir::trusted(&tmp.join("src")).unwrap();
    let e = store
        .install_source(&source, &one_mib, &IMPORT_CHUNK_SIZES)
        .unwrap_err();
    let WeightsError::DigestMismatch {
        expected, actual, ..
    } = e
    else {
        panic!("expected a digest mismatch, got {e}")
    };
    assert_eq!((expected, actual), (one_mib, default));
    assert_eq!(versions(&store), 0);
    // Asked to try that size too, the same source imports.
    store
        .install_source(&source, &one_mib, &[DEFAULT_CHUNK_SIZE, 1 << 20])
        .unwrap();
    let _ = fs::remove_dir_all(&tmp);
}
