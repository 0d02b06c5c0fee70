//! `neuronlab tour`: the bundled prebuilt experiments, run through one session with magics,
//! with a few lines of narration before each. It needs no wasm32 toolchain.

use std::path::{Path, PathBuf};

use neuronlab_session::{Outcome, Session};

use crate::repl::interrupt::CtrlC;
use crate::repl::render::{paint, style, Renderer};

/// One step: narration, then a cell (with `{dir}` standing for the experiments folder).
struct Step {
    say: &'static str,
    cell: &'static str,
}

const STEPS: &[Step] = &[
    Step {
        say: "1/5 hello-tensors: eager ops on neuron:0. %load brings a prebuilt WebAssembly \
              module into the session and %run calls its `run` export. Each op runs at once \
              with real numerics; the summary after the output counts the cell's ops, with \
              their measured host time and modeled Trainium time.",
        cell: "%load {dir}/hello-tensors/hello-tensors.wasm\n%run run",
    },
    Step {
        say: "2/5 generation-cache: a decode step compiled with neuronlab::compile, run two \
              ways. With a growing input the shape changes every token, so the step recompiles \
              every time until it reaches its recompile limit and falls back to eager; with a \
              static padded cache it compiles once.",
        cell: "%load {dir}/generation-cache/generation-cache.wasm\n%run run",
    },
    Step {
        say: "Why did it recompile? %recompiles lists every compile of the session with its \
              reason: the guards that failed (here, the input's shape).",
        cell: "%recompiles",
    },
    Step {
        say: "3/5 bucketing: sequences of varying lengths through a compiled encoder layer. On \
              exact lengths every new length is a new graph; padded to multiples of 128 (with \
              a mask), the layer compiles once per bucket, with the same result.",
        cell: "%load {dir}/bucketing/bucketing.wasm\n%run run",
    },
    Step {
        say: "4/5 tp-mlp as 4 ranks (%spmd 4, as torchrun --nproc_per_node 4), one per \
              NeuronCore: a Megatron-style MLP with W1 split by columns and W2 by rows. One \
              all_reduce sums the ranks' shares, and each rank checks the result against the \
              unsplit MLP. Only rank 0 prints.",
        cell: "%spmd 4 {dir}/tp-mlp/tp-mlp.wasm",
    },
    Step {
        say: "%timeline draws the last cell's modeled device time, one row per core.",
        cell: "%timeline",
    },
    Step {
        say: "5/5 mesh-4x8 as 32 ranks: an [8, 4] device mesh, FSDP across 8 Trainium2 chips \
              and tensor parallelism over the 4 cores of each chip. tp collectives stay on a \
              chip; fsdp collectives cross the chip-to-chip links. The ranks' results are \
              checked bit for bit.",
        cell: "%spmd 32 {dir}/mesh-4x8/mesh-4x8.wasm",
    },
    Step {
        say: "%mem: HBM in use and peak on each core that held tensors, and the host memory cap.",
        cell: "%mem",
    },
];

/// The experiments folder: `dir` when given, else `notebooks/experiments` under the current
/// folder, else the one of the source tree this binary was built from.
pub fn experiments_dir(dir: Option<&Path>) -> Result<PathBuf, String> {
    let has_experiments = |d: &Path| d.join("hello-tensors/hello-tensors.wasm").is_file();
    if let Some(dir) = dir {
        return if has_experiments(dir) {
            Ok(dir.to_path_buf())
        } else {
            Err(format!(
                "{} holds no prebuilt experiments (hello-tensors/hello-tensors.wasm is missing)",
                dir.display()
            ))
        };
    }
    let here = PathBuf::from("notebooks/experiments");
    if has_experiments(&here) {
        return Ok(here);
    }
    let tree = Path::new(env!("CARGO_MANIFEST_DIR")).join("../notebooks/experiments");
    if has_experiments(&tree) {
        return Ok(tree.canonicalize().unwrap_or(tree));
    }
    Err(
        "the prebuilt experiments were not found: run the tour from a neuronlab checkout, or \
         give --dir PATH/notebooks/experiments"
            .to_string(),
    )
}

