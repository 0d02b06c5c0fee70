//! The fs imports as a guest sees them (fixtures/fs.wat): reads, writes and listings inside
//! granted folders, and every way out of a grant refused with `ERR_FS` and a clear message
//! while the guest keeps running; bad pointers are `ERR_BOUNDS`, never a trap.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::Runtime;
use neuronlab_dist::World;
use neuronlab_sandbox::grants::Access;
use neuronlab_sandbox::{ErrorCode, Guest, Limits, Sandbox, Shared};

const FS: i64 = ErrorCode::Fs as i64;
const BOUNDS: i64 = ErrorCode::Bounds as i64;
const INVALID: i64 = ErrorCode::Invalid as i64;
/// Where the test writes paths, and where the host writes what it reads.
const PATH_AT: i64 = 1024;
const OUT_AT: i64 = 16384;

/// A folder `data` (read-only) and `out` (read-write) under a temporary root, next to a
/// secret file, with symlinks that lead out of `data`; and a guest of fs.wat granted both.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    guest: Guest,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let data = base.join("data");
        std::fs::create_dir_all(data.join("sub")).unwrap();
        std::fs::create_dir(base.join("out")).unwrap();
        std::fs::write(data.join("hello.txt"), b"hello, grant").unwrap();
        std::fs::write(data.join("sub/x.bin"), [1u8, 2, 3]).unwrap();
        std::fs::write(base.join("secret"), b"top secret").unwrap();
        symlink(base.join("secret"), data.join("leak")).unwrap();
        symlink(&base, data.join("up")).unwrap();

        let runtime = Arc::new(Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        }));
        let shared = Shared::default();
        shared.files.grant(&data, Access::ReadOnly).unwrap();
        shared
            .files
            .grant(&base.join("out"), Access::ReadWrite)
            .unwrap();
        let sandbox = Sandbox::new(None).unwrap();
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fs.wat");
        let module = sandbox.load_file(&fixture).unwrap();
        let sink = Arc::new(Mutex::new(Vec::new()));
        let guest = sandbox
            .instantiate_rank(
                &module,
                World::single(runtime, CoreId(0)).rank(0),
                shared,
                Limits::default(),
                Box::new(move |o| sink.lock().unwrap().push(o)),
            )
            .unwrap();
        Fixture {
            _tmp: tmp,
            base,
            guest,
        }
    }

    fn call(&mut self, entry: &str, args: &[i64]) -> i64 {
        let args: Vec<String> = args.iter().map(i64::to_string).collect();
        let out = self
            .guest
            .call(entry, &args)
            .unwrap_or_else(|e| panic!("{entry}{args:?} failed the guest: {e}"));
        out.first().map_or(0, |v| v.parse().unwrap())
    }

    fn poke(&mut self, at: i64, bytes: &[u8]) {
        for (k, &b) in bytes.iter().enumerate() {
            self.call("poke8", &[at + k as i64, i64::from(b)]);
        }
    }

    fn peek(&mut self, at: i64, n: i64) -> Vec<u8> {
        (0..n)
            .map(|k| self.call("peek8", &[at + k]) as u8)
            .collect()
    }

    /// Writes `path` into guest memory: its `(ptr, len)`.
    fn path(&mut self, path: &str) -> [i64; 2] {
        self.poke(PATH_AT, path.as_bytes());
        [PATH_AT, path.len() as i64]
    }

    fn error(&mut self) -> String {
        let n = self.call("error", &[]);
        String::from_utf8(self.peek(4096, n)).unwrap()
    }

    fn size(&mut self, path: &str) -> i64 {
        let [p, l] = self.path(path);
        self.call("size", &[p, l])
    }

    fn read(&mut self, path: &str, offset: i64, len: i64) -> Result<Vec<u8>, (i64, String)> {
        let [p, l] = self.path(path);
        match self.call("read", &[p, l, offset, OUT_AT, len]) {
            n if n >= 0 => Ok(self.peek(OUT_AT, n)),
            code => Err((code, self.error())),
        }
    }

    fn write(&mut self, path: &str, data: &[u8], append: i64) -> i64 {
        self.poke(OUT_AT, data);
        let [p, l] = self.path(path);
        self.call("write", &[p, l, OUT_AT, data.len() as i64, append])
    }

    fn list(&mut self, path: &str) -> Result<Vec<String>, (i64, String)> {
        let [p, l] = self.path(path);
        let n = self.call("list", &[p, l, OUT_AT, 4096]);
        if n < 0 {
            return Err((n, self.error()));
        }
        let bytes = self.peek(OUT_AT, n);
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let mut names = Vec::new();
        let mut at = 4;
        for _ in 0..word(0) {
            let len = word(at);
            names.push(String::from_utf8(bytes[at + 4..at + 4 + len].to_vec()).unwrap());
            at += 4 + len;
        }
        assert_eq!(
            at,
            bytes.len(),
            "the list is exactly as long as the host said"
        );
        Ok(names)
    }

    /// `status` is `ERR_FS` and the message holds every one of `words`.
    fn refused(&mut self, what: &str, status: i64, words: &[&str]) {
        assert_eq!(status, FS, "{what}: {}", self.error());
        let message = self.error();
        for w in words {
            assert!(message.contains(w), "{what}: {message:?} lacks {w:?}");
        }
    }
}

