//! `gs-render`: render a trained 3DGS model (standard PLY) from a camera, or every view of a
//! pack with PSNR/SSIM against the ground truth.
//!
//! ```text
//! gs-render --ply MODEL.ply --camera CAM.json -o OUT.png [--backend auto|cpu|cuda] [--bg r,g,b]
//!           [--sh-degree D] [--allow-activated] [--rasterize-mode auto|classic|antialiased]
//! gs-render --ply MODEL.ply --pack PACK [--split test|train|all] -o DIR [same options]
//!           [--exposure exposure.json] [--half left|right] [--color-correct-metric affine|quadratic]
//! gs-render --ply MODEL.ply --cameras cameras.json -o DIR [same options] [--exposure exposure.json]
//! gs-render --ply MODEL.ply (--pack PACK [--split ...] | --cameras cameras.json) --trajectory N -o DIR
//! gs-render --ply MODEL.ply (--pack PACK [--split ...] | --cameras cameras.json) --mesh -o MESH.ply
//!           [--mesh-resolution N | --voxel-size S] [--depth-trunc D] [--sdf-trunc T] [--mesh-pieces K]
//!           [--mesh-memory SIZE]
//! gs-render --ply MODEL.ply --convert OUT.spz|OUT.splat|OUT.ply|OUT.compressed.ply|OUT.sog
//!           [--convert-format ply|spz|splat|compressed-ply|sog] [--crop BOX] [--min-opacity O]
//!           [--prune-to N|P% [--prune-views PACK]] [--sh-degree D]
//! ```
//!
//! The model may be a 3DGS PLY, an SPZ, a `.splat`, a PlayCanvas compressed PLY
//! (`.compressed.ply`) or a PlayCanvas SOG file (`.sog`, or an unbundled SOG's `meta.json`),
//! chosen by its name. A model
//! trained with antialiased rasterization says so (PLY header comment, SPZ flag, SOG `model`) and is
//! rendered that way; `--rasterize-mode` overrides what the file says (and with `--convert`,
//! sets what the converted file says: a gsplat model trained with `--antialiased` can be
//! marked so).
//! `--convert` writes it in the format OUT's name selects, or `--convert-format` names
//! (`ramsplat::export::spz`, `ramsplat::export::splat`, `ramsplat::export::compressed_ply`,
//! `ramsplat::export::sog`: SPZ, compressed PLY and SOG keep every SH degree, quantised;
//! `.splat` keeps degree 0).
//! `--prune-to N` (or `P%`) keeps the N most opaque Gaussians, or with `--prune-views PACK` the
//! N most significant to that pack's training views (`ramsplat::render::significance`).
//!
//! Camera JSON: `{"width","height","fx","fy","cx","cy","world_to_camera": 4×4 row-major}`,
//! OpenCV axes (x right, y down, z forward), world-to-camera `R·p + t`, pixel centres at +0.5
//! (see `ramsplat::scene::camera`). Unknown fields are ignored. The camera, camera-list and
//! exposure files may be streams (`--camera /dev/stdin`, `--cameras <(make_cameras)`); every
//! other input must be a regular file (`ramsplat::fsutil::read_text_input`, `open_file`).
//!
//! `--trajectory N` renders N frames `DIR/frame_00000.png`… along a smooth path through the
//! pack's views of `--split` (or the entries of `--cameras`) in their order: centres on a
//! Catmull–Rom spline, orientations slerped, every frame at the first camera's size; with
//! `--trajectory-shape ellipse`, an orbit around what those cameras look at
//! (`ramsplat::scene::trajectory`); a fly-through to encode with e.g. `ffmpeg -framerate 30 -i
//! DIR/frame_%05d.png -pix_fmt yuv420p fly.mp4`. A DIR holding frames of a longer earlier
//! trajectory is refused: they would be left behind, and the encoder would play them too.
//!
//! `--mesh` fuses the rendered depth and colour of the pack's training views (by default; or
//! `--split`'s, or the entries of `--cameras`) into a TSDF volume and writes its surface, the
//! largest pieces kept, as a PLY mesh with vertex colours (`ramsplat::mesh`).
//!
//! `--cameras` takes the `cameras.json` the original 3DGS trainer (and `gs-train`) writes
//! (see `ramsplat::export::cameras_json`) and writes one PNG per entry, `DIR/<img_name>.png` (an
//! img_name ending in .png/.jpg/.jpeg does not get a second extension).
//!
//! Pack mode writes, into DIR, one side-by-side PNG per view (ground truth left, render right)
//! named `NNNNN_<view name>.png` (the view name's own .png/.jpg extension dropped), and `metrics.json` with per-view and mean PSNR and SSIM.
//! Metrics compare the 8-bit render (exactly what the PNG holds; float colour ×255, rounded,
//! clamped) against the 8-bit ground truth, as the original 3DGS evaluation does with the PNGs
//! it writes. A view identical to its ground truth has infinite PSNR: it is written as `null`
//! and left out of `mean_psnr` (counted in `identical_views`).
//!
//! `--exposure exposure.json` (with `--pack` or `--cameras`) renders each view through its
//! learned 3×4 colour matrix (`gs-train --exposure`, or 3DGS with `--train_test_exp`), found by
//! image name; `--half left|right` (with `--pack`) scores and writes only that half of each
//! view. `--split test --exposure OUT/exposure.json --half right` scores a `gs-train --eval
//! --exposure` run's held-out views exactly as its own evaluation did.
//!
//! `--bilateral-grids OUT/bilateral_grids.json` (with `--pack` or `--cameras`) renders each
//! view a `gs-train --bilateral-grid` run trained on through its learned grid
//! (`ramsplat::train::bilagrid_file`), found by image name as with `--exposure`; views without
//! a grid (held-out ones) render as they are. `--split train` then scores the training views
//! exactly as the run's report did.
//!
//! `--color-correct-metric affine|quadratic` (with `--pack`) also scores each view after
//! fitting its render's colours to its ground truth (`ramsplat::color_correct`; gsplat's
//! `cc_psnr`, `cc_ssim`): `cc_psnr`, `cc_ssim` on each view in `metrics.json`,
//! `color_correct_method`, `mean_cc_psnr`, `mean_cc_ssim` in its summary; the same scores as
//! `gs-train --eval --color-correct-metric` gives the same model and views.
//!
//! `--eval-pose-steps N` (with `--pack`) fits each view's pose to its image first, with the
//! model frozen (`Trainer::align_pose`, as `gs-train --eval-pose-steps`), and renders and scores
//! it from there; `metrics.json` gives the scores from the pack's poses beside. With
//! `--exposure` (and `--half`) the view is aligned through its matrix on the half it is scored
//! on, as `gs-train --eval --exposure --eval-pose-steps` does.
//!
//! `--depth` (every rendering mode) also writes each view's depth beside its PNG:
//! `NAME.depth.npy` (float32, height × width, camera-space z in scene units, NaN where nothing
//! was drawn; `numpy.load` reads it) and `NAME.depth.png`, a picture of it. The depth is that
//! of what the image shows, composited with the image's own weights by the same backend
//! (`ramsplat::render::depth`); `--depth-kind` says what each Gaussian lends it: `mean` (the
//! default), its centre's depth (gsplat's expected depth); `plane`, where the pixel's ray
//! crosses the Gaussian's plane. In pack mode it is the render's (the right half of the
//! side-by-side image). `--mesh` fuses the same depths, `plane` unless `--depth-kind mean`.
//!
//! Every output file is written under a temporary name in its directory, fsynced and renamed
//! into place (`ramsplat::fsutil`), so an interrupted run never leaves a truncated PNG or JSON.
//! No output replaces an input: a path (however spelled) that is the model, a camera file,
//! `--exposure` or `--bilateral-grids` is refused before it is written, and so is an `-o` that
//! is the pack or lies inside it (a pack is immutable) or, outside `--camera`, names a file.
//! Image sizes are checked before any buffer is allocated: a camera beyond `MAX_PIXELS` is
//! refused with a message naming the file and camera.
//!
//! Exit codes: 0 success; 1 any failure (unreadable or invalid model, camera, pack, render or
//! write error; the message names the file and what to do); 2 invalid command line; 3 the
//! requested backend is not available in this build.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{ArgGroup, Parser, ValueEnum};

use ramsplat::color_correct::ColorCorrection;
use ramsplat::dataset::Split;
use ramsplat::eval::{self, safe_stem, to_rgb8, write_png, Score, Scorer};
use ramsplat::export::cameras_json;
use ramsplat::export::ply::{GaussianPlyError, LoadOptions};
use ramsplat::export::{save_model, ModelFormat, ModelInfo, ModelIoError};
use ramsplat::mesh::tsdf::TsdfParams;
use ramsplat::mesh::Fusion;
use ramsplat::render::depth::{
    depth_preview_rgb8, render_depth, write_depth_npy, DepthKind, DepthScratch,
};
use ramsplat::render::significance::{keep_highest, Significance};
use ramsplat::render::{
    make_rasterizer, rasterize_mode_name, Backend, Rasterizer, RenderError, RenderOptions,
    RenderOutput,
};
use ramsplat::resample::{target_size, Resize};
use ramsplat::scene::camera::Camera;
use ramsplat::scene::gaussians::Gaussians;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::PixelLayout;
use ramsplat::train::bilagrid;
use ramsplat::train::bilagrid_file::{self, GridFile};
use ramsplat::train::exposure::{self, Exposure, ExposureConfig};
use ramsplat::train::pose::PoseAlignConfig;
use ramsplat::train::report::{ColorCorrectedScore, EvalPoseReport, GivenPoseScore};
use ramsplat::train::trainer::{Background, Region};
use ramsplat::train::{Engine, TrainConfig, TrainView, Trainer};

