//! Cooperative cancellation of long host ops (an interrupt while a big kernel runs).
//!
//! Whoever can be interrupted (the sandbox, for a guest's op call) runs the op under a cancel
//! token with [`with_token`]. Kernels capture the calling thread's [`Token`] before going
//! parallel and [`Token::check`] it once per chunk of work. A set token unwinds the kernel with
//! a [`Cancelled`] payload (through `resume_unwind`, so no panic message is printed), which
//! rayon carries back to the calling thread and [`crate::Runtime`] turns into
//! [`crate::Error::Cancelled`]. Outputs are fresh buffers, so an abandoned kernel leaves no
//! partial state behind.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

thread_local! {
    static CURRENT: RefCell<Option<Arc<AtomicBool>>> = const { RefCell::new(None) };
}

/// The unwind payload of a cancelled kernel.
#[derive(Debug)]
pub struct Cancelled;

/// Runs `f` with `flag` as this thread's cancel token, restoring the previous one after.
pub fn with_token<R>(flag: Arc<AtomicBool>, f: impl FnOnce() -> R) -> R {
    let previous = CURRENT.with(|c| c.replace(Some(flag)));
    struct Restore(Option<Arc<AtomicBool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(previous);
    f()
}

/// Unwinds with [`Cancelled`] when `flag` is set.
fn unwind_if_set(flag: Option<&AtomicBool>) {
    if flag.is_some_and(|f| f.load(Ordering::Relaxed)) {
        std::panic::resume_unwind(Box::new(Cancelled));
    }
}

/// The calling thread's cancel token, to move into parallel work.
#[derive(Clone, Debug, Default)]
pub struct Token(Option<Arc<AtomicBool>>);

impl Token {
    /// The token of the calling thread (none outside [`with_token`]).
    pub fn current() -> Token {
        Token(CURRENT.with(|c| c.borrow().clone()))
    }

    /// [`Token::check`] on the calling thread's token without taking a handle to it (no
    /// reference count to touch): for work that stays on this thread.
    pub fn check_current() {
        CURRENT.with(|c| unwind_if_set(c.borrow().as_deref()));
    }

    /// Unwinds with [`Cancelled`] when cancellation was requested.
    pub fn check(&self) {
        unwind_if_set(self.0.as_deref());
    }
}
