//! The tok imports as a guest sees them (fixtures/tok.wat): a tokenizer loaded from a granted
//! folder encodes, decodes, looks tokens up and is freed; refused paths are `ERR_FS`, files
//! that are not tokenizers are `ERR_FS` naming the file, one too large is `ERR_MEMORY`
//! before it is read, and bad handles, pointers and arguments are statuses with clear
//! messages, never traps. Python's `tokenizers` checks the ids themselves
//! (tests/python/test_tokenizers.py).

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::Arc;

use neuronlab_core::device::topology::{CoreId, Topology};
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::Runtime;
use neuronlab_dist::World;
use neuronlab_sandbox::grants::Access;
use neuronlab_sandbox::{ErrorCode, Guest, Limits, Sandbox, Shared};

const FS: i64 = ErrorCode::Fs as i64;
const BOUNDS: i64 = ErrorCode::Bounds as i64;
const INVALID: i64 = ErrorCode::Invalid as i64;
const HANDLE: i64 = ErrorCode::Handle as i64;
const MEMORY: i64 = ErrorCode::Memory as i64;
/// Where the test writes paths and text, and where the host writes what it returns.
const IN_AT: i64 = 1024;
const OUT_AT: i64 = 16384;

/// A WordLevel tokenizer as Python's `tokenizers` saves it: whitespace words, `[UNK]`, and a
/// template that wraps a sequence in `[CLS]` and `[SEP]`.
const WORDS: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{"id":0,"content":"[UNK]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":1,"content":"[CLS]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true},{"id":2,"content":"[SEP]","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}],"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],"pair":[{"SpecialToken":{"id":"[CLS]","type_id":0}},{"Sequence":{"id":"A","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}},{"Sequence":{"id":"B","type_id":0}},{"SpecialToken":{"id":"[SEP]","type_id":0}}],"special_tokens":{"[CLS]":{"id":"[CLS]","ids":[1],"tokens":["[CLS]"]},"[SEP]":{"id":"[SEP]","ids":[2],"tokens":["[SEP]"]}}},"decoder":null,"model":{"type":"WordLevel","vocab":{"[UNK]":0,"[CLS]":1,"[SEP]":2,"hello":3,"world":4,"grüße":5},"unk_token":"[UNK]"}}"#;

