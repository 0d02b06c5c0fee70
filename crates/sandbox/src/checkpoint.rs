//! Checkpoints in Hugging Face's safetensors format: one `.safetensors` file, or a sharded
//! folder of them with a `*.safetensors.index.json` whose `weight_map` says which file holds
//! each tensor.
//!
//! Loading reads every header first and checks it where the format leaves room for a bad
//! file (a header length past the end, offsets that overlap, leave gaps or run past the data,
//! a dtype neuronlab does not have, data cut short), then checks that all the tensors fit the
//! host cap and the core's HBM, and only then reads the data, each tensor straight into a
//! tensor on the core (accounted like any other). Saving writes through the `safetensors`
//! crate, so Python's `safetensors` reads the files bit for bit. Tensor names are kept as
//! given and `__metadata__` is kept.
//!
//! Every path is a guest path, turned into a host path by the caller's resolver (the grants
//! check), so the shards an index names are checked like any other file.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::View;
use safetensors::Dtype;
use serde_json::Value;

use crate::grants::Need;
use neuronlab_core::device::host::HOST_MEM_LIMIT_VAR;
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::events::fmt::{bytes, bytes_exact};
use neuronlab_core::tensor::{checked_numel, Buffer, DType, Tensor};
use neuronlab_core::Runtime;

/// Turns a guest path into the host path to use for `Need`, or says why not.
pub type Resolve<'a> = &'a dyn Fn(&str, Need) -> Result<PathBuf, String>;

/// The largest header read, as the reference implementation allows.
const MAX_HEADER: u64 = 100_000_000;

/// The index file a sharded save writes, as Hugging Face names it.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// What kind of failure a checkpoint operation had.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The file or folder cannot be read or written, or is not a valid checkpoint.
    File,
    /// The tensors do not fit the host cap or the core's HBM.
    Memory,
    /// The caller's request is wrong (a name given twice, a bad shard size).
    Invalid,
    /// The caller asked to stop.
    Cancelled,
}

/// Why a checkpoint could not be loaded or saved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointError {
    /// What kind of failure.
    pub kind: FailureKind,
    /// What went wrong and what to do.
    pub message: String,
}

fn file_error(message: String) -> CheckpointError {
    CheckpointError {
        kind: FailureKind::File,
        message,
    }
}

fn invalid(message: String) -> CheckpointError {
    CheckpointError {
        kind: FailureKind::Invalid,
        message,
    }
}

/// One tensor of a checkpoint: where its bytes are.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    /// The host file that holds it.
    file: PathBuf,
    /// Its bytes' absolute offset in the file, and their count.
    start: u64,
    len: u64,
}

impl Entry {
    /// A header's tensor `(name, dtype, shape, start, end)`, its offsets relative to the data
    /// that begins at `data_start` in `file`.
    fn new(tensor: (String, DType, Vec<usize>, u64, u64), file: &Path, data_start: u64) -> Entry {
        let (name, dtype, shape, start, end) = tensor;
        Entry {
            name,
            dtype,
            shape,
            file: file.to_path_buf(),
            start: data_start + start,
            len: end - start,
        }
    }
}

/// A checkpoint's headers, read and checked: its tensors' names, dtypes and shapes, and its
/// metadata. [`Contents::load`] reads the data.
#[derive(Clone, Debug)]
pub struct Contents {
    /// The checkpoint as the caller named it, for messages.
    shown: String,
    /// By name.
    entries: Vec<Entry>,
    metadata: BTreeMap<String, String>,
}

