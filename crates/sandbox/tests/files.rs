//! The fs and ckpt imports as a guest sees them (fixtures/fs.wat): reads, writes, listings
//! and checkpoints inside granted folders, and every way out of a grant refused with `ERR_FS`
//! and a clear message while the guest keeps running; bad pointers are `ERR_BOUNDS`, never a
//! trap, and a failed load leaves no tensor behind.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::Runtime;
use neuronlab_dist::World;
use neuronlab_sandbox::checkpoint;
use neuronlab_sandbox::grants::Access;
use neuronlab_sandbox::{ErrorCode, Guest, Limits, Sandbox, Shared};

const FS: i64 = ErrorCode::Fs as i64;
const BOUNDS: i64 = ErrorCode::Bounds as i64;
const INVALID: i64 = ErrorCode::Invalid as i64;
const HANDLE: i64 = ErrorCode::Handle as i64;
const TOO_SMALL: i64 = ErrorCode::TooSmall as i64;
/// Where the test writes paths, and where the host writes what it reads.
const PATH_AT: i64 = 1024;
const OUT_AT: i64 = 16384;

/// A folder `data` (read-only) and `out` (read-write) under a temporary root, next to a
/// secret file, with symlinks that lead out of `data`; and a guest of fs.wat granted both.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    runtime: Arc<Runtime>,
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
                World::single(runtime.clone(), CoreId(0)).rank(0),
                shared,
                Limits::default(),
                Box::new(move |o| sink.lock().unwrap().push(o)),
            )
            .unwrap();
        Fixture {
            _tmp: tmp,
            base,
            runtime,
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

/// A string list as ABI.md encodes it.
fn strings(list: &[&str]) -> Vec<u8> {
    let mut out = (list.len() as u32).to_le_bytes().to_vec();
    for s in list {
        out.extend((s.len() as u32).to_le_bytes());
        out.extend(s.as_bytes());
    }
    out
}

#[test]
fn checkpoints_load_onto_the_core_and_bad_calls_leave_nothing_behind() {
    let mut f = Fixture::new();
    let t = f.runtime.tensor(Buffer::F32(vec![1.0, 2.0]), &[2]).unwrap();
    let data = f.base.join("data");
    let resolve = |p: &str, _| Ok(data.join(p));
    let meta = [("k".to_string(), "v".to_string())].into();
    checkpoint::save(
        "w.safetensors",
        &resolve,
        &[("a.w".into(), t.clone()), ("b".into(), t)],
        &meta,
        None,
    )
    .unwrap();
    let runtime = f.runtime.clone();
    let in_use = move || runtime.memory().stats(CoreId(0)).unwrap().in_use;
    let before = in_use();

    let [p, l] = f.path("data/w.safetensors");
    let listed = f.call("info", &[p, l, OUT_AT, 4096]);
    let want = [strings(&["a.w", "b"]), strings(&["k", "v"])].concat();
    assert_eq!(f.peek(OUT_AT, listed), want, "names, then metadata pairs");
    assert_eq!(f.call("info", &[p, l, 65530, 100]), BOUNDS);
    assert_eq!(
        f.call("load", &[p, l, 65530, 2]),
        BOUNDS,
        "handles past memory"
    );
    assert_eq!(f.call("load", &[p, l, OUT_AT, 1]), TOO_SMALL);
    assert!(f
        .error()
        .contains("holds 2 tensors but the handle buffer holds 1"));
    assert_eq!(f.call("load", &[p, l, OUT_AT, -1]), TOO_SMALL);
    assert_eq!(in_use(), before, "a refused load reads nothing");
    assert_eq!(f.call("load", &[p, l, OUT_AT, 2]), 2);
    assert_eq!(
        in_use(),
        before + 16,
        "both loaded tensors are accounted on the core"
    );
    let handles: Vec<i64> = f
        .peek(OUT_AT, 8)
        .chunks(4)
        .map(|c| i64::from(u32::from_le_bytes(c.try_into().unwrap())))
        .collect();
    for (path, words) in [
        ("data/../w.safetensors", &["climbs out"][..]),
        ("data/hello.txt", &["is not a valid safetensors file"]),
        ("data/sub", &["without a `*.safetensors.index.json`"]),
    ] {
        let [p, l] = f.path(path);
        let status = f.call("load", &[p, l, OUT_AT, 8]);
        f.refused(&format!("ckpt_load {path}"), status, words);
    }

    // Saving: names (2), then metadata pairs, for the two handles at 8192.
    let names = [strings(&["x", "y"]), strings(&["step", "3"])].concat();
    f.poke(2048, &names);
    let hs: Vec<u8> = handles
        .iter()
        .flat_map(|&h| (h as u32).to_le_bytes())
        .collect();
    f.poke(8192, &hs);
    let save = |f: &mut Fixture, path: &str, names_len: i64, n: i64, shard: i64| {
        let [p, l] = f.path(path);
        f.call("save", &[p, l, 2048, names_len, 8192, n, shard])
    };
    let len = names.len() as i64;
    assert_eq!(save(&mut f, "out/x.safetensors", len, 2, 0), 1);
    assert_eq!(
        save(&mut f, "out/sharded", len, 2, 8),
        2,
        "one shard per 8-byte tensor"
    );
    let back = checkpoint::inspect("out/sharded", &|p, _| Ok(f.base.join(p))).unwrap();
    assert_eq!(back.names().collect::<Vec<_>>(), ["x", "y"]);
    assert_eq!(back.metadata()["step"], "3");
    assert_eq!(
        save(&mut f, "out/bad", len - 1, 2, 0),
        INVALID,
        "a list cut short"
    );
    assert_eq!(
        save(&mut f, "out/bad", len, 1, 0),
        INVALID,
        "more names than handles"
    );
    assert_eq!(save(&mut f, "out/bad", len, -1, 0), INVALID);
    assert_eq!(
        save(&mut f, "out/bad", len, 2, -8),
        INVALID,
        "a negative shard size"
    );
    assert_eq!(save(&mut f, "out/bad", 100_000, 2, 0), BOUNDS);
    let status = save(&mut f, "data/x.safetensors", len, 2, 0);
    f.refused(
        "ckpt_save to a read-only grant",
        status,
        &["granted read-only"],
    );
    f.poke(8192, &7u32.to_le_bytes());
    assert_eq!(save(&mut f, "out/bad", len, 2, 0), HANDLE);
    assert!(!f.base.join("out/bad").exists() && !f.base.join("data/x.safetensors").exists());
}
