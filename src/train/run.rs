//! The `gs-train` application: one training run of a pack into an output directory, with
//! the memory plan, resume, checkpoints, periodic evaluation, outputs and interruption. The
//! binary (`src/bin/gs-train.rs`) only parses arguments and prints; the demo
//! ([`super::demo`]) calls [`run`] too.
//!
//! # Order of work
//! 1. open the pack; choose the backend (`cuda` must exist; `auto` falls back to CPU with
//!    one line);
//! 2. the baseline RSS, measured now: before the model or anything else that scales with the
//!    data exists, so the model is counted once, as its own item;
//! 3. model source: the latest checkpoint under `--resume` (validated against the pack and the
//!    configuration, see [`super::checkpoint`]), or the model file of `--init` (read now, so
//!    the plan counts its Gaussians; adapted by [`super::init::from_model`]: capped by
//!    `--max-gaussians`, converted to `--sh-degree`; `--init` and `--resume` exclude each
//!    other), else the initial model's plan ([`super::init::plan`]: SfM or random points,
//!    capped by `--max-gaussians`);
//! 4. memory plan before any data work and before the model is built: floor = baseline RSS,
//!    loader parts, trainer images, render intersections, evaluation, the model (Gaussians ×
//!    bytes each) and its initialisation's points ([`crate::data::plan_memory`]); below the
//!    budget it fails itemised, naming a `--max-gaussians` that fits when the model is the
//!    problem; the cache gets the rest (plus the initialisation's share once the model is
//!    built) and shrinks when the model grows. [`dry_run`] stops here and reports the plan;
//! 5. the loop ([`super::train_loop`]); after each step: metrics row, save / checkpoint /
//!    test iterations, Ctrl-C (checkpoint, then stop);
//! 6. at the end: final model, checkpoint, evaluation of test (`--eval`) and train views,
//!    `report.json`, the curves plot.
//!
//! # Outputs (`OUT/`)
//! `point_cloud/iteration_N/point_cloud.ply` (and `.spz` / `.splat` with `export`), `cameras.json` (3DGS's camera list),
//! `checkpoints/ckpt-N.bin` + `checkpoints/latest`,
//! `metrics.jsonl`, `report.json`, `training_curves.png`, `test/iteration_N/*.png` (ground
//! truth | render) and `test/iteration_N/metrics.json`; with `--exposure`, `exposure.json`
//! (every view's matrix, written with each saved model). One run at a time writes `OUT`: a run
//! holds the advisory lock [`RUN_LOCK`] from before it reads or clears anything there (or from
//! creating `OUT`) until it ends, and a second is refused ([`RunError::OutputInUse`]).
//!
//! # Exposure compensation
//! With [`TrainConfig::exposure`] every record has an exposure slot (its record number) and
//! `exposure.json` names the slots by image name. With `--eval` as well, the held-out views
//! join the training records with [`Region::LeftHalf`] and are scored on
//! [`Region::RightHalf`] through their matrices (3DGS's `--train_test_exp` protocol); the
//! train-view score stays over whole train views.
//!
//! # Resume
//! A checkpoint holds the whole [`super::TrainState`] including the loader position, and the trainer
//! is deterministic, so resuming reaches bit-identical parameters (tested in
//! `tests/train_cli.rs`). Evaluation only reads the model, so it does not perturb the run.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::bilagrid::{self, BilateralGrids};
use super::checkpoint::{self, CheckpointError, Expected, TrainedViews};
use super::densify::{host_model_bytes, DeviceCap};
use super::depth::{DepthConfig, DepthWeights};
use super::device_engine::{
    device_bytes, device_bytes_per_gaussian, device_bytes_per_pixel, resident_grid_bytes,
    DeviceBytes, DeviceEngine, ResidentEngine, DEVICE_RENDER_BYTES_PER_GAUSSIAN,
};
use super::init::InitPlan;
use super::pose::PoseAlignConfig;
use super::report::{
    self, ColorCorrectedMeans, ColorCorrectedScore, EvalPoseReport, MetricsLog, MetricsRow, Report,
    ReportError, ViewScore,
};
use super::sharded::{ShardedEngine, ROW_CHUNK};
use super::trainer::{Background, Region};
use super::{train_loop, Engine, LoopControl, TrainConfig, TrainError, TrainView, Trainer};
use crate::budget::{
    current_rss_bytes, format_size, peak_rss_bytes, within_budget, BudgetError, Component, Floor,
    FloorItem, ModelShare,
};
use crate::data::pinned::PinnedSlots;
use crate::data::sources::PackViews;
use crate::data::{
    expected_hit_rate, floor_of, plan_memory, Cache, CachePolicy, HeapSlots, LoadError, Loader,
    LoaderConfig, PlanExtras, Position, RecordSource, Sampler, SlotAllocator,
};
use crate::dataset::Split;
use crate::device::Device;
use crate::export::ply::{self as gply, GaussianPlyError, PlyEncoding};
use crate::export::{save_model, ModelFormat, ModelInfo, ModelIoError};
use crate::import::thousands;
use crate::render::CpuRasterizer;
use crate::scene::camera::Camera;
use crate::shard::reader::Pack;
use crate::shard::ShardError;

/// Which rasterizer trains: the one backend choice of every command.
pub use crate::render::Backend;

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    pub pack: PathBuf,
    pub out: PathBuf,
    pub ram_budget: u64,
    pub config: TrainConfig,
    pub backend: Backend,
    /// Devices the model is split over (1: one device; more: [`super::sharded`], GPUs
    /// `0..devices`, or that many emulated devices under `GS_CUDA_EMULATE=1`).
    pub devices: usize,
    /// Device memory the device engine may use (on each device) (`None`: the device's free memory minus
    /// [`VRAM_MARGIN_DIVISOR`]-th of it, at least [`VRAM_MIN_MARGIN`]).
    pub vram_budget: Option<u64>,
    /// Hold out the pack's test views; evaluate them at the end and at `test_iterations`.
    pub eval: bool,
    /// With `eval`: align each held-out view's pose to its image before scoring it
    /// ([`PoseAlignConfig`]; the scores from the dataset's poses are reported beside).
    pub eval_pose: Option<PoseAlignConfig>,
    /// With `eval`: also score each held-out view colour-corrected to its ground truth by this
    /// method ([`crate::eval::Scorer::score_corrected`]; gsplat's `cc_psnr`, `cc_ssim`).
    pub color_correct: Option<crate::color_correct::ColorCorrection>,
    pub resume: bool,
    /// With `resume`: continue past the checkpoint's planned end to `config.iterations`
    /// ([`checkpoint::extended`]: the position learning rate stays at its final value).
    pub extend: bool,
    /// Start from this model (`.ply`, `.spz` or `.splat`) instead of the pack's points
    /// (`gs-train --init`; excludes `resume`).
    pub init: Option<PathBuf>,
    /// Sky points a fresh model starts with beside the pack's ([`super::init::sky_points`],
    /// `gs-train --sky-points`; 0: none). Any number gives the run its far field
    /// ([`super::densify::DensifyConfig::far_field`]), so a resume names it again.
    pub sky_points: usize,
    pub test_iterations: Vec<u64>,
    /// Write the PLY at these iterations (the last iteration is always written).
    pub save_iterations: Vec<u64>,
    /// Also write the model in these formats beside each saved PLY
    /// (`point_cloud/iteration_N/point_cloud.spz`, `.splat`).
    pub export: Vec<ModelFormat>,
    pub checkpoint_iterations: Vec<u64>,
    /// A checkpoint every this many iterations (0: none), keeping the newest
    /// [`KEEP_PERIODIC_CHECKPOINTS`] of them; bounds the work a crash or `kill -9` can lose.
    pub checkpoint_every: u64,
    /// Start afresh in an `out` that holds another run's outputs, removing only those outputs
    /// ([`RUN_OUTPUTS`]); without it (and without `resume`) such an `out` is refused.
    pub overwrite: bool,
    pub workers: usize,
    pub prefetch: usize,
    /// A metrics row every this many iterations.
    pub metrics_every: u64,
    /// Profile this many steps in each window ([`Report::phase_ms`]; 0: none): after
    /// [`PROFILE_WARMUP`] steps of this process, or from each of `profile_at`.
    pub profile_steps: u64,
    /// First iterations (1-based, ascending) of the profiled windows, each starting after the
    /// previous one ends; empty: one window after the warm-up. Iterations this process does not
    /// run (before a resumed run's start, past its end) are not profiled, and the log says so.
    pub profile_at: Vec<u64>,
    /// Write side-by-side PNGs of evaluated views (at most this many per evaluation).
    pub max_test_images: usize,
    /// Set by a Ctrl-C handler: the run checkpoints and stops after the current step.
    pub stop: Arc<AtomicBool>,
    /// Depth regularization's weights as given ([`super::depth`]), used when the pack carries
    /// inverse-depth planes (`gs-pack convert --depths`, as 3DGS uses `-d`, or
    /// `--sfm-depths`); a weight not given takes the default of the pack's kind of planes
    /// ([`DepthConfig::resolve`]), and an initial weight of 0 turns the term off. The run's
    /// [`TrainConfig::depth`] is set from it and the pack. A weight given for a pack without
    /// planes is refused (it would do nothing) rather than trained without them.
    pub depth: DepthWeights,
}

impl RunOptions {
    /// 3DGS defaults for `pack` → `out`.
    pub fn new(pack: &Path, out: &Path) -> RunOptions {
        RunOptions {
            pack: pack.to_owned(),
            out: out.to_owned(),
            ram_budget: 4 << 30,
            config: TrainConfig::default(),
            backend: Backend::Auto,
            devices: 1,
            vram_budget: None,
            eval: false,
            eval_pose: None,
            color_correct: None,
            resume: false,
            extend: false,
            init: None,
            sky_points: 0,
            test_iterations: vec![7_000, 30_000],
            save_iterations: vec![7_000, 30_000],
            export: vec![],
            checkpoint_iterations: vec![],
            checkpoint_every: DEFAULT_CHECKPOINT_EVERY,
            overwrite: false,
            workers: 2,
            prefetch: 4,
            metrics_every: 100,
            profile_steps: 0,
            profile_at: Vec::new(),
            max_test_images: usize::MAX,
            stop: Arc::new(AtomicBool::new(false)),
            depth: DepthWeights::default(),
        }
    }
}

/// Default of [`RunOptions::checkpoint_every`]: a checkpoint costs well under a second at
/// typical model sizes, a thousand iterations take minutes, so this bounds the loss of a crash
/// to minutes at a cost of well under 1 % of the run.
pub const DEFAULT_CHECKPOINT_EVERY: u64 = 1000;
/// Periodic checkpoints kept (older periodic ones are deleted; `--checkpoint-iterations` ones
/// and the final one never are).
pub const KEEP_PERIODIC_CHECKPOINTS: u64 = 3;
/// The run's checkpoint directory, under its output directory.
pub const CHECKPOINT_DIR: &str = "checkpoints";
/// Everything a run writes into its output directory; `--overwrite` removes exactly these.
pub const RUN_OUTPUTS: [&str; 10] = [
    CHECKPOINT_DIR,
    CAMERAS_JSON,
    CFG_ARGS,
    EXPOSURE_JSON,
    "point_cloud",
    report::METRICS_FILE,
    report::REPORT_FILE,
    report::CURVES_FILE,
    report::LOSS_FILE,
    report::TEST_DIR,
];

/// Command-line options that contradict each other or the engine.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionsError {
    #[error("--iterations must be at least 1")]
    ZeroIterations,
    #[error("--strategy mcmc needs a positive --max-gaussians N (the model's fixed size)")]
    McmcWithoutCap,
    #[error(
        "--init and --resume exclude each other: --resume continues this -o's own checkpoint, \
         --init starts a new run from a model file (into a new -o, or with --overwrite)"
    )]
    InitWithResume,
    #[error("--workers and --prefetch must be at least 1")]
    NoWorkers,
    #[error(
        "--extend continues a checkpointed run past its planned end: use it with --resume (and \
         a larger --iterations)"
    )]
    ExtendWithoutResume,
    #[error(
        "--sky-points adds sky points to the model a run starts from the pack's points; --init \
         starts from a model of its own: leave one out"
    )]
    SkyWithInit,
    #[error(
        "--sky-points {sky} leaves no room under --max-gaussians {cap} for the scene's own \
         Gaussians: give fewer sky points or a larger cap"
    )]
    SkyOverCap { sky: usize, cap: usize },
    #[error(
        "--sky-points needs the scene's extent to place the sky, and this pack's cameras all \
         sit at one position (extent 0): leave --sky-points out"
    )]
    SkyWithoutExtent,
    #[error("--devices must be at least 1")]
    NoDevices,
    #[error(
        "--max-gaussians 0 leaves no room for the model: give at least 1, or leave it out (the \
         default caps growth at {0})"
    )]
    ZeroCap(usize),
    #[error("--profile-at needs --profile-steps N, the number of steps each window times")]
    ProfileAtWithoutSteps,
    #[error(
        "--profile-at {at:?}: each window of --profile-steps {steps} must start at iteration 1 \
         or later and after the previous window ends (give the iterations in ascending order)"
    )]
    ProfileWindows { at: Vec<u64>, steps: u64 },
    #[error(
        "--depth-lambda / --depth-l1-weight-init/-final set depth regularization, but pack \
         {pack} holds no depth planes: convert the dataset again with `gs-pack convert … \
         --depths DIR` (monocular inverse-depth maps, 3DGS's -d) or `--sfm-depths` (the SfM \
         points each image observes, gsplat's --depth_loss), or drop the setting"
    )]
    DepthWithoutMaps { pack: PathBuf },
    #[error(
        "pack {pack} holds SfM depths but view {view:?} does not say how many points its plane \
         holds (a pack written by an older ramsplat): convert the dataset again"
    )]
    SfmDepthsUncounted { pack: PathBuf, view: String },
    #[error(
        "--devices {0} splits the model over GPUs, which the CPU engine has none of: use \
         --backend cuda (or auto on a machine with GPUs), or drop --devices"
    )]
    DevicesOnCpu(usize),
}

