//! # device: thin shims that run kernel-oracle's GPU kernels
//!
//! The kernels are source files in the workspace (`cu/`); this crate
//! compiles them at run time, checks every argument against the contract in
//! `core` (crate `oracle`) before anything reaches the GPU, launches them and
//! copies results back. It computes nothing itself.
//!
//! - [`cuda`]: CUDA through cudarc's driver API and NVRTC, both loaded
//!   dynamically, so this crate builds and its argument checks run on a
//!   machine with no CUDA at all; there every entry point returns a typed
//!   error ([`cuda::DeviceError::NoDriver`], [`cuda::DeviceError::NoNvrtc`])
//!   instead of panicking.
//! - [`wgpu`]: WGSL compute shaders (`shaders/`) through wgpu, on Vulkan by
//!   default; CPU Vulkan (Mesa lavapipe) runs them on a machine with no GPU.
#![warn(missing_docs)]

pub mod cuda;
pub mod wgpu;
