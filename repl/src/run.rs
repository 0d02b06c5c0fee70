//! `neuronlab run`: one guest module, its output streamed to the terminal, then the event
//! summary; a trap or host error exits non-zero with the error.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use neuronlab_runtime::device::topology::CoreId;
use neuronlab_runtime::events::{LogFilter, Summary};
use neuronlab_runtime::sandbox::{GuestOutput, Limits, ModuleSource, Sandbox};
use neuronlab_runtime::tensor::{format_tensor, FormatOptions};
use neuronlab_runtime::Runtime;

/// Renders one piece of guest output on a terminal.
fn show(output: GuestOutput) {
    match output {
        GuestOutput::Stdout(text) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        }
        GuestOutput::Stderr(text) => eprint!("{text}"),
        GuestOutput::Tensor(t) => println!("{}", format_tensor(&t, &FormatOptions::default())),
        GuestOutput::Display { mime, data } if mime.starts_with("text/plain") => {
            println!("{}", String::from_utf8_lossy(&data))
        }
        GuestOutput::Display { mime, data } => {
            println!("[{mime}: {} bytes; shown in notebooks]", data.len())
        }
    }
}

/// Runs `entry` of the module at `path` with `args`.
pub fn run(path: &Path, entry: &str, args: &[String], limits: Limits) -> Result<(), String> {
    let sandbox = Sandbox::shared().map_err(|e| e.to_string())?;
    let module = sandbox.load_file(path).map_err(|e| e.to_string())?;
    let runtime = Arc::new(Runtime::from_env().map_err(|e| e.to_string())?);
    let logs = LogFilter::from_env()?;
    if !logs.is_empty() {
        runtime.bus().subscribe(Box::new(move |event| {
            if let Some(line) = logs.line(event) {
                eprintln!("{line}");
            }
        }));
    }
    let mut guest = sandbox
        .instantiate(&module, runtime.clone(), CoreId(0), limits, Box::new(show))
        .map_err(|e| e.to_string())?;
    let result = guest.call(entry, args);
    let events = runtime.bus().events();
    let source = match &module.source {
        ModuleSource::Compiled => "compiled".to_string(),
        ModuleSource::DiskCache => "loaded from the module cache".to_string(),
        ModuleSource::Recompiled(why) => format!("recompiled ({why})"),
    };
    eprintln!(
        "\n-- {} {source} in {:.1} ms\n-- {}",
        module.name,
        module.load_time.as_secs_f64() * 1e3,
        Summary::from_events(&events)
            .to_string()
            .replace('\n', "\n-- ")
    );
    let values = result.map_err(|e| e.to_string())?;
    if !values.is_empty() {
        println!("{entry} returned {}", values.join(", "));
    }
    Ok(())
}