/// `--trajectory-shape`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ShapeArg {
    Interp,
    Ellipse,
}

/// `--rasterize-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ModeArg {
    /// What the model file says (classic when it says nothing).
    Auto,
    Classic,
    Antialiased,
}

/// `--half`: the part of each view scored and written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum HalfArg {
    Left,
    Right,
}

impl HalfArg {
    fn region(self) -> Region {
        match self {
            HalfArg::Left => Region::LeftHalf,
            HalfArg::Right => Region::RightHalf,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SplitArg {
    Test,
    Train,
    All,
}

// An option that belongs to one of the `source` group's modes conflicts with the other three
// rather than `requires` its own: clap does not enforce `requires` on a member of a required
// group (`--convert-format ply --camera C.json` used to be accepted and ignored).
/// Render a 3D Gaussian Splatting model (standard 3DGS PLY).
#[derive(Parser, Debug)]
#[command(
    version,
    group(ArgGroup::new("source").required(true).args(["camera", "pack", "cameras", "convert"])),
    group(ArgGroup::new("depth_output").args(["depth", "mesh"])),
    after_help = "Exit codes: 0 success, 1 failure, 2 invalid command line, 3 backend not available."
)]
struct Args {
    /// The model: a 3DGS PLY holding stored (pre-activation) values, or an .spz / .splat /
    /// .compressed.ply / .sog (or an unbundled SOG's meta.json).
    #[arg(long, value_name = "MODEL.ply")]
    ply: PathBuf,
    /// Render one view from this camera JSON ({"width","height","fx","fy","cx","cy",
    /// "world_to_camera": 4x4 row-major}, OpenCV axes); -o is then the PNG to write.
    #[arg(long, value_name = "CAM.json")]
    camera: Option<PathBuf>,
    /// Render every view of this pack's split and score it; -o is then a directory.
    #[arg(long, value_name = "PACK")]
    pack: Option<PathBuf>,
    /// Render every entry of a 3DGS cameras.json (list of {id, img_name, width, height,
    /// position, rotation (camera-to-world), fx, fy}) into DIR/<img_name>.png; -o is DIR.
    #[arg(long, value_name = "cameras.json")]
    cameras: Option<PathBuf>,
    /// Convert the model to OUT.spz, OUT.splat, OUT.compressed.ply, OUT.sog or OUT.ply (by its
    /// name)
    /// and render nothing.
    #[arg(
        long,
        value_name = "OUT.spz",
        conflicts_with_all = ["bg", "resolution", "data_factor"]
    )]
    convert: Option<PathBuf>,
    /// With --convert: write this format whatever OUT is called (ply, spz, splat,
    /// compressed-ply, sog).
    #[arg(
        long,
        value_name = "FORMAT",
        conflicts_with_all = ["camera", "pack", "cameras"],
        value_parser = parse_model_format
    )]
    convert_format: Option<ModelFormat>,
    /// Which views of the pack to render (or, with --trajectory, to fly through; with --mesh,
    /// to fuse) [default: test; with --mesh: train].
    #[arg(long, value_enum, conflicts_with_all = ["camera", "cameras", "convert"])]
    split: Option<SplitArg>,
    #[command(flatten)]
    resolution: ramsplat::cli::ResolutionArgs,
    /// Render N frames along a smooth path through the cameras of --pack (its --split views,
    /// in pack order) or of --cameras (in file order) into DIR/frame_00000.png, ...
    #[arg(long, value_name = "N", conflicts_with_all = ["camera", "convert"])]
    trajectory: Option<usize>,
    /// The path of --trajectory: `interp` (through the cameras in order) or `ellipse` (an
    /// orbit around what they look at, at their mean height; a closed loop).
    #[arg(
        long,
        value_enum,
        default_value = "interp",
        requires = "trajectory",
        conflicts_with_all = ["camera", "convert"]
    )]
    trajectory_shape: ShapeArg,
    /// Output PNG (with --camera) or directory (with --pack, --cameras).
    #[arg(short, long, value_name = "OUT", required_unless_present = "convert")]
    output: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Background colour as r,g,b in [0, 1] (default: black; with --pack, views packed with
    /// alpha default to white, the NeRF-synthetic convention `gs-train --eval` scores them by).
    #[arg(long, value_name = "r,g,b", value_parser = parse_bg)]
    bg: Option<[f32; 3]>,
    /// SH degree to render with (default: the model's stored degree). With --convert: the
    /// degree to write, the higher bands dropped (degree 0 keeps the base colour: a quarter of
    /// a degree-3 PLY's size).
    #[arg(long, value_name = "D")]
    sh_degree: Option<u32>,
    /// With --convert: leave out the Gaussians whose opacity (as stored, what viewers draw)
    /// is below O, e.g. 0.005 (3DGS's pruning threshold): nearly invisible ones that every
    /// viewer still sorts and draws.
    #[arg(
        long,
        value_name = "O",
        conflicts_with_all = ["camera", "pack", "cameras"],
        value_parser = parse_unit
    )]
    min_opacity: Option<f32>,
    /// With --convert: keep only the Gaussians whose centre lies in this axis-aligned box of
    /// the model's frame (a scene cut out of its surroundings, floaters far away dropped).
    #[arg(
        long,
        value_name = "MINX,MINY,MINZ,MAXX,MAXY,MAXZ",
        conflicts_with_all = ["camera", "pack", "cameras"],
        allow_hyphen_values = true,
        value_parser = parse_crop
    )]
    crop: Option<[f32; 6]>,
    /// With --convert: keep only N Gaussians (or P % of them: `25%`), the most opaque, or with
    /// --prune-views the most significant: a smaller model for viewers and for memory, to
    /// fine-tune with `gs-train PACK --init OUT --densify-until-iter 0` (docs/commands.md:
    /// Cleaning and shrinking a model).
    #[arg(
        long,
        value_name = "N|P%",
        conflicts_with_all = ["camera", "pack", "cameras"],
        value_parser = parse_prune_to
    )]
    prune_to: Option<PruneTo>,
    /// With --prune-to: rank the Gaussians by their summed compositing weight over the pixels
    /// of this pack's training views (Mini-Splatting's importance; rendered on the CPU at the
    /// pack's size whatever --backend says) instead of by opacity: for a model that will not
    /// be fine-tuned afterwards (measured in docs/commands.md).
    #[arg(
        long,
        value_name = "PACK",
        requires = "prune_to",
        conflicts_with_all = ["camera", "pack", "cameras"]
    )]
    prune_views: Option<PathBuf>,
    /// Load a model even though its values look activated (sigmoid opacities, exp scales).
    #[arg(long)]
    allow_activated: bool,
    /// Rasterization: `antialiased` (Mip-Splatting's 2D filter, for models trained with
    /// `gs-train --antialiased` or gsplat's `--antialiased`), `classic` (3DGS), or `auto`: what
    /// the model file says. With --convert: what the converted file says.
    #[arg(long, value_enum, default_value = "auto")]
    rasterize_mode: ModeArg,
    /// Also write each view's depth (camera-space z, scene units, NaN where nothing was drawn;
    /// --depth-kind) beside its PNG: NAME.depth.npy (float32, height × width, for numpy.load)
    /// and NAME.depth.png, a picture of it (near yellow, far violet, black under half covered).
    #[arg(long, conflicts_with = "convert")]
    depth: bool,
    /// With --depth or --mesh: which depth each Gaussian lends the pixels it covers. `plane`:
    /// where the pixel's ray crosses the Gaussian's own plane (the surface's depth for flat
    /// Gaussians; the default for --mesh); `mean`: its centre's depth (gsplat's expected
    /// depth, "ED"; the default for --depth).
    #[arg(long, value_enum, value_name = "KIND", requires = "depth_output")]
    depth_kind: Option<DepthKind>,
    /// Render each view through its 3×4 colour matrix in this exposure.json (what
    /// `gs-train --exposure` writes, or 3DGS with --train_test_exp), found by image name (the
    /// view name's stem with --pack, img_name with --cameras); a view without one is an error.
    #[arg(long, value_name = "exposure.json", conflicts_with_all = ["camera", "convert", "trajectory"])]
    exposure: Option<PathBuf>,
    /// Render each view through its bilateral grid in this bilateral_grids.json (what
    /// `gs-train --bilateral-grid` writes beside its model), found by image name as with
    /// --exposure; views without a grid (held-out ones) render as they are. With
    /// `--split train` the training views score as the run's report scored them.
    #[arg(
        long = "bilateral-grids",
        alias = "bilateral_grids",
        value_name = "bilateral_grids.json",
        conflicts_with_all = ["camera", "convert", "trajectory", "exposure", "eval_pose_steps"]
    )]
    bilateral_grids: Option<PathBuf>,
    /// Score and write only this half of each view of --pack, split at column ⌊W/2⌋:
    /// `right` is how `gs-train --eval --exposure` (and 3DGS's --train_test_exp) score the
    /// held-out views, whose left halves were trained on.
    #[arg(long, value_enum, conflicts_with_all = ["camera", "cameras", "convert", "trajectory", "depth"])]
    half: Option<HalfArg>,
    /// With --pack: before each view is scored, fit its pose to its image in N steps with the
    /// model frozen (what `gs-train --eval-pose-steps` does: the fair score of a model trained
    /// with pose optimisation), and render and score it from there; metrics.json gives each
    /// view's scores from the pack's pose beside. Holds a second copy of the model and its
    /// optimizer moments. With --exposure each view is aligned through its matrix (and with
    /// --half on that half), as `gs-train --eval --exposure --eval-pose-steps` does.
    #[arg(
        long,
        value_name = "N",
        conflicts_with_all = ["camera", "cameras", "convert", "trajectory"],
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    eval_pose_steps: Option<u32>,
    /// Learning rate of that alignment (default 0.001, decaying to 1 % over the steps).
    #[arg(long, value_name = "LR", requires = "eval_pose_steps", value_parser = parse_positive)]
    eval_pose_lr: Option<f64>,
    /// With --pack: also score each view after fitting its render's colours to its ground
    /// truth (gsplat's colour-corrected metrics cc_psnr, cc_ssim, as `gs-train --eval
    /// --color-correct-metric` scores them): `affine` (a gain and offset per channel) or
    /// `quadratic` (multinerf's quadratic fit over unclipped pixels).
    #[arg(
        long,
        value_enum,
        value_name = "METHOD",
        conflicts_with_all = ["camera", "cameras", "convert", "trajectory"]
    )]
    color_correct_metric: Option<ColorCorrection>,
    /// Fuse the views of --pack (its --split views, by default the training views) or of
    /// --cameras into a triangle mesh instead of writing images: each view's rendered depth
    /// and colour go into a truncated signed distance volume, whose surface (marching cubes,
    /// the largest pieces kept) is written to -o as a PLY mesh (vertex colours). 2DGS's and
    /// Gaussian Opacity Fields' extraction (docs/commands.md: Meshes).
    #[arg(
        long,
        conflicts_with_all = [
            "camera", "convert", "trajectory", "depth", "exposure", "bilateral_grids", "half",
            "eval_pose_steps", "color_correct_metric", "bg"
        ]
    )]
    mesh: bool,
    /// With --mesh: voxels across the depth range fused (the voxel size is the depth cut-off
    /// over N, but never below a pixel of the median view at the cameras' median distance
    /// from their mean).
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1024,
        requires = "mesh",
        value_parser = clap::value_parser!(u32).range(16..=65536)
    )]
    mesh_resolution: u32,
    /// With --mesh: the voxel size in scene units (instead of --mesh-resolution's).
    #[arg(
        long,
        value_name = "S",
        requires = "mesh",
        conflicts_with = "mesh_resolution",
        value_parser = parse_positive
    )]
    voxel_size: Option<f64>,
    /// With --mesh: depths beyond D (scene units) are not fused (default: twice the cameras'
    /// radius, 1.1 × the largest distance of a camera from their mean, as 2DGS does).
    #[arg(long, value_name = "D", requires = "mesh", value_parser = parse_positive)]
    depth_trunc: Option<f64>,
    /// With --mesh: the signed distance's truncation in scene units (default: 5 voxels).
    #[arg(long, value_name = "T", requires = "mesh", value_parser = parse_positive)]
    sdf_trunc: Option<f64>,
    /// With --mesh: the most memory the fusion volume may take (e.g. 512M, 8G); past it the
    /// command stops and names a voxel size that fits.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "4G",
        requires = "mesh",
        value_parser = ramsplat::cli::parse_size_arg
    )]
    mesh_memory: u64,
    /// With --mesh: keep the K largest connected pieces of the surface, by triangle count (0
    /// keeps every piece, floaters' included).
    #[arg(long, value_name = "K", default_value_t = 50, requires = "mesh")]
    mesh_pieces: usize,
}

