//! `sdk_codegen`: writes `guest-sdk/src/ops.rs`, the Rust guest SDK's typed op API, from the
//! op registry, which is the single source of truth for every op.
//!
//! ```text
//! cargo run -p neuronlab-tests --bin sdk_codegen             # regenerate the file
//! cargo run -p neuronlab-tests --bin sdk_codegen -- --check  # fail when it is out of date
//! ```
//!
//! The output is formatted with `rustfmt`, which must be on `PATH`. The mapping from an op to
//! Rust is described in the generated module's own documentation ([`MODULE_DOC`]).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use neuronlab_core::ops::attrs::{AttrDefault, AttrKind, AttrSpec};
use neuronlab_core::ops::registry::{InputKind, InputSpec};
use neuronlab_core::ops::{OpDef, Registry};

/// The command that regenerates the file, for messages.
const REGENERATE: &str = "cargo run -p neuronlab-tests --bin sdk_codegen";

const MODULE_DOC: &str = "\
//! Every op of the host's registry, as typed Rust.
//!
//! This file is generated from the registry by `cargo run -p neuronlab-tests --bin
//! sdk_codegen` in the host workspace; do not edit it. Change the op's `OpDef` and regenerate.
//! The test `tests/tests/sdk_codegen.rs` fails while this file is out of date.
//!
//! How an op becomes Rust:
//!
//! - An op whose first input is a tensor is a method on it: `x.softmax()`, `a.add(&b)`,
//!   `condition.where_(&a, &b)`. Its other tensor inputs are `&Tensor`; optional inputs are
//!   `Option<&Tensor>`, and only trailing ones may be `None`.
//! - An op with no tensor input (creation) or with a list of them is a free function:
//!   `zeros(&[2, 3])`, `cat(&[&a, &b])`.
//! - Required attributes are positional parameters, typed by kind: `int` is `i64`, `float`
//!   is `f64`, `int[]` is `&[i64]`, `str` is `&str` and `dtype` is `DType`.
//! - Attributes with a default are set through the op's options type and its `_with` form:
//!   `x.sum_with(SumOptions::new().dims(&[1]).keepdim(1))`. An option left unset takes the
//!   host's default, which each setter's documentation shows.
//! - A name that is a Rust keyword gets a trailing underscore: `where_`.
//! - An op returns `Result<Tensor>`, or an array of tensors when it has several outputs. An
//!   error carries the host's message, such as why two shapes do not broadcast.
";

/// Names of the SDK's hand-written `Tensor` methods, which no op may take.
const TENSOR_METHODS: &[&str] = &[
    "shape",
    "rank",
    "dtype",
    "numel",
    "nbytes",
    "device",
    "to_vec",
    "item",
    "display",
    "try_clone",
    "clone",
    "from_handle",
    "handle",
];

/// Names of the SDK's hand-written free functions, which no op may take.
const FREE_FUNCTIONS: &[&str] = &[
    "call",
    "from_slice",
    "display",
    "display_html",
    "display_svg",
    "clock",
    "entry",
    "neuronlab_abi_version",
    "with_optional",
];

/// Rust's strict and reserved keywords (all editions).
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "crate",
    "do", "dyn", "else", "enum", "extern", "false", "final", "fn", "for", "gen", "if", "impl",
    "in", "let", "loop", "macro", "match", "mod", "move", "mut", "override", "priv", "pub", "ref",
    "return", "self", "Self", "static", "struct", "super", "trait", "true", "try", "type",
    "typeof", "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// A Rust identifier for a registry name.
fn ident(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("{name}_")
    } else {
        name.to_string()
    }
}

/// `log_softmax` to `LogSoftmax`.
fn camel(name: &str) -> String {
    name.split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map_or_else(String::new, |c| {
                c.to_uppercase().chain(chars).collect::<String>()
            })
        })
        .collect()
}

