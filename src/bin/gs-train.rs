//! `gs-train`: train a 3D Gaussian Splatting model from a pack under a RAM budget, or run the
//! embedded demo. Thin: the run lives in `ramsplat::train::run`, the demo in
//! `ramsplat::train::demo`.
//!
//! ```text
//! gs-train PACK -o OUT [--ram-budget 4G] [--iterations 30000] [--backend auto|cpu|cuda] [--devices N]
//!          [--eval] [--resume [--extend] | --init MODEL] [--seed S] [--sh-degree 3] [--test-iterations N...]
//!          [--save-iterations N...] [--checkpoint-iterations N...] [--checkpoint-every N]
//!          [--overwrite] [--max-gaussians N] [--random-background | --white-background] [--workers N] [--prefetch N]
//!          [--export spz,splat,compressed-ply,sog] [--dry-run] [--strategy default|mcmc]
//!          [--color-correct-metric affine|quadratic]
//!          [3DGS's optimisation parameters: --position-lr-init LR … --densify-until-iter N]
//! gs-train --demo [-o OUT] [the options above but PACK]
//! ```
//!
//! Exit codes: 0 success; 1 failure (the message says why and what to change); 2 invalid
//! command line; 3 the requested backend is not available; 130 interrupted by Ctrl-C, SIGTERM
//! or SIGHUP after writing a checkpoint (continue with `--resume`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser};

use ramsplat::budget::format_size;
use ramsplat::cli::parse_size_arg;
use ramsplat::cli::{print_stdout, report_error, Progress, EXIT_FAILURE};
use ramsplat::color_correct::ColorCorrection;
use ramsplat::export::ModelFormat;
use ramsplat::train::bilagrid::{BilagridConfig, GridShape};
use ramsplat::train::demo;
use ramsplat::train::densify::DensifyConfig;
use ramsplat::train::depth::DepthWeights;
use ramsplat::train::exposure::ExposureConfig;
use ramsplat::train::mcmc::McmcConfig;
use ramsplat::train::pose::{PoseAlignConfig, PoseConfig};
use ramsplat::train::run::{self, Backend, Event, RunError, RunOptions};
use ramsplat::train::trainer::{scale_step_list, Background};
use ramsplat::train::TrainConfig;

/// Exit code when the requested backend does not exist here.
const EXIT_BACKEND: u8 = 3;
/// Exit code after Ctrl-C (128 + SIGINT, the shell convention), once the checkpoint is written.
const EXIT_INTERRUPTED: u8 = 130;