fn parse_positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

/// A loaded model and whether to render it antialiased (the file's word, or the override).
struct Loaded {
    gaussians: Gaussians,
    antialiased: bool,
    /// The file's scales and opacities hold a folded 3D filter (kept in a converted file).
    folded_filter_3d: bool,
}

impl std::ops::Deref for Loaded {
    type Target = Gaussians;
    fn deref(&self) -> &Gaussians {
        &self.gaussians
    }
}

const BLACK: [f32; 3] = [0.0; 3];
const WHITE: [f32; 3] = [1.0; 3];

fn parse_bg(s: &str) -> Result<[f32; 3], String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() != 3 {
        return Err(format!(
            "expected r,g,b (three numbers in [0, 1]), got {s:?}"
        ));
    }
    let mut bg = [0.0f32; 3];
    for (o, p) in bg.iter_mut().zip(&parts) {
        let v: f32 = p
            .parse()
            .map_err(|_| format!("{p:?} is not a number (expected r,g,b in [0, 1])"))?;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!("{v} is outside [0, 1] (expected r,g,b in [0, 1])"));
        }
        *o = v;
    }
    Ok(bg)
}

/// Most bytes read from a camera, camera-list or exposure JSON (a `cameras.json` of 100,000
/// views is about 40 MB). These may come from a pipe (`--camera <(make_camera)`,
/// `--cameras /dev/stdin`); the bound keeps an endless stream from exhausting memory.
const MAX_JSON_BYTES: u64 = 256 << 20;
/// Largest image `gs-render` attempts (checked before any buffer is allocated).
const MAX_PIXELS: u64 = 1 << 28;
/// Lower bound of the bytes one pixel costs while rendering (colour, depth and alpha planes in
/// f32, the RGB8 copy), for the refusal message.
const BYTES_PER_PIXEL: u64 = 24;

fn read_camera(path: &Path) -> Result<Camera> {
    let text = ramsplat::fsutil::read_text_input(path, MAX_JSON_BYTES)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let camera = Camera::from_json(&text).with_context(|| format!("{}", path.display()))?;
    check_size(&camera).with_context(|| format!("{}", path.display()))?;
    Ok(camera)
}

/// Refuses an image size gs-render cannot allocate, before any buffer is allocated.
fn check_size(camera: &Camera) -> Result<()> {
    let pixels = u64::from(camera.width) * u64::from(camera.height);
    if pixels > MAX_PIXELS {
        bail!(
            "a {}x{} image ({pixels} pixels) is beyond what gs-render renders (at most \
             {MAX_PIXELS} pixels, e.g. 16384x16384: its float buffers alone would take over \
             {} GiB); lower width/height and scale fx, fy, cx, cy by the same factor",
            camera.width,
            camera.height,
            (MAX_PIXELS * BYTES_PER_PIXEL) >> 30
        );
    }
    Ok(())
}

