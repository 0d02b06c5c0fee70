//! The folders a user granted to guests, and the one check every file access goes through.
//!
//! A guest has no filesystem unless the user grants folders (`neuronlab run --dir PATH`,
//! `--dir-rw PATH`, `%dir PATH [--rw]`). A guest addresses a file as `NAME/relative/path`,
//! where `NAME` is the granted folder's name. [`resolve`] turns such a path into a host path
//! that is inside the grant's canonical root, or refuses it: absolute paths, `..` that climbs
//! out of the grant, symlinks whose target lies outside it, and writes to a read-only grant.

use std::path::{Path, PathBuf};
use std::sync::{PoisonError, RwLock};

/// What a guest may do in a granted folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read files and list folders (`--dir`, `%dir PATH`).
    ReadOnly,
    /// Also write files and make folders (`--dir-rw`, `%dir PATH --rw`).
    ReadWrite,
}

impl Access {
    /// `read-only` or `read-write`, for listings and messages.
    pub fn name(self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::ReadWrite => "read-write",
        }
    }
}

/// One granted folder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The name guests address it by: the folder's own name.
    pub name: String,
    /// The folder, canonical (absolute, symlinks resolved) when it was granted.
    pub root: PathBuf,
    /// What guests may do there.
    pub access: Access,
}

/// What an access needs of the path it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Something that exists, to read or list.
    Read,
    /// A file or folder to create or replace, in a read-write grant: its parent folder must
    /// exist inside the grant.
    Write,
}

/// The folders granted to the guests of one session. Guests read it at each access, so a
/// folder granted between cells is seen by the next call.
#[derive(Debug, Default)]
pub struct Grants {
    list: RwLock<Vec<Grant>>,
}

impl Grants {
    /// Grants the folder at `path` with `access`, named after the folder. Granting a folder
    /// again changes its access; another folder of the same name is refused.
    pub fn grant(&self, path: &Path, access: Access) -> Result<Grant, String> {
        let root = path.canonicalize().map_err(|e| {
            format!(
                "cannot grant {}: {e}; give an existing folder",
                path.display()
            )
        })?;
        if !root.is_dir() {
            return Err(format!(
                "cannot grant {}: it is not a folder; grant the folder that holds it",
                path.display()
            ));
        }
        // The name the user wrote (`latest` for a symlink to `run-42`), else the folder's.
        let name = path
            .file_name()
            .or_else(|| root.file_name())
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                format!(
                    "cannot grant {}: guests address a grant by its folder's name, and this \
                     folder has no UTF-8 name; grant a folder below it",
                    path.display()
                )
            })?
            .to_string();
        let grant = Grant { name, root, access };
        let mut list = self.list.write().unwrap_or_else(PoisonError::into_inner);
        match list.iter_mut().find(|g| g.name == grant.name) {
            Some(old) if old.root == grant.root => *old = grant.clone(),
            Some(old) => {
                return Err(format!(
                    "cannot grant {} as `{}`: {} is granted under that name already; guests \
                     address grants by folder name, so grant a folder of another name (a \
                     symlink of another name to it works)",
                    grant.root.display(),
                    grant.name,
                    old.root.display()
                ))
            }
            None => list.push(grant.clone()),
        }
        Ok(grant)
    }

    /// Every grant, in the order they were made.
    pub fn list(&self) -> Vec<Grant> {
        self.list
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// [`resolve`] against these grants.
    pub fn resolve(&self, path: &str, need: Need) -> Result<PathBuf, String> {
        resolve(
            &self.list.read().unwrap_or_else(PoisonError::into_inner),
            path,
            need,
        )
    }
}

/// The grant names, for messages.
fn names(grants: &[Grant]) -> String {
    if grants.is_empty() {
        return "no folder is granted; grant one with `neuronlab run --dir PATH` (or \
                `--dir-rw PATH`), or `%dir PATH [--rw]` in a session"
            .to_string();
    }
    let names: Vec<String> = grants
        .iter()
        .map(|g| format!("`{}` ({})", g.name, g.access.name()))
        .collect();
    format!("the granted folders are {}", names.join(", "))
}