impl Contents {
    /// The tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.name.as_str())
    }

    /// `__metadata__` of a single file, or the `metadata` of a sharded folder's index (with
    /// values that are not strings as their JSON text, as `total_size`).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The bytes of all the tensors' data.
    pub fn nbytes(&self) -> u64 {
        self.entries.iter().map(|e| e.len).sum()
    }

    /// Reads every tensor onto `core`, in [`Contents::names`]' order. Fails before reading
    /// any data when the tensors do not fit what is left of the host cap or of the core's
    /// HBM. `stop` is asked before each piece read (at most [`READ_PIECE`] bytes), and the
    /// runtime's [`activities`](Runtime::activities) show the bytes read so far.
    pub fn load(
        &self,
        runtime: &Runtime,
        core: CoreId,
        stop: &dyn Fn() -> bool,
    ) -> Result<Vec<(String, Tensor)>, CheckpointError> {
        let total = self.nbytes();
        let memory = runtime.memory();
        let host_free = memory.host_limit().saturating_sub(memory.host_in_use());
        let too_large = |why: String| CheckpointError {
            kind: FailureKind::Memory,
            message: format!(
                "`{}` holds {} of tensors, {why}; nothing was read",
                self.shown,
                bytes_exact(total)
            ),
        };
        if total > host_free {
            return Err(too_large(format!(
                "more than the {} left of the {} host limit; free tensors, or raise \
                 {HOST_MEM_LIMIT_VAR} (e.g. {HOST_MEM_LIMIT_VAR}=64GiB)",
                bytes(host_free),
                bytes(memory.host_limit())
            )));
        }
        let stats = memory
            .stats(core)
            .map_err(|e| invalid(format!("cannot load onto {core}: {e}")))?;
        let hbm_free = stats.capacity.saturating_sub(stats.in_use);
        if total > hbm_free {
            return Err(too_large(format!(
                "more than the {} of HBM free on {core} (of {}); free tensors on it \
                 first, or pick an instance with more HBM per core (%device)",
                bytes(hbm_free),
                bytes(stats.capacity)
            )));
        }
        let activity = runtime
            .activities()
            .begin(format!("loading `{}`", self.shown), total);
        let interrupted = || CheckpointError {
            kind: FailureKind::Cancelled,
            message: format!("interrupted while loading `{}`", self.shown),
        };
        let mut open: Option<(&Path, File)> = None;
        let mut out = Vec::with_capacity(self.entries.len());
        for e in &self.entries {
            let file = match &mut open {
                Some((path, file)) if *path == e.file.as_path() => file,
                slot => {
                    let file = File::open(&e.file).map_err(|err| {
                        file_error(format!("cannot open {}: {err}", e.file.display()))
                    })?;
                    &mut slot.insert((e.file.as_path(), file)).1
                }
            };
            let mut data = vec![0u8; e.len as usize];
            let read_error = |err: std::io::Error| {
                file_error(format!(
                    "cannot read tensor `{}` of `{}`: {err}",
                    e.name, self.shown
                ))
            };
            file.seek(SeekFrom::Start(e.start)).map_err(read_error)?;
            // In pieces, so a large tensor shows progress and an interrupt stops it.
            for piece in data.chunks_mut(READ_PIECE) {
                if stop() {
                    return Err(interrupted());
                }
                file.read_exact(piece).map_err(read_error)?;
                activity.advance(piece.len() as u64);
            }
            let buffer =
                Buffer::from_le_bytes(e.dtype, &data).expect("length checked against the dtype");
            drop(data);
            let t = runtime
                .tensor_on(core, buffer, &e.shape)
                .map_err(|err| CheckpointError {
                    kind: FailureKind::Memory,
                    message: format!("tensor `{}` of `{}`: {err}", e.name, self.shown),
                })?;
            out.push((e.name.clone(), t));
        }
        Ok(out)
    }
}

/// How much of a tensor's data is read at once.
const READ_PIECE: usize = 16 << 20;

/// The neuronlab dtype of a safetensors dtype, if it has one.
fn to_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::BF16 => DType::Bf16,
        Dtype::F16 => DType::F16,
        Dtype::F64 => DType::F64,
        Dtype::I64 => DType::I64,
        Dtype::I32 => DType::I32,
        Dtype::U8 => DType::U8,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

/// The safetensors dtype of a neuronlab dtype.
fn from_dtype(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::Bf16 => Dtype::BF16,
        DType::F16 => Dtype::F16,
        DType::F64 => Dtype::F64,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
    }
}

/// The safetensors names of the dtypes neuronlab has, for messages.
fn supported() -> String {
    let names: Vec<String> = DType::ALL
        .iter()
        .map(|&d| format!("{:?}", from_dtype(d)))
        .collect();
    names.join(", ")
}

/// The header of one safetensors file: its tensors in offset order, and `__metadata__`.
#[derive(Debug)]
struct Header {
    /// `(name, dtype, shape, start, end)`, offsets into the data section.
    tensors: Vec<(String, DType, Vec<usize>, u64, u64)>,
    metadata: BTreeMap<String, String>,
}

