//! The neuronlab Jupyter kernel: Jupyter's messaging protocol over
//! ZeroMQ in front of the same [`Session`](neuronlab_session::Session) the REPL
//! drives. Cells are Rust (built for wasm32 and run sandboxed) or `%` magics.
//!
//! - [`connection`]: the connection file and the five sockets;
//! - [`wire`]: signed messages in, replies with their parent out;
//! - [`server`]: the process: tasks for shell, control, heartbeat, stdin, signals;
//! - [`worker`]: the thread that owns the session and answers shell requests in order;
//! - [`control`]: interrupt and shutdown while a cell runs;
//! - [`outbox`]: the ordered queue of outgoing messages, with stream batching;
//! - [`handlers`]: the replies, one module per message family;
//! - [`history_store`]: the input history, kept across restarts;
//! - [`install`] and [`logo`]: the kernelspec.

#![warn(missing_docs)]

pub mod log;

pub mod connection;
pub mod control;
pub mod handlers;
pub mod history_store;
pub mod install;
pub mod logo;
pub mod outbox;
pub mod server;
pub mod wire;
pub mod worker;
