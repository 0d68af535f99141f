//! What a training run leaves in `OUT/` besides models and checkpoints: `metrics.jsonl` (one
//! JSON row every N iterations), `report.json` (the run's summary), `training_curves.png`
//! (loss and PSNR against iteration) and side-by-side test renders under `OUT/test/`.
//!
//! # Invariants
//! - `metrics.jsonl` only ever holds rows of one consistent history: on `--resume` from
//!   iteration k, rows with `iteration > k` (written by the interrupted run after its last
//!   checkpoint, and about to be recomputed) are dropped first, so a resumed run's file equals
//!   an uninterrupted run's, apart from timing columns.
//! - Rows are appended and flushed one by one (a crash loses at most the row being written);
//!   every other file is written to a temporary name and renamed into place, so readers never
//!   see a torn `report.json` or PNG.
//! - Images on disk are 8-bit: float colour × 255, rounded, clamped (what 3DGS saves), and test
//!   metrics are computed on exactly those 8-bit values, as `gs-render --pack` does.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::checkpoint::write_file_atomic;

/// File names inside `OUT/`.
pub const METRICS_FILE: &str = "metrics.jsonl";
pub const REPORT_FILE: &str = "report.json";
pub const CURVES_FILE: &str = "training_curves.png";
/// The loss chart written beside [`CURVES_FILE`].
pub const LOSS_FILE: &str = "training_loss.png";
pub const TEST_DIR: &str = "test";

