//! Hugging Face tokenizers (ABI.md, "tok"), run on the host by the `tokenizers` crate, from a
//! `tokenizer.json` in a folder the user granted (`--dir`, `%dir`; paths as in [`fs`]).
//!
//! Any `tokenizer.json` that Python's `tokenizers` or `transformers` writes works: byte-level
//! BPE (GPT-2, Llama 3), BPE with byte fallback (Llama 2), WordPiece (BERT), WordLevel and
//! Unigram, with their normalizers, pre-tokenizers, post-processors and decoders. Ids are
//! `i64`, ready for [`from_slice`](crate::from_slice) and an `embedding` op; they equal
//! Python's ids for the same file and text.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::tokenizer::Tokenizer;
//!
//! let tok = Tokenizer::from_file("models/llama/tokenizer.json")?;
//! let ids = tok.encode("Hello, world!", true)?;
//! let eos = tok.token_to_id("<|end_of_text|>")?.expect("an eos token");
//! let x = neuronlab::from_slice(&ids, &[1, ids.len() as i64])?;
//! neuronlab::println!("{} ids of {}: {}", ids.len(), tok.vocab_size()?, x);
//! assert_eq!(tok.decode(&ids, true)?, "Hello, world!");
//! ```
//!
//! [`fs`]: crate::fs

use crate::error::Result;
use crate::sys;

/// A tokenizer loaded on the host. Dropping it frees it there.
#[derive(Debug)]
pub struct Tokenizer {
    handle: u32,
}

impl Tokenizer {
    /// Loads the `tokenizer.json` at the guest path `path` (`NAME/relative/path` in a granted
    /// folder).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Fs`](crate::ErrorKind::Fs) when the path is refused or the file is not a
    /// valid `tokenizer.json` (the message has the library's reason),
    /// [`ErrorKind::Memory`](crate::ErrorKind::Memory) when the file is larger than a
    /// tokenizer may be (100 MiB) or than what is left of the host memory cap.
    #[track_caller]
    pub fn from_file(path: &str) -> Result<Tokenizer> {
        Ok(Tokenizer {
            handle: sys::tok_load(path)?,
        })
    }

    /// The ids `text` encodes to. With `add_special_tokens`, the tokenizer's post-processor
    /// adds its tokens (a BOS, or `[CLS]` and `[SEP]`), as Python's
    /// `encode(text, add_special_tokens=True)`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Memory`](crate::ErrorKind::Memory) for more than 16 MiB of text (encode
    /// it in pieces), [`ErrorKind::Invalid`](crate::ErrorKind::Invalid) when the library
    /// cannot encode it.
    #[track_caller]
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<i64>> {
        sys::tok_encode(self.handle, text, add_special_tokens)
    }

    /// The text `ids` decode to, without special tokens when `skip_special_tokens`. Bytes of
    /// a byte-level BPE that do not form whole UTF-8 characters decode to U+FFFD.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`](crate::ErrorKind::Invalid) for an id outside the vocabulary
    /// (the message names it), or more than 4,194,304 ids.
    #[track_caller]
    pub fn decode(&self, ids: &[i64], skip_special_tokens: bool) -> Result<String> {
        sys::tok_decode(self.handle, ids, skip_special_tokens)
    }

    /// The id of the token `token` (added and special tokens included, such as `</s>`), or
    /// `None` when the vocabulary has no such token.
    #[track_caller]
    pub fn token_to_id(&self, token: &str) -> Result<Option<i64>> {
        sys::tok_token_to_id(self.handle, token)
    }

    /// The vocabulary's size, added tokens included: the rows an embedding table needs for
    /// every id this tokenizer gives.
    #[track_caller]
    pub fn vocab_size(&self) -> Result<usize> {
        sys::tok_vocab_size(self.handle)
    }
}

impl Drop for Tokenizer {
    fn drop(&mut self) {
        // A live handle is always freed successfully; there is nothing to do on error.
        let _ = sys::tok_free(self.handle);
    }
}