fn write_text(path: &Path, text: &str) -> Result<()> {
    ramsplat::fsutil::write_atomic(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The files this command reads, as the file system resolves them
/// ([`ramsplat::fsutil::resolve`]), so that no output replaces one: `-o model.ply` beside
/// `--camera` would have replaced the model with a PNG.
struct Inputs(Vec<(&'static str, PathBuf, PathBuf)>);

impl Inputs {
    fn of(args: &Args) -> Inputs {
        let given = [
            ("--ply", Some(&args.ply)),
            ("--camera", args.camera.as_ref()),
            ("--cameras", args.cameras.as_ref()),
            ("--exposure", args.exposure.as_ref()),
            ("--bilateral-grids", args.bilateral_grids.as_ref()),
            ("--prune-views", args.prune_views.as_ref()),
        ];
        Inputs(
            given
                .into_iter()
                .filter_map(|(flag, p)| Some((flag, p?.clone(), ramsplat::fsutil::resolve(p?))))
                .collect(),
        )
    }

    /// Refuses to write `path` when it is one of the inputs.
    fn check(&self, path: &Path) -> Result<()> {
        let resolved = ramsplat::fsutil::resolve(path);
        if let Some((flag, given, _)) = self.0.iter().find(|(_, _, r)| *r == resolved) {
            bail!(
                "{}: is the {flag} file {} this command reads; write to another path (it was \
                 left as it was)",
                path.display(),
                given.display()
            );
        }
        Ok(())
    }
}

/// Refuses an `-o` that is `--pack`'s pack or lies inside it (a pack is immutable); `what`
/// names what was to be written there.
fn refuse_inside_pack(args: &Args, output: &Path, what: &str) -> Result<()> {
    if let Some(pack) = &args.pack {
        if let Some(relation) = ramsplat::fsutil::placement(output, pack) {
            bail!(
                "-o {} {relation} the pack {}: a pack is immutable; write {what} somewhere else",
                output.display(),
                pack.display()
            );
        }
    }
    Ok(())
}

/// Refuses an output directory that is a file, or that is the pack or lies inside it (a pack
/// is immutable).
fn check_output_dir(args: &Args, output: &Path) -> Result<()> {
    refuse_inside_pack(args, output, "the renders")?;
    if output.exists() && !output.is_dir() {
        bail!(
            "-o {}: is a file; -o names the directory the renders go into (with --camera, the \
             PNG to write)",
            output.display()
        );
    }
    Ok(())
}

struct Renderer {
    raster: Box<dyn Rasterizer>,
    options: RenderOptions,
    out: RenderOutput,
    /// With `--depth`: the depth render's buffers.
    depth: Option<DepthScratch>,
    /// `--depth-kind`.
    depth_kind: DepthKind,
    /// The 8-bit image of the last render (reused across views).
    rgb: Vec<u8>,
    /// `--exposure`: the file, and its image name → matrix.
    exposures: Option<(PathBuf, HashMap<String, Exposure>)>,
    /// `--bilateral-grids`: the run's grids by image name.
    grids: Option<GridFile>,
    /// What no output may replace.
    inputs: Inputs,
}

impl Renderer {
    fn new(raster: Box<dyn Rasterizer>, args: &Args, model: &Loaded) -> Result<Renderer> {
        let sh_degree = args.sh_degree.unwrap_or(model.sh_degree);
        if sh_degree > model.sh_degree {
            bail!(
                "--sh-degree {sh_degree} is above the model's stored SH degree {}; pass \
                 --sh-degree {} or less",
                model.sh_degree,
                model.sh_degree
            );
        }
        Ok(Renderer {
            raster,
            options: RenderOptions {
                sh_degree,
                background: args.bg.unwrap_or(BLACK),
                antialiased: model.antialiased,
                ..RenderOptions::default()
            },
            out: RenderOutput::default(),
            depth: args.depth.then(DepthScratch::default),
            depth_kind: args.depth_kind.unwrap_or(DepthKind::Mean),
            rgb: Vec::new(),
            exposures: match &args.exposure {
                Some(path) => Some((path.clone(), read_exposures(path)?)),
                None => None,
            },
            grids: match &args.bilateral_grids {
                Some(path) => Some(bilagrid_file::read(path)?),
                None => None,
            },
            inputs: Inputs::of(args),
        })
    }

    /// With `--bilateral-grids`: fails unless at least one of the views `names` has a grid (a
    /// file of another run would otherwise change nothing, silently).
    fn check_grids_name_any<'a>(
        &self,
        path: Option<&PathBuf>,
        mut names: impl Iterator<Item = &'a str>,
    ) -> Result<()> {
        if let (Some(g), Some(path)) = (&self.grids, path) {
            if !names.any(|n| g.grid_of(n).is_some()) {
                bail!(
                    "{} has grids for {} views, none of the views to render; pass the \
                     bilateral_grids.json of the run that trained on these views (held-out views \
                     have no grid: render them without --bilateral-grids)",
                    path.display(),
                    g.by_key.len()
                );
            }
        }
        Ok(())
    }

    /// The last render through view `name`'s bilateral grid, when `--bilateral-grids` has one.
    fn apply_grid(&mut self, name: &str, camera: &Camera) {
        if let Some(g) = &self.grids {
            if let Some(grid) = g.grid_of(name) {
                let (w, h) = (camera.width as usize, camera.height as usize);
                bilagrid::apply_in_place(g.shape, grid, &mut self.out.image, w, h);
            }
        }
    }

    /// The `--exposure` matrix of the image `name` (`None` without `--exposure`): by its
    /// stem (3DGS's image name), else by the name itself (see
    /// `ramsplat::train::exposure::view_keys`).
    fn exposure_of(&self, name: &str) -> Result<Option<Exposure>> {
        let Some((path, map)) = &self.exposures else {
            return Ok(None);
        };
        match map
            .get(&cameras_json::img_name(name))
            .or_else(|| map.get(name))
        {
            Some(e) => Ok(Some(*e)),
            None => bail!(
                "{} has no matrix for image {name:?} ({} images listed); pass the exposure.json \
                 of the run that trained on these views, or leave out --exposure",
                path.display(),
                map.len()
            ),
        }
    }

    fn render(&mut self, model: &Gaussians, camera: &Camera) -> Result<&[f32]> {
        self.raster
            .forward(model, camera, &self.options, &mut self.out)
            .context("render failed")?;
        Ok(&self.out.image)
    }

    /// Renders `camera` (through `exposure`, if any, and through the bilateral grid of the
    /// image `name`, if any) into the PNG `png` and, with `--depth`, its depth beside it.
    fn render_to_png(
        &mut self,
        model: &Gaussians,
        camera: &Camera,
        exposure: Option<&Exposure>,
        name: Option<&str>,
        png: &Path,
    ) -> Result<()> {
        let mut rgb = std::mem::take(&mut self.rgb);
        self.render(model, camera)?;
        if let Some(e) = exposure {
            exposure::apply_in_place(e, &mut self.out.image);
        }
        if let Some(name) = name {
            self.apply_grid(name, camera);
        }
        to_rgb8(&self.out.image, &mut rgb);
        let written = self
            .inputs
            .check(png)
            .and_then(|()| Ok(write_png(png, &rgb, camera.width, camera.height)?));
        self.rgb = rgb;
        written?;
        self.write_depth(model, camera, png)
    }

    /// With `--depth`: renders `camera`'s depth (`--depth-kind`) and writes it beside `png` (the
    /// view's image) as `.depth.npy` and `.depth.png`; without, nothing.
    fn write_depth(&mut self, model: &Gaussians, camera: &Camera, png: &Path) -> Result<()> {
        let Some(scratch) = &mut self.depth else {
            return Ok(());
        };
        let (npy, preview) = (
            png.with_extension("depth.npy"),
            png.with_extension("depth.png"),
        );
        self.inputs.check(&npy)?;
        self.inputs.check(&preview)?;
        let map = render_depth(
            self.raster.as_mut(),
            model,
            camera,
            &self.options,
            self.depth_kind,
            scratch,
        )
        .context("depth render failed")?;
        write_depth_npy(&npy, &map)?;
        write_png(&preview, &depth_preview_rgb8(&map), map.width, map.height)?;
        Ok(())
    }
}

fn load_model(args: &Args) -> Result<Loaded> {
    let (model, info) = ramsplat::export::load_model(
        &args.ply,
        &LoadOptions {
            allow_activated: args.allow_activated,
            ..LoadOptions::default()
        },
    )
    .map_err(|e| {
        // Only gs-render may read such a file as it is; the library's message names no flag.
        let activated = matches!(e, ModelIoError::Ply(GaussianPlyError::Activated { .. }));
        let e = anyhow::Error::new(e);
        if activated {
            e.context(
                "cannot load the model (if the file really holds logits and log-scales, pass \
                 --allow-activated)",
            )
        } else {
            e.context("cannot load the model")
        }
    })?;
    if let Some((count, first)) = model.beyond_f32_range() {
        eprintln!(
            "gs-render: warning: {count} Gaussian(s) of {} have a log-scale above {} (σ > 1e13 \
             scene units; the first is vertex {first}); a view where one's projected covariance \
             overflows single precision skips it, where a float64 renderer would draw it over \
             the whole image",
            args.ply.display(),
            ramsplat::scene::gaussians::LOG_SCALE_F32_LIMIT
        );
    }
    if let Some(note) = info.sh_cut_note(&args.ply) {
        eprintln!("gs-render: warning: {note}");
    }
    if let Some(note) = info.filter_3d_note(&args.ply) {
        eprintln!("gs-render: note: {note}");
    }
    let antialiased = match args.rasterize_mode {
        ModeArg::Auto => info.antialiased,
        ModeArg::Classic => false,
        ModeArg::Antialiased => true,
    };
    if info.antialiased && !antialiased {
        eprintln!(
            "gs-render: warning: {} is marked antialiased; --rasterize-mode classic renders \
             its small splats too bright and too wide",
            args.ply.display()
        );
    }
    Ok(Loaded {
        gaussians: model,
        antialiased,
        folded_filter_3d: info.folded_filter_3d,
    })
}

/// `", antialiased"` for the summary lines when the render is.
fn mode_note(antialiased: bool) -> &'static str {
    if antialiased {
        ", antialiased"
    } else {
        ""
    }
}

fn render_camera(
    raster: Box<dyn Rasterizer>,
    args: &Args,
    camera_path: &Path,
    output: &Path,
) -> Result<()> {
    let camera = at_resolution(args, read_camera(camera_path)?)?;
    let model = load_model(args)?;
    let mut r = Renderer::new(raster, args, &model)?;
    r.render_to_png(&model, &camera, None, None, output)?;
    eprintln!(
        "wrote {} ({}x{}, {} Gaussians, SH degree {}, {} backend{})",
        output.display(),
        camera.width,
        camera.height,
        model.len(),
        r.options.sh_degree,
        r.raster.name(),
        mode_note(r.options.antialiased)
    );
    Ok(())
}

fn render_camera_list(
    raster: Box<dyn Rasterizer>,
    args: &Args,
    list: &Path,
    output: &Path,
) -> Result<()> {
    let text = ramsplat::fsutil::read_text_input(list, MAX_JSON_BYTES)
        .with_context(|| format!("cannot read {}", list.display()))?;
    let cameras = cameras_json::parse(&text)
        .with_context(|| format!("{}", list.display()))?
        .into_iter()
        .map(|(e, c)| Ok((e, at_resolution(args, c)?)))
        .collect::<Result<Vec<_>>>()?;
    let mut names = std::collections::HashSet::new();
    for (e, _) in &cameras {
        if !names.insert(safe_stem(&e.img_name)) {
            bail!(
                "{}: two entries would both write {}.png (img_name {:?}); give each entry its \
                 own img_name",
                list.display(),
                safe_stem(&e.img_name),
                e.img_name
            );
        }
    }
    for (entry, camera) in &cameras {
        check_size(camera).with_context(|| {
            format!(
                "{}: camera {} ({:?})",
                list.display(),
                entry.id,
                entry.img_name
            )
        })?;
    }
    let model = load_model(args)?;
    let mut r = Renderer::new(raster, args, &model)?;
    r.check_grids_name_any(
        args.bilateral_grids.as_ref(),
        cameras.iter().map(|(e, _)| e.img_name.as_str()),
    )?;
    std::fs::create_dir_all(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    for (n, (entry, camera)) in cameras.iter().enumerate() {
        let path = output.join(format!("{}.png", safe_stem(&entry.img_name)));
        let context = || format!("camera {} ({:?})", entry.id, entry.img_name);
        let exposure = r.exposure_of(&entry.img_name).with_context(context)?;
        r.render_to_png(
            &model,
            camera,
            exposure.as_ref(),
            Some(&entry.img_name),
            &path,
        )
        .with_context(context)?;
        eprintln!("[{}/{}] wrote {}", n + 1, cameras.len(), path.display());
    }
    eprintln!(
        "{} views ({} Gaussians, SH degree {}, {} backend{}) into {}",
        cameras.len(),
        model.len(),
        r.options.sh_degree,
        r.raster.name(),
        mode_note(r.options.antialiased),
        output.display()
    );
    Ok(())
}

#[derive(serde::Serialize)]
struct ViewMetrics {
    index: usize,
    name: String,
    file: String,
    /// `null` when the render equals the ground truth (infinite PSNR).
    psnr: Option<f64>,
    ssim: f64,
    /// The background the view was rendered and scored over.
    background: [f32; 3],
    /// With --eval-pose-steps (`psnr`, `ssim` are then from the aligned pose): the scores
    /// from the pack's pose and how far the alignment moved it.
    #[serde(skip_serializing_if = "Option::is_none")]
    given_pose: Option<GivenPoseScore>,
    /// With --color-correct-metric: `cc_psnr` (`null` when infinite) and `cc_ssim`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    color_corrected: Option<ColorCorrectedScore>,
}

/// [`MetricsReport::color_corrected`].
#[derive(serde::Serialize)]
struct ColorCorrectedMeans {
    /// `"affine"` or `"quadratic"`.
    color_correct_method: &'static str,
    /// Mean colour-corrected PSNR over views with a finite one; `null` when there are none.
    mean_cc_psnr: Option<f64>,
    mean_cc_ssim: f64,
}

#[derive(serde::Serialize)]
struct MetricsReport {
    model: String,
    pack: String,
    split: String,
    backend: String,
    /// `"antialiased"` or `"classic"`.
    rasterize_mode: &'static str,
    sh_degree: u32,
    /// `--bg`; `null` when each view took its default (RGB black, RGBA white).
    background: Option<[f32; 3]>,
    /// `--exposure`'s file; `null` without.
    exposure: Option<String>,
    /// `--bilateral-grids`' file; absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    bilateral_grids: Option<String>,
    /// `--half`: `"left"` or `"right"`; `null` for whole views.
    half: Option<String>,
    count: usize,
    /// Mean PSNR over views with finite PSNR; `null` when there are none.
    mean_psnr: Option<f64>,
    mean_ssim: f64,
    identical_views: usize,
    /// With --color-correct-metric: `color_correct_method`, `mean_cc_psnr`, `mean_cc_ssim`.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    color_corrected: Option<ColorCorrectedMeans>,
    /// With --eval-pose-steps: the alignment and the scores from the pack's poses.
    #[serde(skip_serializing_if = "Option::is_none")]
    eval_pose: Option<EvalPoseReport>,
    views: Vec<ViewMetrics>,
}

/// `--eval-pose-steps`: a trainer holding a copy of the model, whose pose alignment fits each
/// view's camera before it is rendered and scored.
struct Aligner {
    trainer: Trainer,
    config: PoseAlignConfig,
}

impl Aligner {
    fn new(args: &Args, model: &Loaded, sh_degree: u32, extent: f64) -> Result<Option<Aligner>> {
        let Some(steps) = args.eval_pose_steps else {
            return Ok(None);
        };
        let background = match args.bg {
            None => Background::Black,
            Some(WHITE) => Background::White,
            Some(BLACK) => Background::Black,
            Some(bg) => bail!(
                "--eval-pose-steps aligns over a black or white background (gs-train's), not \
                 --bg {bg:?}: drop --bg or --eval-pose-steps"
            ),
        };
        let config = TrainConfig {
            iterations: 1,
            sh_degree: model.sh_degree,
            initial_sh_degree: sh_degree,
            antialiased: model.antialiased,
            background,
            // One slot, set to each view's --exposure matrix before the view is aligned.
            exposure: args.exposure.is_some().then(ExposureConfig::default),
            ..TrainConfig::default()
        };
        let raster = make_rasterizer(args.backend, &mut |_| {})?;
        let trainer = Trainer::new(
            config,
            model.gaussians.clone(),
            extent,
            Engine::Host(raster),
        )
        .context("cannot set up the pose alignment")?;
        Ok(Some(Aligner {
            trainer,
            config: PoseAlignConfig {
                steps,
                lr: args.eval_pose_lr.unwrap_or(PoseAlignConfig::default().lr),
            },
        }))
    }

    /// The camera `view` (its bytes as packed: `bytes`) is scored from, and its scores from
    /// its own camera, both through `exposure` (the view's `--exposure` matrix) when given. The
    /// alignment's background must be the one the view is scored over.
    fn align(
        &mut self,
        view: &TrainView,
        bytes: &[u8],
        background: [f32; 3],
        exposure: Option<Exposure>,
    ) -> Result<(Camera, GivenPoseScore)> {
        if background != self.trainer.eval_background(view.layout) {
            bail!(
                "--eval-pose-steps aligns views with alpha over white (gs-train's rule), but \
                 --bg renders them over {background:?}: drop --bg"
            );
        }
        let mut view = *view;
        if let Some(matrix) = exposure {
            self.trainer.set_exposure(0, matrix)?;
            view.exposure = Some(0);
        }
        let given = self.trainer.evaluate_view(&view, bytes)?;
        let a = self.trainer.align_pose(&view, bytes, &self.config)?;
        Ok((a.camera, GivenPoseScore::new(&given, &a)))
    }
}

/// The pack's views of `--split` (indices, split name), each checked to be renderable.
/// The size `-r`/`--data-factor` ask for.
fn resize(args: &Args) -> Result<Resize> {
    args.resolution.resize().map_err(anyhow::Error::msg)
}

/// `camera` at `-r`/`--data-factor`'s size (the packer's rule: [`target_size`]).
fn at_resolution(args: &Args, camera: Camera) -> Result<Camera> {
    let (w, h) = target_size(camera.width, camera.height, resize(args)?);
    Ok(if (w, h) == (camera.width, camera.height) {
        camera
    } else {
        camera.resized(w, h)
    })
}

/// The pack at `pack_path`, its views at `-r`/`--data-factor`'s size.
fn open_pack(args: &Args, pack_path: &Path) -> Result<Pack> {
    Ok(Pack::open(pack_path)
        .context("cannot open the pack")?
        .resized(resize(args)?))
}

fn split_views(
    args: &Args,
    pack_path: &Path,
    manifest: &ramsplat::shard::Manifest,
) -> Result<(Vec<usize>, String)> {
    let split = args.split.unwrap_or(if args.mesh {
        SplitArg::Train
    } else {
        SplitArg::Test
    });
    let indices: Vec<usize> = match split {
        SplitArg::All => (0..manifest.views.len()).collect(),
        SplitArg::Test => manifest.split_indices(Split::Test),
        SplitArg::Train => manifest.split_indices(Split::Train),
    };
    let split_name = format!("{split:?}").to_lowercase();
    if indices.is_empty() {
        bail!(
            "{}: the pack has no {split_name} views ({} views in all); pass --split all or \
             --split train, or re-pack with --test-every",
            pack_path.display(),
            manifest.views.len()
        );
    }
    for &i in &indices {
        let v = &manifest.views[i];
        check_size(&v.camera)
            .with_context(|| format!("{}: view {i} ({:?})", pack_path.display(), v.name))?;
    }
    Ok((indices, split_name))
}

/// `--trajectory N`: N frames along a path through `keys` (see the module doc).
fn render_trajectory(
    raster: Box<dyn Rasterizer>,
    args: &Args,
    frames: usize,
    keys: &[Camera],
    source: &Path,
    output: &Path,
) -> Result<()> {
    let path = match args.trajectory_shape {
        ShapeArg::Interp => ramsplat::scene::trajectory::interpolate(keys, frames),
        ShapeArg::Ellipse => ramsplat::scene::trajectory::ellipse(keys, frames),
    }
    .with_context(|| {
        format!(
            "cannot make a path through the cameras of {}",
            source.display()
        )
    })?;
    check_size(&path[0]).with_context(|| format!("{}", source.display()))?;
    check_stale_frames(output, path.len())?;
    let model = load_model(args)?;
    let mut r = Renderer::new(raster, args, &model)?;
    std::fs::create_dir_all(output)
        .with_context(|| format!("cannot create {}", output.display()))?;
    for (n, camera) in path.iter().enumerate() {
        let frame = output.join(format!("frame_{n:05}.png"));
        r.render_to_png(&model, camera, None, None, &frame)
            .with_context(|| format!("trajectory frame {n}"))?;
        if (n + 1) % 25 == 0 || n + 1 == path.len() {
            eprintln!("[{}/{}] frames", n + 1, path.len());
        }
    }
    eprintln!(
        "{} frames of {}x{} through {} cameras ({} Gaussians, SH degree {}, {} backend{}) into \
         {}; e.g. ffmpeg -framerate 30 -i {}/frame_%05d.png -pix_fmt yuv420p fly.mp4",
        path.len(),
        path[0].width,
        path[0].height,
        keys.len(),
        model.len(),
        r.options.sh_degree,
        r.raster.name(),
        mode_note(r.options.antialiased),
        output.display(),
        output.display()
    );
    Ok(())
}

/// Refuses a trajectory of `frames` frames into a directory holding frames of a longer earlier
/// one (`frame_N.png` and its depth files, `N ≥ frames`): they would be left behind, and an
/// encoder reading `frame_%05d.png` would play them after this trajectory's.
fn check_stale_frames(output: &Path, frames: usize) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(output) else {
        return Ok(());
    };
    let mut stale: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let number = name.strip_prefix("frame_")?;
            let end = number.find(|c: char| !c.is_ascii_digit())?;
            let n: usize = number[..end].parse().ok()?;
            let ours = matches!(&number[end..], ".png" | ".depth.png" | ".depth.npy");
            (ours && n >= frames).then_some(name)
        })
        .collect();
    if stale.is_empty() {
        return Ok(());
    }
    stale.sort();
    bail!(
        "{}: holds {} files of a longer earlier trajectory (from {}) that these {frames} frames \
         would leave behind, and `frame_%05d.png` would play them after the new ones; remove \
         them or render into an empty directory (nothing was written)",
        output.display(),
        stale.len(),
        stale[0]
    );
}