/// Train a 3D Gaussian Splatting model from a ramsplat pack, within a RAM budget.
#[derive(Parser, Debug)]
#[command(
    name = "gs-train",
    version,
    after_help = "Sizes: 4G = 4GiB = 4·2^30 bytes; 4GB = 4·10^9 bytes; plain numbers are bytes.\n\
                  Exit codes: 0 success, 1 failure, 2 invalid command line, 3 backend not \
                  available, 130 interrupted by Ctrl-C, SIGTERM or SIGHUP (a checkpoint was written; continue with \
                  --resume)."
)]
struct Args {
    /// The pack to train on (from `gs-pack convert`).
    #[arg(required_unless_present = "demo", conflicts_with = "demo")]
    pack: Option<PathBuf>,
    /// Output directory (models, checkpoints, metrics, report). Default with --demo:
    /// ./gs-train-demo.
    #[arg(short, long, required_unless_present = "demo")]
    output: Option<PathBuf>,
    /// Synthesize a small scene, pack it to a temporary directory, train and evaluate it.
    /// Takes the other training options (left out: the demo's seed 7, SH degree 0, 3,000
    /// iterations with a schedule scaled to them); continue an interrupted demo with --resume.
    #[arg(long)]
    demo: bool,
    /// Cap on the process's peak resident memory.
    #[arg(long, default_value = "4G", value_parser = parse_size_arg)]
    ram_budget: u64,
    /// Training iterations (default 30000; with --demo, the demo's own short schedule).
    #[arg(long)]
    iterations: Option<u64>,
    /// Scale every step count by F (gsplat's --steps_scaler): the iterations, the test, save
    /// and checkpoint iterations, the SH degree interval, densification's start, stop,
    /// interval and opacity reset (MCMC's refinement schedule), and the learning-rate
    /// schedules' lengths given; each truncated, intervals at least 1. 0.25: a 7,500-iteration
    /// run with 3DGS's whole schedule compressed into it.
    #[arg(long, alias = "steps_scaler", value_name = "F", value_parser = positive_f64, conflicts_with = "demo")]
    steps_scaler: Option<f64>,
    /// `cpu`: the CPU engine. `cuda`: the device engine (model, optimizer and loss on the GPU;
    /// under GS_CUDA_EMULATE=1 the host emulation runs the same kernels). `auto`: cuda when a
    /// usable GPU is found, else cpu.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Split the model over N devices (GPUs 0..N; N emulated devices under
    /// GS_CUDA_EMULATE=1): each holds 1/N of the Gaussians and renders every N-th view from
    /// all of them, so a larger model fits (each device also holds 136 B per Gaussian of the
    /// whole model's splats: 4 devices hold about 3× one device's model). Needs the cuda
    /// backend (auto: GPUs only).
    #[arg(long, value_name = "N", default_value_t = 1)]
    devices: usize,
    /// Cap on the device memory the CUDA engine plans for (model, views, intersections; on
    /// each device with --devices); densification stops growing at it. Default: the device's
    /// free memory minus a margin.
    #[arg(long, value_parser = parse_size_arg)]
    vram_budget: Option<u64>,
    /// Hold out the pack's test views; evaluate them at --test-iterations and at the end.
    #[arg(long)]
    eval: bool,
    /// Continue from OUT/checkpoints/latest (same pack and options as the original run).
    #[arg(long)]
    resume: bool,
    /// With --resume: train past the run's planned end, to --iterations N (more than it
    /// planned). The position learning rate keeps its schedule (at its final value after the
    /// original end, as 3DGS past 30,000), densification and the SH schedule are unchanged;
    /// optimizer state, RNG and loader position continue exactly.
    #[arg(long, requires = "resume")]
    extend: bool,
    /// Start from this 3DGS model (.ply, .spz, .splat, .compressed.ply or .sog; stored pre-activation values, an
    /// activated PLY is refused) instead of the pack's points: fine-tune or continue another
    /// run. --max-gaussians subsamples it (stratified, seeded); --sh-degree converts it (extra
    /// bands dropped, missing bands start at 0); the SH schedule starts at its degree.
    #[arg(long, value_name = "MODEL", conflicts_with = "resume")]
    init: Option<PathBuf>,
    /// Start with N sky points beside the pack's points: spread evenly over a sphere ten scene
    /// extents from the cameras' centroid, so what lies beyond the scene (sky, distant
    /// landscape) is learned far away instead of as haze in front of views the training
    /// cameras did not see. Gaussians that far out are never densified or pruned for their
    /// size (the rules in scene units would multiply or delete the sky). For outdoor and
    /// unbounded captures; give the same N to --resume. Counted in --max-gaussians.
    #[arg(long, value_name = "N", conflicts_with = "init")]
    sky_points: Option<usize>,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, alias = "sh_degree", default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=3))]
    sh_degree: u32,
    /// Evaluate the test views at these iterations (with --eval).
    #[arg(long, alias = "test_iterations", num_args = 1.., value_name = "N", default_values_t = [7_000u64, 30_000])]
    test_iterations: Vec<u64>,
    /// Save point_cloud/iteration_N/point_cloud.ply at these iterations (the last always).
    #[arg(long, alias = "save_iterations", num_args = 1.., value_name = "N", default_values_t = [7_000u64, 30_000])]
    save_iterations: Vec<u64>,
    /// Also write the model as SPZ, .splat, PlayCanvas compressed PLY and/or PlayCanvas SOG
    /// beside each saved PLY (point_cloud/iteration_N/point_cloud.spz, .splat, .compressed.ply,
    /// .sog; .splat keeps SH degree 0 only; compressed-ply may also be spelled compressed_ply).
    #[arg(long, value_delimiter = ',', value_name = "spz,splat,compressed-ply,sog", value_parser = parse_format)]
    export: Vec<ModelFormat>,
    /// Write a checkpoint at these iterations (the last, and Ctrl-C, always).
    #[arg(long, alias = "checkpoint_iterations", num_args = 1.., value_name = "N")]
    checkpoint_iterations: Vec<u64>,
    /// Also write a checkpoint every N iterations, keeping the newest 3 of these (0: off).
    #[arg(long, value_name = "N", default_value_t = run::DEFAULT_CHECKPOINT_EVERY)]
    checkpoint_every: u64,
    /// Start afresh in an -o holding another run: deletes that run's outputs (checkpoints,
    /// point clouds, metrics, report, charts, test images) and nothing else.
    #[arg(long, conflicts_with = "resume")]
    overwrite: bool,
    /// Cap on the model: more SfM points than N are subsampled to N (spread over the scene,
    /// seeded), and densification never grows past N. Required by --strategy mcmc, where the
    /// model is reserved at N from the start.
    #[arg(long, value_name = "N")]
    max_gaussians: Option<usize>,
    /// Densification: `default` (3DGS clone/split/prune; the model grows as the scene asks)
    /// or `mcmc` (3DGS-MCMC: relocation of dead Gaussians, growth toward --max-gaussians N
    /// and never past it).
    #[arg(long, value_enum, default_value = "default")]
    strategy: Strategy,
    #[command(flatten)]
    resolution: ramsplat::cli::ResolutionArgs,
    /// Print the memory plan (every item with its formula, the cache's share and the expected
    /// cache hit rate) and exit without training: 0 if the run would start, 1 if the budget
    /// is below the floor. Writes nothing.
    #[arg(long)]
    dry_run: bool,
    /// Train on a random background colour each iteration (views packed with alpha are
    /// composited over the same colour the render uses).
    #[arg(long, alias = "random_background", conflicts_with = "white_background")]
    random_background: bool,
    /// Train on a white background (views packed with alpha are composited over white).
    #[arg(long, alias = "white_background")]
    white_background: bool,
    /// Antialiased rasterization (Mip-Splatting's 2D filter, gsplat's --antialiased): each
    /// splat's opacity is scaled by its low-pass filter's energy, so the model stays right when
    /// rendered at other resolutions or distances. The saved models say so (PLY comment, SPZ
    /// flag) and gs-render renders them that way.
    #[arg(long)]
    antialiased: bool,
    /// Mip-Splatting's 3D smoothing filter: each Gaussian is drawn convolved with a 3D
    /// Gaussian as wide as the finest sampling any training camera has at it, so none grows
    /// thinner than the photos could show, and renders closer than the training views
    /// (zooming in) stay free of its high-frequency artefacts. The filter follows the model
    /// (set from the training cameras every step); saved models hold it folded into their
    /// scales and opacities, so any 3DGS renderer draws them as trained. Mip-Splatting pairs it
    /// with its 2D filter: add --antialiased for that.
    #[arg(long, alias = "filter_3d")]
    filter_3d: bool,
    /// Per-view exposure compensation (3DGS's --train_test_exp): each view learns a 3×4
    /// colour transform applied to its render before the loss, absorbing exposure and white
    /// balance that change from photo to photo (which would otherwise grow floaters).
    /// OUT/exposure.json holds the matrices (3DGS's layout); their mean is kept at the
    /// identity, so the saved model alone renders the scene at the views' mean exposure. With
    /// --eval the held-out views train their left halves, so their exposures are learned too,
    /// and are scored on their right halves, as 3DGS does.
    #[arg(long, visible_alias = "train-test-exp", alias = "train_test_exp")]
    exposure: bool,
    /// Per-view bilateral grids (gsplat's --use_bilateral_grid, now --post_processing
    /// bilateral_grid): each training view learns a grid of 3×4 colour transforms over its
    /// image and its brightness (16×16×8 cells), through which its render passes before the
    /// loss: what a camera's processing does locally (tone mapping, vignetting, white balance
    /// by region) is absorbed there, not by floaters. Smoothed by a total variation term;
    /// gsplat's optimizer and schedule. Held-out views are scored without one (compare with
    /// colour-corrected scores). Not with --exposure.
    #[arg(
        long,
        visible_alias = "use-bilateral-grid",
        alias = "use_bilateral_grid",
        conflicts_with = "exposure"
    )]
    bilateral_grid: bool,
    /// The grids' cells across, down and over brightness (gsplat's bilateral_grid_shape;
    /// default 16,16,8). Also as three values, as gsplat's command line takes it: 16 16 8.
    #[arg(
        long,
        alias = "bilateral_grid_shape",
        value_name = "X,Y,L",
        num_args = 1..=3,
        requires = "bilateral_grid"
    )]
    bilateral_grid_shape: Option<Vec<String>>,
    /// Weight of the depth regularization at the start of the run (3DGS's
    /// depth_l1_weight_init, 1.0; 0.01 on SfM depths). Depth regularization is on whenever the
    /// pack carries monocular inverse-depth maps (gs-pack convert --depths, 3DGS's -d): each
    /// such view adds weight × mean |rendered inverse depth − its map| to the loss; or SfM
    /// depths (gs-pack convert --sfm-depths, gsplat's --depth_loss): weight × scene extent ×
    /// mean over the view's observed points of |rendered inverse depth − 1/depth|. 0 turns it
    /// off
    #[arg(long, alias = "depth_l1_weight_init", value_name = "W", value_parser = non_negative_f64)]
    depth_l1_weight_init: Option<f64>,
    /// Weight of the depth regularization at the end of the run (3DGS's
    /// depth_l1_weight_final, 0.01; 0.01 on SfM depths); it decays exponentially from the
    /// initial weight.
    #[arg(long, alias = "depth_l1_weight_final", value_name = "W", value_parser = positive_f64)]
    depth_l1_weight_final: Option<f64>,
    /// A constant depth weight, both ends of the schedule above (gsplat's depth_lambda, whose
    /// default 0.01 is what SfM depths train with). 0 turns depth regularization off
    #[arg(
        long,
        alias = "depth_lambda",
        value_name = "W",
        value_parser = non_negative_f64,
        conflicts_with_all = ["depth_l1_weight_init", "depth_l1_weight_final"]
    )]
    depth_lambda: Option<f64>,
    /// Camera pose optimisation (gsplat's --pose_opt): each training view learns a small
    /// rigid correction of its pose with the model, absorbing misregistration of the
    /// structure-from-motion poses. OUT/cameras.json then gives the trained poses; held-out
    /// views keep the dataset's. Off by default, as in gsplat.
    #[arg(long, alias = "pose_opt")]
    pose_opt: bool,
    /// Perturb every training camera once by a seeded N(0, σ²) draw per coordinate
    /// (radians, and translations in units of the cameras' distance from their centre):
    /// gsplat's --pose_noise, to measure what --pose-opt recovers. report.json gives the
    /// error left.
    #[arg(long, alias = "pose_noise", value_name = "SIGMA", value_parser = unit_f64)]
    pose_noise: Option<f64>,
    /// With --eval: before each held-out view is scored, fit its pose to its image in N steps
    /// with the model frozen (test-time pose alignment, the fair score of a model trained
    /// with --pose-opt, whose cameras moved a little). The test scores are then from the
    /// aligned poses; report.json's eval_pose and the log give the scores from the dataset's
    /// poses beside. Each step costs a render and its backward per held-out view; 100 is a
    /// good start.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    eval_pose_steps: Option<u32>,
    /// Learning rate of that alignment (default 0.001, decaying to 1 % over the steps).
    #[arg(long, value_name = "LR", value_parser = positive_f64)]
    eval_pose_lr: Option<f64>,
    /// With --eval: also score each held-out view after fitting its render's colours to its
    /// ground truth (gsplat's colour-corrected metrics cc_psnr, cc_ssim): `affine`, a gain
    /// and offset per channel (gsplat's default), or `quadratic`, multinerf's quadratic fit
    /// over unclipped pixels. For comparing models that learn a per-view appearance
    /// (--exposure, gsplat's bilateral grid), which held-out views cannot use. report.json
    /// adds test_cc_psnr, test_cc_ssim and color_correct_method; each view's metrics.json
    /// cc_psnr, cc_ssim.
    #[arg(
        long,
        value_enum,
        value_name = "METHOD",
        conflicts_with = "use_color_correction_metric"
    )]
    color_correct_metric: Option<ColorCorrection>,
    /// gsplat's spelling of --color-correct-metric: on, with --color-correct-method's method.
    #[arg(long, alias = "use_color_correction_metric")]
    use_color_correction_metric: bool,
    /// The method of --use-color-correction-metric (gsplat's color_correct_method; default
    /// affine).
    #[arg(
        long,
        alias = "color_correct_method",
        value_enum,
        value_name = "METHOD"
    )]
    color_correct_method: Option<ColorCorrection>,
    /// AbsGS densification (gsplat's --absgrad): the clone/split statistic sums the absolute
    /// per-pixel gradients of each Gaussian's 2D mean, so one blurring fine detail, whose
    /// pixels pull it different ways, is split too. Raises the default
    /// --densify-grad-threshold to 0.0008. Default strategy only.
    #[arg(long)]
    absgrad: bool,
    /// Clone/split a Gaussian where the gradient of its 2D mean (NDC units), averaged over
    /// the views that saw it, reaches this (3DGS's densify_grad_threshold, gsplat's
    /// grow_grad2d). Lower: more Gaussians. Default 0.0002, or 0.0008 with --absgrad. Default
    /// strategy only.
    #[arg(long, alias = "densify_grad_threshold", value_name = "G")]
    densify_grad_threshold: Option<f32>,
    /// Split children start at opacity 1 − √(1 − o) instead of their parent's o (gsplat's
    /// --revised_opacity), so the pair covers what the parent covered instead of more.
    /// Default strategy only.
    #[arg(long)]
    revised_opacity: bool,
    /// gsplat's --opacity_reg: the loss gains W · mean opacity, which pushes Gaussians toward
    /// transparency so that fewer of them explain the views (densification prunes the ones
    /// it empties). Default 0, or 0.01 with --strategy mcmc (gsplat's MCMC preset).
    #[arg(long, alias = "opacity_reg", value_name = "W", value_parser = non_negative_f32)]
    opacity_reg: Option<f32>,
    /// gsplat's --scale_reg: the loss gains W · mean scale (over the three axes of every
    /// Gaussian), which keeps Gaussians from growing large. Default 0, or 0.01 with
    /// --strategy mcmc.
    #[arg(long, alias = "scale_reg", value_name = "W", value_parser = non_negative_f32)]
    scale_reg: Option<f32>,
    /// From the first opacity reset on, prune Gaussians whose screen radius passed PX pixels
    /// since the last densification (the 3DGS paper's rule, with 20). Default `off`, as in
    /// 3DGS's code (where the rule never fires) and gsplat. The threshold is in pixels, so it
    /// prunes more of a model the larger the views. Default strategy only.
    #[arg(long, value_name = "PX|off", value_parser = parse_screen_radius)]
    prune_screen_radius: Option<ScreenRadius>,
    /// The Gaussians' optimizer (3DGS's --optimizer_type): `default`, Adam over every
    /// Gaussian each step; `sparse_adam`, Adam over the Gaussians the step's view sees
    /// (screen radius > 0) only, without bias correction, as 3DGS's sparse_adam and gsplat's
    /// --visible_adam: a Gaussian out of view keeps its parameters and momentum, and a step
    /// touches only the visible part of the model.
    #[arg(long, alias = "optimizer_type", value_enum, default_value = "default")]
    optimizer_type: OptimizerType,
    /// Decoding threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Views decoded ahead of the trainer.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Append a metrics.jsonl row every N iterations.
    #[arg(long, default_value_t = 100, value_name = "N")]
    metrics_every: u64,
    /// Time each part of N steps after the first 100 (upload, render, loss, backward,
    /// statistics, optimizer): their medians go to the log and to report.json's `phase_ms`. On
    /// a GPU the device queue's time by CUDA events, each part from the previous one's end (so
    /// the parts add up to the step), as tools/gsplat_train.py times gsplat's; each profiled
    /// step then waits for its queue at its end. One device only
    #[arg(long, default_value_t = 0, value_name = "N")]
    profile_steps: u64,
    /// With --profile-steps N: profile N steps from each of these iterations instead (ascending,
    /// each window after the previous one ends; not scaled by --steps-scaler), one entry of
    /// report.json's `phase_ms` each, with the model's size and the render's intersections
    /// then: e.g. `--profile-at 101 2801 3101 6801` around 3DGS's first opacity reset and
    /// before its 7,000-iteration evaluation
    #[arg(long, num_args = 1.., value_name = "ITER")]
    profile_at: Vec<u64>,
    #[command(flatten)]
    optim: OptimArgs,
}