/// A folder `models` granted read-only, holding `words.json` (above), bad files and a
/// symlink out, next to a secret tokenizer; and a guest of tok.wat granted it.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    guest: Guest,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let models = base.join("models");
        std::fs::create_dir_all(models.join("sub")).unwrap();
        std::fs::write(models.join("words.json"), WORDS).unwrap();
        std::fs::write(models.join("cut.json"), &WORDS[..WORDS.len() / 2]).unwrap();
        std::fs::write(models.join("other.json"), r#"{"vocab": {"a": 0}}"#).unwrap();
        // A model type the library does not know.
        let unknown = WORDS.replace(r#""type":"WordLevel""#, r#""type":"WordSalad""#);
        std::fs::write(models.join("unknown.json"), unknown).unwrap();
        std::fs::write(models.join("empty.json"), "").unwrap();
        // Sparse: 100 MiB and a byte, with nothing written.
        std::fs::File::create(models.join("huge.json"))
            .unwrap()
            .set_len((100 << 20) + 1)
            .unwrap();
        std::fs::write(base.join("secret.json"), WORDS).unwrap();
        symlink(base.join("secret.json"), models.join("leak.json")).unwrap();

        let runtime = Arc::new(Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).unwrap(),
            host_limit: 1 << 30,
        }));
        let shared = Shared::default();
        shared.files.grant(&models, Access::ReadOnly).unwrap();
        let sandbox = Sandbox::new(None).unwrap();
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tok.wat");
        let module = sandbox.load_file(&fixture).unwrap();
        let guest = sandbox
            .instantiate_rank(
                &module,
                World::single(runtime, CoreId(0)).rank(0),
                shared,
                Limits::default(),
                Box::new(|_| {}),
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

    /// Writes `text` into guest memory: its `(ptr, len)`.
    fn text(&mut self, text: &str) -> [i64; 2] {
        self.poke(IN_AT, text.as_bytes());
        [IN_AT, text.len() as i64]
    }

    fn error(&mut self) -> String {
        let n = self.call("error", &[]);
        String::from_utf8(self.peek(4096, n)).unwrap()
    }

    fn load(&mut self, path: &str) -> i64 {
        let [p, l] = self.text(path);
        self.call("load", &[p, l])
    }

    /// The ids `text` encodes to, or the status and message.
    fn encode(&mut self, t: i64, text: &str, special: i64) -> Result<Vec<i64>, (i64, String)> {
        let [p, l] = self.text(text);
        match self.call("encode", &[t, p, l, special, OUT_AT, 64]) {
            n if n >= 0 => Ok(self.ids(OUT_AT, n.min(64))),
            code => Err((code, self.error())),
        }
    }

    fn ids(&mut self, at: i64, n: i64) -> Vec<i64> {
        self.peek(at, 8 * n)
            .chunks(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// The text `ids` decode to, or the status and message.
    fn decode(&mut self, t: i64, ids: &[i64], skip: i64) -> Result<String, (i64, String)> {
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        self.poke(IN_AT, &bytes);
        match self.call("decode", &[t, IN_AT, ids.len() as i64, skip, OUT_AT, 4096]) {
            n if n >= 0 => Ok(String::from_utf8(self.peek(OUT_AT, n)).unwrap()),
            code => Err((code, self.error())),
        }
    }

    /// `status` is `code` and the message holds every one of `words`.
    fn refused(&mut self, what: &str, status: i64, code: i64, words: &[&str]) {
        let message = self.error();
        assert_eq!(status, code, "{what}: {message}");
        for w in words {
            assert!(message.contains(w), "{what}: {message:?} lacks {w:?}");
        }
    }
}

#[test]
fn a_loaded_tokenizer_encodes_decodes_and_looks_tokens_up() {
    let mut f = Fixture::new();
    let t = f.load("models/words.json");
    assert!(t > 0, "{}", f.error());
    assert_eq!(
        f.encode(t, "hello grüße world x", 1).unwrap(),
        [1, 3, 5, 4, 0, 2]
    );
    assert_eq!(f.encode(t, "hello grüße world x", 0).unwrap(), [3, 5, 4, 0]);
    assert_eq!(f.encode(t, "", 0).unwrap(), Vec::<i64>::new());
    assert_eq!(
        f.decode(t, &[1, 3, 5, 4, 2], 1).unwrap(),
        "hello grüße world",
        "special tokens skipped"
    );
    assert_eq!(f.decode(t, &[1, 3, 2], 0).unwrap(), "[CLS] hello [SEP]");
    assert_eq!(f.decode(t, &[], 0).unwrap(), "");
    assert_eq!(f.call("vocab_size", &[t]), 6);

    // A size query: cap 0 writes nothing and returns the full count or length.
    let [p, l] = f.text("hello world");
    f.poke(OUT_AT, &[0xaa; 8]);
    assert_eq!(f.call("encode", &[t, p, l, 1, OUT_AT, 0]), 4);
    assert_eq!(f.peek(OUT_AT, 8), [0xaa; 8], "nothing written past cap");
    assert_eq!(f.call("encode", &[t, p, l, 1, OUT_AT, 2]), 4);
    assert_eq!(f.ids(OUT_AT, 2), [1, 3], "the first cap ids");
    f.poke(IN_AT, &3i64.to_le_bytes());
    assert_eq!(f.call("decode", &[t, IN_AT, 1, 0, OUT_AT, 0]), 5);

    for (token, want) in [("[SEP]", Some(2)), ("grüße", Some(5)), ("nope", None)] {
        let [p, l] = f.text(token);
        let found = f.call("token_to_id", &[t, p, l, OUT_AT]);
        assert_eq!(found, i64::from(want.is_some()), "{token}");
        if let Some(id) = want {
            assert_eq!(f.ids(OUT_AT, 1), [id], "{token}");
        }
    }

    // Two handles to two tokenizers; freeing one leaves the other.
    let t2 = f.load("models/sub/../words.json");
    assert!(t2 > 0 && t2 != t, "{}", f.error());
    assert_eq!(f.call("free", &[t]), 0);
    assert_eq!(f.encode(t2, "world", 0).unwrap(), [4]);
}

#[test]
fn bad_handles_are_clear_errors() {
    let mut f = Fixture::new();
    let t = f.load("models/words.json");
    let tensor = f.call("tensor", &[]);
    assert!(tensor > 0);

    let status = f.call("vocab_size", &[tensor]);
    f.refused(
        "a tensor as a tokenizer",
        status,
        HANDLE,
        &["is a tensor, not a tokenizer", "tok_load"],
    );
    let status = f.call("rank", &[t]);
    f.refused(
        "a tokenizer as a tensor",
        status,
        HANDLE,
        &["is a tokenizer, not a tensor"],
    );
    let status = f.call("free", &[tensor]);
    f.refused(
        "tok_free of a tensor",
        status,
        HANDLE,
        &["is a tensor, not a tokenizer"],
    );
    assert_eq!(
        f.call("rank", &[tensor]),
        1,
        "a refused tok_free frees nothing"
    );
    for bad in [0, 0x7ff_ffff, t ^ (1 << 25)] {
        let status = f.call("vocab_size", &[bad]);
        f.refused(
            &format!("handle {bad:#x}"),
            status,
            HANDLE,
            &["a tokenizer handle comes from tok_load"],
        );
    }
    assert_eq!(f.call("free", &[t]), 0);
    let (status, _) = f.encode(t, "hello", 0).unwrap_err();
    f.refused(
        "a freed tokenizer",
        status,
        HANDLE,
        &["not live: it was freed"],
    );
    let status = f.call("free", &[t]);
    f.refused("freed twice", status, HANDLE, &["not live"]);
}

#[test]
fn refused_paths_bad_files_and_a_huge_file_are_errors_and_the_guest_keeps_running() {
    let mut f = Fixture::new();
    let absolute = f.base.join("secret.json").display().to_string();
    let cases: &[(&str, i64, &[&str])] = &[
        (
            &absolute,
            FS,
            &["absolute paths are refused", "`models` (read-only)"],
        ),
        (
            "models/../secret.json",
            FS,
            &["`..` climbs out of the granted folder `models`"],
        ),
        (
            "models/leak.json",
            FS,
            &["leads outside the granted folder `models`"],
        ),
        (
            "nope/tokenizer.json",
            FS,
            &["no folder is granted as `nope`"],
        ),
        ("models/missing.json", FS, &["no such file or folder"]),
        (
            "models/sub",
            FS,
            &["is a folder", "models/sub/tokenizer.json"],
        ),
        (
            "models/cut.json",
            FS,
            &["`models/cut.json` is not a valid tokenizer.json", "EOF"],
        ),
        (
            "models/other.json",
            FS,
            &["`models/other.json` is not a valid tokenizer.json"],
        ),
        (
            "models/unknown.json",
            FS,
            &["is not a valid tokenizer.json", "ModelUntagged"],
        ),
        ("models/empty.json", FS, &["is not a valid tokenizer.json"]),
        (
            "models/huge.json",
            MEMORY,
            &[
                "100 MiB (104857600 bytes)",
                "a tokenizer file may have",
                "nothing was read",
            ],
        ),
    ];
    for (path, code, words) in cases {
        let status = f.load(path);
        f.refused(&format!("tok_load {path}"), status, *code, words);
    }
    assert!(
        f.load("models/words.json") > 0,
        "the guest still loads what it may"
    );
}

#[test]
fn bad_pointers_lengths_and_arguments_are_statuses_not_traps() {
    let mut f = Fixture::new();
    let t = f.load("models/words.json");
    assert_eq!(f.call("load", &[65530, 100]), BOUNDS, "a path past memory");
    assert_eq!(f.call("load", &[-1, 4]), BOUNDS);
    f.poke(IN_AT, &[0xff, 0xfe]);
    assert_eq!(
        f.call("load", &[IN_AT, 2]),
        INVALID,
        "a path that is not UTF-8"
    );

    let [p, l] = f.text("hello world");
    assert_eq!(
        f.call("encode", &[t, p, l, 1, 65530, 64]),
        BOUNDS,
        "ids past memory"
    );
    assert_eq!(f.call("encode", &[t, 65530, 100, 1, OUT_AT, 64]), BOUNDS);
    assert_eq!(f.call("encode", &[t, p, -1, 1, OUT_AT, 64]), BOUNDS);
    assert_eq!(f.call("encode", &[t, p, l, 1, OUT_AT, -1]), BOUNDS);
    let status = f.call("encode", &[t, p, l, 2, OUT_AT, 64]);
    f.refused(
        "add_special_tokens 2",
        status,
        INVALID,
        &["add_special_tokens is 2: pass 0 or 1"],
    );
    let status = f.call("encode", &[t, 0, 16 << 20 | 1, 1, OUT_AT, 64]);
    f.refused("17 MiB of text", status, MEMORY, &["encode it in pieces"]);
    f.poke(IN_AT, &[0xff, 0xfe]);
    assert_eq!(
        f.call("encode", &[t, IN_AT, 2, 0, OUT_AT, 64]),
        INVALID,
        "text that is not UTF-8"
    );

    let (status, _) = f.decode(t, &[3, 6], 0).unwrap_err();
    f.refused(
        "an id past the vocabulary",
        status,
        INVALID,
        &["id 6 (at 1) is not in the tokenizer's vocabulary of 6"],
    );
    let (status, _) = f.decode(t, &[-1], 0).unwrap_err();
    f.refused("a negative id", status, INVALID, &["id -1 (at 0)"]);
    let (status, _) = f.decode(t, &[1 << 40], 0).unwrap_err();
    f.refused(
        "an id past u32",
        status,
        INVALID,
        &["is not in the tokenizer's vocabulary"],
    );
    assert_eq!(
        f.call("decode", &[t, IN_AT, -1, 0, OUT_AT, 64]),
        INVALID,
        "negative n_ids"
    );
    assert_eq!(
        f.call("decode", &[t, 65530, 100, 0, OUT_AT, 64]),
        BOUNDS,
        "ids past memory"
    );
    f.poke(IN_AT, &3i64.to_le_bytes());
    assert_eq!(
        f.call("decode", &[t, IN_AT, 1, 0, 65534, 64]),
        BOUNDS,
        "text past memory"
    );
    assert_eq!(f.call("decode", &[t, IN_AT, 1, 0, OUT_AT, -1]), BOUNDS);
    assert_eq!(
        f.call("decode", &[t, IN_AT, 1, 3, OUT_AT, 64]),
        INVALID,
        "skip is 0 or 1"
    );

    let [p, l] = f.text("hello");
    assert_eq!(
        f.call("token_to_id", &[t, p, l, 65530]),
        BOUNDS,
        "the id past memory"
    );
    assert_eq!(f.call("token_to_id", &[t, p, -2, OUT_AT]), BOUNDS);
    assert_eq!(
        f.encode(t, "hello", 0).unwrap(),
        [3],
        "and the tokenizer still works"
    );
}
