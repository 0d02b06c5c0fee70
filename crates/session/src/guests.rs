//! Running guests for the session: a built Rust cell, a `%%wat` cell, a `%load`ed module's
//! exports (`%run`), and a module as N ranks (`%spmd`). Their output streams into the cell's
//! outputs as it happens; their tensors stay in the session's runtime and variables.

use std::path::Path;

use wasmtime::ValType;

use super::convert::{CellColumns, OutputConverter};
use super::launch::RunRequest;
use super::router::RunWatch;
use super::rust_cell::build::{self, BuildFailure, UserSources};
use super::rust_cell::cache;
use super::rust_cell::codegen::{self, KeptItem, Restore};
use super::rust_cell::direct::{DirectBuild, RustcCommand};
use super::rust_cell::parse;
use super::{fail, CellError, MimeBundle, Outcome, Output, Running, Session};
use crate::toolchain::Toolchain;
use neuronlab_dist::World;
use neuronlab_sandbox::var_store::Var;
use neuronlab_sandbox::{Guest, GuestError, GuestModule};

/// Where, in the cell crate's folder, cargo's rustc command for it is recorded.
const RUSTC_RECORD: &str = "rustc-command.txt";

/// Values an export returned, where a single `i32` is the ABI error code of the error an
/// import just returned to the guest spelled out with its name and message: `-2` becomes
/// `-2 (ERR_HANDLE: ...)`.
fn named_statuses(mut values: Vec<String>, guest: &Guest) -> Vec<String> {
    if let ([value], Some((code, message))) = (values.as_mut_slice(), guest.error_in_last_call()) {
        if value.parse::<i32>() == Ok(code as i32) {
            *value = format!("{value} ({}: {message})", code.name());
        }
    }
    values
}

/// A module loaded with `%load` or defined by a `%%wat` cell, with its live instance, so
/// `%run` calls keep the instance's state.
pub struct LoadedModule {
    /// The name `%run` uses (the file stem, or `wat<N>` for a cell).
    pub name: String,
    /// Its instance.
    pub guest: Guest,
    /// Its callable exports with their parameter types.
    pub exports: Vec<(String, Vec<ValType>)>,
    /// The blake3 of its bytes, for a module a `%%wat` cell defined: running a cell with the
    /// same text again replaces it.
    cell_source: Option<blake3::Hash>,
}

/// What a Rust cell's crate holds besides the cell: kept items, variables restored from the
/// session, and the names kept for later cells.
struct CellPlan {
    kept: Vec<KeptItem>,
    restores: Vec<(String, Restore)>,
    keeps: Vec<String>,
    items_only: bool,
}

/// The cell parsed, or its syntax error pointing at the user's line and column.
fn parse_cell(code: &str, cell_no: u32) -> Result<parse::ParsedCell, CellError> {
    parse::parse(code).map_err(|e| {
        let line = code.lines().nth(e.line.saturating_sub(1)).unwrap_or("");
        let report = format!(
            "error: {}\n --> cell [{cell_no}], line {}:{}\n  |\n  | {line}\n  | {}^\n",
            e.message,
            e.line,
            e.column,
            " ".repeat(e.column.saturating_sub(1))
        );
        CellError {
            ename: "SyntaxError".into(),
            evalue: e.message,
            traceback: vec![report],
        }
    })
}

fn no_toolchain(e: impl std::fmt::Display) -> CellError {
    CellError::new(
        "NoToolchain",
        format!(
            "Rust cells are built for wasm32, and {e}\n%%wat cells, %load, %run and \
             `neuronlab tour` work without it."
        ),
    )
}

fn no_sdk() -> CellError {
    CellError::new(
        "NoSdk",
        "the neuronlab guest SDK was not found: set NEURONLAB_SDK to the guest-sdk folder of a \
         neuronlab checkout",
    )
}

/// The compiler's errors as the cell's error, against the user's lines.
fn compile_error(
    errors: &[build::Diagnostic],
    map: &codegen::SourceMap,
    sources: &UserSources<'_>,
) -> CellError {
    CellError {
        ename: "CompileError".into(),
        evalue: errors
            .first()
            .map(|e| e.message.clone())
            .unwrap_or_default(),
        traceback: build::render(errors, map, sources),
    }
}

impl Session {
    /// Builds and runs a Rust cell; an items-only cell keeps its items.
    pub(super) fn run_rust_cell(&mut self, code: &str, out: &mut dyn FnMut(Output)) -> Outcome {
        match self.build_rust_cell(code, out) {
            Ok(Some(module)) => self.run_cell_module(&module, self.execution_count, out),
            Ok(None) => Outcome::Ok,
            Err(outcome) => outcome,
        }
    }