/// Why an output could not be written or read back. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "{}: line {line}: not a metrics row ({msg}); the file was edited or damaged; move it \
         away to resume",
        path.display()
    )]
    BadRow {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{}: {msg}", path.display())]
    Write { path: PathBuf, msg: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One row of `metrics.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsRow {
    /// Iterations completed (1-based: the row after the first step says 1).
    pub iteration: u64,
    /// Training loss (0.8·L1 + 0.2·(1 − SSIM)), mean over the iterations since the last row.
    pub loss: f64,
    /// Training-view PSNR in dB, mean over the iterations since the last row.
    pub psnr: f64,
    /// With depth regularization: the unweighted inverse-depth L1 (its weighted value is in
    /// `loss`), mean over the iterations since the last row whose view had a depth map.
    /// Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth_l1: Option<f64>,
    pub num_gaussians: u64,
    /// Tile intersections per render ((Gaussian, tile) pairs sorted and walked), mean over the
    /// iterations since the last row: what a step's time grows with. 0 in logs written before
    /// it was recorded.
    #[serde(default)]
    pub intersections: u64,
    /// Process VmHWM so far (kernel figure).
    pub peak_rss_bytes: u64,
    /// Fraction of wall time the trainer waited for data, since the run (or resume) started.
    pub stall_fraction: f64,
    /// Iterations per second since the last row.
    pub iterations_per_s: f64,
    /// Seconds since this process started training.
    pub elapsed_s: f64,
}

/// Appends rows to `metrics.jsonl`.
pub struct MetricsLog {
    path: PathBuf,
    file: File,
}

impl MetricsLog {
    /// Creates (truncates) the log for a fresh run, or, with `resume_at = Some(k)`, keeps the
    /// rows of iterations ≤ k and drops the rest (see the module doc).
    pub fn open(out_dir: &Path, resume_at: Option<u64>) -> Result<MetricsLog, ReportError> {
        let path = out_dir.join(METRICS_FILE);
        match resume_at {
            None => {
                File::create(&path).map_err(io_err(&path))?;
            }
            Some(k) => {
                let kept: Vec<MetricsRow> = match read_metrics(&path) {
                    Ok(rows) => rows.into_iter().filter(|r| r.iteration <= k).collect(),
                    Err(ReportError::Io { source, .. })
                        if source.kind() == io::ErrorKind::NotFound =>
                    {
                        Vec::new()
                    }
                    Err(e) => return Err(e),
                };
                let mut text = String::new();
                for r in &kept {
                    text.push_str(&serde_json::to_string(r).expect("row serialises"));
                    text.push('\n');
                }
                write_file_atomic(&path, text.as_bytes()).map_err(|e| ReportError::Write {
                    path: path.clone(),
                    msg: e.to_string(),
                })?;
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_err(&path))?;
        Ok(MetricsLog { path, file })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row (one `write` call of the whole line, then flush).
    pub fn append(&mut self, row: &MetricsRow) -> Result<(), ReportError> {
        let mut line = serde_json::to_string(row).expect("row serialises");
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(io_err(&self.path))
    }
}

/// Reads every row of a `metrics.jsonl` (blank lines skipped).
pub fn read_metrics(path: &Path) -> Result<Vec<MetricsRow>, ReportError> {
    let file = crate::fsutil::open_file(path).map_err(io_err(path))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io_err(path))?;
        if line.trim().is_empty() {
            continue;
        }
        rows.push(
            serde_json::from_str(&line).map_err(|e| ReportError::BadRow {
                path: path.to_owned(),
                line: i + 1,
                msg: e.to_string(),
            })?,
        );
    }
    Ok(rows)
}

/// `report.json`: the run's summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Mean PSNR (dB) of the 8-bit test renders; `null` without `--eval` or test views.
    pub test_psnr: Option<f64>,
    pub test_ssim: Option<f64>,
    /// Number of test views evaluated.
    pub test_views: usize,
    /// With `--color-correct-metric`: `color_correct_method`, `test_cc_psnr` and
    /// `test_cc_ssim` (absent without it).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub color_corrected: Option<ColorCorrectedMeans>,
    /// Mean PSNR (dB) of the 8-bit renders of the training views at the end; `null` when the
    /// run was interrupted (not evaluated: `interrupted` says so) or every training view renders
    /// exactly (infinite PSNR).
    pub train_psnr: Option<f64>,
    /// Mean SSIM of the same renders; `null` when interrupted.
    pub train_ssim: Option<f64>,
    /// Iterations completed (including those before a resume).
    pub iterations: u64,
    /// Iterations of this process divided by its training wall time.
    pub iterations_per_s: f64,
    pub num_gaussians: u64,
    /// Process VmHWM (kernel figure) at the end; `null` where it cannot be read (not Linux).
    pub peak_rss_bytes: Option<u64>,
    pub ram_budget_bytes: u64,
    /// Peak device memory held by the run's buffers (model, optimizer, views, intersections;
    /// what PyTorch calls `max_memory_allocated`, without the CUDA context's own share; the
    /// largest device's with `--devices`); `null` on the CPU engine.
    #[serde(default)]
    pub peak_device_bytes: Option<u64>,
    /// `null` when the peak is unknown: the budget is never claimed without the kernel's figure.
    pub within_budget: Option<bool>,
    /// Fraction of training wall time spent waiting for data.
    pub stall_fraction: f64,
    pub cache_hit_rate: f64,
    /// The memory floor computed at start (itemised in the log).
    pub floor_bytes: u64,
    pub cache_bytes: u64,
    pub backend: String,
    /// `"antialiased"` or `"classic"`: how the run rasterized (and its models must be
    /// rendered). Reports written before the option existed: classic.
    #[serde(default = "classic")]
    pub rasterize_mode: String,
    /// Whether the run trained through Mip-Splatting's 3D filter (`--filter-3d`); its saved
    /// models hold it folded in. Reports written before the option existed: false.
    #[serde(default)]
    pub filter_3d: bool,
    /// Densification: `"default"` (3DGS's clone/split/prune on the 2D-mean gradient),
    /// `"absgrad"` (the same on the absolute gradient, AbsGS) or `"mcmc"`; `null` in reports
    /// written before it was recorded.
    #[serde(default)]
    pub densification: Option<String>,
    /// The clone/split threshold of `"default"` and `"absgrad"` (NDC units); `null` for MCMC.
    #[serde(default)]
    pub densify_grad_threshold: Option<f64>,
    /// Whether split children started at the revised opacity (`--revised-opacity`).
    #[serde(default)]
    pub revised_opacity: bool,
    /// Sky points the run started with (`--sky-points`); 0 when none, and in reports written
    /// before it was recorded.
    #[serde(default)]
    pub sky_points: u64,
    /// gsplat's `opacity_reg` and `scale_reg` in effect (`--opacity-reg`, `--scale-reg`; 0.01
    /// each under MCMC unless changed, else 0); 0 in reports written before they were
    /// recorded.
    #[serde(default)]
    pub opacity_reg: f64,
    #[serde(default)]
    pub scale_reg: f64,
    /// The Gaussians' optimizer: `"adam"`, or `"sparse_adam"` (`--optimizer-type
    /// sparse_adam`: only the Gaussians each step's view sees are updated); `null` in reports
    /// written before it was recorded.
    #[serde(default)]
    pub optimizer: Option<String>,
    /// The screen-size pruning radius in px (`--prune-screen-radius`); `null` when the rule
    /// is off (the default, and MCMC) or in reports written before it was recorded.
    #[serde(default)]
    pub prune_screen_radius: Option<u32>,
    /// Whether each view was rendered through its learned exposure matrix (`--exposure`;
    /// `OUT/exposure.json`). With `--eval` the test scores are then of the held-out views'
    /// right halves (3DGS's `--train_test_exp` protocol).
    #[serde(default)]
    pub exposure: bool,
    /// With `--bilateral-grid`: the grids' cells (`"16×16×8"`). Training views are scored
    /// through their grids; held-out views, which have none, as rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bilateral_grid: Option<String>,
    /// Camera pose optimisation / injected pose noise (`--pose-opt`, `--pose-noise`): how far
    /// the training views' poses moved, and with noise how far they are from the true ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pose: Option<PoseReport>,
    /// With `--eval-pose-steps`: the held-out views' pose alignment and their scores from the
    /// dataset's poses (`test_psnr`, `test_ssim` are then from the aligned poses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_pose: Option<EvalPoseReport>,
    /// With `--profile-steps N`: the median time of each part of a step, one entry per
    /// profiled window of N steps (after the warm-up, or from each `--profile-at` iteration),
    /// in the order run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_ms: Vec<PhaseReport>,
    /// Wall time of this process, from start to the report.
    pub wall_s: f64,
    /// Seconds of that spent training: the training loop, less what it spent on its outputs
    /// (metrics rows, saves, checkpoints, evaluations); `iterations_per_s` and
    /// `stall_fraction` are of this time.
    pub train_s: f64,
    pub seed: u64,
    /// Iteration this process resumed from (`null` for a fresh run).
    pub resumed_from: Option<u64>,
    /// Whether the run stopped early on Ctrl-C (after writing a checkpoint).
    pub interrupted: bool,
    pub pack: String,
    pub pack_id: String,
    /// Models written, relative to OUT.
    pub point_clouds: Vec<String>,
}

fn classic() -> String {
    crate::render::rasterize_mode_name(false).to_owned()
}

/// Writes `report.json` atomically.
pub fn write_report(out_dir: &Path, report: &Report) -> Result<PathBuf, ReportError> {
    let path = out_dir.join(REPORT_FILE);
    let json = serde_json::to_string_pretty(report).expect("report serialises");
    write_file_atomic(&path, (json + "\n").as_bytes()).map_err(|e| ReportError::Write {
        path: path.clone(),
        msg: e.to_string(),
    })?;
    Ok(path)
}

/// Writes the training curves: PSNR per iteration to `training_curves.png` and the loss
/// (log scale) to `training_loss.png`, with axes, labels and a legend ([`crate::plot`]).
/// Returns the PSNR chart's path. Rows with non-finite values are skipped.
pub fn write_curves(out_dir: &Path, rows: &[MetricsRow]) -> Result<PathBuf, ReportError> {
    use crate::plot::{line_chart, ChartOptions, Series};
    let points = |f: &dyn Fn(&MetricsRow) -> f64| -> Vec<(f64, f64)> {
        rows.iter()
            .map(|r| (r.iteration as f64, f(r)))
            .filter(|p| p.1.is_finite())
            .collect()
    };
    let psnr = points(&|r| r.psnr);
    let loss: Vec<(f64, f64)> = points(&|r| r.loss)
        .into_iter()
        .filter(|p| p.1 > 0.0)
        .collect();
    let path = out_dir.join(CURVES_FILE);
    let err = |path: &Path| {
        let path = path.to_owned();
        move |e: crate::plot::PlotError| ReportError::Write {
            path: path.clone(),
            msg: e.to_string(),
        }
    };
    if !psnr.is_empty() {
        line_chart(
            &path,
            "Training PSNR (view of each logged iteration)",
            "iteration",
            "PSNR (dB)",
            &[Series::new("train view PSNR", psnr)],
            &ChartOptions::default(),
        )
        .map_err(err(&path))?;
    }
    if !loss.is_empty() {
        let loss_path = out_dir.join(LOSS_FILE);
        line_chart(
            &loss_path,
            "Training loss 0.8·L1 + 0.2·(1 − SSIM)",
            "iteration",
            "loss",
            &[Series::new("loss", loss)],
            &ChartOptions {
                log_y: true,
                ..ChartOptions::default()
            },
        )
        .map_err(err(&loss_path))?;
    }
    Ok(path)
}

/// Per-view metrics of an evaluation, written as `OUT/test/metrics_ITER.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewScore {
    pub view: usize,
    pub name: String,
    /// `null` when the 8-bit render equals the ground truth.
    pub psnr: Option<f64>,
    pub ssim: f64,
    /// Side-by-side PNG relative to OUT (when written).
    pub file: Option<String>,
    /// With pose alignment (`--eval-pose-steps`; `psnr` and `ssim` are then from the aligned
    /// pose): the scores from the dataset's pose, and how far the alignment moved it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub given_pose: Option<GivenPoseScore>,
    /// With `--color-correct-metric`: `cc_psnr` and `cc_ssim` (absent without it).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub color_corrected: Option<ColorCorrectedScore>,
}