fn render_pack(
    raster: Box<dyn Rasterizer>,
    args: &Args,
    pack_path: &Path,
    output: &Path,
) -> Result<()> {
    let pack = open_pack(args, pack_path)?;
    let manifest = pack.manifest();
    let (indices, split_name) = split_views(args, pack_path, manifest)?;
    let model = load_model(args)?;
    let mut r = Renderer::new(raster, args, &model)?;
    r.check_grids_name_any(
        args.bilateral_grids.as_ref(),
        indices.iter().map(|&i| manifest.views[i].name.as_str()),
    )?;
    let mut aligner = Aligner::new(args, &model, r.options.sh_degree, manifest.scene.extent)?;
    std::fs::create_dir_all(output)
        .with_context(|| format!("cannot create {}", output.display()))?;

    let progress = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(indices.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} views {msg} [{eta}]")
                .expect("static template"),
        );
        bar
    });
    let mut gt = Vec::new();
    let mut scorer = Scorer::new();
    let mut corrected_scorer = Scorer::new();
    let mut views = Vec::with_capacity(indices.len());
    for (n, &i) in indices.iter().enumerate() {
        let v = &manifest.views[i];
        let (w, h) = (v.width() as usize, v.height() as usize);
        gt.resize(v.decoded_len(), 0);
        pack.read_view_into(i, &mut gt)
            .with_context(|| format!("cannot read view {i} ({:?})", v.name))?;
        // An inverse-depth plane (last in the view's bytes) is for training only.
        let layout = PixelLayout {
            depth: false,
            ..v.layout()
        };
        gt.truncate(layout.len(v.width(), v.height()));
        // RGBA views are rendered and scored over white unless --bg says otherwise (the
        // NeRF-synthetic convention, the one gs-train --eval uses), RGB views over black.
        let background = args.bg.unwrap_or(if v.alpha { WHITE } else { BLACK });
        r.options.background = background;
        let context = || format!("view {i} ({:?})", v.name);
        let exposure = r.exposure_of(&v.name).with_context(context)?;
        // With --eval-pose-steps: the view's camera fitted to its image (on its bytes as
        // packed, the part --half scores, through its exposure), and its scores from the
        // pack's camera.
        let (camera, given_pose) = match &mut aligner {
            Some(a) => {
                let view = TrainView {
                    region: args.half.map_or(Region::Full, HalfArg::region),
                    ..TrainView::new(v.camera, layout)
                };
                let (camera, given) = a
                    .align(&view, &gt, background, exposure)
                    .with_context(context)?;
                (camera, Some(given))
            }
            None => (v.camera, None),
        };
        // A masked view is scored on its used pixels (both images black elsewhere).
        let mask = v
            .mask
            .then(|| gt.split_off(v.layout().pixel_bytes(v.width(), v.height())));
        if v.alpha {
            let rgba = std::mem::take(&mut gt);
            ramsplat::train::alpha::composite_rgba8(&rgba, background, &mut gt);
        }
        r.render(&model, &camera).with_context(context)?;
        if let Some(e) = &exposure {
            exposure::apply_in_place(e, &mut r.out.image);
        }
        r.apply_grid(&v.name, &camera);
        // `--half`: that half of render, ground truth and mask alone.
        let (image, mask, w) = match args.half.map(HalfArg::region) {
            Some(region) => {
                let (lo, hi) = region.columns(v.width());
                gt = region.crop(&gt, v.width(), 3);
                let mask = mask.map(|m| region.crop(&m, v.width(), 1));
                let image = Cow::Owned(region.crop(&r.out.image, v.width(), 3));
                (image, mask, (hi - lo) as usize)
            }
            None => (Cow::Borrowed(&r.out.image[..]), mask, w),
        };
        // Scored by the rules of ramsplat::eval, the ones gs-train --eval uses.
        let Score { psnr, ssim } = scorer
            .score_masked(&image, &gt, mask.as_deref(), w, h)
            .with_context(context)?;
        // Colour-corrected from the 8-bit render just scored, as gs-train --eval does.
        let color_corrected = match args.color_correct_metric {
            Some(method) => Some(ColorCorrectedScore::new(
                corrected_scorer
                    .score_corrected(method, scorer.rgb8(), &gt, mask.as_deref(), w, h)
                    .with_context(context)?,
            )),
            None => None,
        };
        if let Some(m) = &mask {
            eval::mask_rgb8(&mut gt, m);
        }
        let file = eval::view_file_name(i, &v.name);
        let side = eval::side_by_side(&gt, scorer.rgb8(), w, h);
        r.inputs.check(&output.join(&file))?;
        eval::write_png(&output.join(&file), &side, 2 * w as u32, h as u32)?;
        r.write_depth(&model, &camera, &output.join(&file))
            .with_context(|| format!("view {i} ({:?})", v.name))?;
        let corrected = color_corrected.as_ref().map_or(String::new(), |c| {
            format!(
                "; colour-corrected PSNR {} dB, SSIM {:.4}",
                c.cc_psnr.map_or("inf".into(), |p| format!("{p:.2}")),
                c.cc_ssim
            )
        });
        let line = format!(
            "view {i} {}: PSNR {psnr:.2} dB, SSIM {ssim:.4}{corrected}",
            v.name
        );
        match &progress {
            Some(bar) => {
                bar.set_message(line);
                bar.inc(1);
            }
            None => eprintln!("[{}/{}] {line}", n + 1, indices.len()),
        }
        views.push(ViewMetrics {
            index: i,
            name: v.name.clone(),
            file,
            psnr: psnr.is_finite().then_some(psnr),
            ssim,
            background,
            given_pose,
            color_corrected,
        });
    }
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let finite: Vec<f64> = views.iter().filter_map(|v| v.psnr).collect();
    let report = MetricsReport {
        model: args.ply.display().to_string(),
        pack: pack_path.display().to_string(),
        split: split_name,
        backend: r.raster.name().to_owned(),
        rasterize_mode: rasterize_mode_name(r.options.antialiased),
        sh_degree: r.options.sh_degree,
        background: args.bg,
        exposure: args.exposure.as_ref().map(|p| p.display().to_string()),
        bilateral_grids: args
            .bilateral_grids
            .as_ref()
            .map(|p| p.display().to_string()),
        half: args.half.map(|h| format!("{h:?}").to_lowercase()),
        count: views.len(),
        mean_psnr: (!finite.is_empty()).then(|| finite.iter().sum::<f64>() / finite.len() as f64),
        mean_ssim: views.iter().map(|v| v.ssim).sum::<f64>() / views.len() as f64,
        identical_views: views.len() - finite.len(),
        color_corrected: args.color_correct_metric.map(|method| {
            let finite: Vec<f64> = views
                .iter()
                .filter_map(|v| v.color_corrected.as_ref()?.cc_psnr)
                .collect();
            ColorCorrectedMeans {
                color_correct_method: method.name(),
                mean_cc_psnr: (!finite.is_empty())
                    .then(|| finite.iter().sum::<f64>() / finite.len() as f64),
                mean_cc_ssim: views
                    .iter()
                    .filter_map(|v| Some(v.color_corrected.as_ref()?.cc_ssim))
                    .sum::<f64>()
                    / views.len() as f64,
            }
        }),
        eval_pose: aligner.as_ref().and_then(|a| {
            EvalPoseReport::of(
                views.iter().filter_map(|v| v.given_pose.as_ref()),
                a.config.steps,
                a.config.lr,
            )
        }),
        views,
    };
    let json = serde_json::to_string_pretty(&report).context("cannot encode metrics")?;
    r.inputs.check(&output.join("metrics.json"))?;
    write_text(&output.join("metrics.json"), &(json + "\n"))?;
    eprintln!(
        "{} views: mean PSNR {} dB, mean SSIM {:.4}{}{}; wrote {}",
        report.count,
        report
            .mean_psnr
            .map_or("inf".to_owned(), |p| format!("{p:.2}")),
        report.mean_ssim,
        report
            .color_corrected
            .as_ref()
            .map_or(String::new(), |c| format!(
                "; colour-corrected ({}) mean PSNR {} dB, mean SSIM {:.4}",
                c.color_correct_method,
                c.mean_cc_psnr
                    .map_or("inf".to_owned(), |p| format!("{p:.2}")),
                c.mean_cc_ssim
            )),
        report
            .eval_pose
            .as_ref()
            .map_or(String::new(), |e| format!(" ({})", e.line())),
        output.join("metrics.json").display()
    );
    Ok(())
}