/// Why a run failed. Messages name the file / view and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot open the pack: {0}")]
    Pack(#[from] ShardError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Png(#[from] crate::eval::PngError),
    #[error("cannot initialise the model")]
    Init(#[source] super::init::InitError),
    #[error("cannot save the model: {0}")]
    Ply(#[from] GaussianPlyError),
    #[error("cannot export the model: {0}")]
    Export(#[from] ModelIoError),
    /// The `--init` model cannot be read or used.
    #[error(
        "--init {}: {source} (gs-train starts only from a model holding stored \
         pre-activation values; fix or convert the file, or train from the pack's points \
         without --init)",
        path.display()
    )]
    InitModel {
        path: PathBuf,
        #[source]
        source: ModelIoError,
    },
    #[error("{0}")]
    BackendUnavailable(String),
    /// The device memory plan cannot hold the run (itemised).
    #[error("{0}")]
    VramBudget(String),
    /// `--init` names a model that cannot start this run.
    #[error("--init {}: the model cannot start this run", path.display())]
    InitFrom {
        path: PathBuf,
        #[source]
        source: Box<super::init::InitError>,
    },
    #[error(transparent)]
    Options(#[from] OptionsError),
    #[error(
        "{}: the pack has no {}views to train on",
        pack.display(),
        if *train_split { "train " } else { "" }
    )]
    NoViews { pack: PathBuf, train_split: bool },
    #[error(
        "the checkpoint is already at iteration {step} of --iterations {iterations}; nothing to \
         resume (to train further, add --extend with a larger --iterations)"
    )]
    NothingToResume { step: u64, iterations: u64 },
    /// The loader stopped early (a bug: its view count is unbounded).
    #[error("the loader ended at iteration {at} before --iterations {iterations}")]
    LoaderEnded { at: u64, iterations: u64 },
    /// `out` holds another run and neither `--resume` nor `--overwrite` was given.
    #[error(
        "{}: already holds a training run ({found}); continue it with --resume, train into a \
         new -o directory, or pass --overwrite to delete that run's outputs (other files are \
         kept)",
        out.display()
    )]
    ExistingRun { out: PathBuf, found: String },
    /// `out` is the pack or lies inside it: a pack is never written into.
    #[error(
        "-o {} {relation} the pack {}: a pack is never written into; give -o a directory \
         outside it",
        out.display(),
        pack.display()
    )]
    OutputInPack {
        out: PathBuf,
        pack: PathBuf,
        relation: &'static str,
    },
    /// `out` is a file.
    #[error("-o {}: is a file; -o names the directory the run's outputs go into", out.display())]
    OutputIsFile { out: PathBuf },
    /// An input (the pack, the `--init` model) lies inside one of the outputs the run writes or,
    /// with `--overwrite`, deletes before it starts ([`RUN_OUTPUTS`]).
    #[error(
        "{what} {} lies inside {}, which this run {doing}; copy it out of that directory \
         first, or train into another -o directory",
        input.display(),
        output.display()
    )]
    InputInOutputs {
        what: &'static str,
        input: PathBuf,
        output: PathBuf,
        doing: &'static str,
    },
    /// Another live process holds `out`'s run lock ([`RUN_LOCK`]).
    #[error(
        "{}: another gs-train{} is writing this directory right now; wait for it to end (or \
         stop it with Ctrl-C: it checkpoints first), or train into another -o directory",
        out.display(),
        holder.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    OutputInUse { out: PathBuf, holder: Option<u32> },
    /// The run failed after training some iterations; the last good state is on disk.
    #[error(
        "stopped at iteration {step}; the last good state is kept in {} (fix the cause below, \
         then continue with --resume)",
        checkpoint.display()
    )]
    Stopped {
        step: u64,
        checkpoint: PathBuf,
        #[source]
        source: Box<RunError>,
    },
    /// The run failed after training some iterations, before any checkpoint reached the disk
    /// (the first one is what failed, or none was due yet), so nothing can be resumed.
    #[error(
        "stopped at iteration {step} with no checkpoint on disk to resume from (writing one is \
         what failed, or none was due yet); fix the cause below, then run again"
    )]
    StoppedUnsaved {
        step: u64,
        #[source]
        source: Box<RunError>,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What a run reports back while it works.
#[derive(Clone, Debug)]
pub enum Event {
    /// A line for the user.
    Line(String),
    /// `done` of `total` iterations completed.
    Progress { done: u64, total: u64 },
}

/// How a run ended.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub report: Report,
    pub report_path: PathBuf,
    /// Stopped by [`RunOptions::stop`] (after writing a checkpoint).
    pub interrupted: bool,
}

/// Bytes per pixel of the trainer's image-sized buffers: target, render and ∂L/∂image (3×f32
/// each, 36 B), alpha / transmittance / last contributor (12 B), the loss's gradient, and what
/// scoring a held-out view adds (its render, in f32 and in 8 bits). The SSIM holds rows, not
/// planes, and reads 8-bit images as they are: per band of at least 64 rows, about 102 f32
/// per pixel of width ([`crate::metrics`]), at most about 13 B per pixel (images 65 rows
/// tall), 3.4 B at 320×240 on two threads. Measured 91.4 B per pixel at 320×240
/// (`tests/device_host_memory.rs`); rounded up to 128 B for shorter images, more threads and
/// allocator slack.
pub const TRAINER_BYTES_PER_PIXEL: u64 = 128;

/// [`TRAINER_BYTES_PER_PIXEL`] when the model trains on a device: the step's images, loss
/// and gradients live there, so the host holds per pixel only what scoring a held-out view
/// brings back (its render in f32 and in 8 bits, and the SSIM's rows: 20.3 B measured at
/// 320×240, rounded up to 32 B as above).
/// `tests/device_host_memory.rs` holds both engines' step and evaluation to their figures.
pub const DEVICE_TRAINER_BYTES_PER_PIXEL: u64 = 32;

/// What sets a run's per-pixel memory ([`per_pixel_items`]): the pack's views (RGBA, loss
/// masks), the run's add-ons (exposure compensation, depth regularization) and the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ViewKinds {
    pub alpha: bool,
    pub masks: bool,
    pub exposure: bool,
    pub depth: bool,
    /// Bilateral grids ([`TrainConfig::bilagrid`]).
    pub bilagrid: bool,
    /// Colour-corrected scores of held-out views ([`RunOptions::color_correct`]).
    pub color_correct: bool,
    pub on_device: bool,
}

/// The plan's per-pixel items (component, bytes per pixel of the largest view, what they
/// hold) for a run on views of `kinds`: the step's and a held-out view's scoring images
/// ([`TRAINER_BYTES_PER_PIXEL`] or [`DEVICE_TRAINER_BYTES_PER_PIXEL`]) and what each add-on
/// adds to them. `tests/device_host_memory.rs` holds both engines to the sum for every
/// add-on.
pub fn per_pixel_items(kinds: ViewKinds) -> Vec<(Component, u64, &'static str)> {
    let mut items = vec![if kinds.on_device {
        (
            Component::TrainerImages,
            DEVICE_TRAINER_BYTES_PER_PIXEL,
            "a held-out view's render and the SSIM's rows; the step's images live on the device",
        )
    } else {
        (
            Component::TrainerImages,
            TRAINER_BYTES_PER_PIXEL,
            "target, render, gradient, alpha, the SSIM's rows",
        )
    }];
    if kinds.alpha {
        // RGBA views: the step's target composited over its background (RGB8), and the
        // ground truth composited over white to score it.
        items.push((
            Component::TrainerImages,
            3,
            "RGBA view composited over the background",
        ));
        items.push((
            Component::Evaluation,
            3,
            "RGBA ground truth composited over white",
        ));
    }
    if kinds.exposure {
        // The render through the view's exposure (3×f32; on a device it stays there), a
        // held-out view's RGB8 target with its half-view loss mask (4 B), and evaluation's
        // crops of a half view (render, ground truth, mask: at most 16 B).
        items.push(if kinds.on_device {
            (
                Component::TrainerImages,
                4,
                "half-view target and mask; the render through the exposure is on the device",
            )
        } else {
            (
                Component::TrainerImages,
                16,
                "render through the exposure, half-view target and mask",
            )
        });
        items.push((
            Component::Evaluation,
            16,
            "half-view crops of render, truth and mask",
        ));
    }
    if kinds.depth {
        // Depth regularization: the host engine's f32 target, the render's inverse-depth
        // plane and its gradient (4 B each). The device engine keeps all three on the device
        // (the target made there from the staged plane); on the host it holds at most the
        // stored plane (2 B) after a composited target.
        items.push(if kinds.on_device {
            (
                Component::TrainerImages,
                2,
                "the stored inverse-depth plane; target, render and gradient are on the device",
            )
        } else {
            (
                Component::TrainerImages,
                12,
                "inverse-depth target, render and gradient",
            )
        });
    }
    if kinds.bilagrid && !kinds.on_device {
        // The render through the view's grid (3×f32), which the loss and its backward read.
        items.push((
            Component::TrainerImages,
            12,
            "render through the view's bilateral grid",
        ));
    }
    if kinds.color_correct {
        // Colour-corrected scores (on either engine, on the host), in a scorer of their own:
        // the render in f32, which the fit corrects in place (it reads the 8-bit ground truth
        // as it is; a float copy of it took 12 B more), the plain and the corrected 8-bit
        // renders (6 B), a masked view's mask and masked ground truth (4 B), and the SSIM's
        // rows (3.4 B at 320×240 on two threads, at most about 13 B for images 65 rows tall):
        // at most 35 B. Measured 24.3 B per pixel at 320×240 with a mask, 20.3 without
        // (`tests/device_host_memory.rs`).
        items.push((
            Component::Evaluation,
            36,
            "colour correction: the render in f32, both 8-bit renders, the SSIM's rows",
        ));
    }
    if kinds.masks {
        // Masked views: the mask travels with a composited RGBA target, and evaluation holds
        // a masked copy of the ground truth and the mask split off it.
        items.push((
            Component::TrainerImages,
            1,
            "loss mask beside a composited target",
        ));
        items.push((Component::Evaluation, 4, "masked ground truth and its mask"));
    }
    items
}

/// Share of the budget the render's per-intersection buffers may use, as a divisor: 1/8
/// leaves most of the budget to the model and cache, yet 1 GiB of budget already allows
/// ~3.0 M intersections at the CPU backend's 44 B, ~1.8 per pixel of a 1600×1066 view.
pub const INTERSECTION_BUDGET_DIVISOR: u64 = 8;

/// The engine for `backend`: `cpu` → the host engine with the CPU rasterizer; `cuda` → the
/// device engine on the device [`crate::device::Device::from_env`] picks (the host emulation under
/// `GS_CUDA_EMULATE=1`); `auto` → the device engine on a usable GPU (never the emulation),
/// otherwise the CPU, saying why in one line.
///
/// With `devices` > 1 the model is split over that many devices ([`ShardedEngine`]): `cuda`
/// opens them as [`Device::open_many`] does (GPUs `0..devices`, or emulated devices under
/// `GS_CUDA_EMULATE=1`), `auto` opens GPUs only, and a missing device is an error either way
/// (a sharded run does not fall back to the CPU).
fn make_engine(
    backend: Backend,
    devices: usize,
    on_event: &mut dyn FnMut(Event),
) -> Result<Engine, RunError> {
    if devices > 1 {
        let opened = match backend {
            Backend::Cpu => return Err(OptionsError::DevicesOnCpu(devices).into()),
            Backend::Cuda => Device::open_many(devices),
            Backend::Auto => (0..devices).map(Device::cuda_ordinal).collect(),
        };
        let engine = opened
            .map_err(|e| e.to_string())
            .and_then(|d| ShardedEngine::new(d).map_err(|e| e.to_string()))
            .map_err(|e| {
                RunError::BackendUnavailable(format!("--devices {devices}: {e}; use --devices 1"))
            })?;
        return Ok(Engine::Sharded(Box::new(engine)));
    }
    let mut note = |line: &str| on_event(Event::Line(format!("backend: {line}")));
    match backend.select(DeviceEngine::new, &mut note) {
        Ok(Some(e)) => Ok(Engine::Device(Box::new(e))),
        Ok(None) => Ok(Engine::host(CpuRasterizer::<f32>::new())),
        Err(message) => Err(RunError::BackendUnavailable(format!(
            "--backend cuda: {message}"
        ))),
    }
}

/// Share of the device's free memory kept out of the default `--vram-budget`: what the CUDA
/// context, the loaded modules and the allocator's granularity take beyond our own buffers
/// (the plan's items), and room for other processes' small allocations.
pub const VRAM_MARGIN_DIVISOR: u64 = 10;
/// Smallest margin kept out of the default `--vram-budget`.
pub const VRAM_MIN_MARGIN: u64 = 256 << 20;

/// The device memory a device-engine run may plan for.
#[derive(Clone, Copy, Debug)]
struct VramBudget {
    /// On each device.
    bytes: u64,
    explicit: bool,
    /// The least free and total memory of the devices.
    free: u64,
    total: u64,
    /// Devices the model is split over.
    devices: usize,
}

/// `--vram-budget`, or the device's free memory minus the margin; `None` for the host engine.
/// A model split over devices plans for the one with the least free memory (every device
/// holds a shard of the same size and renders views in turn).
fn vram_budget(engine: &Engine, explicit: Option<u64>) -> Result<Option<VramBudget>, RunError> {
    let devices = match engine {
        Engine::Host(_) => return Ok(None),
        Engine::Device(e) => vec![e.device().clone()],
        Engine::Sharded(e) => e.devices(),
    };
    let (mut free, mut total) = (u64::MAX, u64::MAX);
    for d in &devices {
        let (f, t) = d.memory().map_err(|err| {
            RunError::BackendUnavailable(format!(
                "cannot read the free memory of {}: {err}",
                d.name()
            ))
        })?;
        free = free.min(f);
        total = total.min(t);
    }
    let margin = (free / VRAM_MARGIN_DIVISOR).max(VRAM_MIN_MARGIN);
    Ok(Some(VramBudget {
        bytes: explicit.unwrap_or(free.saturating_sub(margin)),
        explicit: explicit.is_some(),
        free,
        total,
        devices: devices.len(),
    }))
}

