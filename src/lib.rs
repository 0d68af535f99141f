//! ramsplat: a 3D Gaussian Splatting trainer whose data pipeline is memory-bounded and
//! out-of-core, so large scenes train on modest machines.
//!
//! # Map
//!
//! Layers depend downward only (each row may use the rows below it, never those above):
//!
//! | layer | modules |
//! | --- | --- |
//! | binaries (thin: argument parsing, printing) | `src/bin/gs-pack.rs`, `gs-train.rs`, `gs-render.rs` |
//! | training | [`train`], [`partition`] (block-wise training of scenes larger than one run) |
//! | evaluation, conversion, generation | [`eval`], [`pack`], [`synth`], [`export`], [`mesh`] |
//! | data pipeline, rendering | [`data`], [`render`] (its `cuda` backend on [`device`]) |
//! | formats and importers | [`shard`], [`import`] (they share [`dataset`], never each other) |
//! | foundations | [`dataset`], [`scene`], [`resample`], [`device`], [`budget`], [`metrics`], [`color_correct`], [`plot`], [`fsutil`], [`cli`], [`rng`] |
//!
//! `budget`, `shard`, `import` and `data` know nothing of Gaussians; `device` knows nothing of
//! Gaussians or datasets; `render` knows nothing of datasets.
//!
//! | module | owns |
//! | --- | --- |
//! | [`dataset`] | the neutral dataset vocabulary: splits, formats, distortion, view descriptions, streamed point chunks and sources |
//! | [`scene`] | cameras (OpenCV axes, pixel centres at +0.5), Gaussians (stored pre-activation) and their field table (the one list of per-Gaussian arrays), Mip-Splatting's 3D filter folded into stored values, spherical harmonics, the shared maths (quaternions, logit, SH DC), camera paths for fly-throughs |
//! | [`import`] | COLMAP, NeRF `transforms.json`, Metashape XML, OpenSfM/OpenDroneMap `reconstruction.json`, Bundler `bundle.out`, Meshroom/AliceVision SfMData, RealityCapture/RealityScan XMP files, PLY, PCD, LAS/LAZ and E57 point clouds and OBJ meshes' vertices (and the transform that registers a cloud to the cameras); image decode + undistortion |
//! | [`shard`] | the pack format (its module doc is the spec): writer seals, reader maps read-only |
//! | [`pack`] | the `gs-pack convert` pipeline: importer → bounded parallel encode → shards |
//! | [`synth`] | procedural datasets (images + COLMAP/NeRF metadata) and program-written packs for tests, benches, the demo, fuzzing |
//! | [`resample`] | the area filter by which views get smaller (packing's `--downscale`/`--max-width`, the loader's `gs-train -r`), with its alpha and mask rules |
//! | [`budget`] | RAM budget parsing and formatting, the reservation ledger, the memory floor |
//! | [`data`] | pack-backed record sources, sampler, byte-budgeted cache, prefetch ring (pageable or page-locked slots) feeding the trainer; `gs-pack bench` |
//! | [`device`] | device memory, copies and kernel launches: CUDA (driver API + NVRTC) on a GPU, or the host emulation that runs the same kernels in CI |
//! | [`render`] | the `Rasterizer` trait and backend choice, the CPU reference backend (`render::cpu`, the oracle), the CUDA backend (`render::cuda`, on [`device`]) and depth maps through either (`render::depth`) |
//! | `kernels/` | the CUDA C++ sources (`*.cu`, shared `*.cuh`) compiled at run time by NVRTC, or by the host C++ compiler with `kernels/host/emulation.h` for the emulation |
//! | [`metrics`] | PSNR and SSIM |
//! | [`color_correct`] | the colour fits of a render to its ground truth behind the colour-corrected scores (gsplat's `cc_psnr`, `cc_ssim`): affine and quadratic |
//! | [`eval`] | scoring renders against ground truth: the one rule set `gs-train --eval` and `gs-render` share |
//! | [`plot`] | PNG line charts (training curves, the loader's speed/RAM curve) |
//! | [`export`] | model files: 3DGS PLY, SPZ, `.splat`, PlayCanvas compressed PLY and SOG, 3DGS `cameras.json`; a pack as a nerfstudio or COLMAP folder (`gs-pack export`) |
//! | [`train`] | the 3DGS training step on two engines (the CPU's, and the device engine with the model resident on [`device`]), densification, Adam, loss, schedule, checkpoints, the run |
//! | [`mesh`] | triangle meshes from a model: rendered depth and colour fused into a sparse TSDF volume, marching cubes, the largest pieces kept, a PLY mesh |
//! | [`partition`] | `gs-pack partition` and `gs-pack merge`: a pack cut into spatial blocks (ground frame, cores, overlapping regions, the views and points of each), each a pack of copied records, and the blocks' trained models joined by their cores |
//! | [`cli`] | shared command-line plumbing (progress, error chains, exit codes) |
//! | [`fsutil`] | crash-safe writes: atomic file replacement, no-clobber directory install (the crate's only `rename`) |
//! | [`rng`] | the project's pinned random number generator |

#![deny(clippy::undocumented_unsafe_blocks)]

pub mod budget;
pub mod cli;
pub mod color_correct;
pub mod data;
pub mod dataset;
pub mod device;
pub mod eval;
pub mod export;
pub mod fsutil;
pub mod import;
pub mod mesh;
pub mod metrics;
pub mod pack;
pub mod partition;
pub mod plot;
pub mod render;
pub mod resample;
pub mod rng;
pub mod scene;
pub mod shard;
pub mod synth;
pub mod train;
