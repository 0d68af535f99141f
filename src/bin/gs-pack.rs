//! `gs-pack`: convert datasets into ramsplat packs, verify and describe them, synthesize test
//! datasets, and benchmark the loader. Thin: all work happens in the library.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use ramsplat::budget::format_size;
use ramsplat::cli::parse_size_arg;
use ramsplat::cli::{print_stdout, report_error, Progress, EXIT_CORRUPT, EXIT_FAILURE};
use ramsplat::data::{CachePolicy, Position};
use ramsplat::dataset::Format;
use ramsplat::dataset::Split;
use ramsplat::import::image::Resize;
use ramsplat::pack::{convert, ConvertOptions, Event};
use ramsplat::shard::reader::Pack;
use ramsplat::shard::{Codec, ShardError};

const SIZE_HELP: &str =
    "Sizes: 4G = 4GiB = 4·2^30 bytes; 4GB = 4·10^9 bytes; plain numbers are bytes.";

#[derive(Parser)]
#[command(
    name = "gs-pack",
    version,
    about = "Pack 3DGS datasets into immutable, checksummed, memory-mapped shards"
)]
#[command(
    after_help = "Exit codes: 0 success, 1 failure, 2 bad command line, 3 verify found damage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a COLMAP workspace, NeRF transforms.json dataset, Agisoft Metashape camera XML,
    /// OpenSfM or OpenDroneMap reconstruction, Meshroom / AliceVision SfMData file, Bundler
    /// file, RealityCapture / RealityScan XMP export, PLY, PCD, LAS, LAZ or E57 point cloud(s),
    /// or OBJ meshes' vertices into a pack.
    #[command(after_help = SIZE_HELP)]
    Convert {
        /// Dataset folder (an OpenDroneMap project folder, a Meshroom node's folder, or the
        /// photos' folder holding RealityCapture's XMP files too) or a
        /// transforms*.json / Metashape .xml / OpenSfM reconstruction.json / Meshroom .sfm /
        /// Bundler .out / .ply / .pcd / .las / .laz / .e57 / .obj file.
        input: PathBuf,
        /// Output pack directory (absent or empty; a pack there needs --force).
        #[arg(short, long)]
        output: PathBuf,
        #[arg(long, value_enum, default_value = "auto")]
        format: Format,
        /// Scale views wider than PX down to PX (default: 1600, as the original 3DGS); 0 keeps
        /// every view at full size.
        #[arg(long, value_name = "PX", conflicts_with = "downscale")]
        max_width: Option<u32>,
        /// Divide both image sides by N, N >= 1 (overrides the default --max-width).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        downscale: Option<u32>,
        /// How view pixels are stored: zstd (lossless, fast to decode), png (lossless,
        /// smaller, slower), raw, or jpeg (smallest: a source JPEG's own compressed data where
        /// the view is packed as the file decodes, i.e. no undistortion, resize or rotation;
        /// other views encoded at --jpeg-quality, which is lossy, or stored with zstd under
        /// --lossless).
        #[arg(long, value_enum, default_value = "zstd")]
        codec: Codec,
        /// Quality (1-100) of the views --codec jpeg has to encode (4:4:4 chroma; default 95).
        #[arg(long, value_name = "Q", value_parser = clap::value_parser!(u8).range(1..=100))]
        jpeg_quality: Option<u8>,
        /// With --codec jpeg: store the views that cannot keep their source JPEG with zstd
        /// instead of encoding them, so no view loses anything.
        #[arg(long, conflicts_with = "jpeg_quality")]
        lossless: bool,
        /// Start a new shard file past this size.
        #[arg(long, default_value = "512M", value_parser = parse_size_arg)]
        shard_size: u64,
        /// Mark every N-th view (0, N, 2N, … in name order) as a test view; 0 = none.
        #[arg(long, default_value_t = 8)]
        test_every: u32,
        /// Replace an existing pack at the output path.
        #[arg(long)]
        force: bool,
        /// Refuse datasets whose metadata lists images that do not exist.
        #[arg(long)]
        strict: bool,
        /// Pack JPEGs whose scan data is corrupt as decoded (damaged part grey), with a warning
        /// naming each file, instead of failing.
        #[arg(long)]
        lenient: bool,
        /// Decode/encode threads (default: all cores).
        #[arg(long)]
        workers: Option<usize>,
        /// Read the images from DIR: for COLMAP instead of images/ (relative to the workspace
        /// root), for transforms.json each file_path's file name in DIR (nerfstudio's images_N),
        /// for a Metashape XML the folder of the photos (relative to the XML; default images/
        /// beside it, else its own folder), for OpenSfM the folder of the shots' images
        /// (relative to the dataset root; default images/), for Meshroom the folder holding the
        /// views' image file names (relative to the .sfm's folder; default each view's path),
        /// for Bundler the folder holding the listed images' file names (relative to
        /// list.txt's folder), for RealityCapture the folder of the photos of the XMP files'
        /// stems (relative to the XMP folder).
        /// A resized copy works, each camera scaled to its file: Mip-NeRF 360's benchmark
        /// protocol (3DGS -i images_4, gsplat --data_factor 4) is `--images images_4` for
        /// outdoor scenes, `images_2` indoors.
        #[arg(long, value_name = "DIR")]
        images: Option<PathBuf>,
        /// Pack each view's monocular inverse-depth map for depth regularization (3DGS's -d):
        /// DIR/IMAGE_NAME_WITHOUT_EXTENSION.png (Depth Anything V2 output), relative to the
        /// dataset root like --images. COLMAP needs the fits in sparse/0/depth_params.json
        /// (3DGS's utils/make_depth_scale.py); transforms.json uses a depth_params.json beside
        /// it when present.
        #[arg(long, value_name = "DIR")]
        depths: Option<PathBuf>,
        /// Pack, for every view, a sparse inverse-depth plane: the inverse depth of each SfM
        /// point its image observes (the COLMAP model's points3D tracks, OpenSfM's tracks.csv
        /// beside its reconstruction.json, a Meshroom file's landmark observations, or a
        /// Bundler file's view lists), at the pixel where
        /// the point projects through the packed camera (the nearest where several share one),
        /// nothing elsewhere. gs-train then supervises the rendered depth at those pixels, as
        /// gsplat's --depth_loss does. COLMAP, OpenSfM, Meshroom and Bundler only; not with
        /// --depths (one kind of depth per pack). Holds about 24 bytes per point and 4 per
        /// observation while converting.
        #[arg(long)]
        sfm_depths: bool,
        /// Start training from the points of FILE (a .ply, .pcd, .las, .laz or .e57 cloud, or
        /// an .obj mesh's vertices: a dense reconstruction such as COLMAP's dense/fused.ply or
        /// Meshroom's texturedMesh.obj, or a laser scan or depth-camera cloud registered to the
        /// cameras) instead of the dataset's own SfM points (or random points, when it has none). Relative to
        /// the dataset root like --images, or absolute. gs-train's --max-gaussians subsamples
        /// a cloud larger than the budget allows.
        #[arg(long, value_name = "FILE")]
        points: Option<PathBuf>,
        /// Move the --points cloud (or the point cloud being converted) into the cameras'
        /// frame by the transform in FILE, applied in double precision before the points are
        /// rounded to the pack's floats: a 4×4 matrix row by row (CloudCompare's registration
        /// matrix, numpy.savetxt), its first three rows, or COLMAP's `scale qw qx qy qz tx ty
        /// tz` (model_aligner's --transform_path). Relative to the working directory.
        #[arg(long, value_name = "FILE")]
        points_transform: Option<PathBuf>,
        /// Apply the inverse of --points-transform (a file that maps the cameras' frame to the
        /// cloud's, as COLMAP's model_aligner writes for a georeferenced model).
        #[arg(long, requires = "points_transform")]
        invert_points_transform: bool,
        /// Pack each view shot through a fisheye lens (COLMAP OPENCV_FISHEYE, RADIAL_FISHEYE,
        /// SIMPLE_RADIAL_FISHEYE, nerfstudio's OPENCV_FISHEYE, Metashape's fisheye sensors,
        /// OpenSfM's fisheye and fisheye_opencv cameras, Meshroom's fisheye4) as
        /// a fisheye view: the ideal equidistant fisheye image of the photo's size and
        /// intrinsics (the lens's k1..k4 removed; an image whose k's are 0 is packed as it is),
        /// which keeps the periphery a pinhole image drops (up to just under 90° off the axis).
        /// Views of other lenses stay pinhole. Without it every view is packed as a pinhole
        /// image.
        #[arg(long)]
        keep_fisheye: bool,
    },
    /// Check every checksum of a pack; exit 0, or 3 naming the damaged shard and record.
    Verify { pack: PathBuf },
    /// Describe a pack: views, resolutions, points, bytes on disk, decoded bytes.
    Info {
        pack: PathBuf,
        /// Print one JSON object instead of a human summary.
        #[arg(long)]
        json: bool,
    },
    /// Write a pack as a folder other trainers read (PNG images exactly as packed, ideal
    /// cameras: pinhole, or OPENCV_FISHEYE with k1..k4 = 0 for fisheye views; split, points):
    /// nerfstudio-style (transforms.json), or a COLMAP sparse model (--format colmap: the
    /// original 3DGS, gsplat); `gs-pack convert` reads either back (--keep-fisheye keeps the
    /// fisheye views).
    Export {
        pack: PathBuf,
        /// Output folder (must not exist).
        #[arg(short, long)]
        output: PathBuf,
        /// For a pack without SfM points: also write the random points `gs-train --seed SEED`
        /// starts from as the folder's point cloud, so another trainer starts from them too.
        #[arg(long, value_name = "SEED")]
        random_points: Option<u64>,
        /// Metadata layout: `nerfstudio` (transforms.json with per-frame intrinsics and the
        /// split lists, sparse_pc.ply) or `colmap` (sparse/0/ with PINHOLE cameras (and
        /// OPENCV_FISHEYE ones for fisheye views), images,
        /// points3D and test.txt, as COLMAP's image_undistorter writes it: what the original
        /// 3DGS and gsplat's simple_trainer read). Images, masks and depth maps are the same.
        #[arg(long, value_enum, default_value = "nerfstudio")]
        format: ExportFormat,
        /// Crop each view (whole pixels, nothing resampled) to the largest window centred on
        /// its principal point, within 0.25 px: the original 3DGS renders every camera as if
        /// its principal point were centred. The pixels outside the windows are not exported.
        #[arg(long, alias = "center-principal-point")]
        centre_principal_point: bool,
    },
    /// Cut a pack into spatial blocks, each a pack of its own to train under its own budget
    /// (scenes larger than one run's --ram-budget or GPU holds); `gs-pack merge` joins the
    /// trained blocks into one model.
    Partition(PartitionArgs),
    /// Join the models trained on a partition's blocks into one model: from each block, the
    /// Gaussians whose centre lies in its core (the cores tile the ground, so nothing is kept
    /// twice).
    Merge {
        /// The folder `gs-pack partition` wrote (holding partition.json).
        partition: PathBuf,
        /// The gs-train output folder of every block (each run's report.json names its pack;
        /// its last saved model is merged).
        #[arg(required = true, value_name = "RUN")]
        runs: Vec<PathBuf>,
        /// The merged model: OUT.ply, OUT.spz, OUT.splat, OUT.compressed.ply or OUT.sog (by its name).
        #[arg(short, long, value_name = "OUT.ply")]
        output: PathBuf,
    },
    /// Generate a procedural dataset (images + COLMAP or transforms.json metadata + points).
    Synth(ramsplat::synth::SynthArgs),
    /// Run the loader alone under a RAM budget and print one JSON line of throughput figures.
    #[command(after_help = SIZE_HELP)]
    Bench(BenchArgs),
}

