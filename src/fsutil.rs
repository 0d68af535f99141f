//! Crash-safe file system primitives shared by every writer that must never leave a torn file or
//! destroy what a user had: atomic file replacement and no-clobber directory installation; and
//! the one way readers open a path a user gave.
//!
//! # Invariants
//! - [`write_atomic`] writes to a hidden temporary name in the destination's own directory
//!   (`.NAME.tmp-PID`), fsyncs the file, renames it over the destination and fsyncs the
//!   directory. A reader sees the old file or the complete new one, never a torn one; on any
//!   error the temporary file is removed, so no hidden leftover survives a failed write.
//! - [`rename_noreplace`] moves a file or directory to a path that must not exist *at the moment
//!   of the rename* (`renameat2(RENAME_NOREPLACE)` on Linux; elsewhere, or on a file system that
//!   lacks the flag, an exclusive `mkdir` of the destination followed by a rename over that empty
//!   directory, which POSIX only allows while it is still empty). Something that appears at the
//!   destination in the meantime is never replaced: the call fails with
//!   [`io::ErrorKind::AlreadyExists`] and the source is left where it was.
//! - [`exchange`] swaps two existing paths atomically (`renameat2(RENAME_EXCHANGE)`), so a
//!   replacement never has a moment where neither the old nor the new content is in place.
//! - [`unique_tmp_path`] + [`install`] serve shared caches (compiled kernels) that several
//!   threads or processes may fill at once: each writes its own temporary, every finished
//!   entry is equal, the last rename wins. [`install`] is also how a writer moves a file it
//!   finished (and fsynced) under a temporary name to its final name.
//!
//! - [`resolve`] spells a path the one way the file system resolves it, so the writers that
//!   must not write into their own inputs can compare the two ([`placement`]).
//!
//! - [`open_file`] (and [`read_file`], [`read_file_to_string`], [`file_exists`]) accept only a
//!   regular file, or a link to one, and name anything else for what it is ([`not_a_file`]),
//!   without ever blocking on a named pipe. Every reader of an input (dataset files, models,
//!   manifests, shards, checkpoints) goes through them; only small text inputs that a shell
//!   may hand over as a stream (`gs-render`'s camera JSON) use [`read_text_input`], which
//!   reads pipes and `/dev/stdin` up to a limit.
//!
//! This module is the crate's only caller of `rename`: every writer goes through it.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `path` made absolute and resolved through symlinks as far as it exists (a missing tail is
/// appended as written), so two spellings of one location compare equal.
pub fn resolve(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let mut existing = abs.as_path();
    let mut tail = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(existing) {
            let mut out = c;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(p), Some(n)) => {
                tail.push(n.to_owned());
                existing = p;
            }
            _ => return abs,
        }
    }
}

/// Where `path` lies relative to the directory `dir`, both as the file system resolves them
/// ([`resolve`]): `"is"` (the same place), `"lies inside"`, or `None` (elsewhere); the words of
/// the refusals of writers that must not write into their inputs.
pub fn placement(path: &Path, dir: &Path) -> Option<&'static str> {
    let (p, d) = (resolve(path), resolve(dir));
    if p == d {
        Some("is")
    } else if p.starts_with(&d) {
        Some("lies inside")
    } else {
        None
    }
}

/// What `meta` is when it is not a regular file, as a noun ("a directory", "a named pipe", "a
/// device", "a socket"), for the errors of readers that look before they read (opening a named
/// pipe waits for a writer forever); `None` for a regular file.
pub fn not_a_file(meta: &fs::Metadata) -> Option<&'static str> {
    let t = meta.file_type();
    if t.is_file() {
        return None;
    }
    if t.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return Some("a named pipe");
        }
        if t.is_socket() {
            return Some("a socket");
        }
        if t.is_char_device() || t.is_block_device() {
            return Some("a device");
        }
    }
    Some("something other than a file")
}