/// The views a run trains on, each with a bilateral grid when it learns them: with `--eval`
/// the train split's (no half-view protocol here, which exposure compensation alone runs).
fn train_view_count(eval: bool, manifest: &crate::shard::Manifest) -> usize {
    if eval {
        manifest.split_indices(Split::Train).len()
    } else {
        manifest.views.len()
    }
}

/// The device memory plan of a device-engine run: refuses a model or a frame that cannot fit
/// (itemised, with the number of Gaussians that would), and returns the cap densification
/// must respect.
fn plan_device(
    budget: VramBudget,
    n: usize,
    config: &TrainConfig,
    max_pixels: u64,
    train_views: usize,
    on_event: &mut dyn FnMut(Event),
) -> Result<DeviceCap, RunError> {
    // MCMC never grows past its cap: the device holds the cap's model from the start (as the
    // RAM plan reserves it).
    let n = match &config.mcmc {
        Some(m) => n.max(m.cap_max),
        None => n,
    };
    let k = budget.devices;
    // A bilateral grid's render goes where the exposure's does (the same per-pixel bytes,
    // without partials); the staged grid and its f64 gradient are a fixed item with the views.
    let per_view = config.exposure.is_some() || config.bilagrid.is_some();
    let mut bytes = device_bytes(
        n,
        k,
        config.sh_degree,
        max_pixels,
        per_view,
        config.depth.is_some(),
        config.max_intersection_bytes,
    );
    // On one device every training view's grid and its optimizer state live there too (the
    // sharded engine leaves them to the host's optimizer).
    let grid_bytes = config.bilagrid.as_ref().map_or(0, |b| {
        12 * b.shape.floats() as u64
            + if k == 1 {
                resident_grid_bytes(b.shape, train_views)
            } else {
                0
            }
    });
    bytes.views += grid_bytes;
    // The 3D filter: one float per Gaussian, beside the model (its cameras are a few floats
    // per view).
    let filter_bytes = if config.filter_3d { 4 } else { 0 };
    let per_gaussian = device_bytes_per_gaussian(config.sh_degree) + filter_bytes;
    let shard = n.div_ceil(k);
    bytes.model += shard as u64 * filter_bytes;
    let model = if k == 1 {
        format!("model {} ({n} Gaussians", format_size(bytes.model))
    } else {
        format!(
            "model shard {} ({shard} of {n} Gaussians on each of {k} devices",
            format_size(bytes.model)
        )
    };
    let gathered = if k == 1 {
        String::new()
    } else {
        format!(
            ", the view's copy of every shard's splats and their gradients {} ({n} × \
             {DEVICE_RENDER_BYTES_PER_GAUSSIAN} B), an edit's rows between devices {} (two \
             pieces of {ROW_CHUNK} rows)",
            format_size(bytes.gathered),
            format_size(bytes.edit_chunks)
        )
    };
    let items = format!(
        "{model} × {per_gaussian} B: parameters, gradients, two Adam moments, statistics, \
         render buffers, an edit's one field{}){gathered}, views {} ({max_pixels} px × \
         {} B{}), intersections {} (1/{INTERSECTION_BUDGET_DIVISOR} of the budget, at most {})",
        if config.filter_3d {
            ", the 3D filter"
        } else {
            ""
        },
        format_size(bytes.views),
        device_bytes_per_pixel(per_view, config.depth.is_some()),
        if grid_bytes > 0 {
            format!(
                " + bilateral grids ({}) {}",
                if k == 1 {
                    format!(
                        "{train_views} views, twice, with their Adam moments; the view's \
                         gradient"
                    )
                } else {
                    "the view's grid and its gradient".to_owned()
                },
                format_size(grid_bytes)
            )
        } else {
            String::new()
        },
        format_size(bytes.intersections),
        format_size(crate::render::DEFAULT_MAX_INTERSECTION_BYTES),
    );
    let device = if k == 1 {
        format!(
            "device: {} free of {}",
            format_size(budget.free),
            format_size(budget.total)
        )
    } else {
        format!(
            "each device: at least {} free of {}",
            format_size(budget.free),
            format_size(budget.total)
        )
    };
    if bytes.total() > budget.bytes {
        let fits = max_gaussians(budget.bytes, &bytes, per_gaussian, k);
        return Err(RunError::VramBudget(format!(
            "the run needs {} of device memory but --vram-budget is {} ({device}): {items}; \
             the budget holds {fits} Gaussians at SH degree {}: raise --vram-budget, lower \
             --sh-degree, or train smaller views (re-pack with --downscale)",
            format_size(bytes.total()),
            format_size(budget.bytes),
            config.sh_degree,
        )));
    }
    let cap = DeviceCap {
        max_gaussians: max_gaussians(budget.bytes, &bytes, per_gaussian, k),
        budget_bytes: budget.bytes,
    };
    on_event(Event::Line(format!(
        "device memory: budget {} ({}; {device}), {items}; room for up to {} Gaussians",
        format_size(budget.bytes),
        if budget.explicit {
            "--vram-budget"
        } else {
            "free memory minus a margin"
        },
        cap.max_gaussians
    )));
    Ok(cap)
}

/// The most Gaussians a budget of `budget` bytes per device holds over `devices` devices:
/// the largest N with ⌈N / devices⌉ × `per_gaussian` (+ N × the gathered splats' bytes when
/// split) + the fixed items ≤ `budget`.
fn max_gaussians(budget: u64, bytes: &DeviceBytes, per_gaussian: u64, devices: usize) -> usize {
    let room = budget.saturating_sub(bytes.fixed()) as u128;
    let k = devices.max(1) as u128;
    let gathered = if devices > 1 {
        DEVICE_RENDER_BYTES_PER_GAUSSIAN as u128
    } else {
        0
    };
    let fits = |n: u128| n.div_ceil(k) * per_gaussian as u128 + n * gathered <= room;
    // N·(per/k + gathered) ≤ room bounds N from above; step down past the rounding of ⌈N/k⌉.
    let mut n = room * k / (per_gaussian as u128 + gathered * k);
    while n > 0 && !fits(n) {
        n -= 1;
    }
    n.min(usize::MAX as u128) as usize
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> RunError + '_ {
    move |source| RunError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Path of the PLY of `iteration`, relative to OUT.
pub fn ply_rel_path(iteration: u64) -> String {
    format!("point_cloud/iteration_{iteration}/point_cloud.ply")
}

/// File name of the per-view exposure matrices in OUT (3DGS's name and place; see
/// [`super::exposure::to_json`]).
pub const EXPOSURE_JSON: &str = "exposure.json";

/// Steps before [`RunOptions::profile_steps`]' profile begins (as gsplat's harness in
/// `tools/gsplat_train.py`: kernels compiled, buffers grown and the loader's cache warm by
/// then).
pub const PROFILE_WARMUP: u64 = 100;

/// The profiled windows as ranges of 1-based iterations: [`RunOptions::profile_steps`] steps
/// from each of [`RunOptions::profile_at`], or, without it, from the first step after
/// [`PROFILE_WARMUP`] steps of this process (which began after `start_step`); none without
/// `profile_steps`.
fn profile_windows(opts: &RunOptions, start_step: u64) -> Vec<std::ops::Range<u64>> {
    if opts.profile_steps == 0 {
        return Vec::new();
    }
    let default = [start_step + PROFILE_WARMUP + 1];
    let starts = match opts.profile_at.is_empty() {
        true => &default[..],
        false => &opts.profile_at[..],
    };
    starts
        .iter()
        .map(|&a| a..a.saturating_add(opts.profile_steps))
        .collect()
}

/// One profiled step: its parts and the size of its work.
#[derive(Clone, Copy, Debug)]
struct ProfiledStep {
    iteration: u64,
    phases: super::device_engine::PhaseTimes,
    num_gaussians: u64,
    intersections: u64,
}

/// The profiled steps of `samples` that fall in `window`.
fn window_steps<'a>(
    samples: &'a [ProfiledStep],
    window: &std::ops::Range<u64>,
) -> Vec<&'a ProfiledStep> {
    samples
        .iter()
        .filter(|s| window.contains(&s.iteration))
        .collect()
}

/// The report's step profile: for each window, each part's median over the window's profiled
/// steps. `done` holds the windows that ran to their end, made and told in the log then; the
/// others are made now and told in one line each. A window this process profiled no step of
/// (before a resumed run's start, past the end, or with the model on several devices) is left
/// out, and the log says why.
fn phase_report(
    samples: &[ProfiledStep],
    windows: &[std::ops::Range<u64>],
    done: Vec<Option<report::PhaseReport>>,
    start_step: u64,
    trainer: &Trainer,
    on_event: &mut dyn FnMut(Event),
) -> Vec<report::PhaseReport> {
    if windows.is_empty() {
        return Vec::new();
    }
    if samples.is_empty() && trainer.devices().len() > 1 {
        on_event(Event::Line(
            "--profile-steps: not profiled: the model is split over several devices, whose \
             queues overlap"
                .to_owned(),
        ));
        return Vec::new();
    }
    windows
        .iter()
        .zip(done)
        .filter_map(|(w, done)| {
            if done.is_some() {
                return done;
            }
            let window = phase_window(&window_steps(samples, w), trainer);
            if window.is_none() {
                on_event(Event::Line(format!(
                    "--profile-steps: no step profiled in the window from iteration {} (this \
                     run trained iterations {}-{})",
                    w.start,
                    start_step + 1,
                    trainer.step_count(),
                )));
            }
            window.map(|(report, line)| {
                on_event(Event::Line(line));
                report
            })
        })
        .collect()
}

