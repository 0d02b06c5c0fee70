//! Session variables (guest-sdk/ABI.md, "vars"): what a notebook or REPL cell leaves for the
//! next cells.
//!
//! A [`VarStore`] maps names to [`Var`]s. It belongs to a session: every guest instance of the
//! session (each cell, each rank of a launch) holds the same `Arc<VarStore>`, and the guest's
//! `var_*` imports read and write it. `neuronlab run` runs in a session of its own, so its store
//! ends with the run.
//!
//! A variable is one of:
//!
//! - a tensor, shared with the guest that set it (the store holds another reference to the
//!   same storage, so its HBM stays reserved while the variable exists);
//! - a plain value (a number, a bool, a string, ...), kept as its `Display` text with its Rust
//!   type name, which a later cell parses back;
//! - a local: a value of a type the store cannot carry between cells (a `Vec`, a struct),
//!   recorded by name and type only, so `%vars` can list it and a later cell that uses it can
//!   be told why it is not there.
//!
//! Names are Rust identifiers ([`check_name`]). The store is thread-safe: ranks of one launch
//! share it, and the last write of a name wins.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

use neuronlab_core::tensor::Tensor;
use neuronlab_core::{Error, Result};

/// One session variable.
#[derive(Clone, Debug)]
pub enum Var {
    /// A tensor, shared (not copied) with the guest that set it.
    Tensor(Tensor),
    /// A plain value: its Rust type name (`i64`, `f64`, `bool`, `String`, ...) and its
    /// `Display` text.
    Value {
        /// The Rust type name, as the guest reported it.
        ty: String,
        /// The value's `Display` text, which parses back into `ty`.
        text: String,
    },
    /// A value that stays local to the cell that made it; only its type name is known.
    Local {
        /// The Rust type name, as the guest reported it.
        ty: String,
    },
}

impl Var {
    /// The variable's type for listings: `Tensor` for a tensor, otherwise the Rust type name
    /// the guest reported.
    pub fn type_name(&self) -> &str {
        match self {
            Var::Tensor(_) => "Tensor",
            Var::Value { ty, .. } | Var::Local { ty } => ty,
        }
    }

    /// What the variable is, for messages: `a tensor (f32[2, 3])`, `a value of type i64`, `a
    /// local of type Vec<i32>`.
    pub fn describe(&self) -> String {
        match self {
            Var::Tensor(t) => format!("a tensor ({})", t.meta()),
            Var::Value { ty, .. } => format!("a value of type {ty}"),
            Var::Local { ty } => format!("a local of type {ty}, kept only in its cell"),
        }
    }
}

impl fmt::Display for Var {
    /// One line: the tensor's dtype and shape, a value's text with its type, or a local's
    /// type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Var::Tensor(t) => write!(f, "Tensor {} on {}", t.meta(), t.device()),
            Var::Value { ty, text } => write!(f, "{ty} = {text}"),
            Var::Local { ty } => write!(f, "{ty} (local to its cell)"),
        }
    }
}

/// Checks that `name` can name a variable: a Rust identifier made of ASCII letters, digits
/// and `_`, not starting with a digit, and not `_` alone (which Rust does not bind).
///
/// The error says what is wrong with the name.
pub fn check_name(name: &str) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::Invalid(format!(
            "{name:?} cannot name a variable: {why}"
        )))
    };
    let Some(first) = name.chars().next() else {
        return bad("the name is empty");
    };
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
    {
        return bad(&format!(
            "{c:?} is not allowed; a name is a Rust identifier (ASCII letters, digits and _)"
        ));
    }
    if first.is_ascii_digit() {
        return bad("a name cannot start with a digit");
    }
    if name == "_" {
        return bad("`_` alone is not a name");
    }
    Ok(())
}

/// The variables of one session, by name.
///
/// It is shared as an `Arc<VarStore>` by every guest of the session; all methods take `&self`
/// and lock an internal mutex for the length of the call only.
#[derive(Debug, Default)]
pub struct VarStore {
    vars: Mutex<BTreeMap<String, Var>>,
}