    /// Builds what every Rust cell links, the standard library and the SDK for wasm32, ahead
    /// of the first cell (`neuronlab-kernel install` does), with progress reports: the first
    /// cell of a session then builds in about a second. Nothing runs and no variable changes.
    pub fn prebuild(&mut self, out: &mut dyn FnMut(Output)) -> Outcome {
        match self.build_rust_cell("0;", out) {
            Ok(_) => Outcome::Ok,
            Err(outcome) => outcome,
        }
    }

    /// Builds a Rust cell into a module, or reuses the module of an identical earlier build.
    /// An items-only cell keeps its items and gives `None`; a failure has been reported and
    /// gives its outcome.
    pub(super) fn build_rust_cell(
        &mut self,
        code: &str,
        out: &mut dyn FnMut(Output),
    ) -> Result<Option<GuestModule>, Outcome> {
        let cell_no = self.execution_count;
        let prepared = parse_cell(code, cell_no)
            .and_then(|parsed| Ok((parsed, self.toolchain()?)))
            .and_then(|(parsed, toolchain)| {
                let sdk = self.sdk_dir.clone().ok_or_else(no_sdk)?;
                Ok((parsed, toolchain, sdk))
            });
        let (parsed, toolchain, sdk_dir) = prepared.map_err(|e| fail(out, e))?;
        let mut plan = self.plan_cell(code, &parsed);
        let first = codegen::generate(code, &parsed, &plan.kept, &plan.restores, &plan.keeps);
        let inputs = cache::build_inputs(&toolchain, &sdk_dir);
        let key = cache::key(&first, &inputs);
        if let Some(built) = self.built_cells.get(&key) {
            self.cell_columns = Some(built.columns);
            if plan.items_only {
                self.kept = plan.kept;
            }
            return Ok(built.module);
        }
        let target_dir = super::cell_target_dir();
        let mut generated = first;
        let wasm = loop {
            if let Err(e) = build::write_crate(&self.work_dir, &sdk_dir, &generated) {
                return Err(fail(out, CellError::new("SessionError", e)));
            }
            let record = self.work_dir.join(RUSTC_RECORD);
            let direct = self
                .rustc_command
                .as_mut()
                .filter(|(recorded_for, _)| *recorded_for == inputs)
                .map(|(_, rustc)| rustc.build(self.interrupter.flag()));
            let built = match direct {
                // Without a compiler error, rustc alone may lack what cargo would rebuild.
                Some(Err(BuildFailure::Tool(_))) | None => {
                    self.rustc_command = None;
                    let mut progress = |report| out(Output::Progress(report));
                    let built = build::build(
                        &toolchain,
                        &self.work_dir,
                        &target_dir,
                        &record,
                        self.interrupter.flag(),
                        &mut progress,
                    );
                    if built.is_ok() {
                        self.rustc_command = RustcCommand::recorded(&record)
                            .map(|rustc| (inputs, DirectBuild::new(rustc)));
                    }
                    built
                }
                Some(built) => built,
            };
            match built {
                Ok(wasm) => break wasm,
                Err(BuildFailure::Compile(errors)) => {
                    let moved = build::moved_keeps(&errors, &generated.map);
                    if !moved.is_empty() {
                        // Moved bindings do not outlive the cell; build without keeping them.
                        plan.keeps.retain(|k| !moved.contains(k));
                        generated = codegen::generate(
                            code,
                            &parsed,
                            &plan.kept,
                            &plan.restores,
                            &plan.keeps,
                        );
                        continue;
                    }
                    let sources = UserSources {
                        cell: (cell_no, code),
                        kept: &plan.kept,
                    };
                    return Err(fail(out, compile_error(&errors, &generated.map, &sources)));
                }
                Err(BuildFailure::Tool(message)) => {
                    return Err(fail(out, CellError::new("BuildError", message)))
                }
                Err(BuildFailure::Interrupted) => {
                    out(Output::Error(CellError::new(
                        "Interrupted",
                        "the cell was interrupted while it was being built",
                    )));
                    return Err(Outcome::Interrupted);
                }
            }
        };
        let columns = CellColumns::of(&generated.map);
        self.cell_columns = Some(columns);
        let module = match plan.items_only {
            true => {
                self.kept = plan.kept;
                None
            }
            false => Some(
                self.sandbox
                    .load_file_uncached(&wasm)
                    .map_err(|e| fail(out, CellError::new(e.kind.name(), e.message)))?,
            ),
        };
        let built = cache::BuiltCell {
            module: module.clone(),
            columns,
        };
        self.built_cells.insert(key, built);
        Ok(module)
    }

