//! Tests of the manifest: canonical form, validation, formats, the chunk table.

use super::*;

fn manifest(files: Vec<(&str, u64)>) -> Manifest {
    Manifest {
        format: MANIFEST_FORMAT_V1.into(),
        chunk_hash: None,
        chunk_size: MIN_CHUNK_SIZE,
        files: files
            .into_iter()
            .map(|(p, size)| FileEntry {
                path: p.into(),
                size,
                mode: 0o644,
                chunks: (0..size.div_ceil(MIN_CHUNK_SIZE))
                    .map(|i| Digest::of(format!("{p}{i}").as_bytes()))
                    .collect(),
            })
            .collect(),
    }
}

#[test]
fn canonical_bytes_parse_back_and_other_forms_are_refused() {
    let m = manifest(vec![("a", 10), ("b/c", 3 * MIN_CHUNK_SIZE + 1)]);
    let bytes = m.canonical_bytes();
    assert_eq!(Manifest::parse(&bytes).unwrap(), m);
    let pretty = serde_json::to_vec_pretty(&m).unwrap();
    assert!(Manifest::parse(&pretty).is_err());
}

#[test]
fn unsorted_files_unsafe_paths_and_wrong_chunk_counts_are_refused() {
    assert!(manifest(vec![("b", 1), ("a", 1)]).validate().is_err());
    assert!(manifest(vec![("a", 1), ("a", 1)]).validate().is_err());
    for p in ["../x", "/abs", "a//b", "a/./b", "a/../b", ""] {
        assert!(manifest(vec![(p, 1)]).validate().is_err(), "{p}");
    }
    let mut m = manifest(vec![("a", 1)]);
    m.files[0].size = MIN_CHUNK_SIZE + 1;
    assert!(m.validate().is_err());
    let mut m = manifest(vec![("a", MIN_CHUNK_SIZE), ("b", 5)]);
    m.files[1].chunks[0] = m.files[0].chunks[0];
    assert!(m.validate().is_err(), "same digest, different lengths");
}

#[test]
fn the_chunk_table_deduplicates_and_records_every_place() {
    let mut m = manifest(vec![("a", 2 * MIN_CHUNK_SIZE), ("b", MIN_CHUNK_SIZE + 5)]);
    m.files[1].chunks[0] = m.files[0].chunks[1];
    let t = ChunkTable::new(&m);
    assert_eq!(t.len(), 3);
    assert_eq!(t.chunks[1].places, vec![(0, MIN_CHUNK_SIZE), (1, 0)]);
    assert_eq!(t.chunks[2].len, 5);
    assert_eq!(t.unique_bytes(), 2 * MIN_CHUNK_SIZE + 5);
}

#[test]
fn each_chunk_hash_has_one_format_and_the_others_are_refused_by_name() {
    let dir = crate::weights::test_dirs::fresh("manifest", "formats");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("w"), vec![7u8; MIN_CHUNK_SIZE as usize + 3]).unwrap();
    let each = Manifest::build_each(&dir, MIN_CHUNK_SIZE, &ChunkHash::ALL).unwrap();
    let (b3, sha) = (&each[0], &each[1]);
    assert_eq!(*b3, Manifest::build(&dir, MIN_CHUNK_SIZE).unwrap());
    assert_eq!(
        *sha,
        Manifest::build_with(&dir, MIN_CHUNK_SIZE, ChunkHash::Sha256).unwrap()
    );
    assert_eq!(
        (b3.chunk_hash(), sha.chunk_hash()),
        (ChunkHash::Blake3, ChunkHash::Sha256)
    );
    let text = String::from_utf8(b3.canonical_bytes()).unwrap();
    assert!(
        text.starts_with(
            r#"{"format":"hcomm-weights/v2","chunk_hash":"blake3","chunk_size":4096,"#
        ),
        "{text}"
    );
    // A v1 manifest is what this code wrote before BLAKE3: same bytes, same digest.
    let text = String::from_utf8(sha.canonical_bytes()).unwrap();
    assert!(
        text.starts_with(r#"{"format":"hcomm-weights/v1","chunk_size":4096,"#),
        "{text}"
    );
    assert_eq!(
        sha.files[0].chunks[0],
        Digest::of(&[7u8; MIN_CHUNK_SIZE as usize])
    );
    for m in [b3, sha] {
        assert_eq!(Manifest::parse(&m.canonical_bytes()).unwrap(), *m);
    }
    for (from, to, named) in [
        (
            r#""format":"hcomm-weights/v1","#,
            r#""format":"hcomm-weights/v1","chunk_hash":"blake3","#,
            "no chunk_hash",
        ),
        (
            r#""chunk_hash":"blake3""#,
            r#""chunk_hash":"sha256""#,
            "other than sha256",
        ),
        (r#""chunk_hash":"blake3","#, "", "found none"),
        (
            r#""hcomm-weights/v2""#,
            r#""hcomm-weights/v3""#,
            "hcomm-weights/v3",
        ),
        (r#""chunk_hash":"blake3""#, r#""chunk_hash":"md5""#, "md5"),
    ] {
        let source =
            String::from_utf8(if from.contains("v1") { sha } else { b3 }.canonical_bytes())
                .unwrap();
        let bad = source.replacen(from, to, 1);
        assert_ne!(bad, source, "{from}");
        let e = Manifest::parse(bad.as_bytes()).unwrap_err().to_string();
        assert!(e.contains(named), "{to}: {e}");
    }
    fs::remove_dir_all(&dir).unwrap();
}