#[derive(clap::Args)]
struct PartitionArgs {
    /// Pack to partition (only read).
    pack: PathBuf,
    /// Output folder (absent or empty): one pack per block (block-C-R) and partition.json.
    #[arg(short, long, required_unless_present = "dry_run")]
    output: Option<PathBuf>,
    /// Blocks as COLUMNSxROWS (e.g. 2x2, or 4x1 for a street), columns along the cameras'
    /// widest spread on the ground; each block gets about as many training views.
    #[arg(long, value_parser = parse_blocks, value_name = "CxR")]
    blocks: (u32, u32),
    /// How far each block reaches into its neighbours for cameras and points, as a fraction
    /// of its size.
    #[arg(long, default_value_t = ramsplat::partition::DEFAULT_OVERLAP, value_name = "F")]
    overlap: f64,
    /// A view outside a block's region joins it when at least this fraction of its image looks
    /// into the block (1 = by camera position only).
    #[arg(long, default_value_t = ramsplat::partition::DEFAULT_MIN_COVERAGE, value_name = "F")]
    min_coverage: f64,
    /// The scene's up direction in the pack's world frame, instead of finding it from the
    /// cameras (their up axes, or the plane of their centres).
    #[arg(long, value_parser = parse_up, value_name = "X,Y,Z", allow_hyphen_values = true)]
    up: Option<[f64; 3]>,
    /// Which SfM points each block starts from: `seen` (those in its region and every point
    /// one of its views sees, VastGaussian's choice) or `region` (its region's only: smaller
    /// blocks, what its views show beyond the region left to densification).
    #[arg(long, value_enum, default_value = "seen")]
    block_points: ramsplat::partition::BlockPoints,
    /// Print the plan (each block's views and points) and write nothing.
    #[arg(long)]
    dry_run: bool,
}