/// One window's [`report::PhaseReport`] and its log line; `None` for no steps.
fn phase_window(
    steps: &[&ProfiledStep],
    trainer: &Trainer,
) -> Option<(report::PhaseReport, String)> {
    let from = steps.first()?.iteration;
    let median_of = |f: fn(&ProfiledStep) -> u64| {
        let mut v: Vec<u64> = steps.iter().map(|s| f(s)).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (num_gaussians, intersections) = (
        median_of(|s| s.num_gaussians),
        median_of(|s| s.intersections),
    );
    let phases: Vec<super::device_engine::PhaseTimes> = steps.iter().map(|s| s.phases).collect();
    let m = super::device_engine::PhaseTimes::median(&phases);
    let clock = match trainer.devices().first() {
        Some(d) if !d.is_emulated() => "device queue (CUDA events)",
        _ => "host clock",
    };
    let list = |e: &[(&str, f64)]| {
        e.iter()
            .map(|(name, ms)| format!("{name} {ms:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let stages = if m.stages.entries().iter().any(|&(_, ms)| ms > 0.0) {
        format!("; the rasterizer's stages: {}", list(&m.stages.entries()))
    } else {
        String::new()
    };
    let line = format!(
        "phases (median ms over {} steps from iteration {from}, {clock}; {} Gaussians, {} \
         intersections): {}{stages}",
        steps.len(),
        thousands(num_gaussians),
        thousands(intersections),
        list(&m.entries()),
    );
    let report = report::PhaseReport {
        clock: clock.to_owned(),
        from_iteration: from,
        steps: steps.len() as u64,
        num_gaussians,
        intersections,
        median: m,
    };
    Some((report, line))
}

/// The report's pose summary over the training views, also told in one line; `None` without
/// pose settings.
fn pose_report(
    trainer: &Trainer,
    train_views: &[TrainView],
    on_event: &mut dyn FnMut(Event),
) -> Option<report::PoseReport> {
    let cfg = trainer.config().pose.as_ref()?;
    let views: Vec<(usize, Camera)> = train_views
        .iter()
        .filter_map(|v| v.pose.map(|s| (s as usize, v.camera)))
        .collect();
    let s = trainer.poses().summary(&views, trainer.pose_unit());
    let mm = super::pose::PoseSummary::mean_max;
    let noisy = cfg.noise > 0.0;
    let r = report::PoseReport {
        optimized: cfg.optimize,
        noise: cfg.noise,
        views: views.len(),
        correction_deg: mm(&s.correction_deg).into(),
        correction_units: mm(&s.correction_units).into(),
        noise_deg: noisy.then(|| mm(&s.noise_deg).into()),
        noise_units: noisy.then(|| mm(&s.noise_units).into()),
        error_deg: noisy.then(|| mm(&s.error_deg).into()),
        error_units: noisy.then(|| mm(&s.error_units).into()),
    };
    let mut line = format!(
        "camera poses ({} training views): corrected by {:.3}° / {:.4} units on average (max \
         {:.3}° / {:.4})",
        r.views,
        r.correction_deg[0],
        r.correction_units[0],
        r.correction_deg[1],
        r.correction_units[1]
    );
    if let (Some(nd), Some(nu), Some(ed), Some(eu)) =
        (r.noise_deg, r.noise_units, r.error_deg, r.error_units)
    {
        line += &format!(
            "; injected noise {:.3}° / {:.4} units on average, left after training {:.3}° / \
             {:.4}",
            nd[0], nu[0], ed[0], eu[0]
        );
    }
    on_event(Event::Line(line));
    Some(r)
}

/// What the files written beside each saved model need of the run's views.
struct SavedViews<'a> {
    /// Every view of the pack.
    views: &'a [crate::shard::ViewEntry],
    /// Per pack view: its pose correction's slot (training views under pose optimisation).
    pose_slots: &'a [Option<u32>],
    /// Per record: its key in `exposure.json` (and `bilateral_grids.json`).
    exposure_names: &'a [String],
}

/// Saves the model of `iteration` (PLY, and the `export` formats) and, with exposure
/// compensation, `OUT/exposure.json` (the matrices of `exposure_names[slot]`) beside it; with
/// bilateral grids, `OUT/bilateral_grids.{npy,json}` (grid `slot` named `exposure_names[slot]`).
/// An export that stores less than the model (a compressed PLY leaving out top SH bands that
/// are all but zero) is said through `on_event`.
fn save_ply(
    out: &Path,
    trainer: &mut Trainer,
    iteration: u64,
    export: &[ModelFormat],
    views: &SavedViews<'_>,
    on_event: &mut dyn FnMut(Event),
) -> Result<String, RunError> {
    if trainer.config().exposure.is_some() {
        let text = super::exposure::to_json(views.exposure_names, trainer.exposures());
        checkpoint::write_file_atomic(&out.join(EXPOSURE_JSON), text.as_bytes())?;
    }
    // The grids beside the model, so gs-render scores the training views through them as the
    // run did (the array first: the JSON that names it is what readers open).
    if let Some(grids) = trainer.grids()? {
        use super::bilagrid_file::{to_json, write_npy, GRIDS_JSON, GRIDS_NPY};
        let keys = views.exposure_names;
        let npy = out.join(GRIDS_NPY);
        crate::fsutil::write_atomic_with(&npy, &mut |w| write_npy(w, grids, keys.len()))
            .map_err(io_err(&npy))?;
        let json = to_json(grids.shape, keys);
        checkpoint::write_file_atomic(&out.join(GRIDS_JSON), json.as_bytes())?;
    }
    // The model was fitted to the trained poses: cameras.json gives those, so renders of the
    // training views line up with their photos.
    if trainer.config().pose.as_ref().is_some_and(|p| p.optimize) {
        let cameras: Vec<Camera> = views
            .views
            .iter()
            .zip(views.pose_slots)
            .map(|(v, slot)| match slot {
                Some(s) => trainer
                    .poses()
                    .camera(*s as usize, &v.camera, trainer.pose_unit()),
                None => v.camera,
            })
            .collect();
        write_cameras_json(out, views.views, &cameras, &mut |_| {})?;
    }
    let rel = ply_rel_path(iteration);
    let path = out.join(&rel);
    let dir = path.parent().expect("has a parent");
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    // The model says how it was trained to be rendered (PLY comment, SPZ flag).
    // With a 3D filter, the files hold it folded in (any renderer draws them as trained), and
    // say so (PLY comments), so that a later `--init --filter-3d` can take it out.
    let info = ModelInfo::with_mode(trainer.config().antialiased)
        .with_folded_filter(trainer.config().filter_3d);
    trainer.with_saved_gaussians(|g| -> Result<(), RunError> {
        gply::save_with_info(&path, g, PlyEncoding::BinaryLittleEndian, info)?;
        for &f in export.iter().filter(|&&f| f != ModelFormat::Ply) {
            let file = path.with_extension(f.extension());
            save_model(&file, g, f, info)?;
            if f == ModelFormat::CompressedPly {
                use crate::export::compressed_ply::{stored_sh_degree, BANDS_LEFT_OUT};
                let stored = stored_sh_degree(g);
                if stored < g.sh_degree {
                    on_event(Event::Line(format!(
                        "{}: SH degree {stored} of the model's {} ({BANDS_LEFT_OUT}; the PLY \
                         beside it keeps every band)",
                        file.display(),
                        g.sh_degree
                    )));
                }
            }
        }
        Ok(())
    })??;
    Ok(rel)
}

/// Writes `OUT/cameras.json` (every view of the pack, `id` = pack view index), where 3DGS
/// writes it and its viewers look for it ([`crate::export::cameras_json`]).
fn write_cameras_json(
    out: &Path,
    views: &[crate::shard::ViewEntry],
    cameras: &[Camera],
    on_event: &mut dyn FnMut(Event),
) -> Result<(), RunError> {
    use crate::export::cameras_json::{self, CameraEntry};
    let entries: Vec<CameraEntry> = views
        .iter()
        .zip(cameras)
        .enumerate()
        .map(|(i, (v, c))| CameraEntry::from_camera(i as u64, &cameras_json::img_name(&v.name), c))
        .collect();
    let off = CameraEntry::max_principal_point_offset(cameras);
    if off > 0.5 {
        on_event(Event::Line(format!(
            "cameras.json: the format assumes a centred principal point; the pack's is up to \
             {off:.1} px off-centre, so renders from cameras.json shift by that much"
        )));
    }
    let path = out.join(CAMERAS_JSON);
    checkpoint::write_file_atomic(&path, cameras_json::to_string(&entries).as_bytes())?;
    Ok(())
}

/// File name of the camera list in OUT (3DGS's name and place).
pub const CAMERAS_JSON: &str = "cameras.json";
/// File name of 3DGS's record of the run's dataset and loading options in OUT.
pub const CFG_ARGS: &str = "cfg_args";

/// Writes `OUT/cfg_args` ([`crate::export::cfg_args`]) for a pack converted from a dataset,
/// so 3DGS's `render.py -m OUT` / `metrics.py` and the SIBR viewer find that dataset; a pack
/// written by a program (the demo, benchmarks) has none to name, and gets no file.
fn write_cfg_args(
    opts: &RunOptions,
    manifest: &crate::shard::Manifest,
    config: &TrainConfig,
) -> Result<(), RunError> {
    use crate::export::cfg_args::{resolution, CfgArgs};
    let source = &manifest.source;
    let widest = manifest.views.iter().map(|v| v.width()).max().unwrap_or(0);
    if source.format == crate::dataset::Format::Auto {
        return Ok(());
    }
    // 3DGS's loaders take the dataset folder: a pack converted from a transforms file names
    // the file.
    let path = Path::new(&source.path);
    let folder = match path.parent() {
        Some(p) if path.is_file() => p,
        _ => path,
    };
    let cfg = CfgArgs {
        source_path: folder.display().to_string(),
        model_path: opts.out.display().to_string(),
        images: source.images.clone().unwrap_or_else(|| "images".into()),
        resolution: resolution(
            source.max_width,
            source.downscale,
            config.resolution,
            widest,
        ),
        sh_degree: config.sh_degree,
        white_background: config.background == Background::White,
        eval: opts.eval,
        train_test_exp: config.exposure.is_some(),
        depths: match config.depth {
            Some(_) => source.depths.clone().unwrap_or_default(),
            None => String::new(),
        },
    };
    let path = opts.out.join(CFG_ARGS);
    checkpoint::write_file_atomic(&path, cfg.to_python().as_bytes())?;
    Ok(())
}

/// The views' scores from their given poses, where they were aligned.
fn given_scores(scores: &[ViewScore]) -> impl Iterator<Item = &report::GivenPoseScore> {
    scores.iter().filter_map(|v| v.given_pose.as_ref())
}

/// The log line of the evaluation of iteration `n`.
fn test_line(n: u64, scores: &[ViewScore], half_split: bool, scoring: Scoring<'_>) -> String {
    let (p, ss) = report::mean_scores(scores);
    let aligned = scoring
        .align
        .and_then(|a| EvalPoseReport::of(given_scores(scores), a.steps, a.lr))
        .map_or(String::new(), |r| format!("; {}", r.line()));
    let corrected = ColorCorrectedMeans::of(scoring.color_correct, scores)
        .map_or(String::new(), |c| format!("; {}", c.line()));
    format!(
        "iteration {n}: test PSNR {} dB, SSIM {:.4} ({} views{}){corrected}{aligned}",
        p.map_or("inf".into(), |p| format!("{p:.2}")),
        ss.unwrap_or(0.0),
        scores.len(),
        if half_split { ", right halves" } else { "" }
    )
}

/// How [`evaluate_views`] scores: side-by-side PNGs of at most `images` views (and their
/// `metrics.json` when any), whether each view's pose is aligned first, and whether it is
/// also scored colour-corrected.
#[derive(Clone, Copy, Debug)]
struct Scoring<'a> {
    images: usize,
    align: Option<&'a PoseAlignConfig>,
    color_correct: Option<crate::color_correct::ColorCorrection>,
}

/// Evaluates `views` (pack view indices, each with its exposure slot and scored region),
/// writing side-by-side PNGs into `OUT/test/<label>/` for the first `scoring.images`, plus
/// `metrics.json` there; with `scoring.align`, each view from its aligned pose, its scores
/// from the given pose beside ([`ViewScore::given_pose`]).
fn evaluate_views(
    pack: &Pack,
    trainer: &mut Trainer,
    views: &[(usize, TrainView)],
    out: &Path,
    label: &str,
    scoring: Scoring<'_>,
    gt: &mut Vec<u8>,
) -> Result<Vec<ViewScore>, RunError> {
    let Scoring {
        images: max_images,
        align,
        color_correct,
    } = scoring;
    let mut corrected_scorer = crate::eval::Scorer::new();
    let dir = report::test_dir(out)?.join(label);
    if max_images > 0 {
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    }
    let manifest = pack.manifest();
    let mut scores = Vec::with_capacity(views.len());
    for (n, (i, view)) in views.iter().enumerate() {
        let (i, v) = (*i, &manifest.views[*i]);
        gt.resize(v.decoded_len(), 0);
        pack.read_view_into(i, gt)?;
        // Scored by the rules of crate::eval, the ones gs-render uses. An RGBA view goes in
        // as it is: `evaluate_view` composites it over white and renders over white (the
        // NeRF-synthetic convention); compositing it here first would hide the alpha and
        // render over the training background instead. A masked view is scored on its used
        // pixels.
        // With pose alignment: scored from the dataset's pose first, then from the aligned one.
        let (e, given_pose) = match align {
            None => (trainer.evaluate_view(view, gt)?, None),
            Some(cfg) => {
                let given = trainer.evaluate_view(view, gt)?;
                let a = trainer.align_pose(view, gt, cfg)?;
                let aligned = TrainView {
                    camera: a.camera,
                    ..*view
                };
                let given = report::GivenPoseScore::new(&given, &a);
                (trainer.evaluate_view(&aligned, gt)?, Some(given))
            }
        };
        // A masked view's mask, for the colour correction's fit (evaluation_rgb8 drops it).
        let mask = color_correct
            .and_then(|_| v.layout().planes(gt, v.width(), v.height()))
            .and_then(|p| p.mask.map(<[u8]>::to_vec));
        // The ground truth as scored, for the side-by-side image (the scored part of it).
        super::alpha::evaluation_rgb8(gt, v.layout());
        let mask = match view.region {
            Region::Full => mask,
            region => {
                *gt = region.crop(gt, v.width(), 3);
                mask.map(|m| region.crop(&m, v.width(), 1))
            }
        };
        // Colour-corrected from the 8-bit render the plain score scored, by the same rules
        // (gs-render --color-correct-metric scores alike).
        let color_corrected = match color_correct {
            Some(method) => Some(ColorCorrectedScore::new(
                corrected_scorer
                    .score_corrected(
                        method,
                        &e.image,
                        gt,
                        mask.as_deref(),
                        e.width as usize,
                        e.height as usize,
                    )
                    .map_err(TrainError::from)?,
            )),
            None => None,
        };
        let psnr = e.psnr;
        let file = if n < max_images {
            let name = crate::eval::view_file_name(i, &v.name);
            let side = crate::eval::side_by_side(gt, &e.image, e.width as usize, e.height as usize);
            crate::eval::write_png(&dir.join(&name), &side, 2 * e.width, e.height)?;
            Some(format!("{}/{label}/{name}", report::TEST_DIR))
        } else {
            None
        };
        scores.push(ViewScore {
            view: i,
            name: v.name.clone(),
            psnr: psnr.is_finite().then_some(psnr),
            ssim: e.ssim,
            file,
            given_pose,
            color_corrected,
        });
    }
    if max_images > 0 {
        let json = serde_json::to_string_pretty(&scores).expect("scores serialise");
        checkpoint::write_file_atomic(&dir.join("metrics.json"), json.as_bytes())?;
    }
    Ok(scores)
}

/// The advisory lock file a run holds in its output directory from before it touches anything
/// there until it ends (hidden; it stays behind, unlocked, and `--overwrite` leaves it).
pub const RUN_LOCK: &str = ".gs-train.lock";

/// A held [`RUN_LOCK`]: the operating system releases it when the process ends, however it
/// ends, so a crashed run never blocks the next one.
struct OutputLock {
    _file: std::fs::File,
}

/// Takes `out`'s run lock (`out` must exist). Two runs writing one directory would mix their
/// checkpoints and metrics, and one's `--overwrite` would delete the other's checkpoints while
/// it trains: the second is refused, naming the first. Where the filesystem cannot lock (some
/// network and FUSE mounts), the run goes on unlocked and says so.
fn lock_output(
    out: &Path,
    on_event: &mut dyn FnMut(Event),
) -> Result<Option<OutputLock>, RunError> {
    use std::io::{Read, Seek, Write};
    let path = out.join(RUN_LOCK);
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_err(&path))?;
    match file.try_lock() {
        Ok(()) => {
            // The holder's process id, for the message of a run refused meanwhile.
            let pid = format!("{}\n", std::process::id());
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(pid.as_bytes()))
                .map_err(io_err(&path))?;
            Ok(Some(OutputLock { _file: file }))
        }
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut text = String::new();
            let holder = file
                .read_to_string(&mut text)
                .ok()
                .and_then(|_| text.trim().parse().ok());
            Err(RunError::OutputInUse {
                out: out.to_owned(),
                holder,
            })
        }
        Err(std::fs::TryLockError::Error(e)) => {
            on_event(Event::Line(format!(
                "warning: {}: cannot lock ({e}); training unlocked: start no other gs-train \
                 into this directory until this one ends",
                path.display()
            )));
            Ok(None)
        }
    }
}

/// Refuses an `out` that would write into the pack (it is the pack, or lies inside it) or that
/// is a file, and an input (the pack, the `--init` model) inside one of the outputs the run
/// writes into or deletes with `--overwrite` ([`RUN_OUTPUTS`]): `gs-train PACK -o OUT
/// --overwrite --init OUT/point_cloud/iteration_N/point_cloud.ply` would delete the model it
/// was to start from before reading it, and a pack named `test` trained with `-o .` would get
/// the run's test images among its shards (and be deleted by the next `--overwrite`). Paths
/// are compared as the file system resolves them ([`crate::fsutil::placement`]). Called before
/// anything is created, locked or read in `out`.
fn check_paths(opts: &RunOptions) -> Result<(), RunError> {
    use crate::fsutil::placement;
    if let Some(relation) = placement(&opts.out, &opts.pack) {
        return Err(RunError::OutputInPack {
            out: opts.out.clone(),
            pack: opts.pack.clone(),
            relation,
        });
    }
    if opts.out.exists() && !opts.out.is_dir() {
        return Err(RunError::OutputIsFile {
            out: opts.out.clone(),
        });
    }
    let inputs =
        std::iter::once(("the pack", &opts.pack)).chain(opts.init.iter().map(|m| ("--init", m)));
    for (what, input) in inputs {
        if let Some(name) = RUN_OUTPUTS
            .iter()
            .find(|n| placement(input, &opts.out.join(n)).is_some())
        {
            let doing = if opts.overwrite {
                "deletes (--overwrite) before it starts"
            } else {
                "writes"
            };
            return Err(RunError::InputInOutputs {
                what,
                input: input.clone(),
                output: opts.out.join(name),
                doing,
            });
        }
    }
    Ok(())
}