/// [`ViewScore::color_corrected`]: the view's scores after its render was colour-corrected to
/// its ground truth ([`crate::eval::Scorer::score_corrected`]; gsplat's `cc_psnr`, `cc_ssim`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColorCorrectedScore {
    /// `null` when the corrected 8-bit render equals the ground truth.
    pub cc_psnr: Option<f64>,
    pub cc_ssim: f64,
}

impl ColorCorrectedScore {
    pub fn new(score: crate::eval::Score) -> Self {
        ColorCorrectedScore {
            cc_psnr: score.psnr.is_finite().then_some(score.psnr),
            cc_ssim: score.ssim,
        }
    }
}

/// [`Report::color_corrected`]: the correction and the means of the views' colour-corrected
/// scores (as [`mean_scores`] means the plain ones).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColorCorrectedMeans {
    /// `"affine"` or `"quadratic"` (gsplat's `color_correct_method`).
    pub color_correct_method: String,
    /// Mean finite colour-corrected PSNR (dB); `null` when no view has one.
    pub test_cc_psnr: Option<f64>,
    pub test_cc_ssim: Option<f64>,
}

impl ColorCorrectedMeans {
    /// The means of `views`' colour-corrected scores under `method`; `None` without a method.
    pub fn of(
        method: Option<crate::color_correct::ColorCorrection>,
        views: &[ViewScore],
    ) -> Option<ColorCorrectedMeans> {
        let method = method?;
        let (test_cc_psnr, test_cc_ssim) = mean_pairs(
            views
                .iter()
                .filter_map(|v| v.color_corrected.as_ref())
                .map(|c| (c.cc_psnr, c.cc_ssim)),
        );
        Some(ColorCorrectedMeans {
            color_correct_method: method.name().to_owned(),
            test_cc_psnr,
            test_cc_ssim,
        })
    }