fn parse_blocks(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected COLUMNSxROWS such as 2x2 or 4x1, got {s:?}");
    let (c, r) = s
        .to_ascii_lowercase()
        .split_once('x')
        .map(|(c, r)| (c.trim().to_owned(), r.trim().to_owned()))
        .ok_or_else(bad)?;
    Ok((c.parse().map_err(|_| bad())?, r.parse().map_err(|_| bad())?))
}

fn parse_up(s: &str) -> Result<[f64; 3], String> {
    let bad = || format!("expected three numbers X,Y,Z such as 0,0,1, got {s:?}");
    let v: Vec<f64> = s
        .split(',')
        .map(|p| p.trim().parse::<f64>().ok().filter(|v| v.is_finite()))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    <[f64; 3]>::try_from(v).map_err(|_| bad())
}

#[derive(clap::Args)]
struct BenchArgs {
    /// Pack to read.
    pack: PathBuf,
    /// Hard cap on the process's peak resident set (VmHWM), e.g. 512M or 4G.
    #[arg(long, value_parser = parse_size_arg)]
    ram_budget: u64,
    /// Passes over the train views.
    #[arg(long, default_value_t = 3)]
    epochs: u64,
    /// Decoder threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Views decoded ahead of the consumer (the ring holds prefetch + 2 slots).
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Seed of the per-epoch view permutations.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Resume from this position of the sequence, EPOCH,INDEX (as printed in `end` of an
    /// earlier run's report).
    #[arg(long, value_parser = parse_position, value_name = "EPOCH,INDEX")]
    start: Option<Position>,
    /// Stop after this many views (before the end of --epochs).
    #[arg(long)]
    limit: Option<u64>,
    /// Cache policy: belady (evict the view needed furthest ahead; the sampler knows the
    /// order) or lru (for comparison).
    #[arg(long, value_parser = parse_policy, default_value = "belady")]
    policy: CachePolicy,
    #[command(flatten)]
    resolution: ramsplat::cli::ResolutionArgs,
}

fn parse_position(s: &str) -> Result<Position, String> {
    let bad = || format!("expected EPOCH,INDEX (two non-negative integers), got {s:?}");
    let (e, i) = s.split_once(',').ok_or_else(bad)?;
    Ok(Position {
        epoch: e.trim().parse().map_err(|_| bad())?,
        index: i.trim().parse().map_err(|_| bad())?,
    })
}

fn parse_policy(s: &str) -> Result<CachePolicy, String> {
    match s.to_ascii_lowercase().as_str() {
        "belady" => Ok(CachePolicy::Belady),
        "lru" => Ok(CachePolicy::Lru),
        _ => Err(format!("unknown cache policy {s:?}: use belady or lru")),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Convert {
            input,
            output,
            format,
            max_width,
            downscale,
            codec,
            jpeg_quality,
            lossless,
            shard_size,
            test_every,
            force,
            strict,
            lenient,
            workers,
            images,
            depths,
            sfm_depths,
            points,
            points_transform,
            invert_points_transform,
            keep_fisheye,
        } => {
            let resize = match (max_width, downscale) {
                (_, Some(n)) => Some(Resize::Downscale(n)),
                (Some(0), None) => Some(Resize::None),
                (Some(w), None) => Some(Resize::MaxWidth(w)),
                (None, None) => None,
            };
            let stray = [
                ("--jpeg-quality", jpeg_quality.is_some()),
                ("--lossless", lossless),
            ];
            if let Some((flag, _)) = stray.iter().find(|(_, set)| *set && codec != Codec::Jpeg) {
                eprintln!(
                    "error: {flag} applies to --codec jpeg only (the codec is {})",
                    format!("{codec:?}").to_lowercase()
                );
                return ExitCode::from(2);
            }
            let mut opts = ConvertOptions {
                format,
                resize,
                codec,
                jpeg_quality: jpeg_quality.unwrap_or(ramsplat::shard::writer::DEFAULT_JPEG_QUALITY),
                lossless,
                shard_size,
                test_every,
                force,
                strict,
                lenient,
                images,
                depths,
                points,
                points_transform,
                invert_points_transform,
                sfm_depths,
                keep_fisheye,
                ..Default::default()
            };
            if let Some(w) = workers {
                opts.workers = w;
            }
            run_convert(&input, &output, &opts)
        }
        Command::Verify { pack } => return run_verify(&pack),
        Command::Info { pack, json } => run_info(&pack, json),
        Command::Export {
            pack,
            output,
            random_points,
            format,
            centre_principal_point,
        } => run_export(
            &pack,
            &output,
            random_points,
            format,
            centre_principal_point,
        ),
        Command::Partition(args) => run_partition(&args),
        Command::Merge {
            partition,
            runs,
            output,
        } => run_merge(&partition, &runs, &output),
        Command::Synth(args) => run_synth(&args),
        Command::Bench(args) => run_bench(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => report_error(&e, EXIT_FAILURE),
    }
}

fn run_convert(input: &Path, output: &Path, opts: &ConvertOptions) -> anyhow::Result<()> {
    let progress: std::sync::OnceLock<Progress> = std::sync::OnceLock::new();
    let on_event = |e: Event<'_>| match e {
        Event::Imported {
            views,
            clouds,
            missing,
        } => {
            eprintln!(
                "found {views} views and {clouds} point clouds in {}{}",
                input.display(),
                if missing > 0 {
                    format!("; {missing} listed images are missing and were skipped")
                } else {
                    String::new()
                }
            );
            let _ = progress.set(Progress::new("packing", views as u64));
        }
        Event::Warning(w) => match progress.get() {
            Some(p) => p.println(&format!("warning: {w}")),
            None => eprintln!("warning: {w}"),
        },
        Event::Views { done, .. } => {
            if let Some(p) = progress.get() {
                p.set(done as u64);
            }
        }
        Event::Cloud { name, points } => match progress.get() {
            Some(p) => p.println(&format!("packed point cloud {name:?}: {points} points")),
            None => eprintln!("packed point cloud {name:?}: {points} points"),
        },
    };
    let report = convert(input, output, opts, &on_event)
        .with_context(|| format!("converting {} into {}", input.display(), output.display()))?;
    if let Some(p) = progress.get() {
        p.finish();
    }
    eprintln!(
        "wrote {}: {} views ({} train, {} test), {} points{}, {} on disk ({} decoded) in {:.1} s ({:.1} views/s, {:.0} MB/s decoded){}",
        output.display(),
        report.views,
        report.train_views,
        report.test_views,
        report.points,
        report.points_in_view.map_or(String::new(), |v| format!(
            " ({:.1} % of a sample in view)",
            100.0 * v.fraction()
        )),
        format_size(report.bytes_on_disk),
        format_size(report.decoded_bytes),
        report.wall_s,
        report.views_per_s,
        report.decoded_mb_per_s,
        if report.missing_images > 0 {
            format!("; {} missing images skipped", report.missing_images)
        } else {
            String::new()
        }
    );
    if let Some(j) = &report.jpeg {
        eprintln!("views stored as JPEG: {}", j.describe());
    }
    if let Some(d) = &report.sfm_depths {
        eprintln!("{}", d.describe(report.views));
    }
    Ok(())
}

/// `gs-pack export --format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ExportFormat {
    Nerfstudio,
    Colmap,
}