/// Parses and checks the JSON header of `shown`, whose data section holds `data_len` bytes.
fn parse_header(json: &[u8], data_len: u64, shown: &str) -> Result<Header, CheckpointError> {
    let bad = |why: String| {
        Err(file_error(format!(
            "`{shown}` is not a valid safetensors file: {why}"
        )))
    };
    let map: BTreeMap<String, Value> = match serde_json::from_slice(json) {
        Ok(m) => m,
        Err(e) => return bad(format!("its header is not a JSON object ({e})")),
    };
    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::new();
    for (name, info) in map {
        if name == "__metadata__" {
            let Value::Object(fields) = info else {
                return bad("`__metadata__` is not an object of strings".into());
            };
            for (k, v) in fields {
                let Value::String(v) = v else {
                    return bad(format!("`__metadata__` value `{k}` is not a string"));
                };
                metadata.insert(k, v);
            }
            continue;
        }
        let field = |key: &str| {
            info.get(key).cloned().ok_or_else(|| {
                file_error(format!(
                    "`{shown}` is not a valid safetensors file: tensor `{name}` has no `{key}`"
                ))
            })
        };
        let dtype = match field("dtype")? {
            Value::String(text) => {
                match serde_json::from_value::<Dtype>(Value::String(text.clone())) {
                    Ok(d) => to_dtype(d).ok_or_else(|| {
                        file_error(format!(
                        "tensor `{name}` of `{shown}` has dtype {text}, which neuronlab does not \
                         have (it has {}); convert the checkpoint to one of those",
                        supported()
                    ))
                    })?,
                    Err(_) => {
                        return bad(format!(
                            "tensor `{name}` has dtype `{text}`, which is not a safetensors dtype"
                        ))
                    }
                }
            }
            other => return bad(format!("tensor `{name}` has dtype {other}, not a name")),
        };
        let numbers = |key: &str| -> Result<Vec<u64>, CheckpointError> {
            let value = field(key)?;
            value
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
                .ok_or_else(|| {
                    file_error(format!(
                        "`{shown}` is not a valid safetensors file: tensor `{name}` has `{key}` \
                         {value}, not a list of whole numbers"
                    ))
                })
        };
        let shape: Vec<usize> = numbers("shape")?
            .into_iter()
            .map(|d| usize::try_from(d).unwrap_or(usize::MAX))
            .collect();
        let [start, end] = numbers("data_offsets")?[..] else {
            return bad(format!(
                "tensor `{name}` has `data_offsets` that are not two numbers"
            ));
        };
        let needed = checked_numel(&shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .and_then(|n| u64::try_from(n).ok());
        match needed {
            _ if end < start => {
                return bad(format!(
                    "tensor `{name}` ends (byte {end}) before it starts ({start})"
                ))
            }
            Some(n) if n == end - start => {}
            Some(n) => {
                return bad(format!(
                    "tensor `{name}` is {} {shape:?}, which takes {n} bytes, but its offsets \
                     span {}",
                    dtype.name(),
                    end - start
                ))
            }
            None => {
                return bad(format!(
                    "tensor `{name}` has shape {shape:?}, which overflows"
                ))
            }
        }
        tensors.push((name, dtype, shape, start, end));
    }
    tensors.sort_by_key(|t| (t.3, t.4));
    let mut at = 0;
    let mut previous: Option<&str> = None;
    for (name, _, _, start, end) in &tensors {
        if *start < at {
            return bad(format!(
                "tensor `{name}` (bytes {start}..{end}) overlaps tensor `{}`",
                previous.unwrap_or("?")
            ));
        }
        if *start > at {
            return bad(format!(
                "bytes {at}..{start} before tensor `{name}` belong to no tensor"
            ));
        }
        at = *end;
        previous = Some(name);
    }
    if at > data_len {
        return bad(format!(
            "it is truncated: its tensors need {at} bytes of data, but only {data_len} follow \
             the header"
        ));
    }
    if at < data_len {
        return bad(format!(
            "{} bytes after its last tensor belong to no tensor",
            data_len - at
        ));
    }
    Ok(Header { tensors, metadata })
}

/// Reads and checks the header of the safetensors file `host` (`shown` to the user): its
/// header and where its data starts.
fn read_file_header(host: &Path, shown: &str) -> Result<(Header, u64), CheckpointError> {
    let cannot = |e: std::io::Error| file_error(format!("cannot read `{shown}`: {e}"));
    let mut file = File::open(host).map_err(cannot)?;
    let file_len = file.metadata().map_err(cannot)?.len();
    let bad = |why: String| file_error(format!("`{shown}` is not a valid safetensors file: {why}"));
    if file_len < 8 {
        return Err(bad(format!(
            "it holds {file_len} bytes, less than the 8-byte header length it starts with"
        )));
    }
    let mut word = [0u8; 8];
    file.read_exact(&mut word).map_err(cannot)?;
    let n = u64::from_le_bytes(word);
    if n > MAX_HEADER {
        return Err(bad(format!(
            "its header length {n} is more than the {MAX_HEADER} bytes a header may have"
        )));
    }
    if n > file_len - 8 {
        return Err(bad(format!(
            "its header length {n} is more than the {} bytes that follow it",
            file_len - 8
        )));
    }
    let mut json = vec![0u8; n as usize];
    file.read_exact(&mut json).map_err(cannot)?;
    let data_start = 8 + n;
    Ok((
        parse_header(&json, file_len - data_start, shown)?,
        data_start,
    ))
}

/// The parent of a guest path (`""` for a grant's name alone).
fn guest_parent(path: &str) -> &str {
    path.trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(dir, _)| dir)
}

