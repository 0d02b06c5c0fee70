//! Op attributes: the values a caller passes (ints, floats, int lists, strings), the spec an op
//! declares for each, and their resolution into typed, defaulted values.

use std::fmt;

use crate::tensor::DType;

/// One attribute value as a caller passes it.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// An integer (also accepted where a float or an int list is expected).
    Int(i64),
    /// A float.
    Float(f64),
    /// A list of integers (dims, shapes, pads).
    Ints(Vec<i64>),
    /// A string (modes, dtype names).
    Str(String),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Float(v) => write!(f, "{v:?}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Str(v) => write!(f, "'{v}'"),
        }
    }
}

/// Named attribute values, in the order the caller gave them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub Vec<(String, AttrValue)>);

impl Attrs {
    /// No attributes.
    pub fn new() -> Attrs {
        Attrs(Vec::new())
    }

    /// Adds an attribute (builder style).
    pub fn with(mut self, name: &str, value: impl Into<AttrValue>) -> Attrs {
        self.0.push((name.to_string(), value.into()));
        self
    }

    fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

impl From<i64> for AttrValue {
    fn from(v: i64) -> Self {
        AttrValue::Int(v)
    }
}
impl From<f64> for AttrValue {
    fn from(v: f64) -> Self {
        AttrValue::Float(v)
    }
}
impl From<Vec<i64>> for AttrValue {
    fn from(v: Vec<i64>) -> Self {
        AttrValue::Ints(v)
    }
}
impl From<&[i64]> for AttrValue {
    fn from(v: &[i64]) -> Self {
        AttrValue::Ints(v.to_vec())
    }
}
impl From<&str> for AttrValue {
    fn from(v: &str) -> Self {
        AttrValue::Str(v.to_string())
    }
}
impl From<DType> for AttrValue {
    fn from(v: DType) -> Self {
        AttrValue::Str(v.name().to_string())
    }
}

/// The type an attribute must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttrKind {
    /// An integer.
    Int,
    /// A float (ints are accepted).
    Float,
    /// A list of integers (a single int is accepted as a one-element list).
    Ints,
    /// A string.
    Str,
    /// A dtype, by name (`"bf16"`).
    DType,
}

impl AttrKind {
    fn name(self) -> &'static str {
        match self {
            AttrKind::Int => "int",
            AttrKind::Float => "float",
            AttrKind::Ints => "int[]",
            AttrKind::Str => "str",
            AttrKind::DType => "dtype",
        }
    }
}

/// What happens when the caller leaves an attribute out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AttrDefault {
    /// The caller must give it.
    Required,
    /// Absent means "not given" (the op decides, e.g. "infer the dtype").
    Optional,
    /// This integer.
    Int(i64),
    /// This float.
    Float(f64),
    /// This list.
    Ints(&'static [i64]),
    /// This string.
    Str(&'static str),
}

/// One attribute an op accepts.
#[derive(Clone, Copy, Debug)]
pub struct AttrSpec {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: AttrKind,
    /// Its default.
    pub default: AttrDefault,
    /// Allowed strings, for `Str` attributes with a fixed set of modes (empty: any).
    pub choices: &'static [&'static str],
}

impl AttrSpec {
    /// A spec with no fixed choices.
    pub const fn new(name: &'static str, kind: AttrKind, default: AttrDefault) -> AttrSpec {
        AttrSpec {
            name,
            kind,
            default,
            choices: &[],
        }
    }

    /// A string attribute restricted to `choices`.
    pub const fn choice(
        name: &'static str,
        default: &'static str,
        choices: &'static [&'static str],
    ) -> AttrSpec {
        AttrSpec {
            name,
            kind: AttrKind::Str,
            default: AttrDefault::Str(default),
            choices,
        }
    }

    /// How the spec reads in a schema: `dim: int = -1`.
    pub fn signature(&self) -> String {
        let default = match self.default {
            AttrDefault::Required => String::new(),
            AttrDefault::Optional => " = None".into(),
            AttrDefault::Int(v) => format!(" = {v}"),
            AttrDefault::Float(v) => format!(" = {v:?}"),
            AttrDefault::Ints(v) => format!(" = {v:?}"),
            AttrDefault::Str(v) => format!(" = '{v}'"),
        };
        format!("{}: {}{default}", self.name, self.kind.name())
    }
}