/// The error of a reader given a path that is not a regular file, in [`not_a_file`]'s words,
/// as [`io::ErrorKind::InvalidInput`] so callers wrap it like any other I/O error of the path.
fn not_a_file_error(kind: &str) -> io::Error {
    let remedy = if kind == "a directory" {
        ""
    } else {
        "; only regular files are read: save the data to a file and give that"
    };
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{kind}, not a regular file{remedy}"),
    )
}

/// Opens `path` for reading if it is a regular file (through symlinks), and refuses anything
/// else with an [`io::ErrorKind::InvalidInput`] error that says what it is. Every reader of a
/// path a user gave goes through this: a named pipe opened plainly would block until some
/// process writes to it (forever, in practice), a directory would fail later with a vague
/// "Is a directory". The kind is read from the opened file (`fstat`), not from the path
/// beforehand, so nothing swapped in between is missed; on Unix the open itself does not block
/// (`O_NONBLOCK`, which changes nothing for regular files and is cleared before returning).
pub fn open_file(path: &Path) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    if let Some(kind) = not_a_file(&file.metadata()?) {
        return Err(not_a_file_error(kind));
    }
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        let fd = file.as_raw_fd();
        // SAFETY: `fd` belongs to `file`, which is alive for both calls; F_GETFL/F_SETFL
        // only read and set the open file's status flags.
        let cleared = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
        };
        if !cleared {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(file)
}

/// [`fs::read`] through [`open_file`]: the whole of a regular file, anything else refused.
pub fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = open_file(path)?;
    let mut bytes = Vec::with_capacity(file.metadata().map_or(0, |m| m.len() as usize));
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`fs::read_to_string`] through [`open_file`].
pub fn read_file_to_string(path: &Path) -> io::Result<String> {
    utf8(read_file(path)?)
}

/// `bytes` as text, with [`fs::read_to_string`]'s error when they are not UTF-8.
fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// Reads a small text input that may also come from a stream: a regular file, or a named pipe
/// or character device such as `/dev/stdin` or the pipe of a shell's `<(command)`, where the
/// read waits for the writer as the user asked. A directory, block device or socket is refused
/// as [`open_file`] refuses it. At most `limit` bytes are read (more is an
/// [`io::ErrorKind::InvalidData`] error), so an endless stream such as `/dev/zero` cannot
/// exhaust memory. For inputs of a few kilobytes to megabytes (camera JSON); data files go
/// through [`open_file`].
pub fn read_text_input(path: &Path, limit: u64) -> io::Result<String> {
    use std::io::Read;
    let meta = fs::metadata(path)?;
    #[cfg(unix)]
    let stream = {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        t.is_fifo() || t.is_char_device()
    };
    #[cfg(not(unix))]
    let stream = false;
    if !stream {
        if let Some(kind) = not_a_file(&meta) {
            return Err(not_a_file_error(kind));
        }
    }
    let mut bytes = Vec::new();
    File::open(path)?.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more than {limit} bytes, far more than such a file holds"),
        ));
    }
    utf8(bytes)
}

/// Whether a regular file is at `path` (through symlinks): `Ok(false)` when nothing is there
/// (a dangling symlink included), an [`io::ErrorKind::InvalidInput`] error naming what is there
/// when it is not a regular file. For the importers' "is this optional file present" probes,
/// which must not take a named pipe or a directory of that name for an absent file.
pub fn file_exists(path: &Path) -> io::Result<bool> {
    match fs::metadata(path) {
        Ok(meta) => match not_a_file(&meta) {
            None => Ok(true),
            Some(kind) => Err(not_a_file_error(kind)),
        },
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Fsyncs a directory so that renames and creations inside it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Hidden temporary name next to `path` (same directory, so the final rename is atomic).
pub fn tmp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// A hidden temporary name in `dir` for `file`, unique per process *and* call (parallel threads
/// of one process may write the same cache entry at once).
pub fn unique_tmp_path(dir: &Path, file: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(".{file}.{}-{seq}.tmp", std::process::id()))
}

/// Moves the finished temporary `from` to `to` (same file system), replacing a file there: the
/// rename(2) every writer's last step is. Whatever must survive a crash was fsynced by the
/// caller; [`write_atomic`] does both for a whole file.
pub fn install(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)
}