/// Reads and checks the headers of the checkpoint at the guest path `path`: a `.safetensors`
/// file, a sharded checkpoint's index file, or the folder that holds the index.
pub fn inspect(path: &str, resolve: Resolve) -> Result<Contents, CheckpointError> {
    let host = resolve(path, Need::Read).map_err(file_error)?;
    let index = if host.is_dir() {
        Some(format!(
            "{}/{}",
            path.trim_end_matches('/'),
            find_index(&host, path)?
        ))
    } else if path.ends_with(".index.json") {
        Some(path.to_string())
    } else {
        None
    };
    let Some(index) = index else {
        let (header, data_start) = read_file_header(&host, path)?;
        let entries = header
            .tensors
            .into_iter()
            .map(|t| Entry::new(t, &host, data_start))
            .collect();
        return Ok(sorted(path, entries, header.metadata));
    };
    inspect_sharded(path, &index, resolve)
}

/// The `*.safetensors.index.json` in the folder `host` (`shown`): `model.safetensors.index.json`
/// when there are several.
fn find_index(host: &Path, shown: &str) -> Result<String, CheckpointError> {
    let entries =
        std::fs::read_dir(host).map_err(|e| file_error(format!("cannot list `{shown}`: {e}")))?;
    let mut found: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".safetensors.index.json"))
        .collect();
    found.sort();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => Err(file_error(format!(
            "`{shown}` is a folder without a `*.safetensors.index.json`; name a .safetensors \
             file, or the folder of a sharded checkpoint"
        ))),
        several if several.iter().any(|n| n == INDEX_FILE) => Ok(INDEX_FILE.to_string()),
        several => Err(file_error(format!(
            "`{shown}` holds several indexes ({}); name the one to load",
            several.join(", ")
        ))),
    }
}

fn sorted(shown: &str, mut entries: Vec<Entry>, metadata: BTreeMap<String, String>) -> Contents {
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Contents {
        shown: shown.to_string(),
        entries,
        metadata,
    }
}

/// A sharded checkpoint: the index at the guest path `index` names each tensor's shard,
/// a file beside it.
fn inspect_sharded(
    shown: &str,
    index: &str,
    resolve: Resolve,
) -> Result<Contents, CheckpointError> {
    let host = resolve(index, Need::Read).map_err(file_error)?;
    let text =
        std::fs::read(&host).map_err(|e| file_error(format!("cannot read `{index}`: {e}")))?;
    let bad =
        |why: String| file_error(format!("`{index}` is not a valid safetensors index: {why}"));
    let Ok(Value::Object(mut root)) = serde_json::from_slice::<Value>(&text) else {
        return Err(bad("it is not a JSON object".into()));
    };
    let metadata: BTreeMap<String, String> = match root.remove("metadata") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => (k, s),
                other => (k, other.to_string()),
            })
            .collect(),
        Some(_) => return Err(bad("`metadata` is not an object".into())),
    };
    let Some(Value::Object(weight_map)) = root.remove("weight_map") else {
        return Err(bad(
            "it has no `weight_map` object (tensor name to shard file)".into(),
        ));
    };
    let mut by_shard: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, file) in weight_map {
        let Value::String(file) = file else {
            return Err(bad(format!(
                "`weight_map` gives tensor `{name}` no file name"
            )));
        };
        let plain = !file.is_empty() && file != "." && file != ".." && !file.contains(['/', '\\']);
        if !plain {
            return Err(bad(format!(
                "`weight_map` puts tensor `{name}` in `{file}`, which is not a file beside the \
                 index"
            )));
        }
        by_shard.entry(file).or_default().push(name);
    }
    let folder = guest_parent(index);
    let mut entries = Vec::new();
    for (file, names) in by_shard {
        let shard = if folder.is_empty() {
            file.clone()
        } else {
            format!("{folder}/{file}")
        };
        let host = resolve(&shard, Need::Read).map_err(file_error)?;
        let (header, data_start) = read_file_header(&host, &shard)?;
        for tensor in header.tensors {
            if !names.contains(&tensor.0) {
                return Err(bad(format!(
                    "`{shard}` holds tensor `{}`, which `weight_map` does not put there",
                    tensor.0
                )));
            }
            entries.push(Entry::new(tensor, &host, data_start));
        }
        if let Some(missing) = names
            .iter()
            .find(|n| !entries.iter().any(|e| &e.name == *n))
        {
            return Err(bad(format!(
                "`weight_map` puts tensor `{missing}` in `{shard}`, which does not hold it"
            )));
        }
    }
    Ok(sorted(shown, entries, metadata))
}

