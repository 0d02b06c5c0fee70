//! Files in the folders the user granted (ABI.md, "fs").
//!
//! A guest has no files unless the user grants a folder: `neuronlab run --dir PATH` (read
//! only) or `--dir-rw PATH`, or `%dir PATH [--rw]` in a session. Paths name the granted
//! folder first, by its folder name: with `--dir /data/mnist`, the file `/data/mnist/train.bin`
//! is `mnist/train.bin`. Absolute paths, `..` that climbs out of a grant, symlinks leading
//! outside it and writes to a read-only grant fail with [`ErrorKind::Fs`] and a message that
//! says what to do.
//!
//! # Example
//!
//! ```ignore
//! use neuronlab::fs;
//!
//! let bytes = fs::read_file("mnist/train.bin")?;
//! let head = fs::read_range("mnist/train.bin", 0, 16)?;
//! fs::write_file("out/log.txt", "step 1\n")?;
//! for name in fs::list_dir("mnist")? {
//!     neuronlab::println!("{name}");
//! }
//! ```
//!
//! [`ErrorKind::Fs`]: crate::ErrorKind::Fs

use crate::error::Result;
use crate::sys;

/// The most bytes one read or write passes to the host: well below an ABI length's limit.
const CHUNK: usize = 1 << 30;

/// The whole file at `path`.
///
/// # Errors
///
/// [`ErrorKind::Fs`](crate::ErrorKind::Fs) when the path is refused, names a folder or does
/// not exist.
#[track_caller]
pub fn read_file(path: &str) -> Result<Vec<u8>> {
    let size = file_size(path)?;
    read_range(path, 0, usize::try_from(size).unwrap_or(usize::MAX))
}

/// The whole file at `path` as text (invalid UTF-8 is replaced).
#[track_caller]
pub fn read_to_string(path: &str) -> Result<String> {
    Ok(String::from_utf8_lossy(&read_file(path)?).into_owned())
}

/// Up to `len` bytes of the file at `path` from byte `offset`: fewer only at the end of the
/// file.
#[track_caller]
pub fn read_range(path: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() < len {
        let want = (len - out.len()).min(CHUNK);
        let start = out.len();
        out.resize(start + want, 0);
        let got = sys::fs_read(path, offset + start as u64, &mut out[start..])?;
        out.truncate(start + got);
        if got < want {
            break;
        }
    }
    Ok(out)
}

/// The size of the file at `path` in bytes.
#[track_caller]
pub fn file_size(path: &str) -> Result<u64> {
    sys::fs_size(path)
}

/// Writes `data` to the file at `path`, creating it or replacing its contents. Needs a
/// read-write grant; the file's folder must exist ([`create_dir`]).
#[track_caller]
pub fn write_file(path: &str, data: impl AsRef<[u8]>) -> Result<()> {
    let data = data.as_ref();
    let mut chunks = data.chunks(CHUNK);
    sys::fs_write(path, chunks.next().unwrap_or(&[]), false)?;
    chunks.try_for_each(|c| sys::fs_write(path, c, true))
}

/// Writes `data` after the contents of the file at `path`, creating it if needed.
#[track_caller]
pub fn append_file(path: &str, data: impl AsRef<[u8]>) -> Result<()> {
    data.as_ref()
        .chunks(CHUNK)
        .try_for_each(|c| sys::fs_write(path, c, true))
}

/// The names in the folder at `path`, sorted; a folder's name ends in `/`. The empty path
/// lists the granted folders.
#[track_caller]
pub fn list_dir(path: &str) -> Result<Vec<String>> {
    sys::fs_list(path)
}

/// Makes the folder at `path` (its parent must exist); nothing when it exists already.
#[track_caller]
pub fn create_dir(path: &str) -> Result<()> {
    sys::fs_mkdir(path)
}
