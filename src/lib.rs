//! kernel-oracle's case library: for each kind of kernel, a generator of
//! cases (seeded or `Arbitrary`), a runner (the device), a judge (the core
//! oracle and its comparison) and a report that reproduces a failure.
//!
//! The contract for every `check` function here, as in wasmtime's oracles:
//! **a bug is a panic**. A case the contract refuses (a precondition such as
//! NaN weight codes) is skipped with a reason and counted, never compared;
//! anything else that goes wrong panics with a reproduction.

pub mod counters;
pub mod fp8_mmq;
pub mod moe_tables;
pub mod mul_mat;
pub mod rng;
