//! Unit tests of the local-source rules: each refusal, and that a checked tree is read
//! through its descriptors, not its names.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::*;

fn temp(label: &str) -> PathBuf {
    let p = crate::weights::test_dirs::fresh("source", label);
    fs::create_dir_all(&p).unwrap();
    p
}

fn roots(r: &[&Path]) -> SourceRoots {
    SourceRoots::new(r.iter().map(|p| p.to_path_buf())).unwrap()
}

fn why(e: SourceRefused) -> Refusal {
    e.why
}

/// Creates a FIFO with the `mkfifo` command (std has none; no `unsafe` here).
fn mkfifo(path: &Path) {
    let out = std::process::Command::new("mkfifo")
        .arg(path)
        .output()
        .expect("run mkfifo");
    assert!(out.status.success(), "mkfifo {}: {out:?}", path.display());
}

/// Runs `f` on a thread and fails the test if it takes longer than 10 s (a FIFO opened
/// for reading would block forever).
fn within_10s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the check blocked: it opened a FIFO for reading")
}

#[test]
fn without_roots_every_local_source_is_refused() {
    let r = SourceRoots::default();
    assert_eq!(
        why(r.open(Path::new("/tmp")).unwrap_err()),
        Refusal::NoRoots
    );
    assert_eq!(
        why(SourceRoots::new([])
            .unwrap()
            .resolve(Path::new("/"))
            .unwrap_err()),
        Refusal::NoRoots
    );
}

#[test]
fn paths_outside_the_roots_relative_or_with_dotdot_are_refused_before_any_lookup() {
    let r = roots(&[Path::new("/data/models"), Path::new("/srv/w/")]);
    assert_eq!(
        r.roots(),
        [PathBuf::from("/data/models"), PathBuf::from("/srv/w")]
    );
    for (p, expected) in [
        ("/etc", Refusal::OutsideRoots(r.roots().to_vec())),
        ("/data/models2/x", Refusal::OutsideRoots(r.roots().to_vec())),
        ("/data", Refusal::OutsideRoots(r.roots().to_vec())),
        ("data/models/x", Refusal::NotAbsolute),
        ("/data/models/../../etc", Refusal::ParentComponent),
        ("/data/models/a/../b", Refusal::ParentComponent),
    ] {
        let e = r.resolve(Path::new(p)).unwrap_err();
        assert_eq!(e.why, expected, "{p}");
        assert!(e.to_string().contains(p), "{e}");
    }
    let (root, rest) = r.resolve(Path::new("/data/models/./llama//v1/")).unwrap();
    assert_eq!(root, PathBuf::from("/data/models"));
    assert_eq!(rest, ["llama", "v1"]);
    assert_eq!(r.resolve(Path::new("/srv/w")).unwrap().1.len(), 0);
    // A root itself must be absolute and without `..`.
    assert_eq!(
        why(SourceRoots::new([PathBuf::from("rel")]).unwrap_err()),
        Refusal::NotAbsolute
    );
    assert_eq!(
        why(SourceRoots::new([PathBuf::from("/a/../etc")]).unwrap_err()),
        Refusal::ParentComponent
    );
}

