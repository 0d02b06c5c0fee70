//! Loading, checking, instantiating and calling guests: the [`Sandbox`] (one wasmtime engine
//! per process) and the [`Guest`] (one store and instance).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use wasmtime::{
    Config, Engine, Extern, ExternType, Func, FuncType, Instance, Linker, Module, Store,
    StoreLimits, StoreLimitsBuilder, Trap, UpdateDeadline, Val, ValType, WasmBacktrace,
};

use super::abi::{self, context::GuestState};
use super::cache::{ModuleCache, ModuleSource};
use super::function_cache::FunctionCache;
use super::guest_error::{frame_name, GuestError, GuestErrorKind};
use super::guest_output::OutputSink;
use super::limits::Limits;
use crate::status::ErrorCode;
use crate::Shared;
use neuronlab_core::device::topology::CoreId;
use neuronlab_core::events::EventKind;
use neuronlab_core::paths::{cache_root, CacheDir};
use neuronlab_core::Runtime;
use neuronlab_dist::{RankComm, World};

/// The ABI major version this host speaks (guest-sdk/ABI.md).
pub const ABI_MAJOR: u32 = 1;
/// The ABI minor version this host implements.
pub const ABI_MINOR: u32 = 10;

/// How often the epoch advances; deadlines and interrupts are noticed within one tick.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// A module compiled for this host, with where it came from. Cloning shares the compiled code.
#[derive(Clone)]
pub struct GuestModule {
    module: Module,
    /// A name for messages (the file name).
    pub name: String,
    /// Compiled now, or loaded from the on-disk cache.
    pub source: ModuleSource,
    /// Host time spent compiling or loading it.
    pub load_time: Duration,
}

impl GuestModule {
    /// The exported functions a caller can name as the entry, with their parameter types.
    pub fn entries(&self) -> Vec<(String, Vec<ValType>)> {
        self.module
            .exports()
            .filter_map(|e| {
                let f = e.ty().func()?.clone();
                Some((e.name().to_string(), f.params().collect()))
            })
            .filter(|(name, _)| !name.starts_with("neuronlab_"))
            .collect()
    }
}

/// The process's wasmtime engine, its linker with the `neuronlab` imports, and the module cache.
pub struct Sandbox {
    engine: Engine,
    linker: Linker<GuestState>,
    cache: ModuleCache,
}

/// Stops a running guest from another thread (Ctrl-C, a Jupyter interrupt).
#[derive(Clone, Debug)]
pub struct InterruptHandle(Arc<AtomicBool>);

impl InterruptHandle {
    /// Asks the guest to stop. It traps at its next epoch check (within a few ms), and a host
    /// op it is in the middle of returns `ERR_CANCELLED`.
    pub fn interrupt(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Raised by the epoch callback when an interrupt was requested.
#[derive(Debug)]
struct Interrupted;
impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}
impl std::error::Error for Interrupted {}

/// Raised by the epoch callback when a call ran past its deadline.
#[derive(Debug)]
struct DeadlineExceeded(Duration);
impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the call ran past its deadline of {:?}", self.0)
    }
}
impl std::error::Error for DeadlineExceeded {}

