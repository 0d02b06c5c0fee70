//! The event stream: one typed stream of what the runtime did, many views of it.
//!
//! Producers (ops, memory, the compiler, collectives, the sandbox) [`EventBus::publish`]
//! [`Event`]s; the bus stamps them and keeps the recent ones. Views read them back: the
//! per-cell [`Summary`], the Chrome trace ([`chrome_trace`]), `%events` tables, log filters.

mod bus;
mod clock;
mod device_clock;
mod event;
pub mod fmt;
mod logs;
mod op_table;
mod ring;
mod summary;
mod trace;

pub use bus::{EventBus, SummaryWindow, DEFAULT_CAPACITY};
pub use event::{
    CacheSource, CollectiveEvent, CompileEvent, Event, EventKind, EventTag, LimitAction, LogLevel,
    MemoryAction, MemoryEvent, OpEvent, Phase, TensorSig,
};
pub use logs::{LogFilter, Topic, TOPICS as LOG_TOPICS};
pub use op_table::op_table;
pub use summary::{OpTotal, Summary, SummaryBuilder, TOP_OPS};
pub use trace::{chrome_trace, save_chrome_trace};