impl VarStore {
    /// An empty store.
    pub fn new() -> VarStore {
        VarStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Var>> {
        // A panic while the lock was held cannot leave the map half-changed: every change is
        // one insert or remove.
        self.vars.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, name: &str, var: Var) -> Result<()> {
        check_name(name)?;
        self.lock().insert(name.to_string(), var);
        Ok(())
    }

    /// Makes `name` refer to the tensor `t` (shared, not copied), replacing what it held.
    /// Fails only for a bad name.
    pub fn set_tensor(&self, name: &str, t: Tensor) -> Result<()> {
        self.set(name, Var::Tensor(t))
    }

    /// The tensor `name` refers to. The error says when there is no such variable, listing
    /// the variables there are, or what the variable holds instead.
    pub fn get_tensor(&self, name: &str) -> Result<Tensor> {
        let vars = self.lock();
        match vars.get(name) {
            Some(Var::Tensor(t)) => Ok(t.clone()),
            Some(other) => Err(Error::Invalid(format!(
                "the variable `{name}` is {}, not a tensor",
                other.describe()
            ))),
            None => Err(missing(name, &vars)),
        }
    }

    /// Makes `name` a plain value of Rust type `ty` with `Display` text `text`, replacing what
    /// it held. Fails only for a bad name or an empty type name.
    pub fn set_value(&self, name: &str, ty: &str, text: &str) -> Result<()> {
        check_type(name, ty)?;
        self.set(
            name,
            Var::Value {
                ty: ty.to_string(),
                text: text.to_string(),
            },
        )
    }

    /// The plain value `name` as its type name and text. The error says when there is no
    /// such variable, listing the variables there are, or what the variable holds instead.
    pub fn get_value(&self, name: &str) -> Result<(String, String)> {
        let vars = self.lock();
        match vars.get(name) {
            Some(Var::Value { ty, text }) => Ok((ty.clone(), text.clone())),
            Some(Var::Tensor(t)) => Err(Error::Invalid(format!(
                "the variable `{name}` is a tensor ({}), not a plain value; read it as a tensor",
                t.meta()
            ))),
            Some(Var::Local { ty }) => Err(Error::Invalid(format!(
                "the variable `{name}` ({ty}) stayed local to the cell that made it: only \
                 tensors and plain values (numbers, bool, char, String) are kept for later cells"
            ))),
            None => Err(missing(name, &vars)),
        }
    }

    /// Records `name` as a value of Rust type `ty` that stays local to its cell, replacing
    /// what it held. Fails only for a bad name or an empty type name.
    pub fn set_local(&self, name: &str, ty: &str) -> Result<()> {
        check_type(name, ty)?;
        self.set(name, Var::Local { ty: ty.to_string() })
    }

    /// The variable `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<Var> {
        self.lock().get(name).cloned()
    }

    /// Removes the variable `name` and returns what it held.
    pub fn remove(&self, name: &str) -> Option<Var> {
        self.lock().remove(name)
    }