    /// `"colour-corrected (affine) PSNR … dB, SSIM …"`, for the log.
    pub fn line(&self) -> String {
        format!(
            "colour-corrected ({}) PSNR {} dB, SSIM {:.4}",
            self.color_correct_method,
            self.test_cc_psnr
                .map_or("inf".into(), |p| format!("{p:.2}")),
            self.test_cc_ssim.unwrap_or(0.0)
        )
    }
}

/// [`ViewScore::given_pose`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GivenPoseScore {
    pub psnr: Option<f64>,
    pub ssim: f64,
    /// Rotation (degrees) and centre distance (scene units) from the dataset's pose to the
    /// aligned one.
    pub moved_deg: f64,
    pub moved_units: f64,
}

impl GivenPoseScore {
    /// The scores `given` from a view's given pose, and how far `alignment` moved it.
    pub fn new(given: &super::Evaluation, alignment: &super::pose::PoseAlignment) -> Self {
        GivenPoseScore {
            psnr: given.psnr.is_finite().then_some(given.psnr),
            ssim: given.ssim,
            moved_deg: alignment.moved_deg,
            moved_units: alignment.moved_units,
        }
    }
}

/// [`Report::eval_pose`]: the test views' pose alignment and their scores without it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalPoseReport {
    /// Steps and learning rate of the alignment per view.
    pub steps: u32,
    pub lr: f64,
    /// Mean PSNR / SSIM from the dataset's poses (the report's `test_psnr`/`test_ssim` are
    /// from the aligned ones).
    pub given_psnr: Option<f64>,
    pub given_ssim: Option<f64>,
    /// How far the alignment moved the poses: mean and maximum.
    pub moved_deg: [f64; 2],
    pub moved_units: [f64; 2],
}