#[test]
fn a_symlink_on_the_way_to_the_source_is_refused_even_one_that_stays_inside() {
    let tmp = temp("path-symlink");
    let root = tmp.join("root");
    fs::create_dir_all(root.join("real/v1")).unwrap();
    symlink("/etc", root.join("out")).unwrap();
    symlink(root.join("real"), root.join("inside")).unwrap();
    let r = roots(&[&root]);
    let e = r.open(&root.join("out")).unwrap_err();
    assert_eq!(
        (e.path.clone(), e.why),
        (root.join("out"), Refusal::Symlink)
    );
    let e = r.open(&root.join("inside/v1")).unwrap_err();
    assert_eq!((e.path, e.why), (root.join("inside"), Refusal::Symlink));
    assert_eq!(
        r.open(&root.join("real/v1")).unwrap().path(),
        root.join("real/v1")
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_file_or_a_missing_path_is_not_a_source_directory() {
    let tmp = temp("not-dir");
    fs::write(tmp.join("f"), b"x").unwrap();
    let r = roots(&[&tmp]);
    assert_eq!(
        why(r.open(&tmp.join("f")).unwrap_err()),
        Refusal::NotADirectory
    );
    assert!(matches!(
        why(r.open(&tmp.join("missing")).unwrap_err()),
        Refusal::Unreadable(_)
    ));
    assert_eq!(
        why(SourceDir::trusted(&tmp.join("f")).unwrap_err()),
        Refusal::NotADirectory
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_symlink_inside_the_tree_is_refused_by_the_walk() {
    let tmp = temp("tree-symlink");
    let src = tmp.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("a.bin"), b"a").unwrap();
    symlink("/etc/hostname", src.join("sub/token")).unwrap();
    let dir = roots(&[&tmp]).open(&src).unwrap();
    let e = dir.check().unwrap_err();
    assert_eq!((e.path, e.why), (src.join("sub/token"), Refusal::Symlink));
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_fifo_in_the_tree_is_refused_without_being_opened_for_reading() {
    let tmp = temp("fifo");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    mkfifo(&src.join("pipe"));
    let dir = roots(&[&tmp]).open(&src).unwrap();
    let e = within_10s(move || dir.check()).unwrap_err();
    assert_eq!(
        (e.path, e.why),
        (src.join("pipe"), Refusal::Special("FIFO"))
    );
    // The FIFO as the source itself.
    let e = within_10s({
        let (tmp, src) = (tmp.clone(), src.clone());
        move || roots(&[&tmp]).open(&src.join("pipe"))
    })
    .unwrap_err();
    assert_eq!(e.why, Refusal::Special("FIFO"));
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn devices_and_sockets_are_refused() {
    // /dev/null is a character device: refused as a source below /dev ...
    let e = roots(&[Path::new("/dev")])
        .open(Path::new("/dev/null"))
        .unwrap_err();
    assert_eq!(e.why, Refusal::Special("character device"));
    // ... and a socket inside a tree is refused by the walk.
    let tmp = temp("socket");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let e = roots(&[&tmp]).open(&src).unwrap().check().unwrap_err();
    assert_eq!(
        (e.path, e.why),
        (src.join("sock"), Refusal::Special("socket"))
    );
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_hard_linked_file_is_refused_before_it_is_read() {
    let tmp = temp("hardlink");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    // The "secret" lives outside the source; a second name for it sits inside.
    let outside = tmp.join("secret");
    fs::write(&outside, b"token").unwrap();
    fs::write(src.join("a.bin"), b"weights").unwrap();
    fs::hard_link(&outside, src.join("b.bin")).unwrap();
    let e = roots(&[&tmp]).open(&src).unwrap().check().unwrap_err();
    assert!(e.to_string().contains("hard links"), "{e}");
    assert_eq!((e.path, e.why), (src.join("b.bin"), Refusal::HardLinked(2)));
    // Once the second name is gone the same file is a plain file again.
    fs::remove_file(&outside).unwrap();
    roots(&[&tmp]).open(&src).unwrap().check().unwrap();
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn a_too_deep_tree_is_refused() {
    let tmp = temp("deep");
    let mut p = tmp.join("src");
    for _ in 0..=MAX_DEPTH + 1 {
        p.push("d");
    }
    fs::create_dir_all(&p).unwrap();
    let e = roots(&[&tmp])
        .open(&tmp.join("src"))
        .unwrap()
        .check()
        .unwrap_err();
    assert_eq!(e.why, Refusal::TooDeep);
    let _ = fs::remove_dir_all(&tmp);
}

#[test]
fn an_opened_source_is_read_through_its_descriptor_not_its_name() {
    // The race `canonicalize`-then-open loses: the checked directory is swapped for a
    // symlink to /etc after the check. The walk still reads the original directory.
    let tmp = temp("swap");
    let src = tmp.join("src");
    fs::create_dir_all(&src).unwrap();
    fs::write(src.join("w.bin"), b"weights").unwrap();
    let dir = roots(&[&tmp]).open(&src).unwrap();
    fs::rename(&src, tmp.join("moved")).unwrap();
    symlink("/etc", &src).unwrap();
    let mut seen = Vec::new();
    dir.walk(&mut |e| {
        if let SourceEntry::File(rel, f) = e {
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut f.open().unwrap(), &mut data).unwrap();
            seen.push((rel.to_path_buf(), data));
        }
        Ok::<(), SourceRefused>(())
    })
    .unwrap();
    assert_eq!(seen, [(PathBuf::from("w.bin"), b"weights".to_vec())]);
    let _ = fs::remove_dir_all(&tmp);
}