fn run_export(
    path: &Path,
    output: &Path,
    random_points: Option<u64>,
    format: ExportFormat,
    centre_principal_point: bool,
) -> anyhow::Result<()> {
    use ramsplat::export::nerfstudio::{export, ExportOptions, Layout, PointsSource};
    let started = std::time::Instant::now();
    let pack = Pack::open(path).with_context(|| format!("opening the pack {}", path.display()))?;
    let options = ExportOptions {
        random_points,
        layout: match format {
            ExportFormat::Nerfstudio => Layout::Nerfstudio,
            ExportFormat::Colmap => Layout::Colmap,
        },
        centre_principal_point,
    };
    let report = export(&pack, output, &options)
        .with_context(|| format!("exporting {} to {}", path.display(), output.display()))?;
    let points = match report.points_source {
        PointsSource::None => "no points (the pack has no SfM points; --random-points SEED \
                               writes gs-train's initial ones)"
            .to_string(),
        PointsSource::Sfm => format!("{} SfM points", report.points),
        PointsSource::Random(seed) => {
            format!(
                "{} random initial points (gs-train --seed {seed})",
                report.points
            )
        }
    };
    eprintln!(
        "wrote {}: {} views ({} train, {} test; {} masked, {} with alpha, {} with depth), {points}, in {:.1} s",
        output.display(),
        report.views,
        report.train_views,
        report.test_views,
        report.masked_views,
        report.alpha_views,
        report.depth_views,
        started.elapsed().as_secs_f64()
    );
    if report.sfm_depth_views_skipped > 0 {
        eprintln!(
            "note: the {} sparse SfM depth planes (gs-pack convert --sfm-depths) were not \
             exported: they hold depth only at the SfM points' pixels and are no monocular depth \
             maps, which is what depths/ and depth_params.json mean to 3DGS's -d and to gs-pack \
             convert --depths; re-convert the original COLMAP model with --sfm-depths to get them \
             again (gsplat's --depth_loss computes them from that model's tracks)",
            report.sfm_depth_views_skipped
        );
    }
    if let Some(c) = report.colmap {
        let pinhole = c.cameras - c.fisheye_cameras;
        let mut kinds = Vec::new();
        if pinhole > 0 || c.fisheye_cameras == 0 {
            kinds.push(format!(
                "{pinhole} PINHOLE camera{}",
                if pinhole == 1 { "" } else { "s" }
            ));
        }
        if c.fisheye_cameras > 0 {
            kinds.push(format!(
                "{} OPENCV_FISHEYE camera{} (fisheye views, k1..k4 = 0)",
                c.fisheye_cameras,
                if c.fisheye_cameras == 1 { "" } else { "s" }
            ));
        }
        eprintln!(
            "COLMAP model in {}: {}; {}",
            output.join("sparse/0").display(),
            kinds.join(" and "),
            if c.every_8th_matches {
                "the pack's test views are every 8th image by name, the split 3DGS --eval and \
                 gsplat (test_every 8) make by default"
            } else {
                "the pack's split is NOT every 8th image by name (what 3DGS --eval and gsplat \
                 make by default): sparse/0/test.txt lists its test views (3DGS reads it with \
                 llffhold 0)"
            }
        );
        // 3DGS's reader ignores cx, cy: say when that matters (a tenth of a pixel does not).
        if c.max_principal_offset_px > 0.1 && report.centring.is_none() {
            eprintln!(
                "note: principal points lie up to {:.2} px off their image's centre; the original \
                 3DGS reads only the focal lengths and renders as if centred (its renders are \
                 shifted by that much against the photos); gsplat and nerfstudio read cx, cy. \
                 --centre-principal-point crops the views to centre them",
                c.max_principal_offset_px
            );
        }
    }
    if let Some(c) = report.centring {
        eprintln!(
            "centred principal points: {} view{} cropped (the most cropped kept {:.1} % of its \
             pixels); principal points now lie up to {:.2} px off their image's centre",
            c.cropped_views,
            if c.cropped_views == 1 { "" } else { "s" },
            100.0 * c.least_kept,
            c.max_offset_px
        );
    }
    Ok(())
}

