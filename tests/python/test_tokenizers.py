"""End-to-end: Hugging Face tokenizers between Python's `tokenizers` and a real Rust guest
(tests/guests/tok-check) run by `neuronlab run` with a granted folder (`--dir`).

Tokenizers trained here on a few sentences (a BERT-style WordPiece, a GPT-2-style byte-level
BPE, and a Llama-3-style BPE with its split regex and a BOS template) are saved as
`tokenizer.json`; the guest's ids equal Python's for ASCII and non-ASCII text, with and
without special tokens, and its decodes equal Python's (byte-level ones give the text back).
Refused paths and malformed files are clear errors while the guest keeps running. And the
device clock advances by the modeled time of a bf16 matmul (docs/cost-model.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

from test_experiments import module, run

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Grüße aus Köln: naïve café, crème brûlée and smörgåsbord.",
    "日本語のテキストも少し。東京は大きい。",
    "Здравствуй, мир! Как дела?",
    "I'm sure we'll see they've done it; don't worry.",
    "Numbers like 12345 and 3.14159 appear in 2024 too.",
    "emoji 🤖🚀 and tabs\tand  double  spaces\nnew lines",
] * 3

TEXTS = [
    "Hello, world!",
    "The lazy dog jumps over the quick brown fox.",
    "Grüße aus Köln — naïve café",
    "日本語のテキスト",
    "Здравствуй, мир",
    "I'm sure they'll do it, won't they?",
    "12345 + 3.14159 = 12348.14159",
    "emoji 🤖🚀 done",
    "  leading spaces,\ttabs\nand new lines  ",
    "unseen words: zyzzyva, quixotic, ω≈π",
    "",
]

LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def wordpiece() -> Tokenizer:
    """BERT's pipeline: lowercasing normalizer, punctuation split, `[CLS] $A [SEP]`."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    special = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=special)
    tok.train_from_iterator(CORPUS, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    tok.decoder = decoders.WordPiece()
    return tok


def gpt2() -> Tokenizer:
    """GPT-2's byte-level BPE: every byte is a token, so nothing is unknown."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def llama3() -> Tokenizer:
    """Llama 3's pipeline: its split regex (lookahead, case-insensitive group: the regex
    engine matters), byte-level without its own regex, and a BOS template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
        special_tokens=[("<|begin_of_text|>", bos)],
    )
    return tok


TOKENIZERS = {"wordpiece": wordpiece, "gpt2": gpt2, "llama3": llama3}
BYTE_LEVEL = {"gpt2", "llama3"}


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> tuple[Path, dict[str, Tokenizer]]:
    """`models` (granted read-only) holding each tokenizer's `NAME/tokenizer.json`, a
    malformed one, and a secret tokenizer beside the folder that no grant covers."""
    root = tmp_path_factory.mktemp("tok")
    folder = root / "models"
    folder.mkdir()
    built = {}
    for name, make in TOKENIZERS.items():
        tok = make()
        (folder / name).mkdir()
        tok.save(str(folder / name / "tokenizer.json"))
        built[name] = Tokenizer.from_file(str(folder / name / "tokenizer.json"))
    (folder / "broken.json").write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": ')
    built["gpt2"].save(str(root / "secret.json"))
    return folder, built


