//! The `fs` group of imports (ABI.md "fs"): files in the folders the user granted.
//!
//! Every path goes through [`Grants::resolve`](crate::grants::Grants::resolve) first, so a
//! guest reaches nothing outside a grant, and writes only in read-write grants. Failures are
//! `ERR_FS` with a message that names the path, the grant and what to do.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use super::context::{
    check_interrupt, encode_strings, memory, range, read, read_str, status, status64, write_capped,
    Ctx,
};
use super::table::{imports, Import};
use crate::grants::Need;
use crate::status::{ErrorCode, Fail, HostResult};

/// The fs group, in ABI.md's order.
pub(crate) const FS: &[Import] = imports! { Fs;
    fn fs_size(c, path_ptr: i32, path_len: i32) -> i64 {
        let r = size(&mut c, path_ptr, path_len);
        status64(&mut c, r)
    }
    fn fs_read(c, path_ptr: i32, path_len: i32, offset: i64, ptr: i32, len: i32) -> i32 {
        let r = read_file(&mut c, path_ptr, path_len, offset, ptr, len);
        status(&mut c, r)
    }
    fn fs_write(c, path_ptr: i32, path_len: i32, data_ptr: i32, data_len: i32, append: i32) -> i32 {
        let r = write_file(&mut c, path_ptr, path_len, data_ptr, data_len, append);
        status(&mut c, r)
    }
    fn fs_list(c, path_ptr: i32, path_len: i32, ptr: i32, cap: i32) -> i32 {
        let r = list(&mut c, path_ptr, path_len, ptr, cap);
        status(&mut c, r)
    }
    fn fs_mkdir(c, path_ptr: i32, path_len: i32) -> i32 {
        let r = mkdir(&mut c, path_ptr, path_len);
        status(&mut c, r)
    }
};

/// An `ERR_FS` failure.
pub(crate) fn fs_error(message: String) -> Fail {
    Fail(ErrorCode::Fs, message)
}

/// The guest path at `(ptr, len)` and the host path it resolves to for `need`.
pub(crate) fn resolve(
    c: &mut Ctx,
    ptr: i32,
    len: i32,
    need: Need,
) -> HostResult<(String, PathBuf)> {
    check_interrupt(c)?;
    let path = read_str(c, ptr, len, "the path")?;
    let host = c
        .data()
        .shared
        .files
        .resolve(&path, need)
        .map_err(fs_error)?;
    Ok((path, host))
}

/// An I/O error on `path`, as the guest named it.
pub(crate) fn io_error(doing: &str, path: &str, e: std::io::Error) -> Fail {
    fs_error(format!("cannot {doing} `{path}`: {e}"))
}

/// The file at `path`, opened to read; a folder is refused.
fn open_file(path: &str, host: &PathBuf) -> HostResult<File> {
    if host.is_dir() {
        return Err(fs_error(format!(
            "`{path}` is a folder, not a file; fs_list lists it"
        )));
    }
    File::open(host).map_err(|e| io_error("open", path, e))
}

fn size(c: &mut Ctx, path_ptr: i32, path_len: i32) -> HostResult<i64> {
    let (path, host) = resolve(c, path_ptr, path_len, Need::Read)?;
    let file = open_file(&path, &host)?;
    let len = file
        .metadata()
        .map_err(|e| io_error("read", &path, e))?
        .len();
    Ok(i64::try_from(len).unwrap_or(i64::MAX))
}

fn read_file(
    c: &mut Ctx,
    path_ptr: i32,
    path_len: i32,
    offset: i64,
    ptr: i32,
    len: i32,
) -> HostResult<i32> {
    let (path, host) = resolve(c, path_ptr, path_len, Need::Read)?;
    let offset = u64::try_from(offset).map_err(|_| {
        Fail(
            ErrorCode::Invalid,
            format!("offset {offset} is negative; a byte offset counts from the file's start"),
        )
    })?;
    let mut file = open_file(&path, &host)?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| io_error("read", &path, e))?;
    // Straight into guest memory, after the range is checked: no buffer of a size the
    // guest chose is allocated.
    let mem = memory(c)?;
    let data = mem.data_mut(&mut *c);
    let out = range(data.len(), ptr, len)?;
    let out = &mut data[out];
    let mut filled = 0;
    while filled < out.len() {
        match file.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("read", &path, e)),
        }
    }
    Ok(filled as i32)
}

fn write_file(
    c: &mut Ctx,
    path_ptr: i32,
    path_len: i32,
    data_ptr: i32,
    data_len: i32,
    append: i32,
) -> HostResult<i32> {
    let (path, host) = resolve(c, path_ptr, path_len, Need::Write)?;
    let append = match append {
        0 => false,
        1 => true,
        a => {
            return Err(Fail(
                ErrorCode::Invalid,
                format!("append is {a}: 0 replaces the file's contents, 1 appends to them"),
            ))
        }
    };
    let data = read(c, data_ptr, data_len)?;
    if host.is_dir() {
        return Err(fs_error(format!(
            "`{path}` is a folder; name a file to write"
        )));
    }
    let mut file = OpenOptions::new()
        .create(true)
        .write(true)
        .append(append)
        .truncate(!append)
        .open(&host)
        .map_err(|e| io_error("write", &path, e))?;
    file.write_all(&data)
        .map_err(|e| io_error("write", &path, e))?;
    Ok(0)
}

fn list(c: &mut Ctx, path_ptr: i32, path_len: i32, ptr: i32, cap: i32) -> HostResult<i32> {
    let path = read_str(c, path_ptr, path_len, "the path")?;
    let names = if path.split('/').all(|p| p.is_empty() || p == ".") {
        // The empty path lists the grants themselves.
        let grants = c.data().shared.files.list();
        grants.into_iter().map(|g| g.name + "/").collect()
    } else {
        let host = c
            .data()
            .shared
            .files
            .resolve(&path, Need::Read)
            .map_err(fs_error)?;
        if !host.is_dir() {
            return Err(fs_error(format!(
                "`{path}` is a file, not a folder; fs_size and fs_read read it"
            )));
        }
        let entries = std::fs::read_dir(&host).map_err(|e| io_error("list", &path, e))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error("list", &path, e))?;
            // A name that is not UTF-8 cannot be passed back as a path: it is left out.
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let dir = entry.path().is_dir();
            names.push(if dir { name + "/" } else { name });
        }
        names.sort();
        names
    };
    write_capped(c, ptr, cap, &encode_strings(&names))
}

fn mkdir(c: &mut Ctx, path_ptr: i32, path_len: i32) -> HostResult<i32> {
    let (path, host) = resolve(c, path_ptr, path_len, Need::Write)?;
    match std::fs::create_dir(&host) {
        // Ranks of one run make the same folder at once: one of them wins, none fails.
        Err(e) if !host.is_dir() => Err(io_error("make the folder", &path, e)),
        _ => Ok(0),
    }
}