fn run_partition(args: &PartitionArgs) -> anyhow::Result<()> {
    use ramsplat::partition::{write, PartitionOptions, Plan};
    let started = std::time::Instant::now();
    let pack = Pack::open(&args.pack)
        .with_context(|| format!("opening the pack {}", args.pack.display()))?;
    let options = PartitionOptions {
        overlap: args.overlap,
        min_coverage: args.min_coverage,
        up: args.up,
        points: args.block_points,
        ..PartitionOptions::new(args.blocks.0, args.blocks.1)
    };
    let plan = Plan::new(&pack, &options)
        .with_context(|| format!("partitioning {}", args.pack.display()))?;
    let f = plan.frame;
    eprintln!(
        "{}: {} views ({} train), {} SfM points; up ({:.3}, {:.3}, {:.3}) from {}, ground axes \
         u ({:.3}, {:.3}, {:.3}) and v ({:.3}, {:.3}, {:.3}) about ({:.3}, {:.3}, {:.3})",
        args.pack.display(),
        plan.views,
        plan.train_views,
        plan.points,
        f.up[0],
        f.up[1],
        f.up[2],
        if plan.up_from == "given" {
            "--up"
        } else {
            plan.up_from
        },
        f.u[0],
        f.u[1],
        f.u[2],
        f.v[0],
        f.v[1],
        f.v[2],
        f.origin[0],
        f.origin[1],
        f.origin[2],
    );
    let bound = |x: Option<f64>, inf: &str| x.map_or(inf.to_owned(), |x| format!("{x:.3}"));
    for b in &plan.blocks {
        eprintln!(
            "  {}: u [{}, {}), v [{}, {}); {} train + {} test views ({} of them seeing it from \
             outside), {} points ({} in the core)",
            b.name,
            bound(b.core.u.min, "-inf"),
            bound(b.core.u.max, "inf"),
            bound(b.core.v.min, "-inf"),
            bound(b.core.v.max, "inf"),
            b.train_views,
            b.test_views,
            b.seeing_views,
            b.points,
            b.core_points,
        );
    }
    let largest = plan.blocks.iter().map(|b| b.train_views).max().unwrap_or(0);
    if largest * 10 >= plan.train_views * 9 {
        eprintln!(
            "note: a block takes {largest} of the {} training views: they see most of the scene \
             from everywhere (an object captured from around it?); blocks save memory on scenes \
             that each view sees only part of (aerial, street, building-scale captures)",
            plan.train_views
        );
    }
    let output = match &args.output {
        Some(o) if !args.dry_run => o,
        _ => {
            eprintln!("dry run: nothing written");
            return Ok(());
        }
    };
    let file = write(&pack, &plan, &options, output, &|k, n| {
        eprintln!("writing block {} of {n}", k + 1);
    })
    .with_context(|| {
        format!(
            "partitioning {} into {}",
            args.pack.display(),
            output.display()
        )
    })?;
    eprintln!(
        "wrote {}: {} block packs and {} in {:.1} s; train each (gs-train {}/block-0-0 -o \
         RUN), then gs-pack merge {} RUN... -o merged.ply",
        output.display(),
        file.blocks.len(),
        ramsplat::partition::PARTITION_FILE,
        started.elapsed().as_secs_f64(),
        output.display(),
        output.display(),
    );
    Ok(())
}