def guest(folder: Path, *commands: str, env: dict[str, str] | None = None) -> list[str]:
    result = run(module("tok-check"), "--dir", str(folder), "--", *commands, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.rstrip().splitlines()
    assert lines and lines[-1] == "done", result.stdout
    return lines[:-1]


def answers(lines: list[str], prefix: str) -> list[str]:
    """The guest's lines of one kind (`ids`, `text`, ...), with errors in their place."""
    out = []
    for line in lines:
        if line.startswith("error: "):
            out.append(line)
        elif line == prefix or line.startswith(prefix + " "):
            out.append(line[len(prefix) + 1 :])
    return out


@pytest.mark.parametrize("name", list(TOKENIZERS))
def test_ids_equal_pythons_and_decodes_round_trip(models_dir, name):
    folder, built = models_dir
    tok = built[name]
    path = f"models/{name}/tokenizer.json"
    commands = []
    for text in TEXTS:
        for special in ("1", "0"):
            commands += ["encode", path, special, text.encode().hex()]
    got = answers(guest(folder, *commands), "ids")
    want = [
        " ".join(str(i) for i in tok.encode(text, add_special_tokens=special).ids)
        for text in TEXTS
        for special in (True, False)
    ]
    assert got == want

    # Decoding Python's ids, skipping special tokens or not, gives Python's text; byte-level
    # decodes give the text itself back.
    commands, want = [], []
    for text in TEXTS:
        ids = tok.encode(text).ids
        for skip in (True, False):
            commands += ["decode", path, str(int(skip)), ",".join(map(str, ids)) or "-"]
            want.append(tok.decode(ids, skip_special_tokens=skip))
    got = [bytes.fromhex(t).decode() for t in answers(guest(folder, *commands), "text")]
    assert got == want
    if name in BYTE_LEVEL:
        assert got[::2] == TEXTS, "skip_special_tokens gives the text back"


def test_a_byte_cut_mid_character_decodes_as_pythons_does(models_dir):
    folder, built = models_dir
    tok = built["gpt2"]
    ids = tok.encode("ü🤖").ids
    # Each prefix of the ids: some end inside a character's bytes (U+FFFD in both).
    prefixes = [ids[:k] for k in range(1, len(ids) + 1)]
    commands = []
    for p in prefixes:
        commands += ["decode", "models/gpt2/tokenizer.json", "0", ",".join(map(str, p))]
    got = [bytes.fromhex(t).decode() for t in answers(guest(folder, *commands), "text")]
    assert got == [tok.decode(p, skip_special_tokens=False) for p in prefixes]
    assert any("\ufffd" in g for g in got), got


def test_special_token_ids_and_vocab_sizes_equal_pythons(models_dir):
    folder, built = models_dir
    cases = [
        ("wordpiece", "[CLS]"),
        ("wordpiece", "[SEP]"),
        ("wordpiece", "[MASK]"),
        ("gpt2", "<|endoftext|>"),
        ("llama3", "<|begin_of_text|>"),
        ("llama3", "<|end_of_text|>"),
        ("llama3", "no such token"),
    ]
    commands = []
    for name, token in cases:
        commands += ["id", f"models/{name}/tokenizer.json", token]
    for name in TOKENIZERS:
        commands += ["vocab", f"models/{name}/tokenizer.json"]
    lines = guest(folder, *commands)
    ids = [built[n].token_to_id(t) for n, t in cases]
    assert answers(lines, "id") == ["none" if i is None else str(i) for i in ids]
    assert ids[-1] is None, "a token that is not in the vocabulary"
    sizes = [str(built[n].get_vocab_size(with_added_tokens=True)) for n in TOKENIZERS]
    assert answers(lines, "vocab") == sizes


def test_refused_paths_and_bad_files_are_clear_errors_and_the_guest_keeps_running(models_dir):
    folder, built = models_dir
    secret = folder.parent / "secret.json"
    lines = guest(
        folder,
        "vocab", str(secret),
        "vocab", "models/../secret.json",
        "vocab", "models/missing.json",
        "vocab", "models/gpt2",
        "vocab", "models/broken.json",
        "decode", "models/gpt2/tokenizer.json", "0", "1,999999",
        "vocab", "models/gpt2/tokenizer.json",
    )  # fmt: skip
    assert len(lines) == 7, lines
    assert lines[0].startswith("error: ERR_FS") and "absolute paths are refused" in lines[0]
    assert lines[1].startswith("error: ERR_FS") and "`..` climbs out" in lines[1]
    assert lines[2].startswith("error: ERR_FS") and "no such file or folder" in lines[2]
    assert lines[3].startswith("error: ERR_FS") and "models/gpt2/tokenizer.json" in lines[3]
    assert lines[4].startswith("error: ERR_FS") and "is not a valid tokenizer.json" in lines[4]
    assert lines[5].startswith("error: ERR_INVALID") and "id 999999 (at 1)" in lines[5]
    assert lines[6] == f"vocab {built['gpt2'].get_vocab_size(with_added_tokens=True)}"


def test_the_device_clock_advances_by_the_modeled_time_of_a_bf16_matmul(models_dir):
    folder, _ = models_dir
    # docs/cost-model.md: a bf16 matmul of m=1, n=k=1024 on trn2.48xlarge models 12.898 µs.
    lines = guest(folder, "clock", env={"NEURONLAB_INSTANCE": "trn2.48xlarge"})
    (clock,) = answers(lines, "device_ns")
    before, after, ns = map(int, clock.split())
    assert before > 0, "the zeros the guest made ran on the core first"
    assert after - before == ns
    assert abs(ns - 12_898) <= 1, ns