/// A resolved value, typed by its spec.
#[derive(Clone, Debug, PartialEq)]
enum Resolved {
    Int(i64),
    Float(f64),
    Ints(Vec<i64>),
    Str(String),
    DType(DType),
    Absent,
}

/// Attributes checked against an op's specs, with defaults filled in.
///
/// The getters take names from the op's own spec; asking for a name the spec does not declare
/// is a bug in the op definition, which the registry tests catch.
#[derive(Clone, Debug)]
pub struct ResolvedAttrs {
    specs: &'static [AttrSpec],
    values: Vec<Resolved>,
}

impl ResolvedAttrs {
    /// Checks `attrs` against `specs`: unknown names, missing required values, wrong types and
    /// values outside a fixed set of choices are errors that say what was expected.
    pub fn resolve(specs: &'static [AttrSpec], attrs: &Attrs) -> Result<ResolvedAttrs, String> {
        for (name, _) in &attrs.0 {
            if !specs.iter().any(|s| s.name == name) {
                let known: Vec<&str> = specs.iter().map(|s| s.name).collect();
                return Err(if known.is_empty() {
                    format!("unknown attribute '{name}': this op takes no attributes")
                } else {
                    format!(
                        "unknown attribute '{name}': expected one of {}",
                        known.join(", ")
                    )
                });
            }
        }
        let values = specs
            .iter()
            .map(|spec| resolve_one(spec, attrs.get(spec.name)))
            .collect::<Result<_, _>>()?;
        Ok(ResolvedAttrs { specs, values })
    }

    fn value(&self, name: &str) -> &Resolved {
        let i = self
            .specs
            .iter()
            .position(|s| s.name == name)
            .unwrap_or_else(|| panic!("op reads undeclared attribute '{name}'"));
        &self.values[i]
    }

    /// An int attribute (`None` when optional and absent).
    pub fn opt_int(&self, name: &str) -> Option<i64> {
        match self.value(name) {
            Resolved::Int(v) => Some(*v),
            _ => None,
        }
    }

    /// A required or defaulted int attribute.
    pub fn int(&self, name: &str) -> i64 {
        self.opt_int(name)
            .unwrap_or_else(|| panic!("attribute '{name}' is not an int"))
    }

    /// A float attribute.
    pub fn float(&self, name: &str) -> f64 {
        match self.value(name) {
            Resolved::Float(v) => *v,
            _ => panic!("attribute '{name}' is not a float"),
        }
    }

    /// An optional float attribute.
    pub fn opt_float(&self, name: &str) -> Option<f64> {
        match self.value(name) {
            Resolved::Float(v) => Some(*v),
            _ => None,
        }
    }