    /// Removes every variable (their tensors are released when no guest holds them).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The variables' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Every variable with its name, sorted by name: a consistent copy taken under one lock.
    pub fn snapshot(&self) -> Vec<(String, Var)> {
        self.lock()
            .iter()
            .map(|(name, var)| (name.clone(), var.clone()))
            .collect()
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when there are no variables.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// A type name must say something: `%vars` shows it and a later cell parses with it.
fn check_type(name: &str, ty: &str) -> Result<()> {
    if ty.trim().is_empty() {
        return Err(Error::Invalid(format!(
            "the variable `{name}` has an empty type name"
        )));
    }
    if ty.contains('\n') {
        return Err(Error::Invalid(format!(
            "the type name of the variable `{name}` contains a newline: {ty:?}"
        )));
    }
    Ok(())
}

/// The error for a variable that does not exist, listing those that do.
fn missing(name: &str, vars: &BTreeMap<String, Var>) -> Error {
    if vars.is_empty() {
        return Error::Invalid(format!(
            "there is no variable `{name}`; there are no variables yet"
        ));
    }
    let names: Vec<&str> = vars.keys().map(String::as_str).collect();
    Error::Invalid(format!(
        "there is no variable `{name}`; the variables are: {}",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use neuronlab_core::device::topology::Topology;
    use neuronlab_core::runtime::RuntimeOptions;
    use neuronlab_core::tensor::Buffer;
    use neuronlab_core::Runtime;

    fn tensor(values: Vec<f32>) -> Tensor {
        let rt = Runtime::new(RuntimeOptions {
            topology: Topology::preset("trn2.3xlarge", None).expect("a preset"),
            host_limit: 1 << 30,
        });
        let n = values.len();
        rt.tensor(Buffer::F32(values), &[n]).expect("a tensor")
    }

    #[test]
    fn names_are_rust_identifiers() {
        for good in ["x", "_x", "x1", "snake_case", "CamelCase", "__", "a_1_b"] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        let bad = [
            ("", "empty"),
            ("1x", "cannot start with a digit"),
            ("a-b", "'-' is not allowed"),
            ("a b", "' ' is not allowed"),
            ("é", "'é' is not allowed"),
            ("_", "`_` alone"),
            ("x\n", "'\\n' is not allowed"),
        ];
        for (name, why) in bad {
            let e = check_name(name).unwrap_err().to_string();
            assert!(e.contains(why), "{name:?}: {e}");
            assert!(e.contains("cannot name a variable"), "{name:?}: {e}");
        }
    }

    #[test]
    fn tensors_values_and_locals_round_trip() {
        let store = VarStore::new();
        assert!(store.is_empty());
        let t = tensor(vec![1.0, 2.0, 3.0]);
        store.set_tensor("x", t.clone()).unwrap();
        store.set_value("n", "i64", "42").unwrap();
        store.set_value("s", "String", "two\nlines").unwrap();
        store.set_local("v", "alloc::vec::Vec<i32>").unwrap();
        assert_eq!(store.len(), 4);
        assert_eq!(store.names(), ["n", "s", "v", "x"]);

        // The tensor is shared, not copied.
        let back = store.get_tensor("x").unwrap();
        assert!(back.shares_storage(&t));
        assert_eq!(back.to_vec::<f32>(), vec![1.0, 2.0, 3.0]);

        match store.get("n") {
            Some(Var::Value { ty, text }) => {
                assert_eq!((ty.as_str(), text.as_str()), ("i64", "42"))
            }
            other => panic!("{other:?}"),
        }
        match store.get("s") {
            Some(Var::Value { text, .. }) => assert_eq!(text, "two\nlines"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(store.get("v"), Some(Var::Local { ty }) if ty == "alloc::vec::Vec<i32>"));
        assert!(store.get("nope").is_none());

        let names: Vec<String> = store.snapshot().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["n", "s", "v", "x"]);
        let types: Vec<String> = store
            .snapshot()
            .iter()
            .map(|(_, v)| v.type_name().to_string())
            .collect();
        assert_eq!(types, ["i64", "String", "alloc::vec::Vec<i32>", "Tensor"]);
    }

    #[test]
    fn a_write_replaces_and_remove_and_clear_forget() {
        let store = VarStore::new();
        store.set_value("x", "i64", "1").unwrap();
        store.set_tensor("x", tensor(vec![5.0])).unwrap();
        assert_eq!(store.len(), 1);
        assert!(matches!(store.get("x"), Some(Var::Tensor(_))));
        store.set_local("x", "Foo").unwrap();
        assert!(store.get_tensor("x").is_err());

        store.set_value("y", "bool", "true").unwrap();
        assert!(matches!(store.remove("x"), Some(Var::Local { .. })));
        assert!(store.remove("x").is_none());
        assert_eq!(store.names(), ["y"]);
        store.clear();
        assert!(store.is_empty());
    }

    #[test]
    fn errors_name_the_variable_and_list_the_others() {
        let store = VarStore::new();
        let e = store.get_tensor("x").unwrap_err().to_string();
        assert!(
            e.contains("no variable `x`") && e.contains("no variables yet"),
            "{e}"
        );

        store.set_value("b", "i64", "1").unwrap();
        store.set_tensor("a", tensor(vec![0.0; 4])).unwrap();
        store.set_local("c", "Vec<u8>").unwrap();
        let e = store.get_tensor("x").unwrap_err().to_string();
        assert!(e.contains("the variables are: a, b, c"), "{e}");
        let e = store.get_tensor("b").unwrap_err().to_string();
        assert!(
            e.contains("`b` is a value of type i64, not a tensor"),
            "{e}"
        );

        assert_eq!(store.get_value("b").unwrap(), ("i64".into(), "1".into()));
        let e = store.get_value("a").unwrap_err().to_string();
        assert!(e.contains("is a tensor (f32[4])"), "{e}");
        let e = store.get_value("c").unwrap_err().to_string();
        assert!(e.contains("stayed local"), "{e}");
        let e = store.get_value("z").unwrap_err().to_string();
        assert!(e.contains("the variables are: a, b, c"), "{e}");

        assert!(store.set_tensor("1a", tensor(vec![1.0])).is_err());
        assert!(store.set_value("ok", "", "1").is_err());
        assert!(store.set_local("ok", "a\nb").is_err());
        assert_eq!(store.len(), 3, "failed writes change nothing");
    }

    #[test]
    fn ranks_share_one_store_across_threads() {
        let store = Arc::new(VarStore::new());
        std::thread::scope(|s| {
            for rank in 0..8 {
                let store = store.clone();
                s.spawn(move || {
                    for i in 0..100 {
                        store
                            .set_value(&format!("r{rank}_{i}"), "i64", &i.to_string())
                            .unwrap();
                        store.set_value("last", "i64", &rank.to_string()).unwrap();
                    }
                });
            }
        });
        assert_eq!(store.len(), 8 * 100 + 1);
        assert!(matches!(store.get("r7_99"), Some(Var::Value { text, .. }) if text == "99"));
    }

    #[test]
    fn vars_display_on_one_line() {
        let store = VarStore::new();
        store.set_tensor("x", tensor(vec![0.0; 3])).unwrap();
        store.set_value("n", "i64", "3").unwrap();
        store.set_local("v", "Vec<i32>").unwrap();
        let lines: Vec<String> = store
            .snapshot()
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        assert_eq!(
            lines,
            [
                "n: i64 = 3",
                "v: Vec<i32> (local to its cell)",
                "x: Tensor f32[3] on neuron:0"
            ]
        );
    }
}