/// 3DGS's optimisation parameters (its `train.py` options, which are also accepted as 3DGS
/// spells them: `--densify_until_iter 10000` is `--densify-until-iter 10000`, as for every
/// option gs-train shares with 3DGS). Left out: the 3DGS defaults.
#[derive(clap::Args, Debug)]
#[command(next_help_heading = "3DGS optimisation parameters")]
struct OptimArgs {
    /// Learning rate of the positions at the start, times the scene extent (3DGS 0.00016).
    #[arg(long, alias = "position_lr_init", value_name = "LR", value_parser = positive_f64)]
    position_lr_init: Option<f64>,
    /// Learning rate of the positions at the end of their schedule, times the scene extent
    /// (3DGS 0.0000016); log-linear in between.
    #[arg(long, alias = "position_lr_final", value_name = "LR", value_parser = positive_f64)]
    position_lr_final: Option<f64>,
    /// Length of the position schedule (default: --iterations; after it the final rate).
    #[arg(long, alias = "position_lr_max_steps", value_name = "N", value_parser = at_least_one)]
    position_lr_max_steps: Option<u64>,
    /// Learning rate of the SH DC colour (3DGS 0.0025; the higher bands get 1/20 of it).
    #[arg(long, alias = "feature_lr", value_name = "LR", value_parser = positive_f64)]
    feature_lr: Option<f64>,
    /// Learning rate of the opacity logits (3DGS 0.025).
    #[arg(long, alias = "opacity_lr", value_name = "LR", value_parser = positive_f64)]
    opacity_lr: Option<f64>,
    /// Learning rate of the log-scales (3DGS 0.005).
    #[arg(long, alias = "scaling_lr", value_name = "LR", value_parser = positive_f64)]
    scaling_lr: Option<f64>,
    /// Learning rate of the rotation quaternions (3DGS 0.001).
    #[arg(long, alias = "rotation_lr", value_name = "LR", value_parser = positive_f64)]
    rotation_lr: Option<f64>,
    /// Weight W of D-SSIM in the loss, (1 − W)·L1 + W·D-SSIM (3DGS 0.2).
    #[arg(long, alias = "lambda_dssim", value_name = "W", value_parser = unit_f32)]
    lambda_dssim: Option<f32>,
    /// Clone (small) / split (large) boundary, as a fraction of the scene extent (3DGS 0.01).
    /// Default strategy only.
    #[arg(long, alias = "percent_dense", value_name = "F", value_parser = positive_f32)]
    percent_dense: Option<f32>,
    /// Densify every N iterations (3DGS 100). With --strategy mcmc: relocate and grow every N.
    #[arg(long, alias = "densification_interval", value_name = "N", value_parser = at_least_one)]
    densification_interval: Option<u64>,
    /// Cap every opacity every N iterations (3DGS 3000). Default strategy only.
    #[arg(long, alias = "opacity_reset_interval", value_name = "N", value_parser = at_least_one)]
    opacity_reset_interval: Option<u64>,
    /// Densify from this iteration on (3DGS 500). With --strategy mcmc: relocate and grow
    /// from it (gsplat's MCMC default 500).
    #[arg(long, alias = "densify_from_iter", value_name = "N")]
    densify_from_iter: Option<u64>,
    /// Densify until this iteration (3DGS 15000). With --strategy mcmc: relocate and grow
    /// until it (gsplat's MCMC default 25000).
    #[arg(long, alias = "densify_until_iter", value_name = "N")]
    densify_until_iter: Option<u64>,
    /// Learning rate of the exposure matrices at the start (3DGS 0.01; 0.001 for scenes whose
    /// exposure varies much, with the three below). Needs --exposure.
    #[arg(long, alias = "exposure_lr_init", value_name = "LR", value_parser = positive_f64)]
    exposure_lr_init: Option<f64>,
    /// Learning rate of the exposure matrices at the end of the run (3DGS 0.001).
    #[arg(long, alias = "exposure_lr_final", value_name = "LR", value_parser = positive_f64)]
    exposure_lr_final: Option<f64>,
    /// Ramp the exposure learning rate up over the first N iterations (3DGS 0: no ramp).
    #[arg(long, alias = "exposure_lr_delay_steps", value_name = "N")]
    exposure_lr_delay_steps: Option<u64>,
    /// Fraction of the exposure learning rate at iteration 0 of that ramp (3DGS 0).
    #[arg(long, alias = "exposure_lr_delay_mult", value_name = "F", value_parser = unit_f64)]
    exposure_lr_delay_mult: Option<f64>,
    /// Learning rate of the pose corrections (gsplat 1e-5; it decays to 1 % over the run).
    /// Needs --pose-opt.
    #[arg(long, alias = "pose_opt_lr", value_name = "LR", value_parser = positive_f64)]
    pose_opt_lr: Option<f64>,
    /// Weight decay of the pose corrections (gsplat 1e-6). Needs --pose-opt.
    #[arg(long, alias = "pose_opt_reg", value_name = "R", value_parser = non_negative_f64)]
    pose_opt_reg: Option<f64>,
}

