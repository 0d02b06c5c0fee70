//! The shape of the import table: one [`Import`] per host function, declared once with
//! [`imports!`](crate::abi::table::imports), which makes the table row and the typed linker
//! definition from the same tokens, so the two cannot disagree.

use wasmtime::Linker;

use super::context::GuestState;

/// The import module every guest import comes from.
pub const MODULE: &str = "neuronlab";

/// The groups of imports, in the order ABI.md documents them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// Output, displays, the last error, the host and device clocks, the run's arguments.
    Sys,
    /// Creating, reading and dropping tensors.
    Tensor,
    /// Looking up and calling registry ops.
    Op,
    /// Compiled functions and lazy mode.
    Compile,
    /// Ranks, groups, the device mesh, collectives and distributed tensors.
    Dist,
    /// Session variables.
    Vars,
    /// Autograd: leaves, backward, gradients and grad mode.
    Grad,
    /// Files in the folders the user granted.
    Fs,
    /// Safetensors checkpoints in the granted folders.
    Ckpt,
    /// Hugging Face tokenizers, loaded from the granted folders.
    Tok,
}

impl Group {
    /// The group's name, as ABI.md's heading gives it.
    pub const fn name(self) -> &'static str {
        match self {
            Group::Sys => "sys",
            Group::Tensor => "tensor",
            Group::Op => "op",
            Group::Compile => "compile",
            Group::Dist => "dist",
            Group::Vars => "vars",
            Group::Grad => "grad",
            Group::Fs => "fs",
            Group::Ckpt => "ckpt",
            Group::Tok => "tok",
        }
    }

    /// The ABI version (major, minor) that added the group.
    pub const fn since(self) -> (u32, u32) {
        match self {
            Group::Sys | Group::Tensor | Group::Op => (1, 0),
            Group::Compile => (1, 1),
            Group::Dist | Group::Vars => (1, 2),
            Group::Grad => (1, 4),
            Group::Fs | Group::Ckpt => (1, 5),
            Group::Tok => (1, 6),
        }
    }
}

/// A wasm value type in an import's signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WasmType {
    /// `i32`: statuses, handles, pointers and lengths.
    I32,
    /// `i64`: byte and element counts, the clock.
    I64,
    /// `f64`.
    F64,
}

impl WasmType {
    /// The type as wasm text writes it.
    pub const fn name(self) -> &'static str {
        match self {
            WasmType::I32 => "i32",
            WasmType::I64 => "i64",
            WasmType::F64 => "f64",
        }
    }
}

/// How a Rust parameter or result type of an import crosses the ABI.
pub trait AbiType {
    /// Its wasm type.
    const WASM: WasmType;
}

impl AbiType for i32 {
    const WASM: WasmType = WasmType::I32;
}

impl AbiType for i64 {
    const WASM: WasmType = WasmType::I64;
}

impl AbiType for f64 {
    const WASM: WasmType = WasmType::F64;
}

/// A result that may also be a trap, which passes through to the guest's caller (a trap in
/// a traced guest function): its wasm type is the value's.
impl<T: AbiType> AbiType for wasmtime::Result<T> {
    const WASM: WasmType = T::WASM;
}

/// One host function of the `neuronlab` module.
pub struct Import {
    /// Its name in the module.
    pub name: &'static str,
    /// Its group.
    pub group: Group,
    /// The ABI version (major, minor) that added it.
    pub since: (u32, u32),
    /// Its parameters' wasm types.
    pub params: &'static [WasmType],
    /// Its one result's wasm type.
    pub result: WasmType,
    /// Defines it on a linker.
    pub(crate) define: fn(&mut Linker<GuestState>) -> wasmtime::Result<()>,
}

impl Import {
    /// The signature as ABI.md writes it: `(i32, i32) -> i32`.
    pub fn signature(&self) -> String {
        let params: Vec<&str> = self.params.iter().map(|t| t.name()).collect();
        format!("({}) -> {}", params.join(", "), self.result.name())
    }
}

/// Declares a group's imports as a `&[Import]`: each row is written as a function whose first
/// parameter names the `Caller` and whose others are the wasm parameters, and becomes both a
/// table row (name, group, signature) and, through its `define`, the linker definition of
/// that very closure. A row may carry `#[since(major, minor)]` when it came after its group.
macro_rules! imports {
    ($group:ident; $(
        $(#[doc = $doc:literal])*
        $(#[since($major:literal, $minor:literal)])?
        fn $name:ident($c:ident $(, $p:ident: $t:ty)*) -> $r:ty { $($body:tt)* }
    )*) => {
        &[$(
            $crate::abi::table::Import {
                name: stringify!($name),
                group: $crate::abi::table::Group::$group,
                since: $crate::abi::table::imports!(@since $group $($major, $minor)?),
                params: &[$(<$t as $crate::abi::table::AbiType>::WASM),*],
                result: <$r as $crate::abi::table::AbiType>::WASM,
                define: |linker| {
                    #[allow(unused_mut)]
                    let host = |mut $c: $crate::abi::context::Ctx $(, $p: $t)*| -> $r { $($body)* };
                    linker.func_wrap($crate::abi::table::MODULE, stringify!($name), host)?;
                    Ok(())
                },
            }
        ),*]
    };
    (@since $group:ident) => { $crate::abi::table::Group::$group.since() };
    (@since $group:ident $major:literal, $minor:literal) => { ($major, $minor) };
}

pub(crate) use imports;