impl Sandbox {
    /// A sandbox whose compiled modules are cached in `cache_dir` (`None` disables the cache).
    pub fn new(cache_dir: Option<std::path::PathBuf>) -> Result<Sandbox, GuestError> {
        let mut config = Config::new();
        config.epoch_interruption(true);
        config.max_wasm_stack(Limits::default().wasm_stack_bytes);
        config.wasm_backtrace_details(wasmtime::WasmBacktraceDetails::Disable);
        config
            .enable_incremental_compilation(Arc::new(FunctionCache::default()))
            .map_err(|e| {
                GuestError::new(
                    GuestErrorKind::Host,
                    format!("cannot set up wasmtime's function cache: {e}"),
                )
            })?;
        let engine = Engine::new(&config).map_err(|e| {
            GuestError::new(GuestErrorKind::Host, format!("cannot start wasmtime: {e}"))
        })?;
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("neuronlab-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| {
                GuestError::new(
                    GuestErrorKind::Host,
                    format!("cannot start the epoch thread: {e}"),
                )
            })?;
        let mut linker = Linker::new(&engine);
        abi::define(&mut linker).map_err(|e| {
            GuestError::new(GuestErrorKind::Host, format!("cannot define the ABI: {e}"))
        })?;
        let cache = ModuleCache::new(&engine, cache_dir.map(|d| CacheDir::Modules.under(&d)));
        Ok(Sandbox {
            engine,
            linker,
            cache,
        })
    }

    /// The process-wide sandbox, caching under [`cache_root`].
    pub fn shared() -> Result<&'static Sandbox, GuestError> {
        static SHARED: OnceLock<Result<Sandbox, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Sandbox::new(Some(cache_root())).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| GuestError::new(GuestErrorKind::Host, e.clone()))
    }

    /// Loads a module from `.wasm` bytes or WebAssembly text, checking its imports.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<GuestModule, GuestError> {
        self.load_with(name, bytes, true)
    }

    fn load_with(
        &self,
        name: &str,
        bytes: &[u8],
        disk_cache: bool,
    ) -> Result<GuestModule, GuestError> {
        let started = Instant::now();
        let wasm = if bytes.starts_with(b"\0asm") {
            std::borrow::Cow::Borrowed(bytes)
        } else {
            std::borrow::Cow::Owned(
                wat::parse_bytes(bytes)
                    .map_err(|e| {
                        GuestError::new(
                            GuestErrorKind::Load,
                            format!("{name} is not valid WebAssembly text: {e}"),
                        )
                    })?
                    .into_owned(),
            )
        };
        let loaded = match disk_cache {
            true => self.cache.load(&self.engine, &wasm),
            false => Module::from_binary(&self.engine, &wasm).map(|m| (m, ModuleSource::Compiled)),
        };
        let (module, source) = loaded.map_err(|e| {
            GuestError::new(
                GuestErrorKind::Load,
                format!("{name} is not a valid WebAssembly module: {e:#}"),
            )
        })?;
        self.check_imports(name, &module)?;
        Ok(GuestModule {
            module,
            name: name.to_string(),
            source,
            load_time: started.elapsed(),
        })
    }

    /// Loads a module that is built, run and replaced within one session (a Rust cell's),
    /// without storing it in the on-disk cache: every changed cell would otherwise add an
    /// entry that no later load asks for. Cranelift's function cache still applies.
    pub fn load_file_uncached(&self, path: &std::path::Path) -> Result<GuestModule, GuestError> {
        let (name, bytes) = read_module_file(path)?;
        self.load_with(&name, &bytes, false)
    }

    /// Loads a module from a `.wasm` or `.wat` file.
    pub fn load_file(&self, path: &std::path::Path) -> Result<GuestModule, GuestError> {
        let (name, bytes) = read_module_file(path)?;
        self.load(&name, &bytes)
    }

    /// Checks what the module asks of the host before anything runs: every import is one of
    /// the ABI's with the signature the host provides, and the module exports its linear
    /// memory as `memory`, which every pointer argument refers to.
    fn check_imports(&self, name: &str, module: &Module) -> Result<(), GuestError> {
        let link_error = |message: String| GuestError::new(GuestErrorKind::Link, message);
        let mut unknown = Vec::new();
        for i in module.imports() {
            let provided = (i.module() == abi::MODULE)
                .then(|| abi::import(i.name()))
                .flatten();
            let Some(provided) = provided else {
                unknown.push(format!("{}::{}", i.module(), i.name()));
                continue;
            };
            let declared = match i.ty() {
                ExternType::Func(f) => signature_text(&f),
                other => format!("a {}", extern_kind(&other)),
            };
            if declared != provided.signature() {
                return Err(link_error(format!(
                    "{name} declares the import `{}` as {declared}, but the host provides it as \
                     {}; rebuild the guest against the SDK of ABI {ABI_MAJOR}.{ABI_MINOR} \
                     (guest-sdk/ABI.md)",
                    i.name(),
                    provided.signature()
                )));
            }
        }
        if !unknown.is_empty() {
            return Err(link_error(format!(
                "{name} imports what this host does not provide: {}. A guest may import only \
                 the `neuronlab` functions listed in guest-sdk/ABI.md (ABI {ABI_MAJOR}.{ABI_MINOR})",
                unknown.join(", ")
            )));
        }
        match module.get_export("memory") {
            Some(ExternType::Memory(_)) => Ok(()),
            Some(other) => Err(link_error(format!(
                "{name} exports `memory` as a {}, but it must be the module's linear memory, \
                 which every pointer passed to the host refers to (guest-sdk/ABI.md)",
                extern_kind(&other)
            ))),
            None => Err(link_error(format!(
                "{name} does not export its linear memory as `memory`, which every pointer \
                 passed to the host refers to; export it (Rust and C toolchains do by default, \
                 see guest-sdk/ABI.md)"
            ))),
        }
    }

    /// Instantiates `module` on `runtime` as a world of one rank, creating tensors on `core`,
    /// with `output` receiving everything the guest prints or displays as it happens. The
    /// guest gets a session-variable store of its own.
    pub fn instantiate(
        &self,
        module: &GuestModule,
        runtime: Arc<Runtime>,
        core: CoreId,
        limits: Limits,
        output: OutputSink,
    ) -> Result<Guest, GuestError> {
        runtime
            .check_core(core)
            .map_err(|e| GuestError::new(GuestErrorKind::Host, e.to_string()))?;
        let comm = World::single(runtime, core).rank(0);
        self.instantiate_rank(module, comm, Shared::default(), limits, output)
    }

    /// Instantiates `module` as the rank `comm` of an SPMD world (see [`crate::spmd`]):
    /// its tensors live on the rank's core and its collectives meet the other ranks'. Its
    /// `var_*` imports read and write the `shared` variables, and its compiled functions use
    /// the `shared` program cache.
    pub fn instantiate_rank(
        &self,
        module: &GuestModule,
        comm: RankComm,
        shared: Shared,
        limits: Limits,
        output: OutputSink,
    ) -> Result<Guest, GuestError> {
        let interrupt = Arc::new(AtomicBool::new(false));
        let store_limits: StoreLimits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes)
            .table_elements(limits.table_elements)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let state = GuestState::new(comm, shared, output, store_limits, interrupt.clone());
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let deadline = limits.deadline;
        store.epoch_deadline_callback(move |ctx| {
            let state = ctx.data();
            if state.interrupt.load(Ordering::SeqCst) {
                return Err(wasmtime::Error::new(Interrupted));
            }
            if state.call_started.elapsed() > deadline {
                return Err(wasmtime::Error::new(DeadlineExceeded(deadline)));
            }
            Ok(UpdateDeadline::Continue(1))
        });
        store.set_epoch_deadline(1);
        let linker = &self.linker;
        let wasm = &module.module;
        let stack = limits.host_stack_bytes;
        let limits_ref = &limits;
        let (store, instance) = on_guest_thread(stack, move || {
            store.data_mut().call_started = Instant::now();
            let instance = linker
                .instantiate(&mut store, wasm)
                .map_err(|e| classify(e, "instantiating", limits_ref))?;
            Ok((store, instance))
        })??;
        let mut guest = Guest {
            store,
            instance,
            interrupt: InterruptHandle(interrupt),
            limits,
            name: module.name.clone(),
        };
        guest.check_abi_version()?;
        Ok(guest)
    }
}