impl OptimArgs {
    /// Sets what was given on `c` (after the strategy is chosen: the schedule flags move the
    /// MCMC schedule under --strategy mcmc).
    fn apply(&self, c: &mut TrainConfig) {
        let set = |v: Option<f64>, f: &mut f64| {
            if let Some(v) = v {
                *f = v;
            }
        };
        set(self.position_lr_init, &mut c.position_lr_init);
        set(self.position_lr_final, &mut c.position_lr_final);
        set(self.feature_lr, &mut c.feature_lr);
        set(self.opacity_lr, &mut c.opacity_lr);
        set(self.scaling_lr, &mut c.scaling_lr);
        set(self.rotation_lr, &mut c.rotation_lr);
        if let Some(n) = self.position_lr_max_steps {
            c.position_lr_max_steps = Some(n);
        }
        if let Some(l) = self.lambda_dssim {
            c.lambda_dssim = l;
        }
        if let Some(p) = self.percent_dense {
            c.densify.percent_dense = p;
        }
        if let Some(n) = self.opacity_reset_interval {
            c.densify.opacity_reset_interval = n;
        }
        let d = &mut c.densify;
        let (from, until, every) = match &mut c.mcmc {
            Some(m) => (
                &mut m.refine_start_iter,
                &mut m.refine_stop_iter,
                &mut m.refine_every,
            ),
            None => (&mut d.from_iter, &mut d.until_iter, &mut d.interval),
        };
        for (v, f) in [
            (self.densify_from_iter, from),
            (self.densify_until_iter, until),
            (self.densification_interval, every),
        ] {
            if let Some(v) = v {
                *f = v;
            }
        }
        if let Some(p) = &mut c.pose {
            set(self.pose_opt_lr, &mut p.lr);
            set(self.pose_opt_reg, &mut p.reg);
        }
        if let Some(e) = &mut c.exposure {
            set(self.exposure_lr_init, &mut e.lr_init);
            set(self.exposure_lr_final, &mut e.lr_final);
            set(self.exposure_lr_delay_mult, &mut e.lr_delay_mult);
            if let Some(n) = self.exposure_lr_delay_steps {
                e.lr_delay_steps = n;
            }
        }
    }