/// A tensor as the `safetensors` crate writes it: its dense little-endian bytes.
struct Data<'a>(&'a Tensor);

impl View for Data<'_> {
    fn dtype(&self) -> Dtype {
        from_dtype(self.0.dtype())
    }
    fn shape(&self) -> &[usize] {
        self.0.shape()
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.0.to_buffer().to_le_bytes())
    }
    fn data_len(&self) -> usize {
        self.0.nbytes()
    }
}

/// Writes `tensors` (names as given) with `metadata` to the host file `host` (`shown`).
fn write_file(
    host: &Path,
    shown: &str,
    tensors: &[(&str, &Tensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    let data = tensors.iter().map(|(name, t)| (*name, Data(t)));
    let info: HashMap<String, String> = metadata.clone().into_iter().collect();
    let info = (!info.is_empty()).then_some(info);
    safetensors::serialize_to_file(data, info, host)
        .map_err(|e| file_error(format!("cannot write `{shown}`: {e}")))
}

/// Saves `tensors` (names as given, each once) with `metadata` at the guest path `path`: one
/// `.safetensors` file when `shard_bytes` is `None`, else a folder of shards of at most
/// `shard_bytes` each (a larger tensor gets a shard of its own) with
/// [`INDEX_FILE`], whose metadata is `metadata` and `total_size`. Returns the number of
/// `.safetensors` files written.
pub fn save(
    path: &str,
    resolve: Resolve,
    tensors: &[(String, Tensor)],
    metadata: &BTreeMap<String, String>,
    shard_bytes: Option<u64>,
) -> Result<usize, CheckpointError> {
    let mut seen = std::collections::HashSet::new();
    for (name, _) in tensors {
        if name == "__metadata__" {
            return Err(invalid(
                "`__metadata__` is the header's metadata entry; name the tensor otherwise".into(),
            ));
        }
        if !seen.insert(name.as_str()) {
            return Err(invalid(format!(
                "tensor `{name}` is given twice; each name holds one tensor"
            )));
        }
    }
    let Some(limit) = shard_bytes else {
        let host = resolve(path, Need::Write).map_err(file_error)?;
        let list: Vec<(&str, &Tensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        write_file(&host, path, &list, metadata)?;
        return Ok(1);
    };
    if limit == 0 {
        return Err(invalid("a shard holds at least one byte".into()));
    }
    let folder = path.trim_end_matches('/');
    let host = resolve(folder, Need::Write).map_err(file_error)?;
    if !host.is_dir() {
        std::fs::create_dir(&host)
            .map_err(|e| file_error(format!("cannot make the folder `{folder}`: {e}")))?;
    }
    let mut shards: Vec<Vec<(&str, &Tensor)>> = Vec::new();
    let mut filled = 0u64;
    for (name, t) in tensors {
        let n = t.nbytes() as u64;
        match shards.last_mut() {
            Some(shard) if filled + n <= limit => {
                shard.push((name.as_str(), t));
                filled += n;
            }
            _ => {
                shards.push(vec![(name.as_str(), t)]);
                filled = n;
            }
        }
    }
    if shards.is_empty() {
        shards.push(Vec::new());
    }
    let count = shards.len();
    let mut weight_map = serde_json::Map::new();
    for (i, shard) in shards.iter().enumerate() {
        let file = format!("model-{:05}-of-{count:05}.safetensors", i + 1);
        let shown = format!("{folder}/{file}");
        let host = resolve(&shown, Need::Write).map_err(file_error)?;
        write_file(&host, &shown, shard, metadata)?;
        for (name, _) in shard {
            weight_map.insert(name.to_string(), Value::String(file.clone()));
        }
    }
    let total: u64 = tensors.iter().map(|(_, t)| t.nbytes() as u64).sum();
    let mut meta: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    meta.insert("total_size".into(), Value::from(total));
    let index = serde_json::json!({ "metadata": meta, "weight_map": weight_map });
    let shown = format!("{folder}/{INDEX_FILE}");
    let host = resolve(&shown, Need::Write).map_err(file_error)?;
    let text = serde_json::to_string_pretty(&index).expect("JSON values serialize");
    std::fs::write(&host, text + "\n")
        .map_err(|e| file_error(format!("cannot write `{shown}`: {e}")))?;
    Ok(count)
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