fn convert(args: &Args, out: &Path) -> Result<()> {
    let Some(format) = args.convert_format.or_else(|| ModelFormat::from_path(out)) else {
        bail!(
            "{}: --convert needs an output ending in .spz, .splat, .compressed.ply, .sog or .ply \
             (or --convert-format)",
            out.display()
        );
    };
    let mut model = load_model(args)?;
    let edits = edit_for_convert(args, &mut model.gaussians, model.antialiased)?;
    let info = ModelInfo::with_mode(model.antialiased).with_folded_filter(model.folded_filter_3d);
    save_model(out, &model, format, info).context("cannot write the converted model")?;
    if format == ModelFormat::Splat && model.antialiased {
        eprintln!(
            "gs-render: warning: .splat cannot say the model is antialiased; render {} with \
             --rasterize-mode antialiased",
            out.display()
        );
    }
    let written_degree = match format {
        ModelFormat::Splat => 0,
        ModelFormat::CompressedPly => ramsplat::export::compressed_ply::stored_sh_degree(&model),
        ModelFormat::Ply | ModelFormat::Spz | ModelFormat::Sog => model.sh_degree,
    };
    eprintln!(
        "wrote {} ({} Gaussians{edits}, SH degree {written_degree}{})",
        out.display(),
        model.len(),
        match format {
            _ if written_degree == model.sh_degree => String::new(),
            ModelFormat::Splat => "; .splat keeps the DC colour only".to_owned(),
            _ => format!("; {}", ramsplat::export::compressed_ply::BANDS_LEFT_OUT),
        }
    );
    Ok(())
}

