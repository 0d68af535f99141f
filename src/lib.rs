//! ramsplat: a 3D Gaussian Splatting trainer whose data pipeline is memory-bounded and
//! out-of-core, so large scenes train on modest machines.
//!
//! # Map
//!
//! Layers depend downward only: `budget`, `shard` and `import` know nothing of Gaussians;
//! `device` knows nothing of Gaussians or datasets; `render` knows nothing of datasets; `train` joins them; binaries in `src/bin/` are thin.
//!
//! | module | owns |
//! | --- | --- |
//! | [`scene::camera`] | the camera conventions (OpenCV axes, pixel centres at +0.5) |
//! | [`import`] | COLMAP, NeRF `transforms.json` and PLY importers; image decode + undistortion |
//! | [`shard`] | the pack format (its module doc is the spec): writer seals, reader maps read-only |
//! | [`pack`] | the `gs-pack convert` pipeline: importer → bounded parallel encode → shards |
//! | [`synth`] | procedural datasets (images + COLMAP/NeRF metadata) for tests, benches, the demo |
//! | [`budget`] | RAM budget parsing and the reservation ledger |
//! | [`data`] | sampler, byte-budgeted cache, prefetch ring (pageable or page-locked slots) feeding the trainer |
//! | [`scene`] | cameras, Gaussians (stored pre-activation), spherical harmonics |
//! | [`device`] | device memory, copies and kernel launches: CUDA on a GPU, or the host emulation that runs the same kernels in CI |
//! | [`render`] | the `Rasterizer` trait, its CPU reference backend and the CUDA backend (on [`device`]) |
//! | [`metrics`] | PSNR and SSIM |
//! | [`plot`] | PNG line charts (training curves, the loader's speed/RAM curve) |
//! | [`export`] | standard 3DGS PLY read/write |
//! | [`train`] | the 3DGS training step on two engines (the CPU's, and the device engine with the model resident on [`device`]), densification, Adam, loss, schedule and loop |
//! | [`cli`] | shared command-line plumbing (progress, sizes, error printing) |
//! | [`fsutil`] | crash-safe writes: atomic file replacement, no-clobber directory install |
//! | [`rng`] | the project's pinned random number generator |

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod budget;
pub mod cli;
pub mod data;
pub mod dataset;
pub mod device;
pub mod eval;
pub mod export;
pub mod fsutil;
pub mod import;
pub mod metrics;
pub mod pack;
pub mod plot;
pub mod render;
pub mod rng;
pub mod scene;
pub mod shard;
pub mod synth;
pub mod train;
