//! `neuronlab`: the command-line front end. Each subcommand is a thin layer over
//! `neuronlab-runtime`; the logic lives there.

mod demo;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use neuronlab_runtime::device::topology::Topology;
use neuronlab_runtime::ops::Registry;

/// An interactive lab for the eager Neuron tensor runtime, simulated on the CPU.
#[derive(Parser)]
#[command(name = "neuronlab", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a small transformer block eagerly on a simulated NeuronCore and shows every op with
    /// its host time and modeled Trainium time.
    Demo {
        /// Also write a Chrome trace (open it in Perfetto or chrome://tracing).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Tokens in the batch.
        #[arg(long, default_value_t = 128)]
        tokens: usize,
    },
    /// Lists the op registry, or shows one op.
    Ops {
        /// An op name.
        name: Option<String>,
        /// Print the registry as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describes the simulated instance (honours NEURONLAB_INSTANCE,
    /// NEURON_LOGICAL_NC_CONFIG and NEURON_RT_VISIBLE_CORES).
    Devices {
        /// An instance preset: trn2.48xlarge, trn2.3xlarge, trn1.32xlarge, trn1.2xlarge.
        #[arg(long)]
        instance: Option<String>,
        /// Logical NeuronCore config (1 or 2 on Trainium2).
        #[arg(long)]
        lnc: Option<u32>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { trace, tokens } => demo::run(tokens, trace.as_deref()),
        Command::Ops { name, json } => ops(name.as_deref(), json),
        Command::Devices { instance, lnc } => devices(instance.as_deref(), lnc),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ops(name: Option<&str>, json: bool) -> Result<(), String> {
    let registry = Registry::global();
    match (name, json) {
        (Some(name), _) => {
            let (_, op) = registry.lookup(name)?;
            println!(
                "{}\n    {}\n    group: {}",
                op.schema(),
                op.doc,
                op.group.name()
            );
        }
        (None, true) => {
            let ops: Vec<serde_json::Value> = registry
                .ops()
                .iter()
                .map(|op| {
                    serde_json::json!({
                        "name": op.name,
                        "group": op.group.name(),
                        "schema": op.schema(),
                        "doc": op.doc,
                    })
                })
                .collect();
            println!("{}", serde_json::Value::Array(ops));
        }
        (None, false) => print!("{}", registry.listing()),
    }
    Ok(())
}

fn devices(instance: Option<&str>, lnc: Option<u32>) -> Result<(), String> {
    let topology = match instance {
        Some(name) => Topology::preset(name, lnc),
        None if lnc.is_some() => Topology::preset("trn2.48xlarge", lnc),
        None => Topology::from_env(),
    }
    .map_err(|e| e.to_string())?;
    println!("{}", topology.report());
    Ok(())
}