    /// The wasm32 toolchain, found once per session (finding it runs the compiler).
    fn toolchain(&mut self) -> Result<Toolchain, CellError> {
        if self.toolchain.is_none() {
            self.toolchain = Some(Toolchain::detect().map_err(no_toolchain)?);
        }
        Ok(self.toolchain.clone().expect("found above"))
    }

    /// What the cell's crate keeps and restores: an items-only cell's items replace kept
    /// items with the same key; other cells restore the session's variables and keep them and
    /// their own top-level bindings.
    fn plan_cell(&self, code: &str, parsed: &parse::ParsedCell) -> CellPlan {
        let mut kept = self.kept.clone();
        let items_only = !parsed.has_statements && !parsed.items.is_empty();
        if items_only {
            for item in &parsed.items {
                kept.retain(|k| k.key != item.key);
                kept.push(KeptItem {
                    key: item.key.clone(),
                    cell: self.execution_count,
                    line: item.line,
                    text: code[item.range.clone()].to_string(),
                });
            }
            return CellPlan {
                kept,
                restores: Vec::new(),
                keeps: Vec::new(),
                items_only,
            };
        }
        let restores: Vec<(String, Restore)> = self
            .shared
            .vars
            .snapshot()
            .into_iter()
            .filter_map(|(name, var)| match var {
                Var::Tensor(_) => Some((name, Restore::Tensor)),
                Var::Value { ty, .. } => Some((name, Restore::Value(ty))),
                Var::Local { .. } => None,
            })
            .collect();
        let mut keeps: Vec<String> = restores.iter().map(|(n, _)| n.clone()).collect();
        for b in &parsed.lets {
            if !keeps.contains(&b.name) {
                keeps.push(b.name.clone());
            }
        }
        CellPlan {
            kept,
            restores,
            keeps,
            items_only,
        }
    }

    /// Instantiates the cell's module and calls its `run` export.
    fn run_cell_module(
        &mut self,
        module: &GuestModule,
        cell_no: u32,
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        let mut guest = match self.instantiate(module) {
            Ok(g) => g,
            Err(e) => return fail(out, CellError::new(e.kind.name(), e.message)),
        };
        self.call(&mut guest, "run", &[], cell_no, out)
            .map_or(Outcome::Error, |_| Outcome::Ok)
    }

    /// A new instance of `module` on the session's runtime, core and variables.
    pub(super) fn instantiate(&self, module: &GuestModule) -> Result<Guest, GuestError> {
        let comm = World::single(self.runtime.clone(), self.runtime.default_device()).rank(0);
        self.sandbox.instantiate_rank(
            module,
            comm,
            self.shared.clone(),
            self.limits.clone(),
            self.router.sink(),
        )
    }

    /// Calls `entry` of `guest`, streaming its output; reports a failure as the cell's error.
    /// Afterwards, `%explain` shows the functions the instance has compiled.
    pub(super) fn call(
        &mut self,
        guest: &mut Guest,
        entry: &str,
        args: &[String],
        cell_no: u32,
        out: &mut dyn FnMut(Output),
    ) -> Result<Vec<String>, ()> {
        self.interrupter
            .set(Running::Guest(guest.interrupt_handle()));
        let mut converter = OutputConverter::new(cell_no, self.cell_columns.take());
        let what = format!("running cell [{cell_no}]");
        let mut watch = RunWatch::new(what, &self.runtime);
        let result = self
            .router
            .stream(&mut converter, out, &mut watch, || guest.call(entry, args));
        self.interrupter.set(Running::Nothing);
        self.explanations = guest.compiled_explanations();
        match result {
            Ok(values) => Ok(named_statuses(values, guest)),
            Err(e) => {
                out(Output::Error(converter.error(&e)));
                Err(())
            }
        }
    }

    /// Compiles a `%%wat` cell, calls its `run` export if it has one, and keeps it for `%run`
    /// as `wat<N>`.
    pub(super) fn run_wat_cell(&mut self, text: &str, out: &mut dyn FnMut(Output)) -> Outcome {
        let name = format!("wat{}", self.execution_count);
        self.load_module_bytes(&name, text.as_bytes(), true, out)
    }

