//! `neuronlab-kernel`: the Jupyter kernel (started by Jupyter with a connection file), and
//! the commands that install its kernelspec.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use neuronlab_kernel::install::{self, Place};
use neuronlab_kernel::server;

// The front ends run on mimalloc: see "Allocator" in ARCHITECTURE.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Installs the kernelspec `neuronlab` (kernel.json and logos); --user by default.
    Install(Location),
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
    let cli = Cli::parse();
    let result = match (cli.command, cli.connection_file) {
        (Some(Command::Install(location)), _) => install_here(&location.place()),
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