fn run_merge(partition: &Path, runs: &[PathBuf], output: &Path) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let report = ramsplat::partition::merge(partition, runs, output)
        .with_context(|| format!("merging the blocks of {}", partition.display()))?;
    for b in &report.blocks {
        eprintln!(
            "  {}: {} of {} Gaussians in its core, from {} (iteration {}{})",
            b.name,
            b.kept,
            b.gaussians,
            b.model.display(),
            b.iterations,
            if b.interrupted {
                ", an interrupted run"
            } else {
                ""
            }
        );
    }
    if report.sh_cut {
        eprintln!(
            "note: the blocks' models have different SH degrees; the merged model keeps degree {}",
            report.sh_degree
        );
    }
    eprintln!(
        "wrote {}: {} Gaussians from {} blocks in {:.1} s",
        output.display(),
        report.gaussians,
        report.blocks.len(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn run_verify(path: &Path) -> ExitCode {
    let pack = match Pack::open(path) {
        Ok(p) => p,
        Err(e) => {
            let code = if is_damage(&e) {
                EXIT_CORRUPT
            } else {
                EXIT_FAILURE
            };
            return report_error(
                &anyhow::Error::new(e).context(format!("verifying {}", path.display())),
                code,
            );
        }
    };
    let total = pack.manifest().bytes_on_disk();
    let progress = Progress::new("verifying", total);
    let result = pack.verify(&|done, _| progress.set(done));
    progress.finish();
    match result {
        Ok(r) => {
            let line = format!(
                "ok: {} shards, {} records, {} verified",
                r.shards,
                r.records,
                format_size(r.bytes)
            );
            match print_stdout(&line) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => report_error(
                    &anyhow::Error::new(e).context("writing to stdout"),
                    EXIT_FAILURE,
                ),
            }
        }
        Err(e) => {
            let code = if is_damage(&e) {
                EXIT_CORRUPT
            } else {
                EXIT_FAILURE
            };
            report_error(
                &anyhow::Error::new(e).context(format!("verifying {}", path.display())),
                code,
            )
        }
    }
}

fn is_damage(e: &ShardError) -> bool {
    matches!(
        e,
        ShardError::Corrupt { .. } | ShardError::BadManifest { .. }
    )
}

fn run_info(path: &Path, json: bool) -> anyhow::Result<()> {
    let pack = Pack::open(path).with_context(|| format!("reading {}", path.display()))?;
    let m = pack.manifest();
    let mut sizes = std::collections::BTreeMap::<(u32, u32), usize>::new();
    for v in &m.views {
        *sizes.entry((v.width(), v.height())).or_default() += 1;
    }
    let test_views = m.split_indices(Split::Test).len();
    let alpha_views = m.views.iter().filter(|v| v.alpha).count();
    let masked_views = m.views.iter().filter(|v| v.mask).count();
    let depth_views = m.views.iter().filter(|v| v.depth.is_some()).count();
    let fisheye_views = m
        .views
        .iter()
        .filter(|v| v.camera.projection == ramsplat::scene::camera::Projection::Fisheye)
        .count();
    // Sparse SfM depth planes: the pixels holding a point, as the manifest counts them.
    let point_pixels = m
        .source
        .sfm_depths
        .then(|| m.views.iter().filter_map(|v| v.depth_pixels).sum::<u64>());
    let points: u64 = m.clouds.iter().map(|c| c.points).sum();
    let in_view = ramsplat::pack::points_in_view(&pack)
        .with_context(|| format!("reading the points of {}", path.display()))?;
    let codecs: std::collections::BTreeSet<_> = m
        .views
        .iter()
        .map(|v| format!("{:?}", v.codec).to_lowercase())
        .collect();
    // Views stored as JPEG: kept as their source file, or encoded at a quality.
    let kept = m
        .views
        .iter()
        .filter(|v| v.jpeg.is_some_and(|j| j.quality.is_none()))
        .count();
    let qualities: std::collections::BTreeSet<u8> =
        m.views.iter().filter_map(|v| v.jpeg?.quality).collect();
    let encoded = m
        .views
        .iter()
        .filter(|v| v.jpeg.is_some_and(|j| j.quality.is_some()))
        .count();
    if json {
        let v = serde_json::json!({
            "pack": path.display().to_string(),
            "version": m.version,
            "views": m.views.len(),
            "train_views": m.views.len() - test_views,
            "test_views": test_views,
            "alpha_views": alpha_views,
            "masked_views": masked_views,
            "depth_views": depth_views,
            "fisheye_views": fisheye_views,
            "sfm_depth_point_pixels": point_pixels,
            "resolutions": sizes.iter().map(|((w, h), n)| serde_json::json!({"width": w, "height": h, "views": n})).collect::<Vec<_>>(),
            "points": points,
            "clouds": m.clouds.iter().map(|c| serde_json::json!({
                "name": c.name, "points": c.points, "has_labels": c.has_labels, "has_normals": c.has_normals,
                "bounds": c.bounds, "chunks": c.chunks.len()})).collect::<Vec<_>>(),
            "no_sfm_points": m.scene.no_sfm_points,
            "points_in_view": in_view,
            "scene_extent": m.scene.extent,
            "codecs": codecs,
            "jpeg_views": (kept + encoded > 0).then(|| serde_json::json!({
                "kept": kept, "encoded": encoded, "qualities": qualities})),
            "shards": m.shards.len(),
            "bytes_on_disk": m.bytes_on_disk(),
            "decoded_bytes": m.decoded_bytes(),
            "max_view_bytes": m.max_view_bytes(),
            "source": m.source,
        });
        print_stdout(&v.to_string())?;
        return Ok(());
    }
    let mut o = String::new();
    writeln!(o, "pack        {}", path.display())?;
    writeln!(o, "source      {} ({})", m.source.path, m.source.format)?;
    if let Some(images) = &m.source.images {
        writeln!(o, "images      {images}/ (cameras scaled to its files)")?;
    }
    writeln!(
        o,
        "views       {} ({} train, {} test)",
        m.views.len(),
        m.views.len() - test_views,
        test_views
    )?;
    if alpha_views > 0 {
        writeln!(
            o,
            "            {alpha_views} with alpha (RGBA, composited over the training background)"
        )?;
    }
    if masked_views > 0 {
        writeln!(
            o,
            "            {masked_views} with a loss mask (excluded pixels teach nothing)"
        )?;
    }
    if fisheye_views > 0 {
        writeln!(
            o,
            "            {fisheye_views} fisheye (ideal equidistant projection, \
             gs-pack convert --keep-fisheye)"
        )?;
    }
    match point_pixels {
        Some(pixels) => writeln!(
            o,
            "            {depth_views} with a sparse SfM depth plane (--sfm-depths: the inverse \
             depth of the points each image observes), {pixels} point pixels in all"
        )?,
        None if depth_views > 0 => writeln!(
            o,
            "            {depth_views} with an inverse-depth map (depth regularization)"
        )?,
        None => {}
    }
    for ((w, h), n) in &sizes {
        writeln!(o, "            {n} × {w}x{h}")?;
    }
    if m.clouds.is_empty() || m.scene.no_sfm_points {
        writeln!(o, "points      none (training starts from random points)")?;
    }
    for c in &m.clouds {
        let extra = match (c.has_labels, c.has_normals) {
            (true, true) => ", labels, normals",
            (true, false) => ", labels",
            (false, true) => ", normals",
            (false, false) => "",
        };
        writeln!(o, "points      {:?}: {}{extra}", c.name, c.points)?;
    }
    if let Some(points) = &m.source.points {
        writeln!(
            o,
            "            from --points {points} (in place of the dataset's own)"
        )?;
    }
    if let Some(rows) = &m.source.points_transform {
        let rows: Vec<String> = rows.iter().map(|r| format!("{r:?}")).collect();
        writeln!(
            o,
            "            moved by --points-transform [A | t] = {}",
            rows.join(" ")
        )?;
    }
    if let Some(v) = in_view {
        writeln!(
            o,
            "in view     {:.1} % of a sample of {} of the initial points (in front of a view, \
             inside its image)",
            100.0 * v.fraction(),
            v.sampled
        )?;
    }
    writeln!(
        o,
        "extent      {:.4} (1.1 × max camera distance from the centroid)",
        m.scene.extent
    )?;
    writeln!(
        o,
        "codec       {}",
        codecs.into_iter().collect::<Vec<_>>().join(", ")
    )?;
    if kept + encoded > 0 {
        let q = qualities
            .iter()
            .map(|q| q.to_string())
            .collect::<Vec<_>>()
            .join("/");
        writeln!(
            o,
            "jpeg        {kept} views kept as their source JPEG (lossless), {encoded} encoded{}",
            if encoded > 0 {
                format!(" at quality {q}")
            } else {
                String::new()
            }
        )?;
    }
    writeln!(
        o,
        "on disk     {} in {} shards",
        format_size(m.bytes_on_disk()),
        m.shards.len()
    )?;
    writeln!(
        o,
        "decoded     {} (largest view {})",
        format_size(m.decoded_bytes()),
        format_size(m.max_view_bytes() as u64)
    )?;
    if !m.source.missing_images.is_empty() {
        writeln!(
            o,
            "missing     {} images listed by the dataset were not found",
            m.source.missing_images.len()
        )?;
    }
    print_stdout(o.trim_end_matches('\n'))?;
    Ok(())
}

fn run_synth(args: &ramsplat::synth::SynthArgs) -> anyhow::Result<()> {
    let progress = Progress::new("rendering", args.views as u64);
    let report = ramsplat::synth::run(args, &|done, _| progress.set(done))
        .context("generating a synthetic dataset")?;
    progress.finish();
    eprintln!(
        "wrote {}: {} {} views of {}x{} ({:?}), {} points, {} in total",
        report.output.display(),
        report.views,
        report.camera_model.projection().name(),
        report.width,
        report.height,
        report.format,
        report.points,
        format_size(report.bytes_written)
    );
    if let Some(side) = report.ground_side {
        eprintln!(
            "aerial layout: ground {side:.1} x {side:.1} ({:.0} units²), {} objects",
            report.ground_area, report.objects
        );
    }
    if let Some((dir, params)) = &report.depth_files {
        eprintln!(
            "depth maps in {} and their fits in {}: pack them with `gs-pack convert {} --depths \
             depths`",
            dir.display(),
            params.display(),
            report.output.display()
        );
    }
    Ok(())
}

fn run_bench(args: &BenchArgs) -> anyhow::Result<()> {
    let resize = args.resolution.resize().map_err(anyhow::Error::msg)?;
    let pack = Arc::new(
        Pack::open(&args.pack)
            .with_context(|| format!("reading {}", args.pack.display()))?
            .resized(resize),
    );
    let views = pack.manifest().split_indices(Split::Train).len() as u64;
    let opts = ramsplat::data::bench::BenchOptions {
        ram_budget: args.ram_budget,
        epochs: args.epochs,
        workers: args.workers,
        prefetch: args.prefetch,
        seed: args.seed,
        policy: args.policy,
        start: args.start.unwrap_or(Position { epoch: 0, index: 0 }),
        limit: args.limit,
    };
    let start = opts.start.epoch * views + opts.start.index;
    let mut todo = (views * args.epochs).saturating_sub(start);
    if let Some(l) = args.limit {
        todo = todo.min(l);
    }
    let progress = Progress::new("loading", todo);
    let report = ramsplat::data::bench::run_bench(pack, &opts, &mut |done, _| progress.set(done))
        .with_context(|| format!("benchmarking the loader on {}", args.pack.display()))?;
    progress.finish();
    print_stdout(&report.to_json_line())?;
    Ok(())
}