    /// `%load FILE`: a `.wasm` or `.wat` module whose exports `%run` calls.
    pub(super) fn load_module_file(&mut self, path: &str, out: &mut dyn FnMut(Output)) -> Outcome {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) => {
                return fail(
                    out,
                    CellError::new("LoadError", format!("cannot read {path}: {e}")),
                )
            }
        };
        let name = Path::new(path).file_stem().map_or_else(
            || path.to_string(),
            |s| s.to_string_lossy().replace('-', "_"),
        );
        self.load_module_bytes(&name, &bytes, false, out)
    }

    fn load_module_bytes(
        &mut self,
        name: &str,
        bytes: &[u8],
        run_now: bool,
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        let module = match self.sandbox.load(name, bytes) {
            Ok(m) => m,
            Err(e) => return fail(out, CellError::new(e.kind.name(), e.message)),
        };
        let exports = module.entries();
        let mut guest = match self.instantiate(&module) {
            Ok(g) => g,
            Err(e) => return fail(out, CellError::new(e.kind.name(), e.message)),
        };
        let listing: Vec<String> = exports
            .iter()
            .map(|(n, params)| {
                let params: Vec<String> = params.iter().map(ToString::to_string).collect();
                format!("{n}({})", params.join(", "))
            })
            .collect();
        // Said before `run` runs, so it comes before the cell's output, result or error.
        out(Output::Stdout(format!(
            "loaded {name}: %run {name}.<export> [args] calls {}\n",
            if listing.is_empty() {
                "nothing (it exports no functions)".to_string()
            } else {
                listing.join(", ")
            }
        )));
        let cell_no = self.execution_count;
        let mut outcome = Outcome::Ok;
        if run_now && exports.iter().any(|(n, p)| n == "run" && p.is_empty()) {
            match self.call(&mut guest, "run", &[], cell_no, out) {
                Ok(values) if !values.is_empty() => {
                    out(Output::Result(MimeBundle::text(values.join(", "))))
                }
                Ok(_) => {}
                Err(()) => outcome = Outcome::Error,
            }
        }
        // A `%%wat` cell run again (the same text) replaces what it loaded, so re-running a
        // cell does not keep an instance per run.
        let cell_source = run_now.then(|| blake3::hash(bytes));
        self.modules
            .retain(|m| m.name != name && (cell_source.is_none() || m.cell_source != cell_source));
        self.modules.push(LoadedModule {
            name: name.to_string(),
            guest,
            exports,
            cell_source,
        });
        outcome
    }

    /// `%run [module.]export args...`: calls an export of a loaded module (the last loaded
    /// when no module is named).
    pub(super) fn run_export(
        &mut self,
        target: &str,
        args: &[String],
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        let (module, entry) = match target.split_once('.') {
            Some((m, e)) => (Some(m), e),
            None => (None, target),
        };
        let index = match module {
            Some(m) => self.modules.iter().position(|l| l.name == m),
            None => self.modules.len().checked_sub(1),
        };
        let Some(index) = index else {
            let known: Vec<&str> = self.modules.iter().map(|m| m.name.as_str()).collect();
            return fail(
                out,
                CellError::new(
                    "MagicError",
                    match module {
                        Some(m) if !known.is_empty() => format!("no module named '{m}' is loaded; loaded: {}", known.join(", ")),
                        _ => "no module is loaded: %load FILE.wasm (or .wat), or define one with a %%wat cell".to_string(),
                    },
                ),
            );
        };
        let cell_no = self.execution_count;
        let mut loaded = self.modules.remove(index);
        let result = self.call(&mut loaded.guest, entry, args, cell_no, out);
        self.modules.insert(index, loaded);
        match result {
            Ok(values) => {
                if !values.is_empty() {
                    out(Output::Result(MimeBundle::text(values.join(", "))));
                }
                Outcome::Ok
            }
            Err(()) => Outcome::Error,
        }
    }

    /// `%spmd`: runs the module at `path` as `nproc` ranks on the session's runtime and
    /// variables; a rank that fails is the cell's error.
    pub(super) fn run_spmd(
        &mut self,
        module: &GuestModule,
        nproc: u32,
        all_ranks: bool,
        guest_args: &[String],
        out: &mut dyn FnMut(Output),
    ) -> Outcome {
        let request = RunRequest {
            nproc,
            entry: "run",
            args: &[],
            guest_args,
            all_ranks,
            processes: None,
        };
        let report = match self.run_module(module, &request, out) {
            Ok(report) => report,
            Err(e) => return fail(out, e),
        };
        let failures = report.failures();
        match failures.first() {
            None => Outcome::Ok,
            Some(first) => fail(
                out,
                CellError {
                    ename: "SpmdError".into(),
                    evalue: format!("{} of {nproc} ranks failed; {first}", failures.len()),
                    traceback: failures,
                },
            ),
        }
    }

    /// The modules loaded with `%load` or `%%wat`.
    pub fn loaded_modules(&self) -> impl Iterator<Item = &LoadedModule> {
        self.modules.iter()
    }

    /// Forgets loaded modules (for `%reset`).
    pub(super) fn clear_modules(&mut self) {
        self.modules.clear();
    }
}
