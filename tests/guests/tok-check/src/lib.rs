//! A test guest for tests/python/test_tokenizers.py: it runs the commands its arguments (what
//! follows `--` on `neuronlab run`) spell, each printing one line, and keeps going after a
//! command fails, printing `error: <ERR_*>: <message>`. Text goes in and out as hex of its
//! UTF-8 bytes, so any text survives the command line and the output lines.
//!
//! - `encode PATH SPECIAL HEX`: `ids <id> <id> ...` of the text, with special tokens when
//!   SPECIAL is 1;
//! - `decode PATH SKIP IDS`: `text <hex>` of the comma-separated IDS (`-` for none), skipping
//!   special tokens when SKIP is 1;
//! - `id PATH TOKEN`: `id <id>`, or `id none`;
//! - `vocab PATH`: `vocab <size>`;
//! - `clock`: `device_ns <before> <after> <ns>` around one bf16 matmul of m=1, n=k=1024 (and
//!   `host_us <us>` for contrast).

use neuronlab::prelude::*;
use neuronlab::println;
use neuronlab::tokenizer::Tokenizer;

fn unhex(hex: &str) -> Result<String> {
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
        })
        .collect();
    bytes
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| Error::new(ErrorKind::Invalid, format!("{hex:?} is not hex of UTF-8")))
}

fn hex(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

/// Runs one command; `args` are its operands.
fn command(name: &str, args: &[String]) -> Result<()> {
    let arg = |i: usize| args[i].as_str();
    match name {
        "encode" => {
            let tok = Tokenizer::from_file(arg(0))?;
            let ids = tok.encode(&unhex(arg(2))?, arg(1) == "1")?;
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            println!("ids {}", ids.join(" "));
        }
        "decode" => {
            let tok = Tokenizer::from_file(arg(0))?;
            let ids: Vec<i64> = match arg(2) {
                "-" => Vec::new(),
                list => list.split(',').map(|i| i.parse().unwrap_or(-1)).collect(),
            };
            println!("text {}", hex(&tok.decode(&ids, arg(1) == "1")?));
        }
        "id" => match Tokenizer::from_file(arg(0))?.token_to_id(arg(1))? {
            Some(id) => println!("id {id}"),
            None => println!("id none"),
        },
        "vocab" => println!("vocab {}", Tokenizer::from_file(arg(0))?.vocab_size()?),
        "clock" => {
            let x = zeros_with(&[1, 1024], ZerosOptions::new().dtype(DType::Bf16))?;
            let w = zeros_with(&[1024, 1024], ZerosOptions::new().dtype(DType::Bf16))?;
            let (before, host) = (neuronlab::device_time(), neuronlab::clock());
            let y = x.matmul(&w)?;
            let (after, host) = (neuronlab::device_time(), neuronlab::clock() - host);
            drop(y);
            println!(
                "device_ns {} {} {}",
                before.as_nanos(),
                after.as_nanos(),
                (after - before).as_nanos()
            );
            println!("host_us {}", host.as_micros());
        }
        other => println!("error: unknown command {other}"),
    }
    Ok(())
}

/// How many operands each command takes.
fn operands(name: &str) -> usize {
    match name {
        "encode" | "decode" => 3,
        "id" => 2,
        "vocab" => 1,
        _ => 0,
    }
}

fn run() -> Result<()> {
    let args = neuronlab::args();
    let mut rest = args.as_slice();
    while let Some((name, tail)) = rest.split_first() {
        let n = operands(name).min(tail.len());
        if let Err(e) = command(name, &tail[..n]) {
            println!("error: {e}");
        }
        rest = &tail[n..];
    }
    println!("done");
    Ok(())
}

neuronlab::main!(run);