/// Refuses an `out` holding another run's outputs (see [`RUN_OUTPUTS`]), or, with `overwrite`,
/// removes exactly those outputs and nothing else.
fn claim_output(out: &Path, overwrite: bool) -> Result<(), RunError> {
    let found: Vec<&str> = RUN_OUTPUTS
        .iter()
        .copied()
        .filter(|n| std::fs::symlink_metadata(out.join(n)).is_ok())
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    if !overwrite {
        return Err(RunError::ExistingRun {
            out: out.to_owned(),
            found: found.join(", "),
        });
    }
    for n in found {
        let p = out.join(n);
        let meta = std::fs::symlink_metadata(&p).map_err(io_err(&p))?;
        if meta.is_dir() {
            std::fs::remove_dir_all(&p).map_err(io_err(&p))?;
        } else {
            std::fs::remove_file(&p).map_err(io_err(&p))?;
        }
    }
    Ok(())
}

/// Deletes the periodic checkpoint that fell out of the newest [`KEEP_PERIODIC_CHECKPOINTS`]
/// after the one at iteration `it` was written (unless it was also requested explicitly).
fn prune_periodic(dir: &Path, it: u64, opts: &RunOptions) {
    let Some(old) = it.checked_sub(KEEP_PERIODIC_CHECKPOINTS * opts.checkpoint_every) else {
        return;
    };
    if old > 0 && !opts.checkpoint_iterations.contains(&old) {
        // Best effort: a leftover checkpoint costs disk space, never correctness.
        let _ = std::fs::remove_file(dir.join(checkpoint::checkpoint_file_name(old)));
    }
}

/// Points drawn when a pack has no SfM points (3DGS: 100k).
pub const RANDOM_POINTS: usize = 100_000;
/// The RNG stream (see [`crate::rng::Rng::derived`]) of the initial random points, apart from
/// the trainer's own stream.
const INIT_STREAM: u64 = 0x1A17;

/// Initial Gaussians of a fresh run ([`super::init::from_pack`]), at most `max_gaussians`.
pub fn initial_gaussians(
    pack: &Pack,
    sh_degree: u32,
    max_gaussians: usize,
    seed: u64,
) -> Result<crate::scene::gaussians::Gaussians, RunError> {
    initial_gaussians_with_sky(pack, sh_degree, max_gaussians, 0, seed)
}

/// [`initial_gaussians`] with `sky` sky points after the pack's
/// ([`super::init::from_pack_with_sky`]; `gs-train --sky-points`).
pub fn initial_gaussians_with_sky(
    pack: &Pack,
    sh_degree: u32,
    max_gaussians: usize,
    sky: usize,
    seed: u64,
) -> Result<crate::scene::gaussians::Gaussians, RunError> {
    let mut rng = crate::rng::Rng::derived(seed, INIT_STREAM);
    super::init::from_pack_with_sky(pack, sh_degree, RANDOM_POINTS, max_gaussians, sky, &mut rng)
        .map_err(RunError::Init)
}

/// Where the model comes from, known before it is built (so the plan precedes it).
enum ModelStart {
    /// The latest checkpoint's state (already read: its model is resident).
    Resume(Box<super::TrainState>),
    /// The initial Gaussians [`super::init::from_pack`] will build.
    Fresh(InitPlan),
    /// The `--init` model, read and adapted to the run ([`super::init::from_model`]), and
    /// whether its scales and opacities hold a folded 3D filter that this run, training through
    /// its own (`--filter-3d`), takes out before its first step
    /// ([`super::filter3d::unfold`]).
    Model(
        Box<crate::scene::gaussians::Gaussians>,
        super::init::ModelInit,
        bool,
    ),
}

impl ModelStart {
    /// Gaussians the model starts with.
    fn gaussians(&self) -> usize {
        match self {
            ModelStart::Resume(state) => state.model.len(),
            ModelStart::Fresh(init) => init.gaussians as usize,
            ModelStart::Model(g, ..) => g.len(),
        }
    }
}

/// Reads the latest checkpoint under `--resume`, else plans the initial model.
fn model_start(
    opts: &RunOptions,
    config: &TrainConfig,
    pack: &Pack,
    views: (TrainedViews, u64),
    ckpt_dir: &Path,
    on_event: &mut dyn FnMut(Event),
) -> Result<ModelStart, RunError> {
    if let Some(path) = &opts.init {
        // A run with a 3D filter of its own trains a Mip-Splatting file's unfiltered values.
        let options = gply::LoadOptions {
            unfused_filter_3d: config.filter_3d,
            ..gply::LoadOptions::default()
        };
        let (g, info) =
            crate::export::load_model(path, &options).map_err(|source| RunError::InitModel {
                path: path.clone(),
                source,
            })?;
        if let Some(note) = info.sh_cut_note(path) {
            on_event(Event::Line(format!("warning: {note}")));
        }
        if let Some(note) = info.filter_3d_note(path) {
            on_event(Event::Line(format!("note: {note}")));
        }
        if config.filter_3d && info.fused_filter_3d {
            on_event(Event::Line(format!(
                "note: {} holds Mip-Splatting's 3D smoothing filter (`filter_3D`) beside its \
                 unfiltered scales and opacities: this run trains those, through its own filter \
                 set from this pack's training cameras",
                path.display()
            )));
        }
        if info.antialiased && !config.antialiased {
            on_event(Event::Line(format!(
                "warning: {} is marked antialiased (trained with Mip-Splatting's filter); this \
                 run trains it classic: add --antialiased to keep training it as it was",
                path.display()
            )));
        } else if !info.antialiased && config.antialiased {
            on_event(Event::Line(format!(
                "note: {} is not marked antialiased (a classic model, or saved by a tool that \
                 does not record the mode); this run trains it antialiased, so its smallest \
                 splats render fainter at first",
                path.display()
            )));
        }
        let mut rng = crate::rng::Rng::derived(config.seed, INIT_STREAM);
        let (g, report) =
            super::init::from_model(g, config.sh_degree, config.densify.max_gaussians, &mut rng)
                .map_err(|source| RunError::InitFrom {
                    path: path.clone(),
                    source: Box::new(source),
                })?;
        // A filter folded into the file is taken out once the run's cameras are known.
        let unfold = config.filter_3d && info.folded_filter_3d;
        return Ok(ModelStart::Model(Box::new(g), report, unfold));
    }
    if !opts.resume {
        return Ok(ModelStart::Fresh(super::init::plan(
            pack,
            RANDOM_POINTS,
            config.initial_cap(),
            opts.sky_points,
        )));
    }
    let manifest = pack.manifest();
    let path = checkpoint::latest(ckpt_dir)?;
    let state = checkpoint::load_state(
        &path,
        &Expected {
            pack_id: &manifest.pack_id.to_string(),
            pack_content: Some(&pack.content_fingerprint()),
            config,
            extend: opts.extend,
            views: Some(views),
        },
    )?;
    on_event(Event::Line(format!(
        "resuming from {} (iteration {}, {} Gaussians)",
        path.display(),
        state.step,
        state.model.len()
    )));
    Ok(ModelStart::Resume(Box::new(state)))
}

/// What a run says of the folded 3D filter it took out of its `--init` model.
fn unfold_line(path: &Path, u: super::filter3d::Unfolded) -> String {
    let mut line = format!(
        "{}: its scales and opacities hold a 3D filter folded in when it was saved; this run's \
         filter (from this pack's training cameras) is taken out of them, so its first step \
         draws the model as saved and the filter is not applied twice",
        path.display()
    );
    if u.inexact > 0 {
        line.push_str(&format!(
            "; {} of {} Gaussians are narrower than this run's filter (saved through a \
             narrower one: other cameras, or a larger training size) and are drawn at its width",
            u.inexact, u.gaussians
        ));
    }
    line
}

/// The line that says, once, what the initial model is made of.
fn init_line(init: &InitPlan, seed: u64) -> String {
    let line = if init.subsampled() {
        format!(
            "initial model: {} of the pack's {} SfM points (--max-gaussians {}: kept spread \
             over the scene by stratified sampling along a space-filling curve, seed {seed})",
            init.gaussians - init.sky,
            init.points,
            init.gaussians
        )
    } else if init.random {
        format!(
            "initial model: {} random Gaussians (the pack has no SfM points)",
            init.gaussians
        )
    } else {
        format!("initial model: {} Gaussians", init.gaussians)
    };
    if init.sky == 0 {
        return line;
    }
    format!(
        "{line}, {} of them sky points on a sphere {} scene extents from the cameras' centroid \
         (--sky-points)",
        init.sky,
        super::init::SKY_RADIUS_PER_EXTENT
    )
}

/// The loader configuration and the trainer's floor items of a run (see the module doc):
/// trainer images, render intersections, evaluation, the model and its initialisation.
fn plan_inputs(
    opts: &RunOptions,
    config: &TrainConfig,
    pack: &Pack,
    start: &ModelStart,
    on_device: bool,
) -> (LoaderConfig, PlanExtras) {
    let manifest = pack.manifest();
    let (position, step, gaussians, uncapped, init_points) = match start {
        ModelStart::Resume(state) => {
            let n = state.model.len() as u64;
            (state.position, state.step, n, n, 0)
        }
        ModelStart::Fresh(init) => (
            Position { epoch: 0, index: 0 },
            0,
            init.gaussians,
            init.points + init.sky,
            init.points + init.sky,
        ),
        // The model is resident already (read before the plan); nothing else is built.
        ModelStart::Model(g, report, _) => (
            Position { epoch: 0, index: 0 },
            0,
            g.len() as u64,
            report.file_gaussians,
            0,
        ),
    };
    let loader_config = LoaderConfig {
        workers: opts.workers,
        prefetch: opts.prefetch,
        start: position,
        limit: Some(config.iterations.saturating_sub(step)),
    };
    let max_view = manifest.max_view_bytes() as u64;
    let max_pixels = manifest.max_view_pixels();
    let coeffs = crate::scene::gaussians::sh_coeffs(config.sh_degree) as u64;
    let params = crate::scene::gaussians::floats_per_gaussian(config.sh_degree) as u64;
    let views = ViewKinds {
        alpha: manifest.has_alpha(),
        masks: manifest.has_masks(),
        exposure: config.exposure.is_some(),
        depth: config.depth.is_some(),
        bilagrid: config.bilagrid.is_some(),
        color_correct: opts.eval && opts.color_correct.is_some(),
        on_device,
    };
    let mut items: Vec<FloorItem> = per_pixel_items(views)
        .into_iter()
        .map(|(component, bytes, what)| {
            FloorItem::new(
                component,
                bytes * max_pixels,
                format!("{max_pixels} pixels (largest view) × {bytes} B ({what})"),
            )
        })
        .collect();
    items.extend([
        // Evaluation reads one ground-truth view and writes one side-by-side image (2 views).
        FloorItem::new(
            Component::Evaluation,
            3 * max_view,
            format!(
                "3 × {} (ground truth + side-by-side image of the largest view)",
                format_size(max_view)
            ),
        ),
    ]);
    let scratch = pack.max_decode_scratch(0..manifest.views.len()) as u64;
    if scratch > 0 {
        // Reading a view to score it allocates what the loader's workers reserve for their
        // own reads: the JPEG decoder's scratch, and at a run's resolution the view decoded
        // at its stored size first.
        let resampled = !pack.resize().is_none();
        let jpeg = manifest.views.iter().any(|v| v.jpeg.is_some());
        items.push(FloorItem::new(
            Component::Evaluation,
            scratch,
            match (jpeg, resampled) {
                (true, true) => format!(
                    "the JPEG decoder's scratch and a view read at its stored size, then \
                     resampled ({})",
                    pack.resize()
                ),
                (true, false) => "the JPEG decoder's scratch for one view".to_owned(),
                _ => format!(
                    "a view read at its stored size, then resampled ({})",
                    pack.resize()
                ),
            },
        ));
    }
    if let Some(b) = &config.bilagrid {
        // Every training view's grid and its two Adam moments, held from the first step, and
        // the step's gradient scratch (f64: one grid, its row bands', and one per thread).
        let views = train_view_count(opts.eval, manifest);
        let threads = rayon::current_num_threads();
        let scratch = bilagrid::step_scratch_bytes(b.shape, threads);
        items.push(FloorItem::new(
            Component::ViewParameters,
            BilateralGrids::bytes(b.shape, views) + scratch,
            format!(
                "{views} views × {} cells × 12 × 3 floats (bilateral grids, Adam moments), \
                 gradient scratch {}",
                b.shape,
                format_size(scratch)
            ),
        ));
    }
    // Saving SOG encodes its images in memory beside the model: the part that does not grow
    // with the model here, the rest in the model's bytes per Gaussian below.
    let sog = opts.export.contains(&ModelFormat::Sog);
    if sog {
        items.push(FloorItem::new(
            Component::Model,
            crate::export::sog::encode_fixed_bytes(config.sh_degree),
            "saving SOG (--export sog): codebook tables, the WebP encoder's tables and its \
             work on the palette image"
                .to_owned(),
        ));
    }
    let sog_per_gaussian = if sog {
        crate::export::sog::encode_bytes_per_gaussian(config.sh_degree)
    } else {
        0
    };
    // On the device engine the intersections live in device memory (its own plan).
    if !on_device {
        items.push(FloorItem::new(
            Component::RenderIntersections,
            config.max_intersection_bytes,
            format!(
                "min(budget / {INTERSECTION_BUDGET_DIVISOR}, {})",
                format_size(crate::render::DEFAULT_MAX_INTERSECTION_BYTES)
            ),
        ));
    }
    // MCMC never grows past its cap: the model item is the cap's bytes from the start, so the
    // cache gets the rest and never shrinks.
    let gaussians = match &config.mcmc {
        Some(m) => gaussians.max(m.cap_max as u64),
        None => gaussians,
    };
    // On a device, the host holds one copy of the model at most (what a checkpoint or an
    // export downloads); the gradients and the rasterizer's buffers stay on the device.
    let model = ModelShare {
        gaussians,
        uncapped,
        bytes_per_gaussian: host_model_bytes(1, config.sh_degree, on_device)
            + super::filter3d::bytes_per_gaussian(config.filter_3d, on_device)
            + sog_per_gaussian,
        formula: format!(
            "P = 11 + 3 × {coeffs} SH coefficients = {params} floats: {}{}{}",
            if on_device {
                format!(
                    "the host copy a checkpoint downloads, parameters P and Adam moments 2P, \
                     4 B each; densify statistics 12 B; saving's scratch {} B",
                    super::densify::SAVE_SCRATCH_BYTES_PER_GAUSSIAN
                )
            } else {
                format!(
                    "parameters P, gradients P + 2, Adam moments 2P, 4 B each; densify \
                     statistics 12 B; render buffers {} B; densification scratch {} B (the SH \
                     coefficients gathered beside the old)",
                    super::densify::RENDER_BYTES_PER_GAUSSIAN,
                    super::densify::gather_scratch_bytes(config.sh_degree)
                )
            },
            match super::filter3d::bytes_per_gaussian(config.filter_3d, on_device) {
                0 => String::new(),
                b => format!("; 3D filter {b} B"),
            },
            match sog_per_gaussian {
                0 => String::new(),
                b => format!("; saving SOG {b} B"),
            }
        ),
        init_points,
        init_bytes_per_point: super::init::INIT_BYTES_PER_POINT,
    };
    let extras = PlanExtras {
        items,
        // The CPU rasterizer's and the kNN's compute pool.
        threads: rayon::current_num_threads(),
        model: Some(model),
    };
    (loader_config, extras)
}