/// What an `unreachable` trap says. A Rust guest traps this way when it panics or returns an
/// error, after printing why; the note saying so is added only when the guest did print.
const ABORTED: &str = "the guest aborted (an `unreachable` instruction)";

/// How long after the deadline the watch stops a host op: a few epoch ticks, so guest code
/// is always stopped by the epoch check, with its own message.
const HOST_OP_GRACE: Duration = Duration::from_millis(50);

/// The message of a call stopped at its deadline while the host ran an op for it.
fn past_deadline(deadline: Duration) -> String {
    format!(
        "{}, inside a host op, which was stopped; one op that takes this long is too large for \
         the deadline (raise it if the work is real)",
        DeadlineExceeded(deadline)
    )
}

/// A function type as ABI.md writes signatures: `(i32, i32) -> i32`.
fn signature_text(f: &FuncType) -> String {
    let names = |types: &mut dyn Iterator<Item = ValType>| -> Vec<String> {
        types.map(|t| t.to_string()).collect()
    };
    let params = names(&mut f.params());
    let results = names(&mut f.results());
    let result = match results.as_slice() {
        [] => "()".to_string(),
        [one] => one.clone(),
        many => format!("({})", many.join(", ")),
    };
    format!("({}) -> {result}", params.join(", "))
}

/// What kind of thing an import or export is, for messages.
fn extern_kind(ty: &ExternType) -> &'static str {
    match ty {
        ExternType::Func(_) => "function",
        ExternType::Global(_) => "global",
        ExternType::Table(_) => "table",
        ExternType::Memory(_) => "memory",
        ExternType::Tag(_) => "tag",
    }
}

