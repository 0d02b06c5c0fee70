//! A test guest for tests/python/test_checkpoints.py: it runs the commands its arguments
//! (what follows `--` on `neuronlab run`) spell, each printing one line per result, and keeps
//! going after a command fails, printing `error: <ERR_*>: <message>`:
//!
//! - `args`: prints its arguments, one `arg: <text>` line each;
//! - `load PATH`: loads a checkpoint and prints `meta <key>=<value>` lines, then one
//!   `tensor <name>\t<dtype>\t<shape>\t<hex of the bytes>` line per tensor;
//! - `copy SRC DST`: loads SRC and saves it as one file at DST, with SRC's metadata and
//!   `copied_by=neuronlab`;
//! - `shard SRC DST BYTES`: the same as a sharded folder of shards of at most BYTES;
//! - `read PATH`, `write PATH`, `list PATH`: the fs calls, printing what they got;
//! - `grants`: lists the granted folders.

use neuronlab::checkpoint;
use neuronlab::prelude::*;
use neuronlab::{fs, println};

/// The little-endian bytes of a tensor's elements, in hex.
fn hex(t: &Tensor) -> Result<String> {
    let bytes: Vec<u8> = match t.dtype() {
        DType::F32 => t.to_vec::<f32>()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::Bf16 => t.to_vec::<Bf16>()?.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        DType::F16 => t.to_vec::<F16>()?.iter().flat_map(|x| x.to_bits().to_le_bytes()).collect(),
        DType::F64 => t.to_vec::<f64>()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I64 => t.to_vec::<i64>()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::I32 => t.to_vec::<i32>()?.iter().flat_map(|x| x.to_le_bytes()).collect(),
        DType::U8 => t.to_vec::<u8>()?,
        DType::Bool => t.to_vec::<bool>()?.iter().map(|&b| b as u8).collect(),
    };
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The tensors of `ckpt` as `save` takes them, and its metadata with `copied_by`.
fn copy_of(ckpt: &checkpoint::Checkpoint) -> (Vec<(&str, &Tensor)>, Vec<(&str, &str)>) {
    let tensors = ckpt.tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut meta: Vec<(&str, &str)> =
        ckpt.metadata.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    meta.push(("copied_by", "neuronlab"));
    (tensors, meta)
}

/// Runs one command; `args` are its operands.
fn command(name: &str, args: &[String]) -> Result<()> {
    let arg = |i: usize| args[i].as_str();
    match name {
        "load" => {
            let ckpt = checkpoint::load(arg(0))?;
            for (k, v) in &ckpt.metadata {
                println!("meta {k}={v}");
            }
            for (n, t) in &ckpt.tensors {
                println!("tensor {n}\t{}\t{:?}\t{}", t.dtype(), t.shape(), hex(t)?);
            }
        }
        "copy" => {
            let ckpt = checkpoint::load(arg(0))?;
            let (tensors, meta) = copy_of(&ckpt);
            checkpoint::save(arg(1), &tensors, &meta)?;
            println!("saved {}", arg(1));
        }
        "shard" => {
            let ckpt = checkpoint::load(arg(0))?;
            let (tensors, meta) = copy_of(&ckpt);
            let bytes: u64 = arg(2).parse().unwrap_or(0);
            let shards = checkpoint::save_sharded(arg(1), &tensors, &meta, bytes)?;
            println!("saved {} in {shards} shards", arg(1));
        }
        "read" => println!("read {}", fs::read_to_string(arg(0))?.trim_end()),
        "write" => {
            fs::write_file(arg(0), "written by the guest\n")?;
            println!("wrote {}", arg(0));
        }
        "list" => println!("list {}", fs::list_dir(arg(0))?.join(" ")),
        "grants" => println!("grants {}", fs::list_dir("")?.join(" ")),
        "args" => {}
        other => println!("error: unknown command {other}"),
    }
    Ok(())
}

/// How many operands each command takes.
fn operands(name: &str) -> usize {
    match name {
        "load" | "read" | "write" | "list" => 1,
        "copy" => 2,
        "shard" => 3,
        _ => 0,
    }
}

fn run() -> Result<()> {
    let args = neuronlab::args();
    let mut rest = args.as_slice();
    while let Some((name, tail)) = rest.split_first() {
        let n = operands(name).min(tail.len());
        if name == "args" {
            for a in &args {
                println!("arg: {a}");
            }
        }
        if let Err(e) = command(name, &tail[..n]) {
            println!("error: {e}");
        }
        rest = &tail[n..];
    }
    println!("done");
    Ok(())
}

neuronlab::main!(run);