/// Registry text as Markdown, with the characters Markdown would interpret escaped.
fn markdown(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The registry's one-line doc as a sentence.
fn sentence(doc: &str) -> String {
    let doc = markdown(doc);
    if doc.ends_with('.') {
        doc
    } else {
        format!("{doc}.")
    }
}

/// How an attribute kind appears in Rust.
struct KindInfo {
    /// The parameter type of a required attribute and of a setter.
    param: &'static str,
    /// The field type in an options struct.
    field: &'static str,
    /// The `Attrs` method that encodes it.
    encode: &'static str,
    /// How a setter turns its parameter into the field.
    store: &'static str,
    /// Whether the field is read by value (`Copy`) in `attrs()`.
    copy: bool,
}

fn kind_info(kind: AttrKind) -> KindInfo {
    match kind {
        AttrKind::Int => KindInfo {
            param: "i64",
            field: "i64",
            encode: "int",
            store: "",
            copy: true,
        },
        AttrKind::Float => KindInfo {
            param: "f64",
            field: "f64",
            encode: "float",
            store: "",
            copy: true,
        },
        AttrKind::Ints => KindInfo {
            param: "&[i64]",
            field: "Vec<i64>",
            encode: "ints",
            store: ".to_vec()",
            copy: false,
        },
        AttrKind::Str => KindInfo {
            param: "&str",
            field: "String",
            encode: "str",
            store: ".to_string()",
            copy: false,
        },
        AttrKind::DType => KindInfo {
            param: "DType",
            field: "DType",
            encode: "dtype",
            store: "",
            copy: true,
        },
    }
}

/// What the generated code needs imported.
#[derive(Default)]
struct Uses {
    dtype: bool,
    with_optional: bool,
}

/// One op's generated API.
struct OpApi<'a> {
    def: &'a OpDef,
    /// The receiver's input name when the op is a `Tensor` method.
    receiver: Option<&'static str>,
    /// Attributes that are positional parameters.
    required: Vec<&'a AttrSpec>,
    /// Attributes set through the options struct.
    optional: Vec<&'a AttrSpec>,
}

impl<'a> OpApi<'a> {
    fn new(def: &'a OpDef) -> OpApi<'a> {
        let receiver = def
            .inputs
            .first()
            .filter(|i| i.kind == InputKind::Tensor)
            .map(|i| i.name);
        let (required, optional) = def
            .attrs
            .iter()
            .partition(|a| a.default == AttrDefault::Required);
        OpApi {
            def,
            receiver,
            required,
            optional,
        }
    }

    fn name(&self) -> String {
        ident(self.def.name)
    }

    fn with_name(&self) -> String {
        format!("{}_with", self.def.name)
    }

    /// The `_with` function as an intra-doc link target.
    fn with_target(&self) -> String {
        match self.receiver {
            Some(_) => format!("Tensor::{}", self.with_name()),
            None => self.with_name(),
        }
    }

    fn options_type(&self) -> String {
        format!("{}Options", camel(self.def.name))
    }

    /// The inputs that are parameters (all but the receiver).
    fn input_params(&self) -> &'a [InputSpec] {
        let skip = usize::from(self.receiver.is_some());
        &self.def.inputs[skip..]
    }

    fn has_optional_inputs(&self) -> bool {
        self.def
            .inputs
            .iter()
            .any(|i| i.kind == InputKind::Optional)
    }

    /// The return type: one tensor, or an array for an op with several outputs.
    fn return_type(&self) -> String {
        match self.def.outputs.len() {
            1 => "Result<Tensor>".to_string(),
            n => format!("Result<[Tensor; {n}]>"),
        }
    }

    /// The parameters: `&self` for a method, the other inputs, the required attributes and,
    /// for the `_with` form, the options.
    fn params(&self, with_options: bool) -> Vec<String> {
        let mut params = Vec::new();
        if self.receiver.is_some() {
            params.push("&self".to_string());
        }
        for input in self.input_params() {
            let ty = match input.kind {
                InputKind::Tensor => "&Tensor",
                InputKind::Optional => "Option<&Tensor>",
                InputKind::List => "&[&Tensor]",
            };
            params.push(format!("{}: {ty}", ident(input.name)));
        }
        for attr in &self.required {
            params.push(format!(
                "{}: {}",
                ident(attr.name),
                kind_info(attr.kind).param
            ));
        }
        if with_options {
            params.push(format!("options: {}", self.options_type()));
        }
        params
    }