/// The per-render intersection cap for a budget of `budget` bytes (RAM on the host engine,
/// device memory on the device engine): 1/[`INTERSECTION_BUDGET_DIVISOR`] of it, at most
/// [`crate::render::DEFAULT_MAX_INTERSECTION_BYTES`].
fn intersection_cap(budget: u64) -> u64 {
    (budget / INTERSECTION_BUDGET_DIVISOR).min(crate::render::DEFAULT_MAX_INTERSECTION_BYTES)
}

/// Settings `run` and `dry_run` refuse before opening anything.
/// The run's depth regularization: [`RunOptions::depth`] resolved for the pack's kind of
/// planes when it carries any (said in one line, with how many views have one), off
/// otherwise (refused when a depth weight was given, which would then do nothing).
fn depth_config(
    opts: &RunOptions,
    manifest: &crate::shard::Manifest,
    extent: f64,
    on_event: &mut dyn FnMut(Event),
) -> Result<Option<DepthConfig>, RunError> {
    let with_maps = manifest.views.iter().filter(|v| v.depth.is_some()).count();
    if with_maps == 0 {
        return match opts.depth.given() {
            true => Err(OptionsError::DepthWithoutMaps {
                pack: opts.pack.clone(),
            }
            .into()),
            false => Ok(None),
        };
    }
    let sparse = manifest.source.sfm_depths;
    if sparse {
        // The mean of a sparse plane runs over its points, which the pack counts.
        if let Some(v) = manifest
            .views
            .iter()
            .find(|v| v.depth.is_some() && v.depth_pixels.is_none())
        {
            return Err(OptionsError::SfmDepthsUncounted {
                pack: opts.pack.clone(),
                view: v.name.clone(),
            }
            .into());
        }
    }
    let d = DepthConfig::resolve(opts.depth, sparse);
    if !d.enabled() {
        on_event(Event::Line(format!(
            "the pack's depth {} ({with_maps} views) are not used: --depth-l1-weight-init 0",
            if sparse { "points" } else { "maps" }
        )));
        return Ok(None);
    }
    let schedule = if d.weight_init == d.weight_final {
        format!("weight {}", d.weight_init)
    } else {
        format!("weight {} → {} over the run", d.weight_init, d.weight_final)
    };
    on_event(Event::Line(if sparse {
        let points: u64 = manifest.views.iter().filter_map(|v| v.depth_pixels).sum();
        format!(
            "depth from SfM points (gsplat's --depth_loss): {with_maps} of {} views carry the \
             inverse depths of the points they observe ({points} in all; the others train on \
             the photometric loss alone); {schedule}, times the scene extent {extent:.4} \
             (--depth-lambda W, or --depth-l1-weight-init/-final; 0 turns it off)",
            manifest.views.len(),
        )
    } else {
        format!(
            "depth regularization: {with_maps} of {} views carry an inverse-depth map (the \
             others train on the photometric loss alone); {schedule} \
             (--depth-l1-weight-init/-final; 0 turns it off)",
            manifest.views.len(),
        )
    }));
    Ok(Some(d))
}

fn check_options(opts: &RunOptions) -> Result<(), RunError> {
    if opts.config.iterations == 0 {
        return Err(OptionsError::ZeroIterations.into());
    }
    if opts.extend && !opts.resume {
        return Err(OptionsError::ExtendWithoutResume.into());
    }
    if opts.sky_points > 0 && opts.init.is_some() {
        return Err(OptionsError::SkyWithInit.into());
    }
    let cap = opts.config.initial_cap();
    if opts.sky_points > 0 && opts.sky_points >= cap {
        return Err(OptionsError::SkyOverCap {
            sky: opts.sky_points,
            cap,
        }
        .into());
    }
    if opts.devices == 0 {
        return Err(OptionsError::NoDevices.into());
    }
    if opts.devices > 1 && opts.backend == Backend::Cpu {
        return Err(OptionsError::DevicesOnCpu(opts.devices).into());
    }
    if let Some(m) = &opts.config.mcmc {
        if m.cap_max == 0 {
            return Err(OptionsError::McmcWithoutCap.into());
        }
    }
    if opts.config.densify.max_gaussians == 0 {
        let default = TrainConfig::default().densify.max_gaussians;
        return Err(OptionsError::ZeroCap(default).into());
    }
    if opts.init.is_some() && opts.resume {
        return Err(OptionsError::InitWithResume.into());
    }
    if opts.workers == 0 || opts.prefetch == 0 {
        return Err(OptionsError::NoWorkers.into());
    }
    if !opts.profile_at.is_empty() {
        if opts.profile_steps == 0 {
            return Err(OptionsError::ProfileAtWithoutSteps.into());
        }
        let ordered = opts.profile_at.first() >= Some(&1)
            && opts
                .profile_at
                .windows(2)
                .all(|w| w[1] >= w[0].saturating_add(opts.profile_steps));
        if !ordered {
            return Err(OptionsError::ProfileWindows {
                at: opts.profile_at.clone(),
                steps: opts.profile_steps,
            }
            .into());
        }
    }
    Ok(())
}

/// The floor a refusal reports. On the host engine the intersection buffers take a share of
/// the budget (1/[`INTERSECTION_BUDGET_DIVISOR`], capped), so the floor grows with the budget
/// tried: reporting the floor at that budget would name a different figure at every attempt,
/// none of which fits. What the run needs is the smallest budget that holds its own floor, a
/// fixed point reached in a few steps (the share grows 1/8 as fast as the budget); that floor
/// is the same whichever budget below it was tried. `budget` and the advice stay those of the
/// budget the user gave.
fn needed_floor(
    opts: &RunOptions,
    config: &TrainConfig,
    pack: &Pack,
    start: &ModelStart,
    on_device: bool,
    source: &dyn RecordSource,
    baseline: u64,
) -> Floor {
    let floor_at = |budget: u64| {
        let mut c = config.clone();
        if !on_device {
            c.max_intersection_bytes = intersection_cap(budget);
        }
        let (loader_config, extras) = plan_inputs(opts, &c, pack, start, on_device);
        floor_of(budget, source, &loader_config, baseline, extras)
    };
    let first = floor_at(opts.ram_budget);
    let mut f = first.clone();
    for _ in 0..64 {
        if f.total() <= f.budget {
            break;
        }
        f = floor_at(f.total());
    }
    // The advice stays the one for the budget tried (e.g. the `--max-gaussians` that fits it).
    f.budget = opts.ram_budget;
    f.advice = first.advice;
    f
}

/// What `gs-train --dry-run` reports: the memory plan of a run, computed exactly as [`run`]
/// computes it (the same baseline point, the same items), without building the model.
#[derive(Clone, Debug)]
pub struct PlanSummary {
    pub floor: Floor,
    /// Whether the run would start (the floor fits the budget).
    pub fits: bool,
    /// What the cache gets once the initial model is built: the budget less the floor, plus
    /// the initialisation's points, released then (0 when it does not fit).
    pub cache_bytes: u64,
    /// Views of the largest size that fit the cache, of `views`.
    pub cache_views: u64,
    pub views: usize,
    /// Iterations still to train.
    pub iterations: u64,
    /// The cache hit rate the known sampling order gives over those iterations
    /// ([`crate::data::expected_hit_rate`]); `None` when the run would not start.
    pub expected_hit_rate: Option<f64>,
    /// The initial model of a fresh run (`None` on resume and with `--init`).
    pub init: Option<InitPlan>,
    /// MCMC's cap when the model is reserved at it from the start (`None`: the model grows).
    pub fixed_model: Option<usize>,
    /// With `--init`: what the model file gives ([`super::init::ModelInit::line`]).
    pub init_model: Option<String>,
    pub seed: u64,
}

impl PlanSummary {
    /// The plan for the user, one line each.
    pub fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "memory plan for --ram-budget {} (host RAM; peak resident set, kernel VmHWM):",
            format_size(self.floor.budget)
        )];
        out.push(self.floor.table());
        out.push(format!(
            "  {:<21} {:>12}  the floor: what the run needs before caching anything",
            "total",
            format_size(self.floor.total())
        ));
        if let Some(init) = &self.init {
            out.push(init_line(init, self.seed));
        }
        if let Some(line) = &self.init_model {
            out.push(line.clone());
        }
        if !self.fits {
            out.push(format!(
                "--ram-budget {} is below this floor: the run would be refused. To fit, use {}",
                format_size(self.floor.budget),
                self.floor.advice.join("; ")
            ));
            return out;
        }
        let growth = match self.fixed_model {
            Some(cap) => format!(
                "the model is reserved at its cap of {cap} Gaussians (--strategy mcmc), so the \
                 cache never shrinks"
            ),
            None => "it shrinks as densification grows the model".to_string(),
        };
        out.push(format!(
            "cache: {} (the budget less the floor, plus the initialisation once the model is \
             built): {} of the {} training views at the largest view size; {growth}",
            format_size(self.cache_bytes),
            self.cache_views.min(self.views as u64),
            self.views
        ));
        if let Some(h) = self.expected_hit_rate {
            out.push(format!(
                "expected cache hit rate: {:.1}% over the {} iterations to train (the real \
                 cache replayed on the seed-{} sampling order at the planned size)",
                100.0 * h,
                self.iterations,
                self.seed
            ));
        }
        out
    }
}

/// What a run at a resolution of its own (`resolution`, `gs-train -r`) says first: the size
/// its views train at and what reading them at that size costs; `None` without one.
fn resolution_note(pack: &Pack, resolution: crate::resample::Resize) -> Option<String> {
    if resolution.is_none() {
        return None;
    }
    let views = &pack.manifest().views;
    let resampled: Vec<usize> = (0..views.len())
        .filter(|&i| pack.resample_scratch(i) > 0)
        .collect();
    let Some(&first) = resampled.first() else {
        return Some(format!(
            "resolution: every view is already {resolution}; the views train at the pack's size"
        ));
    };
    let (stored, shown) = (pack.stored_view(first)?, &views[first]);
    Some(format!(
        "resolution: views train and are scored {resolution} ({} of {} views resampled as \
         they are read, e.g. {}x{} → {}x{}); packing at that size (`gs-pack convert \
         --downscale N` or `--max-width PX`) saves that work on every read",
        resampled.len(),
        views.len(),
        stored.width(),
        stored.height(),
        shown.width(),
        shown.height()
    ))
}

/// The far field of a run with `--sky-points` (`None` without), from the pack's cameras.
fn far_field(
    opts: &RunOptions,
    manifest: &crate::shard::Manifest,
) -> Result<Option<super::densify::FarField>, RunError> {
    if opts.sky_points == 0 {
        return Ok(None);
    }
    let s = &manifest.scene;
    // Cameras at one position (a tripod's panorama) give no extent to place a sky by.
    if s.extent.is_nan() || s.extent <= 0.0 {
        return Err(OptionsError::SkyWithoutExtent.into());
    }
    Ok(Some(super::init::sky_far_field(
        s.camera_centroid,
        s.extent,
    )))
}

