//! Ctrl-C while a cell runs: the SIGINT handler interrupts the cell through the session's
//! [`Interrupter`]. At the REPL's prompt the line editor reads Ctrl-C as a key instead.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use neuronlab_session::Interrupter;

/// How many presses in one cell make the process leave (for a cell that does not stop).
const QUIT_AFTER: u32 = 3;

/// The installed handler's state.
pub struct CtrlC {
    presses: Arc<AtomicU32>,
}

impl CtrlC {
    /// Installs the SIGINT handler (once per process).
    pub fn install(interrupter: Interrupter) -> Result<CtrlC, String> {
        let presses = Arc::new(AtomicU32::new(0));
        let seen = presses.clone();
        ctrlc::set_handler(move || {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            interrupter.interrupt();
            if n == 1 && std::io::stderr().is_terminal() {
                // The terminal echoed `^C`: what the cell reports next starts on a new line.
                eprintln!();
            } else if n == QUIT_AFTER - 1 {
                eprintln!("\n(interrupting; press Ctrl-C once more to quit neuronlab)");
            } else if n >= QUIT_AFTER {
                eprintln!("\nquitting: the cell did not stop");
                std::process::exit(130);
            }
        })
        .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
        Ok(CtrlC { presses })
    }

    /// Forgets earlier presses: a new cell starts.
    pub fn start_cell(&self) {
        self.presses.store(0, Ordering::SeqCst);
    }

    /// Whether Ctrl-C was pressed since the cell started.
    pub fn pressed(&self) -> bool {
        self.presses.load(Ordering::SeqCst) > 0
    }
}