    /// The first pose optimizer setting given, by its flag (they need --pose-opt).
    fn pose_flag(&self) -> Option<&'static str> {
        [
            (self.pose_opt_lr.is_some(), "--pose-opt-lr"),
            (self.pose_opt_reg.is_some(), "--pose-opt-reg"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }

    /// The first exposure setting given, by its flag (they need --exposure).
    fn exposure_flag(&self) -> Option<&'static str> {
        [
            (self.exposure_lr_init.is_some(), "--exposure-lr-init"),
            (self.exposure_lr_final.is_some(), "--exposure-lr-final"),
            (
                self.exposure_lr_delay_steps.is_some(),
                "--exposure-lr-delay-steps",
            ),
            (
                self.exposure_lr_delay_mult.is_some(),
                "--exposure-lr-delay-mult",
            ),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number ≥ 0")),
    }
}

fn non_negative_f32(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a number ≥ 0 (and below 3.4e38)")),
    }
}

fn positive_f32(s: &str) -> Result<f32, String> {
    positive_f64(s).map(|v| v as f32)
}

fn unit_f32(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a weight from 0 to 1")),
    }
}

fn unit_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a fraction from 0 to 1")),
    }
}

fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

/// The densification strategy of `--strategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Strategy {
    Default,
    Mcmc,
}