/// `gs-train --dry-run`: see [`PlanSummary`]. Opens the pack (and reads the checkpoint under
/// `--resume`), writes nothing. A budget below the floor is not an error here: the summary
/// says so (`fits == false`) with the refusal a run would give.
pub fn dry_run(
    opts: &RunOptions,
    on_event: &mut dyn FnMut(Event),
) -> Result<PlanSummary, RunError> {
    check_options(opts)?;
    check_paths(opts)?;
    let mut config = opts.config.clone();
    let pack = Arc::new(Pack::open(&opts.pack)?.resized(config.resolution));
    if let Some(note) = resolution_note(&pack, config.resolution) {
        on_event(Event::Line(note));
    }
    let manifest = pack.manifest().clone();
    config.depth = depth_config(opts, &manifest, manifest.scene.extent, on_event)?;
    if let Some(field) = far_field(opts, &manifest)? {
        config.densify.far_field = Some(field);
    }
    let views = TrainedViews::of_run(opts.eval, &config);
    let source = PackViews::new(pack.clone(), views.split());
    if source.is_empty() {
        return Err(RunError::NoViews {
            pack: opts.pack.clone(),
            train_split: opts.eval,
        });
    }
    // As in `run`: the engine, with every module it will load, exists before the baseline.
    let mut engine = make_engine(opts.backend, opts.devices, on_event)?;
    engine.prepare(&config)?;
    let vram = vram_budget(&engine, opts.vram_budget)?;
    config.max_intersection_bytes = intersection_cap(vram.map_or(opts.ram_budget, |v| v.bytes));
    let baseline = current_rss_bytes().unwrap_or(0);
    let start = model_start(
        opts,
        &config,
        &pack,
        (views, source.len() as u64),
        &opts.out.join(CHECKPOINT_DIR),
        on_event,
    )?;
    drop(engine);
    if let Some(v) = vram {
        // The device plan prints itself; a refusal is reported, not returned (as the RAM
        // plan's is).
        let max_pixels = manifest.max_view_pixels();
        let views = train_view_count(opts.eval, &manifest);
        if let Err(e) = plan_device(v, start.gaussians(), &config, max_pixels, views, on_event) {
            on_event(Event::Line(format!("device memory: {e}")));
        }
    }
    let (loader_config, extras) = plan_inputs(opts, &config, &pack, &start, vram.is_some());
    let mut floor = floor_of(opts.ram_budget, &source, &loader_config, baseline, extras);
    let fits = floor.check().is_ok();
    if !fits {
        floor = needed_floor(
            opts,
            &config,
            &pack,
            &start,
            vram.is_some(),
            &source,
            baseline,
        );
    }
    let cache_bytes = if fits {
        opts.ram_budget - floor.total() + floor.item(Component::Initialisation)
    } else {
        0
    };
    let largest = manifest.max_view_bytes();
    let expected_hit_rate = if fits {
        Some(expected_hit_rate(
            &source,
            CachePolicy::Belady,
            cache_bytes,
            config.seed,
            loader_config.start,
            loader_config.limit.unwrap_or(0),
        )?)
    } else {
        None
    };
    Ok(PlanSummary {
        fits,
        cache_bytes,
        cache_views: cache_bytes / crate::data::cache::entry_cost(largest).max(1),
        views: source.len(),
        iterations: loader_config.limit.unwrap_or(0),
        expected_hit_rate,
        init_model: match (&start, &opts.init) {
            (ModelStart::Model(_, report, _), Some(path)) => Some(report.line(path)),
            _ => None,
        },
        init: match start {
            ModelStart::Fresh(init) => Some(init),
            ModelStart::Resume(_) | ModelStart::Model(..) => None,
        },
        fixed_model: config.mcmc.as_ref().map(|m| m.cap_max),
        seed: config.seed,
        floor,
    })
}