/// The host path of the guest path `path` (`NAME/relative/path`) in `grants`, checked to lie
/// inside its grant's root after every symlink is followed, or why it is refused. The empty
/// path and a grant's name alone stand for the grant's root.
pub fn resolve(grants: &[Grant], path: &str, need: Need) -> Result<PathBuf, String> {
    let refuse = |why: String| Err(format!("`{path}`: {why}"));
    if path.contains('\0') {
        return refuse("a path cannot hold a NUL byte".into());
    }
    if path.contains('\\') {
        return refuse("a path holds no backslash; separate folders with `/`".into());
    }
    if path.starts_with('/') || Path::new(path).is_absolute() {
        return refuse(format!(
            "absolute paths are refused: a guest sees only granted folders, as \
             `NAME/relative/path`; {}",
            names(grants)
        ));
    }
    let mut parts = path.split('/').filter(|p| !p.is_empty() && *p != ".");
    let Some(name) = parts.next() else {
        return refuse(format!("name a granted folder first; {}", names(grants)));
    };
    if name == ".." {
        return refuse(
            "`..` climbs out of every granted folder; paths stay inside their grant".into(),
        );
    }
    let Some(grant) = grants.iter().find(|g| g.name == name) else {
        return refuse(format!(
            "no folder is granted as `{name}`; {}",
            names(grants)
        ));
    };
    if need == Need::Write && grant.access == Access::ReadOnly {
        return refuse(format!(
            "`{name}` is granted read-only; to write, grant it read-write (`--dir-rw {}` or \
             `%dir {} --rw`)",
            grant.root.display(),
            grant.root.display()
        ));
    }
    // `..` is resolved by name first, so `a/../b` is fine and `a/../..` climbs out.
    let mut relative: Vec<&str> = Vec::new();
    for part in parts {
        match part {
            ".." if relative.pop().is_none() => {
                return refuse(format!(
                    "`..` climbs out of the granted folder `{name}`; paths stay inside their \
                     grant"
                ))
            }
            ".." => {}
            p => relative.push(p),
        }
    }
    let target = relative
        .iter()
        .fold(grant.root.clone(), |dir, part| dir.join(part));
    let inside = |p: &Path| p.starts_with(&grant.root);
    let outside = |what: &str| {
        refuse(format!(
            "{what} leads outside the granted folder `{name}` (through a symlink); only what \
             lies inside a grant can be reached"
        ))
    };
    match target.symlink_metadata() {
        // It exists (perhaps as a symlink, even a dangling one): it is what its target is.
        Ok(_) => match target.canonicalize() {
            Ok(real) if inside(&real) => {
                if need == Need::Write && real == grant.root {
                    return refuse(format!(
                        "this is the granted folder `{name}` itself; name a file inside it"
                    ));
                }
                Ok(real)
            }
            Ok(_) => outside("it"),
            Err(_) => refuse(
                "it is a symlink to nothing (or through one); only what lies inside a grant \
                 can be reached"
                    .into(),
            ),
        },
        Err(_) if need == Need::Read => refuse(format!(
            "no such file or folder in the granted folder `{name}`"
        )),
        Err(_) => {
            // A new entry: its folder must exist inside the grant.
            let (file, dirs) = relative.split_last().expect("the root exists");
            let parent = dirs
                .iter()
                .fold(grant.root.clone(), |dir, part| dir.join(part));
            match parent.canonicalize() {
                Ok(real) if inside(&real) && real.is_dir() => Ok(real.join(file)),
                Ok(real) if inside(&real) => {
                    refuse(format!("`{}` is a file, not a folder", dirs.join("/")))
                }
                Ok(_) => outside("its folder"),
                Err(_) => refuse(format!(
                    "the folder `{name}/{}` does not exist; make it first",
                    dirs.join("/")
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A grant of `root/NAME` with a file, a folder and symlinks in and out, in a fresh
    /// temporary folder.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        grants: Vec<Grant>,
    }

    fn fixture(access: Access) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("data");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("a.bin"), b"abc").unwrap();
        std::fs::write(root.join("sub/b.txt"), b"b").unwrap();
        std::fs::write(base.join("secret"), b"s").unwrap();
        symlink(base.join("secret"), root.join("out")).unwrap();
        symlink(&base, root.join("up")).unwrap();
        symlink(root.join("a.bin"), root.join("in")).unwrap();
        symlink(base.join("missing"), root.join("dangling")).unwrap();
        let g = Grants::default();
        g.grant(&root, access).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            grants: g.list(),
        }
    }

    fn err(f: &Fixture, path: &str, need: Need) -> String {
        match resolve(&f.grants, path, need) {
            Err(e) => e,
            Ok(p) => panic!("{path} resolved to {}", p.display()),
        }
    }

    #[test]
    fn paths_inside_a_grant_resolve_to_canonical_host_paths() {
        let f = fixture(Access::ReadWrite);
        let ok = |path: &str, need| resolve(&f.grants, path, need).unwrap();
        assert_eq!(ok("data/a.bin", Need::Read), f.root.join("a.bin"));
        assert_eq!(
            ok("data/./sub//b.txt", Need::Read),
            f.root.join("sub/b.txt")
        );
        assert_eq!(ok("data/sub/../a.bin", Need::Read), f.root.join("a.bin"));
        assert_eq!(ok("data", Need::Read), f.root);
        assert_eq!(ok("data/in", Need::Read), f.root.join("a.bin"));
        assert_eq!(ok("data/new.bin", Need::Write), f.root.join("new.bin"));
        assert_eq!(ok("data/sub/new", Need::Write), f.root.join("sub/new"));
        assert_eq!(ok("data/a.bin", Need::Write), f.root.join("a.bin"));
    }

    #[test]
    fn escapes_are_refused_with_what_to_do() {
        let f = fixture(Access::ReadWrite);
        let e = err(&f, "/etc/passwd", Need::Read);
        assert!(
            e.contains("absolute paths are refused") && e.contains("`data`"),
            "{e}"
        );
        let e = err(&f, "data/../secret", Need::Read);
        assert!(
            e.contains("`..` climbs out of the granted folder `data`"),
            "{e}"
        );
        let e = err(&f, "data/sub/../../x", Need::Write);
        assert!(e.contains("climbs out"), "{e}");
        for link in ["data/out", "data/up/secret", "data/up"] {
            let e = err(&f, link, Need::Read);
            assert!(
                e.contains("leads outside the granted folder `data`"),
                "{link}: {e}"
            );
        }
        let e = err(&f, "data/out", Need::Write);
        assert!(
            e.contains("leads outside"),
            "writing through a symlink: {e}"
        );
        let e = err(&f, "data/up/new", Need::Write);
        assert!(e.contains("its folder leads outside"), "{e}");
        let e = err(&f, "data/dangling", Need::Write);
        assert!(e.contains("symlink to nothing"), "{e}");
        let e = err(&f, "other/x", Need::Read);
        assert!(e.contains("no folder is granted as `other`"), "{e}");
        let e = err(&f, "", Need::Read);
        assert!(e.contains("name a granted folder first"), "{e}");
        assert!(err(&f, "data/a\0", Need::Read).contains("NUL"));
        assert!(err(&f, "data\\..\\x", Need::Read).contains("backslash"));
    }

    #[test]
    fn missing_files_read_only_grants_and_the_root_are_clear_errors() {
        let f = fixture(Access::ReadOnly);
        let e = err(&f, "data/a.bin", Need::Write);
        assert!(
            e.contains("granted read-only") && e.contains("--dir-rw"),
            "{e}"
        );
        let e = err(&f, "data/nope", Need::Read);
        assert!(e.contains("no such file or folder"), "{e}");
        let f = fixture(Access::ReadWrite);
        let e = err(&f, "data/nope/x", Need::Write);
        assert!(e.contains("`data/nope` does not exist"), "{e}");
        let e = err(&f, "data/a.bin/x", Need::Write);
        assert!(e.contains("is a file, not a folder"), "{e}");
        let e = err(&f, "data", Need::Write);
        assert!(e.contains("the granted folder `data` itself"), "{e}");
        let none = resolve(&[], "data/x", Need::Read).unwrap_err();
        assert!(
            none.contains("no folder is granted") && none.contains("--dir"),
            "{none}"
        );
    }

    #[test]
    fn granting_names_checks_and_replaces() {
        let f = fixture(Access::ReadOnly);
        let g = Grants::default();
        assert_eq!(g.grant(&f.root, Access::ReadOnly).unwrap().name, "data");
        assert_eq!(
            g.grant(&f.root, Access::ReadWrite).unwrap().access,
            Access::ReadWrite
        );
        assert_eq!(g.list().len(), 1, "granting again changes the access");
        let other = f.root.join("sub/data");
        std::fs::create_dir(&other).unwrap();
        let e = g.grant(&other, Access::ReadOnly).unwrap_err();
        assert!(e.contains("granted under that name already"), "{e}");
        let e = g
            .grant(&f.root.join("a.bin"), Access::ReadOnly)
            .unwrap_err();
        assert!(e.contains("not a folder"), "{e}");
        let e = g.grant(&f.root.join("nope"), Access::ReadOnly).unwrap_err();
        assert!(e.contains("give an existing folder"), "{e}");
        // A symlink is granted under its own name, as the user wrote it.
        let link = f.root.join("sub/latest");
        symlink(&f.root, &link).unwrap();
        let latest = g.grant(&link, Access::ReadOnly).unwrap();
        assert_eq!(
            (latest.name.as_str(), latest.root),
            ("latest", f.root.clone())
        );
    }
}