/// The Gaussians' optimizer of `--optimizer-type` (3DGS's spellings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum OptimizerType {
    Default,
    #[value(name = "sparse_adam", alias = "sparse-adam")]
    SparseAdam,
}

/// `--prune-screen-radius`: a radius in pixels, or `off`.
#[derive(Clone, Copy, Debug)]
struct ScreenRadius(Option<u32>);

fn parse_screen_radius(s: &str) -> Result<ScreenRadius, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(ScreenRadius(None));
    }
    match s.parse::<u32>() {
        Ok(px) if px > 0 => Ok(ScreenRadius(Some(px))),
        _ => Err(format!(
            "{s:?} is neither a radius in pixels (a whole number above 0; 3DGS uses 20) nor `off`"
        )),
    }
}

fn parse_format(s: &str) -> Result<ModelFormat, String> {
    ModelFormat::from_name(s).ok_or_else(|| {
        format!("{s:?} is not a model format (spz, splat, compressed-ply, sog, ply)")
    })
}

/// The run `args` ask for, training on `pack` into `out` (`iterations` when `--iterations` is
/// not given).
fn options(args: &Args, pack: &Path, out: &Path, iterations: u64) -> Result<RunOptions> {
    if args.metrics_every == 0 {
        bail!("--metrics-every must be at least 1");
    }
    let resolution = args.resolution.resize().map_err(anyhow::Error::msg)?;
    let mut config = TrainConfig {
        iterations: args.iterations.unwrap_or(iterations),
        resolution,
        seed: args.seed,
        sh_degree: args.sh_degree,
        ..TrainConfig::default()
    };
    if let Some(n) = args.max_gaussians {
        config.densify.max_gaussians = n;
    }
    if args.strategy == Strategy::Mcmc {
        let Some(n) = args.max_gaussians else {
            bail!(
                "--strategy mcmc keeps the model at a fixed size: give it with --max-gaussians N \
                 (e.g. the Gaussian count a default run reaches, or what --dry-run says fits the \
                 budget)"
            );
        };
        config.mcmc = Some(McmcConfig::with_cap(n));
        for (given, flag) in [
            (args.absgrad, "--absgrad"),
            (
                args.densify_grad_threshold.is_some(),
                "--densify-grad-threshold",
            ),
            (args.revised_opacity, "--revised-opacity"),
            (args.prune_screen_radius.is_some(), "--prune-screen-radius"),
            (args.optim.percent_dense.is_some(), "--percent-dense"),
            (
                args.optim.opacity_reset_interval.is_some(),
                "--opacity-reset-interval",
            ),
        ] {
            if given {
                bail!(
                    "{flag} tunes how the default strategy clones, splits and prunes; \
                     --strategy mcmc does none of that (it relocates dead Gaussians by \
                     opacity): drop one of the two"
                );
            }
        }
    }
    config.densify.absgrad = args.absgrad;
    config.densify.revised_opacity = args.revised_opacity;
    // The regularisers' weights go to the strategy that runs; MCMC keeps gsplat's 0.01 unless
    // told otherwise.
    let (opacity_reg, scale_reg) = match &mut config.mcmc {
        Some(m) => (&mut m.opacity_reg, &mut m.scale_reg),
        None => (
            &mut config.densify.opacity_reg,
            &mut config.densify.scale_reg,
        ),
    };
    if let Some(w) = args.opacity_reg {
        *opacity_reg = w;
    }
    if let Some(w) = args.scale_reg {
        *scale_reg = w;
    }
    config.adam.sparse = args.optimizer_type == OptimizerType::SparseAdam;
    if let Some(ScreenRadius(px)) = args.prune_screen_radius {
        config.densify.prune_screen_radius = px;
    }
    if args.absgrad {
        config.densify.grad_threshold = DensifyConfig::ABSGRAD_GRAD_THRESHOLD;
    }
    if let Some(g) = args.densify_grad_threshold {
        if !(g.is_finite() && g > 0.0) {
            bail!(
                "--densify-grad-threshold {g} must be a positive number (3DGS uses 0.0002, \
                 gsplat suggests 0.0006 to 0.0008 with --absgrad)"
            );
        }
        config.densify.grad_threshold = g;
    }
    if args.random_background {
        config.background = Background::Random;
    }
    if args.white_background {
        config.background = Background::White;
    }
    config.antialiased = args.antialiased;
    config.filter_3d = args.filter_3d;
    if args.exposure {
        config.exposure = Some(ExposureConfig::default());
    } else if let Some(flag) = args.optim.exposure_flag() {
        bail!("{flag} sets how the exposure matrices learn: add --exposure, or drop it");
    }
    if args.bilateral_grid {
        config.bilagrid = Some(BilagridConfig {
            shape: match &args.bilateral_grid_shape {
                Some(parts) => GridShape::parse(&parts.join(","))
                    .map_err(|e| anyhow::anyhow!("--bilateral-grid-shape: {e}"))?,
                None => GridShape::default(),
            },
            ..BilagridConfig::default()
        });
    }
    let pose_noise = args.pose_noise.filter(|&n| n > 0.0);
    if args.pose_opt || pose_noise.is_some() {
        config.pose = Some(PoseConfig {
            optimize: args.pose_opt,
            noise: pose_noise.unwrap_or(0.0),
            ..PoseConfig::default()
        });
    }
    if !args.pose_opt {
        if let Some(flag) = args.optim.pose_flag() {
            bail!("{flag} sets how the camera poses learn: add --pose-opt, or drop it");
        }
    }
    args.optim.apply(&mut config);
    let mut o = RunOptions::new(pack, out);
    o.ram_budget = args.ram_budget;
    o.config = config;
    o.backend = args.backend;
    o.devices = args.devices;
    o.vram_budget = args.vram_budget;
    o.eval = args.eval;
    o.eval_pose = match (args.eval_pose_steps, args.eval_pose_lr) {
        (Some(_), _) if !(args.eval || args.demo) => bail!(
            "--eval-pose-steps aligns the held-out views' poses before scoring them: add \
             --eval, or drop it"
        ),
        (Some(steps), lr) => Some(PoseAlignConfig {
            steps,
            lr: lr.unwrap_or(PoseAlignConfig::default().lr),
        }),
        (None, Some(_)) => bail!(
            "--eval-pose-lr sets how the held-out poses are aligned: add --eval-pose-steps N, \
             or drop it"
        ),
        (None, None) => None,
    };
    o.color_correct = match (
        args.color_correct_metric,
        args.use_color_correction_metric,
        args.color_correct_method,
    ) {
        (None, false, Some(_)) => bail!(
            "--color-correct-method sets the method of --use-color-correction-metric: add that \
             flag, or pass --color-correct-metric METHOD instead"
        ),
        (Some(_), _, Some(_)) => bail!(
            "--color-correct-method goes with --use-color-correction-metric (gsplat's spelling); \
             --color-correct-metric METHOD already names the method: drop one"
        ),
        (Some(m), _, None) => Some(m),
        (None, true, m) => Some(m.unwrap_or(ColorCorrection::Affine)),
        (None, false, None) => None,
    };
    if o.color_correct.is_some() && !(args.eval || args.demo) {
        let flag = match args.use_color_correction_metric {
            true => "--use-color-correction-metric",
            false => "--color-correct-metric",
        };
        bail!("{flag} scores the held-out views colour-corrected: add --eval, or drop it");
    }
    o.resume = args.resume;
    o.extend = args.extend;
    o.init = args.init.clone();
    o.sky_points = args.sky_points.unwrap_or(0);
    o.test_iterations = args.test_iterations.clone();
    o.save_iterations = args.save_iterations.clone();
    o.export = args.export.clone();
    o.checkpoint_iterations = args.checkpoint_iterations.clone();
    o.checkpoint_every = args.checkpoint_every;
    o.overwrite = args.overwrite;
    o.workers = args.workers;
    o.prefetch = args.prefetch;
    o.metrics_every = args.metrics_every;
    o.profile_steps = args.profile_steps;
    o.profile_at = args.profile_at.clone();
    o.depth = DepthWeights {
        init: args.depth_lambda.or(args.depth_l1_weight_init),
        fin: args.depth_lambda.or(args.depth_l1_weight_final),
    };
    if let Some(f) = args.steps_scaler {
        o.config.scale_steps(f);
        o.test_iterations = scale_step_list(&o.test_iterations, f);
        o.save_iterations = scale_step_list(&o.save_iterations, f);
        o.checkpoint_iterations = scale_step_list(&o.checkpoint_iterations, f);
    }
    Ok(o)
}