impl EvalPoseReport {
    /// The summary of the views aligned with `steps` at `lr` (their [`GivenPoseScore`]s);
    /// `None` when there are none.
    pub fn of<'a>(
        given: impl IntoIterator<Item = &'a GivenPoseScore>,
        steps: u32,
        lr: f64,
    ) -> Option<EvalPoseReport> {
        let given: Vec<&GivenPoseScore> = given.into_iter().collect();
        if given.is_empty() {
            return None;
        }
        let (given_psnr, given_ssim) = mean_pairs(given.iter().map(|g| (g.psnr, g.ssim)));
        let mean_max = |v: Vec<f64>| -> [f64; 2] {
            let (mean, max) = super::pose::PoseSummary::mean_max(&v);
            [mean, max]
        };
        Some(EvalPoseReport {
            steps,
            lr,
            given_psnr,
            given_ssim,
            moved_deg: mean_max(given.iter().map(|g| g.moved_deg).collect()),
            moved_units: mean_max(given.iter().map(|g| g.moved_units).collect()),
        })
    }

    /// `"poses aligned (… steps): … dB, SSIM … from the dataset's poses; moved …"`.
    pub fn line(&self) -> String {
        format!(
            "poses aligned in {} steps, by {:.3}° / {:.4} units on average; from the dataset's \
             poses {} dB, SSIM {:.4}",
            self.steps,
            self.moved_deg[0],
            self.moved_units[0],
            self.given_psnr.map_or("inf".into(), |p| format!("{p:.2}")),
            self.given_ssim.unwrap_or(0.0)
        )
    }
}

/// Mean of an evaluation's views: (mean finite PSNR, mean SSIM); PSNR `None` when no view has
/// a finite one (all identical) or there are no views.
pub fn mean_scores(views: &[ViewScore]) -> (Option<f64>, Option<f64>) {
    mean_pairs(views.iter().map(|v| (v.psnr, v.ssim)))
}

/// [`mean_scores`] of `(PSNR, SSIM)` pairs.
fn mean_pairs(pairs: impl Iterator<Item = (Option<f64>, f64)>) -> (Option<f64>, Option<f64>) {
    let (mut psnr_sum, mut finite, mut ssim_sum, mut n) = (0.0, 0usize, 0.0, 0usize);
    for (p, s) in pairs {
        if let Some(p) = p {
            psnr_sum += p;
            finite += 1;
        }
        ssim_sum += s;
        n += 1;
    }
    if n == 0 {
        return (None, None);
    }
    let psnr = (finite > 0).then(|| psnr_sum / finite as f64);
    (psnr, Some(ssim_sum / n as f64))
}

