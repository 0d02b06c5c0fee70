//! `neuronlab-kernel`: the Jupyter kernel (started by Jupyter with a connection file), and
//! the commands that install its kernelspec.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use neuronlab_kernel::install::{self, Place};
use neuronlab_kernel::server;
use neuronlab_session::{Output, Session};

// The front ends run on mimalloc: see "The front ends run on mimalloc" in ARCHITECTURE.md.
#[global_allocator]
static ALLOCATOR: neuronlab_core::allocator::MiMalloc = neuronlab_core::allocator::MiMalloc;

#[derive(Parser)]
#[command(
    name = "neuronlab-kernel",
    version,
    about = "The neuronlab Jupyter kernel: Rust cells on a simulated Trainium.",
    long_about = "The neuronlab Jupyter kernel: Rust cells on a simulated Trainium.\n\n\
                  Jupyter starts it with --connection-file; run `neuronlab-kernel install` \
                  once so that Jupyter lists it."
)]
struct Cli {
    /// The connection file Jupyter wrote for this kernel.
    #[arg(long, short = 'f', value_name = "FILE")]
    connection_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Installs the kernelspec `neuronlab` (kernel.json and logos); --user by default. Then
    /// builds the standard library and the SDK for Rust cells, so the first cell is fast.
    Install {
        #[command(flatten)]
        location: Location,
        /// Only install: leave the build of the standard library and the SDK to the first
        /// Rust cell (about a minute).
        #[arg(long)]
        no_prebuild: bool,
    },
    /// Removes the kernelspec `neuronlab`; --user by default.
    Uninstall(Location),
}

/// Where the kernelspec goes (default: --user).
#[derive(Args)]
#[group(multiple = false)]
struct Location {
    /// The user's Jupyter data folder ($JUPYTER_DATA_DIR, else ~/.local/share/jupyter).
    #[arg(long)]
    user: bool,
    /// The environment of the python3 on PATH (sys.prefix/share/jupyter).
    #[arg(long)]
    sys_prefix: bool,
    /// DIR/share/jupyter (list DIR/share/jupyter in JUPYTER_PATH for Jupyter to find it).
    #[arg(long, value_name = "DIR")]
    prefix: Option<PathBuf>,
}

impl Location {
    fn place(&self) -> Place {
        match (&self.prefix, self.sys_prefix) {
            (Some(dir), _) => Place::Prefix(dir.clone()),
            (None, true) => Place::SysPrefix,
            (None, false) => Place::User,
        }
    }
}

fn main() -> ExitCode {
    neuronlab_core::allocator::keep_freed_memory();
    let cli = Cli::parse();
    let result = match (cli.command, cli.connection_file) {
        (
            Some(Command::Install {
                location,
                no_prebuild,
            }),
            _,
        ) => install_here(&location.place()).map(|()| {
            if !no_prebuild {
                prebuild();
            }
        }),
        (Some(Command::Uninstall(location)), _) => {
            install::uninstall(&location.place()).map(|removed| match removed {
                Some(dir) => println!("removed the kernelspec {}", dir.display()),
                None => println!(
                    "the kernelspec {} was not installed there",
                    install::KERNEL_NAME
                ),
            })
        }
        (None, Some(file)) => server::run(&file),
        (None, None) => Err("Jupyter starts this kernel with --connection-file FILE; \
             run `neuronlab-kernel install` to register it with Jupyter (--help for more)"
            .to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "neuronlab-kernel: {e}");
            ExitCode::from(2)
        }
    }
}

/// Builds what Rust cells link, with progress on stderr. Installing still succeeds when it
/// cannot (no wasm32 toolchain, say): the note says why and what the first cell will do.
fn prebuild() {
    let mut session = match Session::from_env() {
        Ok(session) => session,
        Err(e) => {
            eprintln!("note: no prebuild of the standard library and the SDK: {e}");
            return;
        }
    };
    let terminal = std::io::stderr().is_terminal();
    let mut failed = None;
    session.prebuild(&mut |output| match output {
        Output::Progress(progress) => {
            if let Some(text) = progress.terminal_text(terminal) {
                eprint!("{text}");
            }
        }
        Output::Error(e) => failed = Some(e.head()),
        _ => {}
    });
    if let Some(why) = failed {
        eprintln!(
            "note: the standard library and the SDK were not prebuilt, so the first Rust cell \
             builds them (about a minute): {why}"
        );
    }
}

fn install_here(place: &Place) -> Result<(), String> {
    let exe = std::env::current_exe()
        .and_then(|p| p.canonicalize())
        .map_err(|e| format!("cannot find this binary's path: {e}"))?;
    let dir = install::install(place, &exe)?;
    println!(
        "installed the kernelspec {} in {}",
        install::KERNEL_NAME,
        dir.display()
    );
    if let Some(note) = install::search_path_note(place) {
        println!("{note}");
    }
    Ok(())
}