/// The demo's run: every option `args` give, the demo's own (see `demo::demo_options`) for
/// those they leave out that the demo sets differently (seed, SH degree, iterations, metrics
/// interval, no intermediate saves or evaluations); its densification schedule is always
/// scaled to the run (`demo::scale_schedule`), and it always evaluates its held-out views.
/// `given(id)`: whether the flag `id` was on the command line. The pack is the demo's,
/// built when the run starts.
fn demo_run_options(args: &Args, given: &dyn Fn(&str) -> bool) -> Result<RunOptions> {
    let out = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("gs-train-demo"));
    let base = demo::demo_options(Path::new(""), &out, args.ram_budget, demo::DEMO_ITERATIONS);
    let mut o = options(args, Path::new(""), &out, base.config.iterations)?;
    if !given("seed") {
        o.config.seed = base.config.seed;
    }
    if !given("sh_degree") {
        o.config.sh_degree = base.config.sh_degree;
    }
    // A resumed run keeps the schedule its checkpoint was planned with (past it with
    // --extend); the checkpoint's own check then compares everything else.
    let saved = match args.resume {
        true => demo::resumed_config(&out)?,
        false => None,
    };
    match saved {
        Some(saved) => demo::keep_schedule(&mut o.config, &saved),
        None => {
            let planned = o.config.iterations;
            demo::scale_schedule(&mut o.config, planned);
        }
    }
    // The schedule flags given win over the demo's scaled schedule.
    args.optim.apply(&mut o.config);
    o.eval = true;
    if !given("test_iterations") {
        o.test_iterations = base.test_iterations;
    }
    if !given("save_iterations") {
        o.save_iterations = base.save_iterations;
    }
    if !given("metrics_every") {
        o.metrics_every = base.metrics_every;
    }
    Ok(o)
}

/// Ctrl-C sets the flag; the run checkpoints after the current step and stops. A second
/// Ctrl-C while that happens is left to the default handler's successor: it sets the flag again.
fn install_ctrlc(stop: &Arc<AtomicBool>) -> Result<()> {
    let flag = stop.clone();
    // The `termination` feature routes SIGTERM and SIGHUP here too: a `kill`, a logout or a
    // batch scheduler's stop checkpoints like Ctrl-C does.
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("cannot install the Ctrl-C / SIGTERM handler")
}