/// Makes this thread run the kernels of the ops it calls itself, for as long as the returned
/// pool lives, instead of handing them to the process's thread pool: a pool of one thread,
/// this one. For a thread that is one of at least as many busy threads as there are cores,
/// where handing work to the shared pool only adds hand-offs and wake-ups. `None` when this
/// thread is in a pool already.
pub(crate) fn kernels_on_this_thread() -> Option<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
        .ok()
}

/// Runs `f` on a fresh thread with a `stack`-byte stack, so deep guest recursion meets the
/// wasm stack limit (a trap) long before the native stack ends. A panic in the host code that
/// `f` runs becomes an error instead of taking the caller down.
fn on_guest_thread<R: Send>(stack: usize, f: impl FnOnce() -> R + Send) -> Result<R, GuestError> {
    on_guest_thread_within(stack, None, f).map(|(r, _)| r)
}

/// [`on_guest_thread`], and when `watch` gives a deadline and the guest's interrupt flag,
/// sets the flag once the deadline passes: the epoch check stops guest code by itself, but a
/// host op the guest called (one long kernel) only stops at the flag. Returns whether the
/// deadline had to be enforced that way, beside the result.
fn on_guest_thread_within<R: Send>(
    stack: usize,
    watch: Option<(Duration, &AtomicBool)>,
    f: impl FnOnce() -> R + Send,
) -> Result<(R, bool), GuestError> {
    // The guest's kernels run where the caller's would: on the guest thread itself when the
    // caller runs its own on its own thread (see `kernels_on_this_thread`).
    let own_pool = rayon::current_thread_index().is_some() && rayon::current_num_threads() == 1;
    std::thread::scope(|s| {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let mut enforced = false;
        let handle = std::thread::Builder::new()
            .name("neuronlab-guest".into())
            .stack_size(stack)
            .spawn_scoped(s, move || {
                let _pool = own_pool.then(kernels_on_this_thread);
                let r = f();
                let _ = done.send(());
                r
            })
            .map_err(|e| {
                GuestError::new(
                    GuestErrorKind::Host,
                    format!("cannot start the guest thread: {e}"),
                )
            })?;
        if let Some((deadline, interrupt)) = watch {
            // The channel closes when the thread ends, also by a panic; until then a timeout
            // is the deadline passing inside a host call.
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(deadline)
            {
                interrupt.store(true, Ordering::SeqCst);
                enforced = true;
            }
        }
        let result = handle.join().map_err(|panic| {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            GuestError::new(
                GuestErrorKind::Host,
                format!(
                    "internal error in the host while running the guest: {what}; please report it"
                ),
            )
        });
        result.map(|r| (r, enforced))
    })
}