    /// The arguments that forward `params(false)` (without `&self`).
    fn forward_args(&self) -> Vec<String> {
        let inputs = self.input_params().iter().map(|i| ident(i.name));
        let attrs = self.required.iter().map(|a| ident(a.name));
        inputs.chain(attrs).collect()
    }

    /// An example call, with the schema's names as placeholder arguments; the `_with` form
    /// sets the first option.
    fn example(&self, with_options: bool) -> Vec<String> {
        let mut lines = Vec::new();
        let mut args: Vec<String> = self
            .input_params()
            .iter()
            .map(|i| match i.kind {
                InputKind::Tensor => format!("&{}", ident(i.name)),
                InputKind::Optional => format!("Some(&{})", ident(i.name)),
                InputKind::List => "&[&a, &b]".to_string(),
            })
            .collect();
        args.extend(self.required.iter().map(|a| ident(a.name)));
        let name = if with_options {
            let first = ident(self.optional[0].name);
            lines.push(format!(
                "let options = {}::new().{first}({first});",
                self.options_type()
            ));
            args.push("options".to_string());
            self.with_name()
        } else {
            self.name()
        };
        let callee = match self.receiver {
            Some(receiver) => format!("{}.{name}", ident(receiver)),
            None => name,
        };
        lines.push(format!("let out = {callee}({})?;", args.join(", ")));
        lines
    }

    /// Writes an example as a doc section.
    fn example_doc(&self, out: &mut String, with_options: bool) {
        out.push_str("///\n/// # Example\n///\n/// ```ignore\n");
        for line in self.example(with_options) {
            let _ = writeln!(out, "/// {line}");
        }
        out.push_str("/// ```\n");
    }

    /// The doc comment of a function.
    fn fn_doc(&self, out: &mut String, with_options: bool) {
        let def = self.def;
        let _ = writeln!(out, "/// {}\n///", sentence(def.doc));
        if with_options {
            let _ = writeln!(
                out,
                "/// Sets the attributes that have defaults through [`{}`].\n///",
                self.options_type()
            );
        } else if !self.optional.is_empty() {
            let _ = writeln!(
                out,
                "/// Attributes with defaults keep them; [`{}`] sets them.\n///",
                self.with_target()
            );
        }
        let _ = writeln!(
            out,
            "/// Op `{}` ({}): `{}`",
            def.name,
            def.group.name(),
            def.schema()
        );
        self.example_doc(out, with_options);
    }

    /// The body of the function that calls the op.
    fn call_body(&self, out: &mut String, uses: &mut Uses) {
        let _ = writeln!(out, "static OP: Op = Op::new({:?});", self.def.name);
        // Each input's argument: `self` for the receiver, else its parameter.
        let args: Vec<(&InputSpec, String)> = self
            .def
            .inputs
            .iter()
            .enumerate()
            .map(|(i, input)| match self.receiver {
                Some(_) if i == 0 => (input, "self".to_string()),
                _ => (input, ident(input.name)),
            })
            .collect();
        let inputs = if self.has_optional_inputs() {
            uses.with_optional = true;
            let (optional, required): (Vec<_>, Vec<_>) = args
                .iter()
                .partition(|(input, _)| input.kind == InputKind::Optional);
            let required: Vec<&str> = required.iter().map(|(_, arg)| arg.as_str()).collect();
            let optional: Vec<String> = optional
                .iter()
                .map(|(input, arg)| format!("({:?}, {arg})", input.name))
                .collect();
            let _ = writeln!(
                out,
                "let inputs = with_optional({:?}, &[{}], &[{}])?;",
                self.def.name,
                required.join(", "),
                optional.join(", ")
            );
            "&inputs".to_string()
        } else {
            match args.as_slice() {
                [(input, arg)] if input.kind == InputKind::List => arg.clone(),
                _ => {
                    let args: Vec<&str> = args.iter().map(|(_, arg)| arg.as_str()).collect();
                    format!("&[{}]", args.join(", "))
                }
            }
        };
        let mut attrs = if self.optional.is_empty() {
            "Attrs::new()".to_string()
        } else {
            "options.attrs()".to_string()
        };
        for attr in &self.required {
            let info = kind_info(attr.kind);
            let _ = write!(
                attrs,
                ".{}({:?}, {})",
                info.encode,
                attr.name,
                ident(attr.name)
            );
        }
        let _ = writeln!(out, "OP.call({inputs}, {attrs})");
    }