fn main() -> ExitCode {
    let matches = Args::command().get_matches();
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => e.exit(),
    };
    let given = |id: &str| matches.value_source(id) == Some(ValueSource::CommandLine);
    let stop = Arc::new(AtomicBool::new(false));
    if let Err(e) = install_ctrlc(&stop) {
        return report_error(&e, EXIT_FAILURE);
    }
    let result = if args.demo {
        demo_run_options(&args, &given).and_then(|mut o| {
            o.stop = stop;
            if args.dry_run {
                print_demo_plan(o)
            } else {
                run_demo(o)
            }
        })
    } else {
        match (&args.pack, &args.output) {
            (Some(pack), Some(out)) => options(&args, pack, out, TrainConfig::default().iterations),
            _ => Err(anyhow::anyhow!(
                "PACK and -o OUT are required (or use --demo)"
            )),
        }
        .and_then(|mut o| {
            o.stop = stop;
            if args.dry_run {
                print_plan(&o)
            } else {
                run_training(&o)
            }
        })
    };
    match result {
        Ok(interrupted) if interrupted => ExitCode::from(EXIT_INTERRUPTED),
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            let code = match e.downcast_ref::<RunError>() {
                Some(RunError::BackendUnavailable(_)) => EXIT_BACKEND,
                _ => EXIT_FAILURE,
            };
            report_error(&e, code)
        }
    }
}

/// `--dry-run`: prints the plan; fails (exit 1) when the run would be refused.
fn print_plan(o: &RunOptions) -> Result<bool> {
    let plan = run::dry_run(o, &mut |ev| {
        if let Event::Line(l) = ev {
            eprintln!("{l}");
        }
    })
    .with_context(|| format!("planning a run of {} failed", o.pack.display()))?;
    show_plan(&plan)
}

/// `--demo --dry-run`: the demo's pack is built (in a temporary directory, removed after),
/// then planned as `--dry-run` plans a pack.
fn print_demo_plan(o: RunOptions) -> Result<bool> {
    let plan = demo::plan_demo(o, &mut |ev| match ev {
        demo::DemoEvent::Stage(s) => eprintln!("{s}"),
        demo::DemoEvent::Run(Event::Line(l)) => eprintln!("{l}"),
        demo::DemoEvent::Run(Event::Progress { .. }) => {}
    })
    .map_err(demo_error)
    .context("planning the demo failed")?;
    show_plan(&plan)
}

/// A demo failure as the error main reports: a run's error unwrapped, so that main's exit
/// code sees a missing backend.
fn demo_error(e: demo::DemoError) -> anyhow::Error {
    match e {
        demo::DemoError::Run(e) => anyhow::Error::new(e),
        e => anyhow::Error::new(e),
    }
}

/// Prints a plan to stdout; fails (exit 1) when the run would be refused.
fn show_plan(plan: &run::PlanSummary) -> Result<bool> {
    print_stdout(&plan.lines().join("\n")).context("writing the plan to stdout")?;
    if !plan.fits {
        bail!(
            "--ram-budget {} is below the floor of {} (see the plan above)",
            format_size(plan.floor.budget),
            format_size(plan.floor.total())
        );
    }
    Ok(false)
}

/// Runs with a progress bar (terminal) or plain lines; returns whether it was interrupted.
fn run_training(o: &RunOptions) -> Result<bool> {
    let progress = Progress::new("training", o.config.iterations);
    let outcome = run::run(o, &mut |ev| match ev {
        Event::Line(l) => progress.println(&l),
        Event::Progress { done, .. } => progress.set(done),
    });
    progress.finish();
    let outcome = outcome.with_context(|| format!("training {} failed", o.pack.display()))?;
    print_summary(&outcome.report, &o.out, &outcome.report_path);
    Ok(outcome.interrupted)
}

fn print_summary(
    r: &ramsplat::train::report::Report,
    out: &std::path::Path,
    report: &std::path::Path,
) {
    let test = match (r.test_psnr, r.test_ssim) {
        (Some(p), Some(s)) => format!(
            "test PSNR {p:.2} dB, SSIM {s:.4} ({} views{}{}{}); ",
            r.test_views,
            if r.exposure { ", right halves" } else { "" },
            r.color_corrected
                .as_ref()
                .map_or(String::new(), |c| format!("; {}", c.line())),
            r.eval_pose
                .as_ref()
                .map_or(String::new(), |e| format!("; {}", e.line()))
        ),
        _ => String::new(),
    };
    let train = match (r.train_psnr, r.train_ssim) {
        (Some(p), _) => format!("train PSNR {p:.2} dB; "),
        (None, Some(_)) => "train views reproduced exactly; ".to_string(),
        (None, None) => String::new(),
    };
    eprintln!(
        "{} iterations in {:.0} s ({:.2} it/s, stall {:.1}%), {} Gaussians; {test}{train}peak \
         RSS {} of budget {}{}",
        r.iterations,
        r.wall_s,
        r.iterations_per_s,
        100.0 * r.stall_fraction,
        r.num_gaussians,
        r.peak_rss_bytes
            .map_or("unknown (not measurable here)".to_string(), format_size),
        format_size(r.ram_budget_bytes),
        r.peak_device_bytes.map_or(String::new(), |b| format!(
            "; peak device memory {}",
            format_size(b)
        ))
    );
    eprintln!(
        "outputs in {} (report: {})",
        out.display(),
        report.display()
    );
}

/// Builds the demo pack and runs `o` on it, with the same progress display as a run.
fn run_demo(o: RunOptions) -> Result<bool> {
    let progress = std::cell::RefCell::new(None::<Progress>);
    let out = o.out.clone();
    let outcome = demo::run_demo(o, &mut |ev| match ev {
        demo::DemoEvent::Stage(s) => {
            if let Some(p) = progress.borrow_mut().take() {
                p.finish();
            }
            eprintln!("{s}");
        }
        demo::DemoEvent::Run(Event::Line(l)) => match &*progress.borrow() {
            Some(p) => p.println(&l),
            None => eprintln!("{l}"),
        },
        demo::DemoEvent::Run(Event::Progress { done, total }) => {
            let mut p = progress.borrow_mut();
            p.get_or_insert_with(|| Progress::new("training", total))
                .set(done);
        }
    });
    if let Some(p) = progress.borrow_mut().take() {
        p.finish();
    }
    let outcome = outcome.map_err(demo_error).context("the demo failed")?;
    print_summary(&outcome.report, &out, &outcome.report_path);
    Ok(outcome.interrupted)
}
