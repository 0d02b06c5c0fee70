//! Rust cells: a cell is parsed ([`parse`]), turned into a guest crate whose line numbers are
//! the user's ([`codegen`]), built with the wasm32 toolchain, and its compiler errors mapped
//! back to the user's cells ([`build`]); a changed cell is rebuilt with rustc alone
//! ([`direct`]), and a session reuses the build of a cell it has built before ([`cache`]).

pub mod build;
pub(crate) mod cache;
pub mod codegen;
pub(crate) mod direct;
pub mod parse;
