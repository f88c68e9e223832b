//! Unit tests of `walk.rs`.

use super::*;
use std::cell::RefCell;

type Hook = Box<dyn FnOnce(&Path)>;

thread_local! {
    /// What [`after_refused_open`] runs next on this thread (once).
    static AFTER_REFUSED_OPEN: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

pub(super) fn after_refused_open(at: &Path) {
    if let Some(hook) = AFTER_REFUSED_OPEN.with_borrow_mut(Option::take) {
        hook(at);
    }
}

// The integration tests cover the rest; these need the walk without the test-isolation
// rule in front of it (which refuses `..` on its own).

#[test]
fn a_dot_dot_component_is_refused_before_anything_is_opened() {
    let t = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(t.path().join("a/slots")).expect("mkdir");
    let path = t.path().join("a/../a/slots");
    let err = open(&path, true).err().expect("`..` is refused");
    assert!(matches!(err, Error::ParentComponent { .. }), "{err:?}");
    assert!(err.to_string().contains("`..`"), "{err}");
    assert!(
        matches!(
            open(&t.path().join("a/slots/.."), true),
            Err(Error::ParentComponent { .. })
        ),
        "a trailing `..` too"
    );
}

#[test]
fn a_link_replaced_by_a_directory_after_the_open_is_looked_at_again() {
    let t = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(t.path().join("real/slots")).expect("mkdir");
    std::fs::create_dir_all(t.path().join("new/slots")).expect("mkdir");
    let mid = t.path().join("mid");
    std::os::unix::fs::symlink(t.path().join("real"), &mid).expect("symlink");
    let (tx, rx) = std::sync::mpsc::channel();
    let (new, swapped) = (t.path().join("new"), mid.clone());
    AFTER_REFUSED_OPEN.set(Some(Box::new(move |at: &Path| {
        // As another process could: the link goes and a directory takes its name.
        std::fs::remove_file(&swapped).expect("remove the link");
        std::fs::rename(&new, &swapped).expect("a directory at the link's name");
        tx.send(at.to_owned()).expect("report");
    })));
    let opened = open(&mid.join("slots"), false).expect("the directory now at the name");
    assert_eq!(
        rx.try_recv().expect("the open was refused at the link"),
        mid,
        "refused at the link"
    );
    let stat = rustix::fs::fstat(&opened.fd).expect("fstat");
    let want = std::fs::metadata(mid.join("slots")).expect("stat");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        stat.st_ino,
        want.ino(),
        "the walk looked again and went through the directory"
    );
}

#[test]
fn a_relative_path_is_walked_from_the_current_directory() {
    // The current directory of a test process is its package root, which lies under a
    // directory owned by root or the caller: walk to a directory that exists there.
    let opened = open(Path::new("src"), false).expect("the package's src directory");
    let stat = rustix::fs::fstat(&opened.fd).expect("fstat");
    let want = std::fs::metadata("src").expect("stat src");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(stat.st_ino, want.ino(), "the same directory");
}
