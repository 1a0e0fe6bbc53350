//! Applying a layer's entries under a directory, as a runtime's snapshotter applies a layer
//! over the ones before it, and the path rules that keep every write inside the directory.
//!
//! An entry's path must be relative and free of `..`; a symbolic link's target may be
//! absolute (it is the image's root, resolved inside the container, never followed here)
//! but a relative one must not climb above the root from where the link sits; a hard
//! link's target is an entry path like any other. Writing never follows a link: each
//! directory on the way is checked, and a link there (made by an earlier entry) refuses the
//! entry; a file, link or whiteout replaces what the path named without following it.

use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::error::UnpackError;

/// Why applying an entry failed.
pub(super) enum Error {
    /// The entry would leave the directory.
    Refused(UnpackError),
    /// Reading its body failed (the stream's or the tar's failure).
    Read(io::Error),
    /// Writing under the directory failed.
    Write(io::Error),
}

/// The opaque-directory whiteout: the directory's earlier contents are hidden.
const OPAQUE: &str = ".wh..wh..opq";

/// A directory layers are applied under, in order.
#[derive(Debug)]
pub struct Target {
    root: PathBuf,
}

impl Target {
    /// Applies layers under `root` (made if missing).
    pub fn new(root: &Path) -> io::Result<Target> {
        fs::create_dir_all(root)?;
        Ok(Target {
            root: root.to_path_buf(),
        })
    }

    /// Applies one entry.
    pub(super) fn apply(
        &mut self,
        path: &Path,
        name: &str,
        kind: EntryType,
        link: Option<&Path>,
        body: &mut impl Read,
        whiteout: bool,
    ) -> Result<(), Error> {
        // A directory removed under the unpacker (a stop) is never made again.
        if !self.root.is_dir() {
            return Err(Error::Write(io::Error::from(io::ErrorKind::NotFound)));
        }
        let refused = || Error::Refused(UnpackError::UnsafePath(name.to_owned()));
        let dest = self.resolve(path).ok_or_else(refused)?;
        if dest == self.root {
            // `./` itself: nothing to make.
            return Ok(());
        }
        let parent = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&parent).map_err(Error::Write)?;
        if whiteout {
            return whiteout_at(&parent, &dest).map_err(Error::Write);
        }
        match kind {
            EntryType::Directory => match fs::symlink_metadata(&dest) {
                Ok(m) if m.is_dir() => Ok(()),
                Ok(_) => remove(&dest)
                    .and_then(|_| fs::create_dir(&dest))
                    .map_err(Error::Write),
                Err(_) => fs::create_dir(&dest).map_err(Error::Write),
            },
            EntryType::Symlink => {
                let target = link.ok_or_else(refused)?;
                remove(&dest)
                    .and_then(|_| std::os::unix::fs::symlink(target, &dest))
                    .map_err(Error::Write)
            }
            EntryType::Link => {
                let target = link.and_then(|l| self.resolve(l)).ok_or_else(refused)?;
                remove(&dest)
                    .and_then(|_| fs::hard_link(target, &dest))
                    .map_err(Error::Write)
            }
            k if k.is_file() || k == EntryType::Continuous => {
                remove(&dest).map_err(Error::Write)?;
                let mut file = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&dest)
                    .map_err(Error::Write)?;
                copy(body, &mut file)
            }
            // Devices and FIFOs cannot be made without privileges; a rootless unpacker
            // skips them, as this does.
            _ => Ok(()),
        }
    }

    /// `root/path`, made of the path's normal components, or `None` if a directory on the
    /// way is a link (an earlier entry's) or the path is not one [`check_path`] allows.
    fn resolve(&self, path: &Path) -> Option<PathBuf> {
        let mut at = self.root.clone();
        let parts: Vec<_> = path.components().collect();
        for (i, c) in parts.iter().enumerate() {
            match c {
                Component::CurDir => {}
                Component::Normal(part) => {
                    at.push(part);
                    let last = i + 1 == parts.len();
                    if !last && fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink())
                    {
                        return None;
                    }
                }
                _ => return None,
            }
        }
        Some(at)
    }
}

/// Copies an entry's body into its file: a read failure is the stream's, a write the
/// directory's.
fn copy(body: &mut impl Read, file: &mut fs::File) -> Result<(), Error> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::Read(e)),
        };
        io::Write::write_all(file, &buf[..n]).map_err(Error::Write)?;
    }
}

/// A whiteout in `dir`: `.wh..wh..opq` empties the directory, `.wh.NAME` removes `NAME`.
fn whiteout_at(dir: &Path, dest: &Path) -> io::Result<()> {
    let name = dest.file_name().unwrap_or_default().to_string_lossy();
    if name == OPAQUE {
        for child in fs::read_dir(dir)? {
            remove(&child?.path())?;
        }
        return Ok(());
    }
    match name.strip_prefix(".wh.") {
        Some(hidden) => remove(&dir.join(hidden)),
        None => Ok(()),
    }
}

/// Removes what `path` names, without following a link; nothing there is fine.
fn remove(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// An entry path must stay inside the directory: relative, no `..`.
pub(super) fn check_path(path: &Path) -> Result<(), UnpackError> {
    let inside = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    match inside {
        true => Ok(()),
        false => Err(unsafe_path(path)),
    }
}

/// A link's target: a hard link's is an entry path; a symbolic link's, if relative, must
/// not climb above the root from the directory the link is in.
pub(super) fn check_link(path: &Path, link: &Path, hard: bool) -> Result<(), UnpackError> {
    if hard {
        return check_path(link).map_err(|_| unsafe_path(path));
    }
    if link.is_absolute() {
        return Ok(());
    }
    // Depth of the directory the link is in, below the root.
    let mut depth = path
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
        .saturating_sub(1) as i64;
    for c in link.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return Err(unsafe_path(path));
        }
    }
    Ok(())
}

/// The refusal of an entry by its path.
fn unsafe_path(path: &Path) -> UnpackError {
    UnpackError::UnsafePath(path.to_string_lossy().into_owned())
}