/// `--convert`'s edits of the loaded model, in order: `--crop`, `--min-opacity`,
/// `--prune-to`, `--sh-degree`. Returns what they left out, for the summary line (empty
/// without edits); a model left with no Gaussian is an error, so nothing is written.
fn edit_for_convert(args: &Args, g: &mut Gaussians, antialiased: bool) -> Result<String> {
    let before = g.len();
    let mut notes = Vec::new();
    if let Some(b) = args.crop {
        let keep: Vec<bool> = g
            .means
            .iter()
            .map(|m| (0..3).all(|a| b[a] <= m[a] && m[a] <= b[3 + a]))
            .collect();
        g.retain(&keep);
        notes.push(format!("{} outside the crop box", before - g.len()));
    }
    if let Some(o) = args.min_opacity {
        let n = g.len();
        let keep: Vec<bool> = g
            .logit_opacities
            .iter()
            .map(|&l| ramsplat::scene::maths::sigmoid(l) >= o)
            .collect();
        g.retain(&keep);
        notes.push(format!("{} below opacity {o}", n - g.len()));
    }
    if let (Some(target), n) = (args.prune_to, g.len()) {
        if n > 0 {
            let keep = target.count(n);
            match &args.prune_views {
                Some(pack) => {
                    let views = prune_by_significance(g, antialiased, pack, keep)?;
                    notes.push(format!(
                        "{} least significant to the {views} training views of {}",
                        n - g.len(),
                        pack.display()
                    ));
                }
                None => {
                    let opacity: Vec<f64> = g.logit_opacities.iter().map(|&l| l.into()).collect();
                    g.retain(&keep_highest(&opacity, keep));
                    notes.push(format!("{} least opaque", n - g.len()));
                }
            }
        }
    }
    if g.is_empty() {
        bail!(
            "{}: no Gaussian of the {before} is left ({}); nothing was written: widen --crop or \
             lower --min-opacity",
            args.ply.display(),
            notes.join(", ")
        );
    }
    if let Some(d) = args.sh_degree {
        if d > g.sh_degree {
            bail!(
                "--sh-degree {d} is above the model's stored SH degree {}; a converted model \
                 can only drop bands",
                g.sh_degree
            );
        }
        g.set_sh_degree(d);
    }
    Ok(if notes.is_empty() {
        String::new()
    } else {
        format!(" of {before}; left out {}", notes.join(", "))
    })
}

/// `--prune-to`: how many Gaussians to keep.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PruneTo {
    Count(usize),
    /// Percent of the model, in (0, 100].
    Percent(f64),
}

impl PruneTo {
    /// How many of `n` Gaussians to keep: at least one, at most `n`.
    fn count(self, n: usize) -> usize {
        match self {
            PruneTo::Count(k) => k.min(n),
            PruneTo::Percent(p) => ((n as f64 * p / 100.0).round() as usize).clamp(1, n),
        }
    }
}

/// `--prune-to`: a whole count of at least 1, or a percentage in (0, 100] ending in `%`.
fn parse_prune_to(s: &str) -> Result<PruneTo, String> {
    if let Some(p) = s.strip_suffix('%') {
        return match p.trim().parse::<f64>() {
            Ok(v) if v > 0.0 && v <= 100.0 => Ok(PruneTo::Percent(v)),
            _ => Err(format!("{s:?} is not a percentage in (0, 100], e.g. 34%")),
        };
    }
    match s.parse::<usize>() {
        Ok(k) if k > 0 => Ok(PruneTo::Count(k)),
        _ => Err(format!(
            "{s:?} is neither a count of Gaussians (a whole number, at least 1) nor a \
             percentage such as 34%"
        )),
    }
}

/// `--prune-to`: scores every Gaussian of `g` by its compositing weights over the training
/// views of `pack_path` (`ramsplat::render::significance`) and keeps the `keep`
/// most significant. Returns how many views scored them.
fn prune_by_significance(
    g: &mut Gaussians,
    antialiased: bool,
    pack_path: &Path,
    keep: usize,
) -> Result<usize> {
    let pack = Pack::open(pack_path).context("cannot open the pack")?;
    let manifest = pack.manifest();
    let train = manifest.split_indices(Split::Train);
    if train.is_empty() {
        bail!(
            "{}: the pack has no training views to score the Gaussians by ({} views in all, all \
             held out)",
            pack_path.display(),
            manifest.views.len()
        );
    }
    // The weights depend on geometry and opacity only: no colour is evaluated past SH 0.
    let options = RenderOptions {
        sh_degree: 0,
        antialiased,
        background: [0.0; 3],
        ..RenderOptions::default()
    };
    let started = std::time::Instant::now();
    let mut scores = Significance::new(g.len());
    for (k, &i) in train.iter().enumerate() {
        let v = &manifest.views[i];
        let what = || format!("{}: view {i} ({:?})", pack_path.display(), v.name);
        check_size(&v.camera).with_context(what)?;
        scores.add_view(g, &v.camera, &options).with_context(what)?;
        if (k + 1) % 25 == 0 || k + 1 == train.len() {
            eprintln!("[{}/{}] training views scored", k + 1, train.len());
        }
    }
    let seen = scores.scores().iter().filter(|&&s| s > 0.0).count();
    g.retain(&keep_highest(scores.scores(), keep));
    eprintln!(
        "scored {} Gaussians over {} training views in {:.1} s ({seen} drawn in at least one; \
         CPU); kept the {keep} most significant",
        scores.scores().len(),
        train.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(train.len())
}

/// `--min-opacity`: a number in [0, 1].
fn parse_unit(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number in [0, 1]")),
    }
}

