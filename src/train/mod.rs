//! Training: the 3DGS optimisation step and the loop that feeds it from the loader.
//!
//! | module | owns |
//! | --- | --- |
//! | [`init`] | initial Gaussians from the pack's SfM points (k-d tree kNN scales) or random points |
//! | [`adam`] | Adam with per-group learning rates, moments shaped like the model |
//! | [`schedule`] | the exponential position learning-rate schedule |
//! | [`bilagrid`] | per-view bilateral grids: a learned colour transform that varies over the image and with brightness, its total variation and Adam |
//! | [`bilagrid_file`] | a run's grids on disk: `bilateral_grids.npy` (gsplat's layout) and the JSON naming each grid's view |
//! | [`exposure`] | per-view exposure compensation: a learned 3×4 colour transform per view, its Adam, `exposure.json` |
//! | [`filter3d`] | Mip-Splatting's 3D smoothing filter set from the training cameras (host; the device kernels are its twins) |
//! | [`pose`] | camera pose optimisation: a learned rigid correction per training view, its Adam, injected pose noise |
//! | [`loss`] | `0.8·L1 + 0.2·(1 − SSIM)` and its image gradient |
//! | [`depth`] | depth regularization: the inverse-depth L1 term against the views' monocular maps, its weight schedule |
//! | [`device_adam`] | the same Adam step on device-resident parameters and moments (`kernels/adam.cu`) |
//! | [`device_loss`] | the same loss and the RGB8 → f32 target conversion on a device (`kernels/loss.cu`), for the device trainer |
//! | [`device_engine`] | the step with the model resident on a device: parameters, moments, statistics, the uploaded view (`kernels/densify.cu` for the statistics) |
//! | [`sharded`] | the same step with the model split over several devices: each holds consecutive rows, the view's device gathers every shard's splats |
//! | [`densify`] | the 3DGS densification strategy and the one place that edits all per-Gaussian arrays |
//! | [`trainer`] | [`TrainConfig`], [`Trainer`] (one step), [`TrainState`] (resume), [`train_loop`] |
//! | [`checkpoint`], [`report`], [`demo`] | the `gs-train` application layer |
//!
//! # One training state
//! [`TrainState`] is what a resumed run needs (its borrowed form [`TrainStateRef`] writes a
//! checkpoint without copying the model); [`densify::Model`] is its per-Gaussian part:
//! parameters and both Adam moments as [`Gaussians`](crate::scene::gaussians::Gaussians)
//! (the same field table, [`crate::scene::gaussians::Field`]) and the densification
//! statistics. Densification, the optimizer (host and device), gradients, checkpoints and
//! device transfers iterate the field table, so a new per-Gaussian attribute is declared once
//! in `scene::gaussians`. A checkpoint's header ([`checkpoint::StateMeta`]) is the file
//! format's schema for the scalars of the state, not another in-memory representation.
//!
//! Invariants: everything is deterministic for a seed (the RNG is [`crate::rng::Rng`], every
//! reduction is order-fixed), so a run resumed from a [`TrainState`] reaches bit-identical
//! parameters; the model's per-Gaussian arrays (parameters, moments, statistics) always have
//! equal lengths ([`densify::Model::check_shapes`]).

pub mod adam;
pub mod alpha;
pub mod bilagrid;
pub mod bilagrid_file;
pub mod densify;
pub mod depth;
pub mod device_adam;
pub mod device_engine;
pub mod device_loss;
pub mod device_mcmc;
pub mod exposure;
pub mod filter3d;
pub mod init;
pub mod loss;
pub mod mcmc;
pub mod pose;
pub mod schedule;
pub mod sharded;
pub mod trainer;

pub mod checkpoint;
pub mod demo;
pub mod report;
pub mod run;

pub use trainer::{
    train_loop, Background, Engine, Evaluation, LoopControl, LoopInfo, LoopSummary, StepStats,
    StepTimings, TrainConfig, TrainError, TrainState, TrainStateRef, TrainView, Trainer,
};