/// Creates `OUT/test/` if needed.
pub fn test_dir(out_dir: &Path) -> Result<PathBuf, ReportError> {
    let dir = out_dir.join(TEST_DIR);
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    Ok(dir)
}

/// One window of [`Report::phase_ms`]: medians in milliseconds of each part of a profiled
/// step ([`crate::train::device_engine::PhaseTimes`]), over `steps` steps from
/// `from_iteration`, and the size of the work they did: a step's time grows with the model
/// and with the render's tile intersections, so a window is read with both.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// `"device queue (CUDA events)"` on a GPU, `"host clock"` elsewhere (the CPU engine; the
    /// emulation, whose launches run when made).
    pub clock: String,
    pub from_iteration: u64,
    pub steps: u64,
    /// Median over the window's steps (of an even count, the upper middle one) of the
    /// Gaussians after the step.
    #[serde(default)]
    pub num_gaussians: u64,
    /// Median over the window's steps (likewise) of the render's tile intersections.
    #[serde(default)]
    pub intersections: u64,
    /// The medians, beside the fields above in the JSON.
    #[serde(flatten)]
    pub median: crate::train::device_engine::PhaseTimes,
}

/// [`Report::pose`]: means and maxima over the training views (degrees, scene units).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PoseReport {
    /// Whether the poses were optimised (`--pose-opt`).
    pub optimized: bool,
    /// `--pose-noise` (0: none).
    pub noise: f64,
    pub views: usize,
    /// How far training moved each pose from the one it started from.
    pub correction_deg: [f64; 2],
    pub correction_units: [f64; 2],
    /// With noise: how far the noise moved each pose from the dataset's, and how far the
    /// trained pose is from the dataset's (the error left).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_deg: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise_units: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_deg: Option<[f64; 2]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_units: Option<[f64; 2]>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: u64) -> MetricsRow {
        MetricsRow {
            depth_l1: None,
            iteration: i,
            loss: 1.0 / i as f64,
            psnr: 10.0 + i as f64,
            num_gaussians: 100 + i,
            intersections: 5000 + i,
            peak_rss_bytes: 1 << 20,
            stall_fraction: 0.1,
            iterations_per_s: 3.0,
            elapsed_s: i as f64,
        }
    }

    #[test]
    fn resume_drops_rows_past_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MetricsLog::open(dir.path(), None).unwrap();
        for i in [10, 20, 30, 40] {
            log.append(&row(i)).unwrap();
        }
        drop(log);
        let mut log = MetricsLog::open(dir.path(), Some(20)).unwrap();
        log.append(&row(30)).unwrap();
        let rows = read_metrics(&dir.path().join(METRICS_FILE)).unwrap();
        assert_eq!(
            rows.iter().map(|r| r.iteration).collect::<Vec<_>>(),
            [10, 20, 30]
        );
        assert_eq!(rows[2], row(30));
        // A fresh run truncates.
        drop(MetricsLog::open(dir.path(), None).unwrap());
        assert!(read_metrics(&dir.path().join(METRICS_FILE))
            .unwrap()
            .is_empty());
        // Resuming without a log starts one.
        let d2 = tempfile::tempdir().unwrap();
        MetricsLog::open(d2.path(), Some(5))
            .unwrap()
            .append(&row(6))
            .unwrap();
        assert_eq!(
            read_metrics(&d2.path().join(METRICS_FILE)).unwrap().len(),
            1
        );
    }

    #[test]
    fn a_damaged_row_is_named_by_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(METRICS_FILE);
        fs::write(
            &path,
            format!(
                "{}\n{{\"iteration\": 3\n",
                serde_json::to_string(&row(1)).unwrap()
            ),
        )
        .unwrap();
        let e = MetricsLog::open(dir.path(), Some(2))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn means_skip_infinite_psnr() {
        let v = |psnr, ssim| ViewScore {
            view: 0,
            name: String::new(),
            psnr,
            ssim,
            file: None,
            given_pose: None,
            color_corrected: None,
        };
        assert_eq!(mean_scores(&[]), (None, None));
        assert_eq!(
            mean_scores(&[v(Some(30.0), 0.9), v(None, 1.0), v(Some(20.0), 0.8)]),
            (Some(25.0), Some(0.9))
        );
    }

    /// The colour-corrected fields are absent without a method (the JSON as before), named as
    /// gsplat names them with one, `null` for an infinite PSNR, and read back either way.
    #[test]
    fn colour_corrected_scores_serialise_only_when_scored() {
        use crate::color_correct::ColorCorrection;
        let view = |cc: Option<(Option<f64>, f64)>| ViewScore {
            view: 1,
            name: "a.png".into(),
            psnr: Some(20.0),
            ssim: 0.8,
            file: None,
            given_pose: None,
            color_corrected: cc.map(|(cc_psnr, cc_ssim)| ColorCorrectedScore { cc_psnr, cc_ssim }),
        };
        let keys = |v: serde_json::Value| -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        assert_eq!(
            keys(serde_json::to_value(view(None)).unwrap()),
            ["file", "name", "psnr", "ssim", "view"]
        );
        let views = [view(Some((Some(30.0), 0.9))), view(Some((None, 1.0)))];
        let json = serde_json::to_value(&views[1]).unwrap();
        assert_eq!(json["cc_psnr"], serde_json::Value::Null);
        assert_eq!(json["cc_ssim"], 1.0);
        for v in [view(None), views[0].clone(), views[1].clone()] {
            let back: ViewScore =
                serde_json::from_value(serde_json::to_value(&v).unwrap()).unwrap();
            assert_eq!(back, v);
        }
        assert_eq!(ColorCorrectedMeans::of(None, &views), None);
        let means = ColorCorrectedMeans::of(Some(ColorCorrection::Quadratic), &views).unwrap();
        assert_eq!(means.color_correct_method, "quadratic");
        assert_eq!(means.test_cc_psnr, Some(30.0));
        assert!((means.test_cc_ssim.unwrap() - 0.95).abs() < 1e-12);
        assert!(means
            .line()
            .contains("(quadratic) PSNR 30.00 dB, SSIM 0.9500"));
        assert_eq!(
            keys(serde_json::to_value(&means).unwrap()),
            ["color_correct_method", "test_cc_psnr", "test_cc_ssim"]
        );
    }

    #[test]
    fn eval_pose_summary_means_the_given_scores() {
        let v = |psnr: Option<f64>, moved: f64| ViewScore {
            view: 0,
            name: String::new(),
            psnr: psnr.map(|p| p + 2.0),
            ssim: 0.9,
            file: None,
            given_pose: Some(GivenPoseScore {
                psnr,
                ssim: 0.8,
                moved_deg: moved,
                moved_units: moved / 10.0,
            }),
            color_corrected: None,
        };
        let given = |v: &[ViewScore]| -> Vec<GivenPoseScore> {
            v.iter().filter_map(|v| v.given_pose.clone()).collect()
        };
        assert_eq!(EvalPoseReport::of(&[], 10, 1e-3), None);
        let r = EvalPoseReport::of(
            &given(&[v(Some(20.0), 0.5), v(None, 1.5), v(Some(22.0), 1.0)]),
            10,
            1e-3,
        )
        .unwrap();
        assert_eq!(r.given_psnr, Some(21.0));
        assert!((r.given_ssim.unwrap() - 0.8).abs() < 1e-12);
        assert_eq!(r.moved_deg, [1.0, 1.5]);
        assert!((r.moved_units[0] - 0.1).abs() < 1e-12 && r.moved_units[1] == 0.15);
        let line = r.line();
        assert!(
            line.contains("10 steps") && line.contains("21.00 dB"),
            "{line}"
        );
    }
}