/// Writes a cache entry `dir/file` through [`unique_tmp_path`] and [`install`]: a reader never
/// sees a partial entry under the final name; no fsync (a cache lost in a crash is rebuilt).
pub fn write_cache_entry(dir: &Path, file: &str, bytes: &[u8]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = unique_tmp_path(dir, file);
    let result = fs::write(&tmp, bytes).and_then(|()| install(&tmp, &dir.join(file)));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Writes `bytes` to `path` atomically: temporary file, fsync, rename, directory fsync.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, &mut |w| w.write_all(bytes))
}

/// Like [`write_atomic`], with the content produced by `body` through a buffered writer.
pub fn write_atomic_with(
    path: &Path,
    body: &mut dyn FnMut(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = tmp_path(path);
    let result = (|| {
        let file = File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        body(&mut w)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        drop(file);
        install(&tmp, path)
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(parent_dir(path))
}

#[cfg(target_os = "linux")]
fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both pointers come from live, NUL-terminated CStrings that outlive the call;
    // AT_FDCWD makes relative paths resolve against the working directory, like `rename`.
    // The raw syscall is used so that a libc without the `renameat2` wrapper still works.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            flags,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// True for the errors meaning "this kernel or file system does not support the flag".
#[cfg(target_os = "linux")]
fn unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS))
}

/// Renames `from` to `to`, failing with `AlreadyExists` if anything is at `to` (see the module
/// doc). Never replaces or removes what is at `to`.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        match renameat2(from, to, libc::RENAME_NOREPLACE) {
            Ok(()) => return Ok(()),
            Err(e) if unsupported(&e) => {}
            Err(e) => return Err(e),
        }
    }
    // Fallback for directories: claim `to` with an exclusive mkdir, then rename over the empty
    // directory we own (fails with ENOTEMPTY/EEXIST if anyone put something into it).
    if fs::symlink_metadata(from)?.is_dir() {
        fs::create_dir(to)?;
        return fs::rename(from, to).inspect_err(|_| {
            let _ = fs::remove_dir(to);
        });
    }
    // Files: a hard link cannot replace an existing path.
    fs::hard_link(from, to)?;
    fs::remove_file(from)
}