/// Runs training as described in the module doc.
pub fn run(opts: &RunOptions, on_event: &mut dyn FnMut(Event)) -> Result<RunOutcome, RunError> {
    let started = Instant::now();
    check_options(opts)?;
    check_paths(opts)?;
    let mut config = opts.config.clone();
    let pack = Arc::new(Pack::open(&opts.pack)?.resized(config.resolution));
    if let Some(note) = resolution_note(&pack, config.resolution) {
        on_event(Event::Line(note));
    }
    let manifest = pack.manifest().clone();
    config.depth = depth_config(opts, &manifest, manifest.scene.extent, on_event)?;
    if let Some(field) = far_field(opts, &manifest)? {
        config.densify.far_field = Some(field);
    }
    let pack_id = manifest.pack_id.to_string();
    // The stored pack's: the run's resolution is one of its settings (`config.resolution`).
    let pack_content = pack.content_fingerprint();
    // 3DGS's --train_test_exp protocol: with exposure compensation, held-out views train
    // their left halves (so their exposures are learned) and are scored on their right halves.
    let views = TrainedViews::of_run(opts.eval, &config);
    let half_split = views == TrainedViews::TestLeftHalves;
    let test_views = if opts.eval {
        manifest.split_indices(Split::Test)
    } else {
        Vec::new()
    };
    let source = Arc::new(PackViews::new(pack.clone(), views.split()));
    if source.is_empty() {
        return Err(RunError::NoViews {
            pack: opts.pack.clone(),
            train_split: opts.eval,
        });
    }
    if opts.eval && test_views.is_empty() {
        on_event(Event::Line(
            "--eval: the pack has no test views (re-pack with --test-every N to hold some out); \
             only training views will be scored"
                .into(),
        ));
    }
    let exposure_slot = |r: u32| config.exposure.is_some().then_some(r);
    // Pose slots number the views that train whole, in record order; held-out views keep the
    // dataset's poses (gsplat's rule): they are scored from them.
    let mut posed = 0u32;
    let train_views: Vec<TrainView> = (0..source.len() as u32)
        .map(|r| {
            let v = &manifest.views[source.view_index(r)];
            let held_out = half_split && v.split == Split::Test;
            let pose = (config.pose.is_some() && !held_out).then(|| {
                posed += 1;
                posed - 1
            });
            TrainView {
                camera: v.camera,
                layout: v.layout(),
                exposure: exposure_slot(r),
                pose,
                // Every record trains whole (the half-view protocol is exposure's alone).
                grid: config.bilagrid.is_some().then_some(r),
                region: if held_out {
                    Region::LeftHalf
                } else {
                    Region::Full
                },
                depth: v.depth,
                depth_points: v.depth_pixels,
            }
        })
        .collect();
    // Evaluation: the test views (their right halves under the protocol above), and the
    // train views in full; each through its exposure.
    let test_views: Vec<(usize, TrainView)> = test_views
        .into_iter()
        .map(|i| {
            let v = &manifest.views[i];
            let mut view = TrainView::new(v.camera, v.layout());
            if half_split {
                // Every view is a record then, in pack order: view i is record i.
                view.exposure = exposure_slot(i as u32);
                view.region = Region::RightHalf;
            }
            (i, view)
        })
        .collect();
    let train_eval_views: Vec<(usize, TrainView)> = (0..source.len() as u32)
        .map(|r| (source.view_index(r), train_views[r as usize]))
        .filter(|(_, v)| v.region == Region::Full)
        .collect();
    // Per pack view: the record whose pose correction it has (training views under pose
    // optimisation), for the trained cameras.json.
    let mut pose_slots: Vec<Option<u32>> = vec![None; manifest.views.len()];
    for (r, v) in train_views.iter().enumerate() {
        if let Some(slot) = v.pose {
            pose_slots[source.view_index(r as u32)] = Some(slot);
        }
    }
    let exposure_names = super::exposure::view_keys(
        &(0..source.len() as u32)
            .map(|r| manifest.views[source.view_index(r)].name.clone())
            .collect::<Vec<_>>(),
    );
    let saved_views = SavedViews {
        views: &manifest.views,
        pose_slots: &pose_slots,
        exposure_names: &exposure_names,
    };
    let ckpt_dir = opts.out.join(CHECKPOINT_DIR);
    let save = |t: &mut Trainer| -> Result<PathBuf, RunError> {
        Ok(checkpoint::save_state_of(
            &ckpt_dir,
            t.state_ref()?,
            &pack_id,
            Some(&pack_content),
            Some(views),
        )?)
    };

    let mut engine = make_engine(opts.backend, opts.devices, on_event)?;
    engine.prepare(&config)?;
    let backend_name = engine.name();
    let max_pixels = manifest.max_view_pixels();
    let vram = vram_budget(&engine, opts.vram_budget)?;
    // The render's intersection buffers get a fixed share of the memory that holds them: the
    // RAM budget on the host engine (a floor item), the VRAM budget on the device engine.
    let intersection_bytes = intersection_cap(vram.map_or(opts.ram_budget, |v| v.bytes));
    config.max_intersection_bytes = intersection_bytes;
    // After the backend check (so a missing backend is reported first), before any work. An
    // existing -o is locked before its outputs are read or cleared; a new one when created.
    let early_lock = if opts.out.is_dir() {
        Some(lock_output(&opts.out, on_event)?)
    } else {
        None
    };
    if !opts.resume {
        claim_output(&opts.out, opts.overwrite)?;
    }
    // The baseline, before the model or anything else that scales with the data exists: the
    // model is an item of its own, never also part of the baseline. (The engine, and with it a
    // CUDA context and every kernel module the run uses, exists already: its resident memory
    // is part of the baseline.)
    let baseline = current_rss_bytes().unwrap_or(0);
    let start = model_start(
        opts,
        &config,
        &pack,
        (views, source.len() as u64),
        &ckpt_dir,
        on_event,
    )?;
    if let ModelStart::Resume(state) = &start {
        if state.step >= config.iterations {
            return Err(RunError::NothingToResume {
                step: state.step,
                iterations: config.iterations,
            });
        }
    }

    // Memory plans (host RAM, and device memory on the device engine), before any data work
    // and before the model is built.
    let (loader_config, extras) = plan_inputs(opts, &config, &pack, &start, vram.is_some());
    let floor = floor_of(
        opts.ram_budget,
        &*source,
        &loader_config,
        baseline,
        extras.clone(),
    );
    if floor.check().is_err() {
        let f = needed_floor(
            opts,
            &config,
            &pack,
            &start,
            vram.is_some(),
            &*source,
            baseline,
        );
        return Err(LoadError::from(BudgetError::BelowFloor(Box::new(f))).into());
    }
    let mut plan = plan_memory(opts.ram_budget, &*source, &loader_config, baseline, extras)?;
    let views = train_view_count(opts.eval, &manifest);
    let device_cap = vram
        .map(|v| plan_device(v, start.gaussians(), &config, max_pixels, views, on_event))
        .transpose()?;
    let (mut trainer, resumed_from) = match start {
        ModelStart::Resume(mut state) => {
            let step = state.step;
            // The cap follows this run's budget (it is not compared with the checkpoint's).
            state.config.max_intersection_bytes = intersection_bytes;
            (Trainer::from_state(*state, engine)?, Some(step))
        }
        ModelStart::Fresh(init) => {
            let g = initial_gaussians_with_sky(
                &pack,
                config.sh_degree,
                config.initial_cap(),
                opts.sky_points,
                config.seed,
            )?;
            on_event(Event::Line(init_line(&init, config.seed)));
            (
                Trainer::new(config.clone(), g, manifest.scene.extent, engine)?,
                None,
            )
        }
        ModelStart::Model(mut g, report, unfold) => {
            if let Some(path) = &opts.init {
                on_event(Event::Line(report.line(path)));
                if unfold {
                    let cameras: Vec<Camera> = train_views.iter().map(|v| v.camera).collect();
                    let u = super::filter3d::unfold(&mut g, &cameras);
                    on_event(Event::Line(unfold_line(path, u)));
                }
            }
            // The SH schedule starts at the model's degree: iteration 1 renders the model.
            config.initial_sh_degree = report.file_sh_degree.min(config.sh_degree);
            (
                Trainer::new(config.clone(), *g, manifest.scene.extent, engine)?,
                None,
            )
        }
    };
    if let Some(cap) = device_cap {
        trainer.set_device_cap(cap);
    }
    // Every record's matrix from the first step on (the mean constraint covers them all).
    trainer.hold_exposure_views(source.len());
    // Every record's grid from the first step on (the total variation covers them all).
    trainer.hold_grid_views(source.len())?;
    // Every posed view's correction (and injected noise) from the first step on, with the
    // cameras whose frame the corrections keep.
    let posed_cameras: Vec<Camera> = train_views
        .iter()
        .filter(|v| v.pose.is_some())
        .map(|v| v.camera)
        .collect();
    trainer.hold_pose_views(&posed_cameras)?;
    // The 3D filter is set from every training view's camera, at the size it trains at.
    trainer.set_filter_cameras(&train_views.iter().map(|v| v.camera).collect::<Vec<_>>())?;
    // The initialisation's points are freed: their share goes to the cache.
    plan.release_to_cache(Component::Initialisation);
    let model_reservation = plan
        .take(Component::Model)
        .expect("the plan reserves the model");
    trainer.set_model_reservation(model_reservation)?;
    let floor_bytes = plan.floor.total();
    let cache_bytes = plan.cache.bytes();
    on_event(Event::Line(format!(
        "memory: budget {}, floor {} ({}), cache {}",
        format_size(opts.ram_budget),
        format_size(floor_bytes),
        // One entry per component, in plan order (add-ons are items of their own).
        plan.floor
            .items
            .iter()
            .fold(Vec::<(Component, u64)>::new(), |mut acc, i| {
                match acc.iter_mut().find(|(c, _)| *c == i.component) {
                    Some((_, bytes)) => *bytes += i.bytes,
                    None => acc.push((i.component, i.bytes)),
                }
                acc
            })
            .iter()
            .map(|(c, bytes)| format!("{c} {}", format_size(*bytes)))
            .collect::<Vec<_>>()
            .join(", "),
        format_size(cache_bytes)
    )));
    let cache = Cache::new(CachePolicy::Belady, plan.cache);
    let sampler = Sampler::grouped(config.seed, source.groups()).map_err(LoadError::from)?;
    // The device engine uploads from page-locked slots (asynchronous copies); the host engine
    // reads ordinary memory.
    let pinned_slots = trainer.device().map(PinnedSlots::new);
    let slots: &dyn SlotAllocator = match &pinned_slots {
        Some(p) => p,
        None => &HeapSlots,
    };
    let mut loader = Loader::start(source.clone(), sampler, cache, slots, &loader_config)?;

    // Created only now: a run refused above (budget, settings, checkpoint) leaves no empty -o.
    std::fs::create_dir_all(&opts.out).map_err(io_err(&opts.out))?;
    let _lock = match early_lock {
        Some(lock) => lock,
        None => lock_output(&opts.out, on_event)?,
    };
    let given: Vec<Camera> = manifest.views.iter().map(|v| v.camera).collect();
    write_cameras_json(&opts.out, &manifest.views, &given, on_event)?;
    write_cfg_args(opts, &manifest, &config)?;
    let mut metrics = MetricsLog::open(&opts.out, resumed_from)?;
    let mut point_clouds: Vec<String> = Vec::new();
    let mut window = (0.0f64, 0.0f64, 0u64, 0u64); // loss sum, psnr sum, steps, intersections
    let mut depth_window = (0.0f64, 0u64); // depth L1 sum, steps with a depth map
    let mut last_row = Instant::now();
    let mut interrupted = false;
    let mut gt = Vec::new();
    let mut failure: Option<RunError> = None;
    let train_started = Instant::now();
    // Seconds the loop spent on its outputs (metrics rows, saves, checkpoints, evaluations),
    // which the training time leaves out.
    let mut outputs_s = 0.0f64;
    let total = config.iterations;
    let start_step = trainer.step_count();
    // By default the profile starts after a warm-up (kernels compiled, buffers grown, caches
    // warm).
    let profile_windows = profile_windows(opts, start_step);
    trainer.profile_iterations(profile_windows.clone());
    let mut profile: Vec<ProfiledStep> = Vec::new();
    // Windows that ran to their end, reported (and told in the log) then.
    let mut profile_done: Vec<Option<report::PhaseReport>> = vec![None; profile_windows.len()];
    let test_scoring = Scoring {
        images: opts.max_test_images,
        align: opts.eval_pose.as_ref(),
        color_correct: opts.color_correct,
    };
    // A run resumed right before an opacity reset: that iteration's saves and evaluation are
    // made before its step (see `due` below), at the end of the step the checkpoint holds, and
    // the run that wrote the checkpoint may have stopped (crashed, or failed writing them)
    // before making them. They are made again here (the same model: the same files).
    let next = start_step + 1;
    let outputs_started = Instant::now();
    if resumed_from.is_some() && trainer.resets_opacity_at(next) {
        if opts.save_iterations.contains(&next) {
            point_clouds.push(save_ply(
                &opts.out,
                &mut trainer,
                next,
                &opts.export,
                &saved_views,
                on_event,
            )?);
        }
        if opts.eval && opts.test_iterations.contains(&next) {
            let scores = evaluate_views(
                &pack,
                &mut trainer,
                &test_views,
                &opts.out,
                &format!("iteration_{next}"),
                test_scoring,
                &mut gt,
            )?;
            on_event(Event::Line(test_line(
                next,
                &scores,
                half_split,
                test_scoring,
            )));
        }
    }
    outputs_s += outputs_started.elapsed().as_secs_f64();
    {
        let mut on_step = |t: &mut Trainer, s: &super::StepStats, info: &super::LoopInfo| {
            let it = s.iteration;
            profile.extend(s.phases.map(|phases| ProfiledStep {
                iteration: it,
                phases,
                num_gaussians: s.num_gaussians as u64,
                intersections: s.intersections,
            }));
            // A window's line as soon as its last step ran (a long run shows its early
            // windows while it trains; the report gets every window at the end).
            if let Some(w) = profile_windows.iter().position(|w| w.end == it + 1) {
                if let Some((r, line)) =
                    phase_window(&window_steps(&profile, &profile_windows[w]), t)
                {
                    on_event(Event::Line(line));
                    profile_done[w] = Some(r);
                }
            }
            window.0 += s.loss;
            window.1 += s.psnr;
            window.2 += 1;
            window.3 += s.intersections;
            if let Some(d) = s.depth_l1 {
                depth_window.0 += d;
                depth_window.1 += 1;
            }
            if let Some(why) = &s.growth_stopped {
                on_event(Event::Line(format!("iteration {it}: {why}")));
            }
            let outputs_started = Instant::now();
            let result = (|| -> Result<LoopControl, RunError> {
                if it.is_multiple_of(opts.metrics_every) || it == total {
                    let secs = last_row.elapsed().as_secs_f64();
                    let row = MetricsRow {
                        iteration: it,
                        loss: window.0 / window.2 as f64,
                        psnr: window.1 / window.2 as f64,
                        depth_l1: (depth_window.1 > 0)
                            .then(|| depth_window.0 / depth_window.1 as f64),
                        num_gaussians: s.num_gaussians as u64,
                        intersections: window.3 / window.2,
                        peak_rss_bytes: peak_rss_bytes().unwrap_or(0),
                        stall_fraction: if info.elapsed_seconds > 0.0 {
                            (info.stall_seconds / info.elapsed_seconds).min(1.0)
                        } else {
                            0.0
                        },
                        iterations_per_s: if secs > 0.0 {
                            window.2 as f64 / secs
                        } else {
                            0.0
                        },
                        elapsed_s: train_started.elapsed().as_secs_f64(),
                    };
                    metrics.append(&row)?;
                    window = (0.0, 0.0, 0, 0);
                    depth_window = (0.0, 0);
                    last_row = Instant::now();
                }
                // An iteration whose step resets the opacities is saved and evaluated before
                // that step (as 3DGS and gsplat do), i.e. at the end of the step before it:
                // after the reset every opacity is at most 0.01 and the model renders nearly
                // nothing. `due(list)`: the iterations of `list` saved or evaluated now.
                let next = it + 1;
                let early = t.resets_opacity_at(next);
                let late = t.resets_opacity_at(it);
                let due = |list: &[u64]| -> Vec<u64> {
                    let now = !late && it != total && list.contains(&it);
                    let ahead = early && list.contains(&next);
                    [(now, it), (ahead, next)]
                        .into_iter()
                        .filter_map(|(yes, n)| yes.then_some(n))
                        .collect()
                };
                for n in due(&opts.save_iterations) {
                    point_clouds.push(save_ply(
                        &opts.out,
                        t,
                        n,
                        &opts.export,
                        &saved_views,
                        on_event,
                    )?);
                }
                let periodic =
                    opts.checkpoint_every > 0 && it.is_multiple_of(opts.checkpoint_every);
                if (periodic || opts.checkpoint_iterations.contains(&it)) && it != total {
                    save(t)?;
                    if periodic {
                        prune_periodic(&ckpt_dir, it, opts);
                    }
                }
                for n in due(&opts.test_iterations).into_iter().filter(|_| opts.eval) {
                    let scores = evaluate_views(
                        &pack,
                        t,
                        &test_views,
                        &opts.out,
                        &format!("iteration_{n}"),
                        test_scoring,
                        &mut gt,
                    )?;
                    on_event(Event::Line(test_line(n, &scores, half_split, test_scoring)));
                }
                if opts.stop.load(Ordering::SeqCst) && it != total {
                    let path = save(t)?;
                    on_event(Event::Line(format!(
                        "interrupted at iteration {it}: checkpoint {}; continue with --resume",
                        path.display()
                    )));
                    interrupted = true;
                    return Ok(LoopControl::Stop);
                }
                Ok(LoopControl::Continue)
            })();
            outputs_s += outputs_started.elapsed().as_secs_f64();
            on_event(Event::Progress { done: it, total });
            match result {
                Ok(c) => c,
                Err(e) => {
                    failure = Some(e);
                    LoopControl::Stop
                }
            }
        };
        let summary = train_loop(&mut trainer, &mut loader, &train_views, total, &mut on_step);
        // A failure after some progress keeps the last good state: a data error (the loader
        // failed before the next step) or a failed output (after a complete step) leaves the
        // trainer consistent, so it is checkpointed; otherwise the newest checkpoint is named.
        let keep = |e: RunError, trainer: &mut Trainer, consistent: bool| -> RunError {
            let step = trainer.step_count();
            let saved = if consistent && step > start_step {
                save(trainer).ok()
            } else {
                None
            };
            match saved.or_else(|| checkpoint::latest(&ckpt_dir).ok()) {
                Some(checkpoint) => RunError::Stopped {
                    step,
                    checkpoint,
                    source: Box::new(e),
                },
                None if step > start_step => RunError::StoppedUnsaved {
                    step,
                    source: Box::new(e),
                },
                None => e,
            }
        };
        if let Some(e) = failure.take() {
            return Err(keep(e, &mut trainer, true));
        }
        let summary = match summary {
            Ok(s) => s,
            Err(e) => {
                let consistent = matches!(e, TrainError::Load(_));
                return Err(keep(e.into(), &mut trainer, consistent));
            }
        };
        let train_s = (train_started.elapsed().as_secs_f64() - outputs_s).max(0.0);
        let steps = summary.steps;
        let loader_stats = summary.loader;
        let cache_hit_rate = summary.cache.hit_rate();
        drop(loader);
        if !interrupted && trainer.step_count() < total {
            return Err(RunError::LoaderEnded {
                at: trainer.step_count(),
                iterations: total,
            });
        }
        let it = trainer.step_count();
        let mut test = (None, None, 0usize);
        let mut eval_pose = None;
        let mut color_corrected = None;
        let mut train_scores = (None, None);
        if !interrupted {
            // The final checkpoint first: it is what a re-run needs, and on a full disk the
            // error names the newest checkpoint that did make it.
            if let Err(e) = save(&mut trainer) {
                return Err(keep(e, &mut trainer, false));
            }
            match save_ply(
                &opts.out,
                &mut trainer,
                it,
                &opts.export,
                &saved_views,
                on_event,
            ) {
                Ok(p) => point_clouds.push(p),
                Err(e) => return Err(keep(e, &mut trainer, false)),
            }
            if opts.eval && !test_views.is_empty() {
                let scores = evaluate_views(
                    &pack,
                    &mut trainer,
                    &test_views,
                    &opts.out,
                    &format!("iteration_{it}"),
                    test_scoring,
                    &mut gt,
                )?;
                let (p, s) = report::mean_scores(&scores);
                test = (p, s, scores.len());
                color_corrected = ColorCorrectedMeans::of(opts.color_correct, &scores);
                eval_pose = opts
                    .eval_pose
                    .and_then(|a| EvalPoseReport::of(given_scores(&scores), a.steps, a.lr));
            }
            let scores = evaluate_views(
                &pack,
                &mut trainer,
                &train_eval_views,
                &opts.out,
                "train",
                Scoring {
                    images: 0,
                    align: None,
                    color_correct: None,
                },
                &mut gt,
            )?;
            train_scores = report::mean_scores(&scores);
        }
        let peak = peak_rss_bytes();
        // The regularisers' weights in effect, as written (0.01 rather than its f32 widening).
        let regularisers = {
            let (o, s) = match &config.mcmc {
                Some(m) => (m.opacity_reg, m.scale_reg),
                None => (config.densify.opacity_reg, config.densify.scale_reg),
            };
            let widen = |w: f32| w.to_string().parse().unwrap_or(f64::NAN);
            (widen(o), widen(s))
        };
        let report = Report {
            test_psnr: test.0,
            test_ssim: test.1,
            test_views: test.2,
            color_corrected,
            train_psnr: train_scores.0,
            train_ssim: train_scores.1,
            iterations: it,
            iterations_per_s: if train_s > 0.0 {
                steps as f64 / train_s
            } else {
                0.0
            },
            num_gaussians: trainer.num_gaussians() as u64,
            peak_rss_bytes: peak,
            ram_budget_bytes: opts.ram_budget,
            peak_device_bytes: trainer.devices().iter().map(|d| d.usage().peak).max(),
            within_budget: within_budget(peak, opts.ram_budget),
            stall_fraction: if train_s > 0.0 {
                (loader_stats.stall_seconds / train_s).min(1.0)
            } else {
                0.0
            },
            cache_hit_rate,
            floor_bytes,
            cache_bytes,
            backend: backend_name,
            rasterize_mode: crate::render::rasterize_mode_name(config.antialiased).to_owned(),
            filter_3d: config.filter_3d,
            densification: Some(
                match (config.mcmc.is_some(), config.uses_absgrad()) {
                    (true, _) => "mcmc",
                    (false, true) => "absgrad",
                    (false, false) => "default",
                }
                .to_owned(),
            ),
            densify_grad_threshold: config
                .mcmc
                .is_none()
                // Through its shortest decimal form, so 8e-4 reads 0.0008, not 0.00080000004.
                .then(|| {
                    config
                        .densify
                        .grad_threshold
                        .to_string()
                        .parse()
                        .unwrap_or(f64::NAN)
                }),
            revised_opacity: config.mcmc.is_none() && config.densify.revised_opacity,
            sky_points: opts.sky_points as u64,
            opacity_reg: regularisers.0,
            scale_reg: regularisers.1,
            optimizer: Some(
                if config.adam.sparse {
                    "sparse_adam"
                } else {
                    "adam"
                }
                .to_owned(),
            ),
            prune_screen_radius: config
                .densify
                .prune_screen_radius
                .filter(|_| config.mcmc.is_none()),
            exposure: config.exposure.is_some(),
            bilateral_grid: config.bilagrid.as_ref().map(|b| b.shape.to_string()),
            pose: pose_report(&trainer, &train_views, on_event),
            eval_pose,
            phase_ms: phase_report(
                &profile,
                &profile_windows,
                profile_done,
                start_step,
                &trainer,
                on_event,
            ),
            wall_s: started.elapsed().as_secs_f64(),
            train_s,
            seed: config.seed,
            resumed_from,
            interrupted,
            pack: opts.pack.display().to_string(),
            pack_id,
            point_clouds,
        };
        let rows = report::read_metrics(metrics.path())?;
        super::report::write_curves(&opts.out, &rows)?;
        let report_path = report::write_report(&opts.out, &report)?;
        Ok(RunOutcome {
            report,
            report_path,
            interrupted,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--sky-points` gives a run its far field from the pack's cameras, and refuses a pack
    /// whose cameras share one position (no extent to place the sky by).
    #[test]
    fn sky_points_need_a_scene_extent() {
        let dir = tempfile::tempdir().unwrap();
        crate::synth::packs::write_tiny_pack(dir.path()).unwrap();
        let pack = Pack::open(dir.path()).unwrap();
        let mut opts = RunOptions::new(dir.path(), &dir.path().join("out"));
        let mut manifest = pack.manifest().clone();
        assert_eq!(far_field(&opts, &manifest).unwrap(), None);
        opts.sky_points = 10;
        let s = &manifest.scene;
        let field = far_field(&opts, &manifest).unwrap().unwrap();
        assert_eq!(field.centre, s.camera_centroid);
        assert_eq!(field.radius, 5.0 * s.extent);
        manifest.scene.extent = 0.0;
        let e = far_field(&opts, &manifest).unwrap_err().to_string();
        assert!(e.contains("extent 0") && e.contains("--sky-points"), "{e}");
    }
}