    /// The function (or `_with` function) that calls the op.
    fn call_fn(&self, out: &mut String, uses: &mut Uses) {
        let with_options = !self.optional.is_empty();
        self.fn_doc(out, with_options);
        let name = if with_options {
            self.with_name()
        } else {
            self.name()
        };
        let _ = writeln!(
            out,
            "#[track_caller]\npub fn {name}({}) -> {} {{",
            self.params(with_options).join(", "),
            self.return_type()
        );
        self.call_body(out, uses);
        out.push_str("}\n");
    }

    /// The function without options, which calls the `_with` form with none set.
    fn plain_fn(&self, out: &mut String) {
        self.fn_doc(out, false);
        let mut args = self.forward_args();
        args.push(format!("{}::new()", self.options_type()));
        let callee = match self.receiver {
            Some(_) => format!("self.{}", self.with_name()),
            None => self.with_name(),
        };
        let _ = writeln!(
            out,
            "#[track_caller]\npub fn {}({}) -> {} {{\n{callee}({})\n}}",
            self.name(),
            self.params(false).join(", "),
            self.return_type(),
            args.join(", ")
        );
    }

    /// The options struct of the attributes that have defaults.
    fn options_struct(&self, out: &mut String) {
        let ty = self.options_type();
        let _ = writeln!(
            out,
            "/// Options of [`{}`]: the attributes of `{}` that have defaults.\n\
             ///\n/// An option left unset takes the host's default.",
            self.with_target(),
            self.def.name,
        );
        self.example_doc(out, true);
        let _ = writeln!(
            out,
            "#[derive(Clone, Debug, Default, PartialEq)]\npub struct {ty} {{"
        );
        for attr in &self.optional {
            let _ = writeln!(
                out,
                "{}: Option<{}>,",
                ident(attr.name),
                kind_info(attr.kind).field
            );
        }
        let _ = writeln!(out, "}}\n\nimpl {ty} {{");
        let _ = writeln!(
            out,
            "/// No options set: every attribute takes its default.\n\
             pub fn new() -> {ty} {{\n{ty}::default()\n}}\n"
        );
        for attr in &self.optional {
            let info = kind_info(attr.kind);
            let field = ident(attr.name);
            let mut doc = format!("/// Sets `{}`: `{}`", attr.name, attr.signature());
            if attr.choices.is_empty() {
                doc.push('.');
            } else {
                let choices: Vec<String> = attr.choices.iter().map(|c| format!("`{c}`")).collect();
                let _ = write!(doc, ", one of {}.", choices.join(", "));
            }
            let _ = writeln!(
                out,
                "{doc}\n#[must_use]\npub fn {field}(mut self, {field}: {}) -> {ty} {{\n\
                 self.{field} = Some({field}{});\nself\n}}\n",
                info.param, info.store
            );
        }
        out.push_str("fn attrs(&self) -> Attrs {\nlet mut attrs = Attrs::new();\n");
        for attr in &self.optional {
            let info = kind_info(attr.kind);
            let field = ident(attr.name);
            let value = if info.copy { "*value" } else { "value" };
            let _ = writeln!(
                out,
                "if let Some(value) = &self.{field} {{\nattrs = attrs.{}({:?}, {value});\n}}",
                info.encode, attr.name
            );
        }
        out.push_str("attrs\n}\n}\n");
    }