/// Runs the tour. A failed step is shown and the tour goes on; the result says which failed.
pub fn run(dir: Option<&Path>) -> Result<(), String> {
    let dir = experiments_dir(dir)?;
    let dir = dir.to_string_lossy();
    if dir.contains(char::is_whitespace) {
        return Err(format!(
            "the experiments folder {dir} has a space in its path, which %spmd cannot take: \
             run the tour from a path without spaces"
        ));
    }
    let mut session = Session::from_env()?;
    let ctrlc = CtrlC::install(session.interrupter())?;
    let mut renderer = Renderer::new();
    let colour = renderer.colour();
    let topology = session.runtime().topology();
    say(
        &mut renderer,
        &format!(
            "A tour of neuronlab: five prebuilt experiments, sandboxed WebAssembly guests, run \
             in one session on a simulated {} ({} NeuronCores). Each `In [n]:` is a cell you \
             can type in the REPL (`neuronlab` with no subcommand).",
            topology.instance_name(),
            topology.num_cores()
        ),
    );
    let mut failed = Vec::new();
    for step in STEPS {
        say(&mut renderer, step.say);
        let cell = step.cell.replace("{dir}", &dir);
        ctrlc.start_cell();
        match run_cell(&mut session, &mut renderer, colour, &cell) {
            Outcome::Ok => {}
            Outcome::Error => failed.push(session.execution_count()),
            Outcome::Interrupted => return Err("the tour was interrupted".into()),
        }
        if ctrlc.pressed() {
            return Err("the tour was interrupted".into());
        }
    }
    say(
        &mut renderer,
        "That was the tour. `neuronlab` starts the REPL, where cells are Rust (built for \
         wasm32: scripts/setup installs the toolchain) or the magics above; %help lists them. \
         `neuronlab exec FILE` runs a file of `# %%` cells.",
    );
    if failed.is_empty() {
        Ok(())
    } else {
        let list: Vec<String> = failed.iter().map(|n| format!("[{n}]")).collect();
        Err(format!("tour cells {} failed", list.join(", ")))
    }
}

/// Shows `cell` as if typed at the prompt, runs it and renders its outputs.
fn run_cell(session: &mut Session, renderer: &mut Renderer, colour: bool, cell: &str) -> Outcome {
    let n = session.execution_count() + 1;
    let mut echo = String::new();
    for (i, line) in cell.lines().enumerate() {
        let prompt = if i == 0 {
            format!("In [{n}]: ")
        } else {
            format!("{:>width$}: ", "...", width = format!("In [{n}]").len())
        };
        echo.push_str(&paint(colour, style::GREEN, &prompt));
        echo.push_str(line);
        echo.push('\n');
    }
    renderer.out(&echo);
    let outcome = session.execute(cell, &mut |o| renderer.output(n, o));
    renderer.finish();
    outcome
}

/// Narration: wrapped to 92 columns, cyan on a terminal, a blank line before.
fn say(renderer: &mut Renderer, text: &str) {
    let colour = renderer.colour();
    let mut out = String::from("\n");
    for line in wrap(text, 92) {
        out.push_str(&paint(colour, style::CYAN, &line));
        out.push('\n');
    }
    renderer.out(&out);
}

/// `text` as lines of at most `width` columns, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narration_wraps_at_spaces() {
        assert_eq!(wrap("a bb ccc dddd", 6), ["a bb", "ccc", "dddd"]);
        for step in STEPS {
            assert!(wrap(step.say, 92).iter().all(|l| l.chars().count() <= 92));
        }
    }

    #[test]
    fn the_source_tree_has_the_experiments() {
        let dir = experiments_dir(None).expect("the tree this test was built from");
        for step in STEPS {
            for word in step.cell.split_whitespace() {
                if let Some(rel) = word.strip_prefix("{dir}/") {
                    assert!(dir.join(rel).is_file(), "{rel} is missing");
                }
            }
        }
    }
}