    /// An int list attribute (`None` when optional and absent).
    pub fn opt_ints(&self, name: &str) -> Option<&[i64]> {
        match self.value(name) {
            Resolved::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// A required or defaulted int list attribute.
    pub fn ints(&self, name: &str) -> &[i64] {
        self.opt_ints(name)
            .unwrap_or_else(|| panic!("attribute '{name}' is not an int list"))
    }

    /// A string attribute.
    pub fn str(&self, name: &str) -> &str {
        match self.value(name) {
            Resolved::Str(v) => v,
            _ => panic!("attribute '{name}' is not a string"),
        }
    }

    /// An optional dtype attribute.
    pub fn opt_dtype(&self, name: &str) -> Option<DType> {
        match self.value(name) {
            Resolved::DType(v) => Some(*v),
            _ => None,
        }
    }

    /// The attributes as caller values again (for events, caches and explain).
    pub fn to_attrs(&self) -> Attrs {
        let mut out = Attrs::new();
        for (spec, v) in self.specs.iter().zip(&self.values) {
            let value = match v {
                Resolved::Int(x) => AttrValue::Int(*x),
                Resolved::Float(x) => AttrValue::Float(*x),
                Resolved::Ints(x) => AttrValue::Ints(x.clone()),
                Resolved::Str(x) => AttrValue::Str(x.clone()),
                Resolved::DType(d) => AttrValue::from(*d),
                Resolved::Absent => continue,
            };
            out.0.push((spec.name.to_string(), value));
        }
        out
    }
}

fn resolve_one(spec: &AttrSpec, given: Option<&AttrValue>) -> Result<Resolved, String> {
    let wrong = |v: &AttrValue| {
        format!(
            "attribute '{}' expects {}, got {v}",
            spec.name,
            spec.kind.name()
        )
    };
    let Some(v) = given else {
        return match spec.default {
            AttrDefault::Required => Err(format!(
                "missing required attribute '{}' ({})",
                spec.name,
                spec.kind.name()
            )),
            AttrDefault::Optional => Ok(Resolved::Absent),
            AttrDefault::Int(x) => Ok(Resolved::Int(x)),
            AttrDefault::Float(x) => Ok(Resolved::Float(x)),
            AttrDefault::Ints(x) => Ok(Resolved::Ints(x.to_vec())),
            AttrDefault::Str(x) if spec.kind == AttrKind::DType => x
                .parse()
                .map(Resolved::DType)
                .map_err(|e| format!("bad default for '{}': {e}", spec.name)),
            AttrDefault::Str(x) => Ok(Resolved::Str(x.to_string())),
        };
    };
    let r = match (spec.kind, v) {
        (AttrKind::Int, AttrValue::Int(x)) => Resolved::Int(*x),
        (AttrKind::Float, AttrValue::Float(x)) => Resolved::Float(*x),
        (AttrKind::Float, AttrValue::Int(x)) => Resolved::Float(*x as f64),
        (AttrKind::Ints, AttrValue::Ints(x)) => Resolved::Ints(x.clone()),
        (AttrKind::Ints, AttrValue::Int(x)) => Resolved::Ints(vec![*x]),
        (AttrKind::Str, AttrValue::Str(x)) => {
            if !spec.choices.is_empty() && !spec.choices.contains(&x.as_str()) {
                return Err(format!(
                    "attribute '{}' is '{x}': expected one of {}",
                    spec.name,
                    spec.choices.join(", ")
                ));
            }
            Resolved::Str(x.clone())
        }
        (AttrKind::DType, AttrValue::Str(x)) => Resolved::DType(
            x.parse()
                .map_err(|e| format!("attribute '{}': {e}", spec.name))?,
        ),
        (_, v) => return Err(wrong(v)),
    };
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    static SPECS: &[AttrSpec] = &[
        AttrSpec::new("dim", AttrKind::Int, AttrDefault::Int(-1)),
        AttrSpec::new("eps", AttrKind::Float, AttrDefault::Float(1e-5)),
        AttrSpec::choice("approximate", "none", &["none", "tanh"]),
        AttrSpec::new("dtype", AttrKind::DType, AttrDefault::Optional),
        AttrSpec::new("shape", AttrKind::Ints, AttrDefault::Required),
    ];

    #[test]
    fn defaults_and_coercions() {
        let a = ResolvedAttrs::resolve(SPECS, &Attrs::new().with("shape", 4).with("eps", 1i64))
            .unwrap();
        assert_eq!(a.int("dim"), -1);
        assert_eq!(a.float("eps"), 1.0);
        assert_eq!(a.ints("shape"), &[4]);
        assert_eq!(a.str("approximate"), "none");
        assert_eq!(a.opt_dtype("dtype"), None);
    }

    #[test]
    fn errors_say_what_was_expected() {
        let e = ResolvedAttrs::resolve(SPECS, &Attrs::new()).unwrap_err();
        assert!(e.contains("missing required attribute 'shape'"), "{e}");
        let e = ResolvedAttrs::resolve(SPECS, &Attrs::new().with("shape", 1).with("dimm", 0))
            .unwrap_err();
        assert!(
            e.contains("unknown attribute 'dimm'") && e.contains("dim, eps"),
            "{e}"
        );
        let e = ResolvedAttrs::resolve(
            SPECS,
            &Attrs::new().with("shape", 1).with("approximate", "fast"),
        )
        .unwrap_err();
        assert!(e.contains("expected one of none, tanh"), "{e}");
        let e = ResolvedAttrs::resolve(SPECS, &Attrs::new().with("shape", 1).with("dim", 0.5))
            .unwrap_err();
        assert!(e.contains("expects int"), "{e}");
        let e = ResolvedAttrs::resolve(SPECS, &Attrs::new().with("shape", 1).with("dtype", 99))
            .unwrap_err();
        // Dtypes are passed by name (ABI.md); a number is not a dtype.
        assert!(e.contains("attribute 'dtype' expects dtype, got 99"), "{e}");
    }
}