/// Swaps two existing paths atomically. `Unsupported` where the platform cannot.
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        match renameat2(a, b, libc::RENAME_EXCHANGE) {
            Err(e) if unsupported(&e) => {}
            other => return other,
        }
    }
    let _ = (a, b);
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "atomic exchange is not supported on this file system",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("a.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
        // A failing body removes its temporary file and keeps the old content.
        let err = write_atomic_with(&p, &mut |_| Err(io::Error::other("disk full"))).unwrap_err();
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn rename_noreplace_never_clobbers() {
        let d = tempfile::tempdir().unwrap();
        let (src, dst) = (d.path().join("src"), d.path().join("dst"));
        fs::create_dir(&src).unwrap();
        fs::write(src.join("x"), b"new").unwrap();
        fs::create_dir(&dst).unwrap(); // even an empty directory is not replaced
        let e = rename_noreplace(&src, &dst).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(src.join("x").exists());
        fs::remove_dir(&dst).unwrap();
        fs::write(&dst, b"user file").unwrap();
        assert!(rename_noreplace(&src, &dst).is_err());
        assert_eq!(fs::read(&dst).unwrap(), b"user file");
        fs::remove_file(&dst).unwrap();
        rename_noreplace(&src, &dst).unwrap();
        assert_eq!(fs::read(dst.join("x")).unwrap(), b"new");
        assert!(!src.exists());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn exchange_swaps() {
        let d = tempfile::tempdir().unwrap();
        let (a, b) = (d.path().join("a"), d.path().join("b"));
        fs::write(&a, b"A").unwrap();
        fs::create_dir(&b).unwrap();
        match exchange(&a, &b) {
            Ok(()) => {
                assert!(a.is_dir());
                assert_eq!(fs::read(&b).unwrap(), b"A");
            }
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::Unsupported),
        }
    }

    /// Makes a named pipe at `p`.
    #[cfg(unix)]
    fn mkfifo(p: &Path) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a live NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    }

    /// Runs `f` on a thread and fails the test if it has not returned after 30 s (a blocking
    /// open of a pipe never returns, and must fail the test rather than hang it).
    fn within_30s<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(f()));
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("still blocked after 30 s")
    }

    #[cfg(unix)]
    #[test]
    fn readers_take_regular_files_and_refuse_the_rest_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f.json");
        fs::write(&file, b"{}").unwrap();
        let link = d.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_file(&file).unwrap(), b"{}");
        assert_eq!(read_file_to_string(&link).unwrap(), "{}");
        assert!(file_exists(&link).unwrap());
        // The descriptor open_file hands out blocks again like any file's.
        let f = open_file(&file).unwrap();
        {
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor belongs to `f`, alive for the call.
            let flags = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) };
            assert_eq!(flags & libc::O_NONBLOCK, 0);
        }

        let pipe = d.path().join("pipe.json");
        mkfifo(&pipe);
        let p = pipe.clone();
        let e = within_30s(move || open_file(&p).unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(
            e.to_string()
                .starts_with("a named pipe, not a regular file; "),
            "{e}"
        );
        let p = pipe.clone();
        let e = within_30s(move || read_file_to_string(&p).unwrap_err());
        assert!(e.to_string().contains("a named pipe"), "{e}");
        let e = file_exists(&pipe).unwrap_err();
        assert!(e.to_string().contains("a named pipe"), "{e}");

        let e = open_file(d.path()).unwrap_err();
        assert_eq!(e.to_string(), "a directory, not a regular file");
        let e = read_file(Path::new("/dev/null")).unwrap_err();
        assert!(
            e.to_string().starts_with("a device, not a regular file"),
            "{e}"
        );

        // Nothing there: a plain NotFound from the readers, `false` from the probe (a dangling
        // symlink and a path through a file included).
        let gone = d.path().join("gone.json");
        assert_eq!(
            open_file(&gone).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
        assert!(!file_exists(&gone).unwrap());
        let dangling = d.path().join("dangling.json");
        std::os::unix::fs::symlink(&gone, &dangling).unwrap();
        assert!(!file_exists(&dangling).unwrap());
        assert!(!file_exists(&file.join("x")).unwrap());
    }

    /// Small text inputs may come from streams: a pipe with a writer and a character device
    /// read like a file, an endless stream stops at the limit, a directory is refused.
    #[cfg(unix)]
    #[test]
    fn text_inputs_read_streams_up_to_their_limit() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("cam.json");
        fs::write(&file, "{}").unwrap();
        assert_eq!(read_text_input(&file, 10).unwrap(), "{}");
        let e = read_text_input(&file, 1).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);

        let pipe = d.path().join("pipe.json");
        mkfifo(&pipe);
        let p = pipe.clone();
        // Opening the write side waits for the reader below.
        let writer = std::thread::spawn(move || fs::write(&p, "[1, 2]").unwrap());
        let p = pipe.clone();
        assert_eq!(
            within_30s(move || read_text_input(&p, 100).unwrap()),
            "[1, 2]"
        );
        writer.join().unwrap();

        let e = read_text_input(Path::new("/dev/zero"), 1000).unwrap_err();
        assert!(e.to_string().starts_with("more than 1000 bytes"), "{e}");
        let e = read_text_input(d.path(), 1000).unwrap_err();
        assert_eq!(e.to_string(), "a directory, not a regular file");
    }
}