#[test]
fn guests_read_list_and_write_inside_their_grants() {
    let mut f = Fixture::new();
    assert_eq!(f.size("data/hello.txt"), 12);
    assert_eq!(f.read("data/hello.txt", 0, 12).unwrap(), b"hello, grant");
    assert_eq!(
        f.read("data/hello.txt", 7, 100).unwrap(),
        b"grant",
        "short at the end"
    );
    assert_eq!(
        f.read("data/hello.txt", 1000, 8).unwrap(),
        b"",
        "past the end"
    );
    assert_eq!(f.read("data/sub/../sub/x.bin", 0, 3).unwrap(), [1, 2, 3]);
    assert_eq!(
        f.list("").unwrap(),
        ["data/", "out/"],
        "the empty path lists the grants"
    );
    assert_eq!(
        f.list("data").unwrap(),
        ["hello.txt", "leak", "sub/", "up/"],
        "sorted, folders marked (symlinks are listed, not followed out)"
    );

    assert_eq!(f.write("out/log.txt", b"one ", 0), 0);
    assert_eq!(f.write("out/log.txt", b"two", 1), 0);
    assert_eq!(
        std::fs::read(f.base.join("out/log.txt")).unwrap(),
        b"one two"
    );
    assert_eq!(f.write("out/log.txt", b"new", 0), 0, "append 0 replaces");
    assert_eq!(std::fs::read(f.base.join("out/log.txt")).unwrap(), b"new");
    let [p, l] = f.path("out/run1");
    assert_eq!(f.call("mkdir", &[p, l]), 0);
    assert_eq!(f.call("mkdir", &[p, l]), 0, "a folder that exists is fine");
    assert_eq!(f.write("out/run1/w.bin", &[9, 9], 0), 0);
    assert_eq!(f.list("out").unwrap(), ["log.txt", "run1/"]);
    assert_eq!(f.size("out/run1/w.bin"), 2);
}

#[test]
fn every_way_out_of_a_grant_is_refused_and_the_guest_keeps_running() {
    let mut f = Fixture::new();
    let absolute = f.base.join("secret").display().to_string();
    let cases: &[(&str, &[&str])] = &[
        (
            &absolute,
            &["absolute paths are refused", "`data` (read-only)"],
        ),
        (
            "data/../secret",
            &["`..` climbs out of the granted folder `data`"],
        ),
        ("../secret", &["`..` climbs out"]),
        ("data/sub/../../secret", &["climbs out"]),
        ("data/leak", &["leads outside the granted folder `data`"]),
        ("data/up/secret", &["leads outside"]),
        (
            "nope/x",
            &["no folder is granted as `nope`", "`out` (read-write)"],
        ),
        ("data/missing.txt", &["no such file or folder"]),
        ("", &["name a granted folder first"]),
    ];
    for (path, words) in cases {
        let status = f.size(path);
        f.refused(&format!("fs_size {path}"), status, words);
        let (status, _) = f.read(path, 0, 8).unwrap_err();
        f.refused(&format!("fs_read {path}"), status, words);
    }
    for (path, words) in [
        ("data/new.txt", &["granted read-only", "--dir-rw"][..]),
        ("out/../data/x", &["climbs out"]),
        ("data/up/out/x", &["granted read-only"]),
        ("out/missing/x", &["`out/missing` does not exist"]),
        ("out", &["the granted folder `out` itself"]),
    ] {
        let status = f.write(path, b"x", 0);
        f.refused(&format!("fs_write {path}"), status, words);
    }
    assert!(!f.base.join("data/new.txt").exists() && !f.base.join("x").exists());
    for (path, words) in [
        ("data/leak", &["leads outside"][..]),
        ("data/hello.txt", &["is a file"]),
    ] {
        let (status, _) = f.list(path).unwrap_err();
        f.refused(&format!("fs_list {path}"), status, words);
    }
    let status = f.size("data/sub");
    f.refused("fs_size of a folder", status, &["is a folder"]);
    // The secret is untouched and the guest still reads inside its grant.
    assert_eq!(std::fs::read(f.base.join("secret")).unwrap(), b"top secret");
    assert_eq!(f.read("data/hello.txt", 0, 5).unwrap(), b"hello");
}

#[test]
fn bad_pointers_lengths_and_arguments_are_statuses_not_traps() {
    let mut f = Fixture::new();
    let [p, l] = f.path("data/hello.txt");
    assert_eq!(f.call("size", &[65530, 100]), BOUNDS, "a path past memory");
    assert_eq!(f.call("size", &[-1, 4]), BOUNDS);
    assert_eq!(f.call("size", &[p, -3]), BOUNDS);
    assert_eq!(
        f.call("read", &[p, l, 0, 65530, 100]),
        BOUNDS,
        "a buffer past memory"
    );
    assert_eq!(
        f.call("read", &[p, l, 0, OUT_AT, i64::from(i32::MAX)]),
        BOUNDS
    );
    assert_eq!(
        f.call("read", &[p, l, -1, OUT_AT, 4]),
        INVALID,
        "a negative offset"
    );
    assert_eq!(
        f.call("list", &[p, l, 65530, 100]),
        FS,
        "a file is not listed"
    );
    let [p, l] = f.path("data");
    assert_eq!(f.call("list", &[p, l, 65530, 100]), BOUNDS);
    assert_eq!(f.call("list", &[p, l, OUT_AT, -1]), BOUNDS);
    assert_eq!(
        f.call("list", &[p, l, OUT_AT, 0]),
        40,
        "a size query copies nothing"
    );
    let [p, l] = f.path("out/w");
    assert_eq!(f.call("write", &[p, l, 65530, 100, 0]), BOUNDS);
    assert_eq!(
        f.call("write", &[p, l, OUT_AT, 1, 2]),
        INVALID,
        "append is 0 or 1"
    );
    f.poke(PATH_AT, &[0xff, 0xfe]);
    assert_eq!(
        f.call("size", &[PATH_AT, 2]),
        INVALID,
        "a path that is not UTF-8"
    );
    let [p, l] = f.path("data/a\0b");
    assert_eq!(f.call("size", &[p, l]), FS);
    assert!(f.error().contains("NUL"));
    assert!(!f.base.join("out/w").exists());
}