/// `--crop`: six finite numbers, each minimum at most its maximum.
fn parse_crop(s: &str) -> Result<[f32; 6], String> {
    let v: Vec<f32> = s
        .split(',')
        .map(|p| p.trim().parse::<f32>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("{s:?} is not six numbers separated by commas"))?;
    let b: [f32; 6] = v
        .try_into()
        .map_err(|v: Vec<f32>| format!("{s:?} holds {} numbers, not six", v.len()))?;
    if let Some(a) = (0..3).find(|&a| b[a] > b[3 + a]) {
        return Err(format!(
            "{s:?}: the minimum {} of axis {} is above its maximum {}",
            b[a],
            ["x", "y", "z"][a],
            b[3 + a]
        ));
    }
    Ok(b)
}

fn parse_model_format(s: &str) -> Result<ModelFormat, String> {
    ModelFormat::from_name(s).ok_or_else(|| {
        format!("{s:?} is not a model format (ply, spz, splat, compressed-ply, sog)")
    })
}

/// Reads an `exposure.json` (see `ramsplat::train::exposure`).
fn read_exposures(path: &Path) -> Result<HashMap<String, Exposure>> {
    let text = ramsplat::fsutil::read_text_input(path, MAX_JSON_BYTES)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let list = exposure::from_json(&text)
        .map_err(|why| anyhow::anyhow!("{}: not an exposure.json: {why}", path.display()))?;
    Ok(list.into_iter().collect())
}

/// The cameras of a `cameras.json`, in file order, at `-r`/`--data-factor`'s size.
fn read_camera_list(args: &Args, list: &Path) -> Result<Vec<Camera>> {
    let text = ramsplat::fsutil::read_text_input(list, MAX_JSON_BYTES)
        .with_context(|| format!("cannot read {}", list.display()))?;
    let cameras = cameras_json::parse(&text).with_context(|| format!("{}", list.display()))?;
    cameras
        .into_iter()
        .map(|(_, c)| at_resolution(args, c))
        .collect()
}

/// Refuses a `--mesh` output that is an input, a directory, or lies inside the pack.
fn check_mesh_output(args: &Args, output: &Path) -> Result<()> {
    Inputs::of(args).check(output)?;
    refuse_inside_pack(args, output, "the mesh")?;
    if output.is_dir() {
        bail!(
            "-o {}: is a directory; with --mesh, -o names the PLY mesh to write",
            output.display()
        );
    }
    Ok(())
}

/// `--mesh`: fuses `cameras`' renders into a TSDF volume and writes its surface to `output`
/// (`ramsplat::mesh`).
fn fuse_mesh(
    raster: Box<dyn Rasterizer>,
    args: &Args,
    cameras: &[Camera],
    source: &Path,
    output: &Path,
) -> Result<()> {
    for (i, c) in cameras.iter().enumerate() {
        check_size(c).with_context(|| format!("{}: camera {i}", source.display()))?;
    }
    let mut params = TsdfParams::for_cameras(cameras, args.mesh_resolution, args.depth_trunc)
        .with_context(|| {
            format!(
                "{}: {} camera(s); pass --depth-trunc (and --voxel-size)",
                source.display(),
                cameras.len()
            )
        })?;
    if let Some(v) = args.voxel_size {
        params.voxel_size = v;
        params.sdf_trunc = ramsplat::mesh::TRUNC_VOXELS * v;
    }
    if let Some(t) = args.sdf_trunc {
        params.sdf_trunc = t;
    }
    let model = load_model(args)?;
    // The renderer's options (SH degree checked against the model, rasterization mode); the
    // fusion renders over black whatever its background.
    let Renderer {
        mut raster,
        options,
        ..
    } = Renderer::new(raster, args, &model)?;
    let mesh_depth = args.depth_kind.unwrap_or(DepthKind::Plane);
    let mut fusion = Fusion::new(params, &options)
        .map_err(|e| {
            anyhow::Error::new(e).context("--voxel-size, --sdf-trunc and --depth-trunc do not fit")
        })?
        .with_limit(args.mesh_memory)
        .with_depth(mesh_depth);
    for (i, camera) in cameras.iter().enumerate() {
        fusion
            .add_view(raster.as_mut(), &model, camera, i)
            .with_context(|| format!("{}: camera {i}", source.display()))?;
        if (i + 1) % 10 == 0 || i + 1 == cameras.len() {
            eprintln!(
                "[{}/{}] views fused ({} blocks, {})",
                i + 1,
                cameras.len(),
                fusion.volume.blocks(),
                ramsplat::budget::format_size(fusion.volume.bytes())
            );
        }
    }
    let mut mesh = fusion.volume.mesh();
    let (triangles, vertices) = (mesh.triangles.len(), mesh.positions.len());
    let pieces = if args.mesh_pieces == 0 {
        None
    } else {
        Some(mesh.keep_largest_pieces(args.mesh_pieces))
    };
    if mesh.is_empty() {
        bail!(
            "{}: the {} views saw no surface within {} (scene units) of their cameras (covered \
             at least half); check that the model and the cameras are in one frame, or pass a \
             larger --depth-trunc",
            source.display(),
            cameras.len(),
            params.depth_trunc
        );
    }
    let comments = [
        format!(
            "ramsplat gs-render --mesh: {} views of {} fused ({} depths, voxel {:.6e}, \
             truncation {:.6e}, depths to {:.6e})",
            cameras.len(),
            source.display(),
            mesh_depth.name(),
            params.voxel_size,
            params.sdf_trunc,
            params.depth_trunc
        ),
        format!("model {}", args.ply.display()),
    ];
    mesh.write_ply(output, &comments)?;
    let kept = match pieces {
        Some(n) if n > args.mesh_pieces => format!(
            "; kept the {} largest of {n} pieces: {} triangles, {} vertices",
            args.mesh_pieces,
            mesh.triangles.len(),
            mesh.positions.len()
        ),
        Some(n) => format!(" in {n} piece(s)"),
        None => String::new(),
    };
    eprintln!(
        "wrote {}: {triangles} triangles, {vertices} vertices{kept} (from {} views at {}x{}, \
         {} Gaussians, {} backend{}; voxel {:.4e}, truncation {:.4e}, depths to {:.4e}; volume \
         {} in {} blocks)",
        output.display(),
        cameras.len(),
        cameras[0].width,
        cameras[0].height,
        model.len(),
        raster.name(),
        mode_note(options.antialiased),
        params.voxel_size,
        params.sdf_trunc,
        params.depth_trunc,
        ramsplat::budget::format_size(fusion.volume.bytes()),
        fusion.volume.blocks()
    );
    Ok(())
}

fn run(args: &Args) -> Result<()> {
    if let Some(out) = &args.convert {
        Inputs::of(args).check(out)?;
        return convert(args, out);
    }
    let output = args
        .output
        .as_deref()
        .expect("clap requires -o without --convert");
    // Before any work: the one file of --camera or --mesh, or the directory of the other
    // modes.
    if args.mesh {
        check_mesh_output(args, output)?;
    } else if args.camera.is_some() {
        Inputs::of(args).check(output)?;
    } else {
        check_output_dir(args, output)?;
    }
    // Fail on an unavailable backend before doing any work.
    let raster = make_rasterizer(args.backend, &mut |note| eprintln!("gs-render: {note}"))?;
    if args.mesh {
        let (cameras, source) = match (&args.pack, &args.cameras) {
            (Some(pack_path), None) => {
                let pack = open_pack(args, pack_path)?;
                let (indices, _) = split_views(args, pack_path, pack.manifest())?;
                let cameras = indices
                    .iter()
                    .map(|&i| pack.manifest().views[i].camera)
                    .collect();
                (cameras, pack_path)
            }
            (None, Some(list)) => (read_camera_list(args, list)?, list),
            _ => bail!("--mesh needs the cameras of --pack PACK or --cameras cameras.json"),
        };
        return fuse_mesh(raster, args, &cameras, source, output);
    }
    if let Some(frames) = args.trajectory {
        return match (&args.pack, &args.cameras) {
            (Some(pack_path), None) => {
                let pack = open_pack(args, pack_path)?;
                let (indices, _) = split_views(args, pack_path, pack.manifest())?;
                let keys: Vec<Camera> = indices
                    .iter()
                    .map(|&i| pack.manifest().views[i].camera)
                    .collect();
                render_trajectory(raster, args, frames, &keys, pack_path, output)
            }
            (None, Some(list)) => {
                let keys = read_camera_list(args, list)?;
                render_trajectory(raster, args, frames, &keys, list, output)
            }
            _ => bail!("--trajectory needs the cameras of --pack PACK or --cameras cameras.json"),
        };
    }
    match (&args.camera, &args.pack, &args.cameras) {
        (Some(cam), None, None) => render_camera(raster, args, cam, output),
        (None, Some(pack), None) => render_pack(raster, args, pack, output),
        (None, None, Some(list)) => render_camera_list(raster, args, list, output),
        _ => unreachable!(
            "clap's `source` group requires exactly one of --camera / --pack / --cameras"
        ),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gs-render: error: {}", ramsplat::cli::chain_message(&e));
            if matches!(
                e.downcast_ref::<RenderError>(),
                Some(RenderError::Backend { .. })
            ) {
                ExitCode::from(3)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