/// The name (the file name) and the bytes of the module file at `path`.
fn read_module_file(path: &std::path::Path) -> Result<(String, Vec<u8>), GuestError> {
    let bytes = std::fs::read(path).map_err(|e| {
        GuestError::new(
            GuestErrorKind::Load,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    Ok((name, bytes))
}

/// Turns a wasmtime error into a [`GuestError`] with the trap kind and the wasm backtrace.
fn classify(e: wasmtime::Error, doing: &str, limits: &Limits) -> GuestError {
    let backtrace = e
        .downcast_ref::<WasmBacktrace>()
        .map(|bt| {
            bt.frames()
                .iter()
                .map(|f| match f.func_name() {
                    Some(name) => frame_name(name),
                    None => format!("<wasm function {}>", f.func_index()),
                })
                .collect()
        })
        .unwrap_or_default();
    let (kind, message) = if e.is::<Interrupted>() {
        (
            GuestErrorKind::Interrupted,
            "the guest was interrupted".to_string(),
        )
    } else if let Some(d) = e.downcast_ref::<DeadlineExceeded>() {
        (
            GuestErrorKind::Deadline,
            format!("{d}; it may be looping forever (raise the deadline if the work is real)"),
        )
    } else if let Some(trap) = e.downcast_ref::<Trap>() {
        let kind = GuestErrorKind::Trap;
        let msg = match trap {
            Trap::StackOverflow => "stack overflow: the guest recursed too deeply".to_string(),
            Trap::UnreachableCodeReached => ABORTED.to_string(),
            other => format!("wasm trap: {other}"),
        };
        (kind, msg)
    } else {
        let text = format!("{e:#}");
        let grew = text.contains("limit") || text.contains("grow");
        if text.contains("memory") && grew {
            (
                GuestErrorKind::ResourceLimit,
                format!(
                    "the guest's linear memory would exceed its limit of {} MiB ({})",
                    limits.memory_bytes >> 20,
                    e.root_cause()
                ),
            )
        } else if text.contains("table") && grew {
            (
                GuestErrorKind::ResourceLimit,
                format!(
                    "the guest's table would exceed its limit of {} elements ({}); a guest \
                     that needs more is not one this sandbox runs",
                    limits.table_elements,
                    e.root_cause()
                ),
            )
        } else {
            (GuestErrorKind::Host, format!("error while {doing}: {text}"))
        }
    };
    GuestError {
        kind,
        message,
        backtrace,
        reported: None,
    }
}

/// One instantiated guest: its store (with the handle table and output sink) and instance.
pub struct Guest {
    store: Store<GuestState>,
    instance: Instance,
    interrupt: InterruptHandle,
    limits: Limits,
    name: String,
}

impl Guest {
    /// A handle that stops this guest from another thread.
    pub fn interrupt_handle(&self) -> InterruptHandle {
        self.interrupt.clone()
    }

    /// The last error an import returned to the guest in its last call, with the message
    /// `last_error` gives: what a raw status the guest returned stands for.
    pub fn error_in_last_call(&self) -> Option<(ErrorCode, &str)> {
        let state = self.store.data();
        state
            .error_in_call
            .map(|code| (code, state.last_error.as_str()))
    }

    /// Number of tensor handles the guest holds.
    pub fn live_tensors(&self) -> usize {
        self.store.data().handles.len()
    }

    /// `(name, explanation)` of every function this instance compiled with
    /// `neuronlab::compile`: versions, guards, graphs and kernels (what `%explain` shows).
    pub fn compiled_explanations(&self) -> Vec<(String, String)> {
        self.store.data().compile.explanations()
    }

    fn check_abi_version(&mut self) -> Result<(), GuestError> {
        let f = self
            .instance
            .get_typed_func::<(), i32>(&mut self.store, "neuronlab_abi_version")
            .map_err(|_| {
                GuestError::new(
                    GuestErrorKind::AbiVersion,
                    format!(
                        "{} does not export `neuronlab_abi_version() -> i32`; build it with the \
                         neuronlab SDK (or see guest-sdk/ABI.md). This host speaks ABI {ABI_MAJOR}.{ABI_MINOR}",
                        self.name
                    ),
                )
            })?;
        let version = self.run(|store| f.call(store, ()))? as u32;
        let (major, minor) = (version >> 16, version & 0xffff);
        if major != ABI_MAJOR {
            return Err(GuestError::new(
                GuestErrorKind::AbiVersion,
                format!(
                    "{} was built for ABI {major}.{minor}, but this host speaks ABI {ABI_MAJOR}.x \
                     (up to {ABI_MAJOR}.{ABI_MINOR}); rebuild it against this version of the SDK",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// Runs `f` against the store on the guest thread, with the deadline clock restarted.
    fn run<R: Send>(
        &mut self,
        f: impl FnOnce(&mut Store<GuestState>) -> wasmtime::Result<R> + Send,
    ) -> Result<R, GuestError> {
        self.interrupt.0.store(false, Ordering::SeqCst);
        let store = &mut self.store;
        store.data_mut().call_started = Instant::now();
        store.data_mut().wrote_stderr = false;
        store.data_mut().reported = None;
        store.data_mut().error_in_call = None;
        let limits = self.limits.clone();
        // The guest thread carries the interrupt flag as its cancel token, so every host op
        // the guest calls can be cancelled without setting a token per call.
        let token = self.interrupt.0.clone();
        // Guest code meets its deadline at the next epoch tick; what is still running a moment
        // later is inside a host op, which only the interrupt flag stops.
        let watch = (limits.deadline + HOST_OP_GRACE, &*self.interrupt.0);
        let stack = limits.host_stack_bytes;
        let (result, enforced) = on_guest_thread_within(stack, Some(watch), move || {
            neuronlab_core::cancel::with_token(token, || f(store))
        })?;
        let result = result.map_err(|e| classify(e, "running the guest", &limits));
        // Stopped by the watch: the deadline's error, whatever the guest did after the host
        // op it was in was cancelled (trapped at the next epoch check, or returned).
        let result = match result {
            Err(e) if enforced && e.kind != GuestErrorKind::Deadline => Err(GuestError {
                kind: GuestErrorKind::Deadline,
                message: past_deadline(limits.deadline),
                backtrace: e.backtrace,
                reported: None,
            }),
            Ok(_) if enforced => Err(GuestError::new(
                GuestErrorKind::Deadline,
                past_deadline(limits.deadline),
            )),
            other => other,
        };
        let reported = self.store.data_mut().reported.take();
        let cancelled_call = match self.error_in_last_call() {
            Some((ErrorCode::Cancelled, message)) => Some(message.to_string()),
            _ => None,
        };
        let result = result.map_err(|mut e| {
            if e.kind == GuestErrorKind::Trap {
                e.reported = reported;
            }
            // Interrupted inside a host call (a collective it waited in): what that call was
            // doing, which names the ranks a collective still waited for.
            if e.kind == GuestErrorKind::Interrupted {
                if let Some(call) = cancelled_call {
                    let call = call.strip_prefix("cancelled: ").unwrap_or(&call);
                    e.message = match call.strip_prefix("interrupted ") {
                        Some(rest) => format!("the guest was interrupted {rest}"),
                        None => format!("{}: {call}", e.message),
                    };
                }
            }
            if e.message == ABORTED && e.reported.is_none() && self.store.data().wrote_stderr {
                e.message.push_str(
                    "; a Rust guest panicked or returned an error: its message is on stderr above",
                );
            }
            e
        });
        if let Err(e) = &result {
            self.publish_stop(e);
        }
        result
    }

    /// Publishes a `guest_trap` event when the guest stopped running: it trapped, ran out of
    /// its time or memory, or was interrupted.
    fn publish_stop(&self, e: &GuestError) {
        use GuestErrorKind::*;
        if matches!(e.kind, Trap | Interrupted | Deadline | ResourceLimit) {
            let state = self.store.data();
            let message = format!("{} in {}: {}", e.name(), self.name, e.summary());
            state
                .runtime
                .bus()
                .publish(state.core, EventKind::GuestTrap { message });
        }
    }

    /// Calls the exported function `entry` with `args` parsed to its parameter types, and
    /// returns its results formatted as text.
    pub fn call(&mut self, entry: &str, args: &[String]) -> Result<Vec<String>, GuestError> {
        let func: Func = match self.instance.get_export(&mut self.store, entry) {
            Some(Extern::Func(f)) => f,
            _ => {
                let available: Vec<String> = self
                    .instance
                    .exports(&mut self.store)
                    .filter(|e| {
                        e.clone().into_func().is_some() && !e.name().starts_with("neuronlab_")
                    })
                    .map(|e| e.name().to_string())
                    .collect();
                return Err(GuestError::new(
                    GuestErrorKind::MissingEntry,
                    format!(
                        "{} has no exported function `{entry}`; it exports: {}",
                        self.name,
                        if available.is_empty() {
                            "nothing callable".to_string()
                        } else {
                            available.join(", ")
                        }
                    ),
                ));
            }
        };
        let ty = func.ty(&self.store);
        let params: Vec<ValType> = ty.params().collect();
        if params.len() != args.len() {
            return Err(GuestError::new(
                GuestErrorKind::BadArguments,
                format!(
                    "`{entry}` takes {} argument(s) ({}), got {}",
                    params.len(),
                    params
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    args.len()
                ),
            ));
        }
        let values = params
            .iter()
            .zip(args)
            .enumerate()
            .map(|(i, (ty, arg))| parse_arg(i, ty, arg))
            .collect::<Result<Vec<Val>, GuestError>>()?;
        let n_results = ty.results().len();
        let results = self.run(move |store| {
            let mut results = vec![Val::I32(0); n_results];
            func.call(store, &values, &mut results)?;
            Ok(results)
        })?;
        Ok(results.iter().map(format_val).collect())
    }
}

fn parse_arg(i: usize, ty: &ValType, arg: &str) -> Result<Val, GuestError> {
    let bad = || {
        GuestError::new(
            GuestErrorKind::BadArguments,
            format!("argument {i} '{arg}' is not a valid {ty}"),
        )
    };
    Ok(match ty {
        ValType::I32 => Val::I32(arg.parse().map_err(|_| bad())?),
        ValType::I64 => Val::I64(arg.parse().map_err(|_| bad())?),
        ValType::F32 => Val::F32(arg.parse::<f32>().map_err(|_| bad())?.to_bits()),
        ValType::F64 => Val::F64(arg.parse::<f64>().map_err(|_| bad())?.to_bits()),
        other => {
            return Err(GuestError::new(
                GuestErrorKind::BadArguments,
                format!("argument {i} has type {other}, which the command line cannot pass"),
            ))
        }
    })
}

fn format_val(v: &Val) -> String {
    match v {
        Val::I32(x) => x.to_string(),
        Val::I64(x) => x.to_string(),
        Val::F32(b) => f32::from_bits(*b).to_string(),
        Val::F64(b) => f64::from_bits(*b).to_string(),
        other => format!("{other:?}"),
    }
}