    /// Every item of the op.
    fn render(&self, out: &mut String, uses: &mut Uses) {
        let with_options = !self.optional.is_empty();
        if self.def.attrs.iter().any(|a| a.kind == AttrKind::DType) {
            uses.dtype = true;
        }
        let mut fns = String::new();
        if with_options {
            self.plain_fn(&mut fns);
            fns.push('\n');
        }
        self.call_fn(&mut fns, uses);
        if self.receiver.is_some() {
            let _ = writeln!(out, "impl Tensor {{\n{fns}}}\n");
        } else {
            let _ = writeln!(out, "{fns}");
        }
        if with_options {
            self.options_struct(out);
            out.push('\n');
        }
    }

    /// An error when a generated name would collide with a hand-written one.
    fn check_names(&self) -> Result<(), String> {
        let mut names = vec![self.name()];
        if !self.optional.is_empty() {
            names.push(self.with_name());
        }
        let reserved = if self.receiver.is_some() {
            TENSOR_METHODS
        } else {
            FREE_FUNCTIONS
        };
        match names.iter().find(|n| reserved.contains(&n.as_str())) {
            Some(n) => Err(format!(
                "op '{}' would generate `{n}`, which the SDK defines by hand; rename the op or \
                 the SDK item",
                self.def.name
            )),
            None => Ok(()),
        }
    }
}

/// The generated module, before formatting.
fn render(ops: &[OpDef]) -> Result<String, String> {
    let mut body = String::new();
    let mut uses = Uses::default();
    for def in ops {
        let api = OpApi::new(def);
        api.check_names()?;
        api.render(&mut body, &mut uses);
    }
    let mut out = String::from(MODULE_DOC);
    out.push('\n');
    out.push_str("use crate::attrs::Attrs;\n");
    if uses.dtype {
        out.push_str("use crate::dtype::DType;\n");
    }
    out.push_str("use crate::error::Result;\n");
    if uses.with_optional {
        out.push_str("use crate::op::{with_optional, Op};\n");
    } else {
        out.push_str("use crate::op::Op;\n");
    }
    out.push_str("use crate::tensor::Tensor;\n\n");
    out.push_str(&body);
    Ok(out)
}

/// Formats Rust source with `rustfmt`, as `cargo fmt` would inside `dir`.
fn rustfmt(source: &str, dir: &Path) -> Result<String, String> {
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2021", "--emit", "stdout"])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("cannot run rustfmt ({e}); install it with `rustup component add rustfmt`")
        })?;
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(source.as_bytes())
        .map_err(|e| format!("writing to rustfmt: {e}"))?;
    let output = child
        .wait_with_output()
        .map_err(|e| format!("waiting for rustfmt: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "rustfmt rejected the generated code:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    String::from_utf8(output.stdout).map_err(|e| format!("rustfmt output: {e}"))
}

fn sdk_dir() -> PathBuf {
    let tests = Path::new(env!("CARGO_MANIFEST_DIR"));
    tests
        .parent()
        .expect("the tests crate is inside the workspace")
        .join("guest-sdk")
}

fn run(check: bool) -> Result<(), String> {
    let dir = sdk_dir();
    let path = dir.join("src/ops.rs");
    let generated = rustfmt(&render(Registry::global().ops())?, &dir)?;
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    if check {
        if current != generated {
            return Err(format!(
                "{} is out of date with the op registry; regenerate it with `{REGENERATE}`",
                path.display()
            ));
        }
        println!("{} is up to date", path.display());
    } else if current == generated {
        println!("{} is up to date", path.display());
    } else {
        std::fs::write(&path, generated).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let check = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        [] => false,
        ["--check"] => true,
        _ => {
            eprintln!("usage: sdk_codegen [--check]");
            return ExitCode::from(2);
        }
    };
    match run(check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sdk_codegen: {e}");
            ExitCode::FAILURE
        }
    }
}
