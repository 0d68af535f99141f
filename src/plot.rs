//! Small PNG line charts: training curves, the loader's speed/RAM trade-off curve.
//!
//! One entry point, [`line_chart`]: a title, axis labels, a legend, any number of [`Series`]
//! (solid or dashed lines, optional point markers), each axis linear or logarithmic.
//!
//! Invariants:
//! - No system font libraries: text is drawn by plotters' `ab_glyph` backend with the DejaVu Sans
//!   TTF embedded in the binary by the `dejavu` crate (registered once per process).
//! - The PNG appears atomically ([`crate::fsutil::write_atomic_with`]): it is written to a hidden
//!   temporary file in the destination directory, fsynced, then renamed over `path`; on any error the temporary file is removed
//!   and an existing file at `path` is left untouched.
//! - Bad input is an error, never a panic: no series, a series without points, non-finite
//!   coordinates, non-positive values on a log axis, or a canvas too small to draw on.

use std::path::{Path, PathBuf};
use std::sync::Once;

use image::ImageEncoder;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

/// The font family name the embedded TTF is registered under (plotters' default family).
const FONT: &str = "sans-serif";

/// Series colours, in order: the Tableau 10 palette (distinguishable on white, and by most
/// colour-blind readers for the first few entries).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The smallest canvas side that leaves room for the title, tick labels and a plot area
/// (title 40 px + x label area 60 px + margins 2·15 px ≈ 130 px, rounded up).
pub const MIN_SIDE: u32 = 160;

/// One line on the chart.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text; an empty label leaves the series out of the legend.
    pub label: String,
    /// (x, y) points, drawn in the order given.
    pub points: Vec<(f64, f64)>,
    /// Dashed instead of solid (e.g. a baseline drawn as a horizontal line).
    pub dashed: bool,
    /// Draw a filled circle at every point.
    pub markers: bool,
    /// Index into the palette; `None` takes the series' position in the slice.
    pub color: Option<usize>,
}

impl Series {
    /// A solid line without markers, coloured by its position.
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            points,
            ..Series::default()
        }
    }
}

/// Canvas size and axis scales.
#[derive(Clone, Debug)]
pub struct ChartOptions {
    pub width: u32,
    pub height: u32,
    pub log_x: bool,
    pub log_y: bool,
    /// Force the y axis to start at 0 (linear axis only): speed charts read better from zero.
    pub y_from_zero: bool,
}

impl Default for ChartOptions {
    fn default() -> Self {
        ChartOptions {
            width: 1024,
            height: 640,
            log_x: false,
            log_y: false,
            y_from_zero: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("{}: {msg}", path.display())]
    BadInput { path: PathBuf, msg: String },
    #[error("{}: drawing the chart failed: {msg}", path.display())]
    Draw { path: PathBuf, msg: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: PNG encoding failed: {source}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bytes are a valid TTF shipped by the `dejavu` crate; a failure here would be a
        // packaging bug, and the only consequence is that text is not drawn, so it is ignored
        // rather than turned into a panic.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Formats a tick value compactly: integers without decimals, large/small values with SI-like
/// exponents, everything else with up to 3 significant decimals.
fn fmt_tick(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".to_owned()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.0e}")
    } else if (v - v.round()).abs() < 1e-9 * a.max(1.0) {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    }
}

/// Data extent of one axis, padded so lines do not sit on the frame: 5% of the span on a linear
/// axis, a factor 1.2 on a log axis; a degenerate (single-value) extent is widened.
fn axis_range(lo: f64, hi: f64, log: bool, from_zero: bool) -> (f64, f64) {
    if log {
        let (lo, hi) = if lo == hi {
            (lo / 2.0, hi * 2.0)
        } else {
            (lo, hi)
        };
        (lo / 1.2, hi * 1.2)
    } else {
        let (lo, hi) = if from_zero {
            (lo.min(0.0), hi.max(0.0))
        } else {
            (lo, hi)
        };
        let span = if hi > lo { hi - lo } else { lo.abs().max(1.0) };
        let pad = 0.05 * span;
        let lo = if from_zero && lo >= 0.0 {
            0.0
        } else {
            lo - pad
        };
        (lo, hi + pad)
    }
}

/// Draws `series` as a PNG line chart at `path` (see the module doc for the guarantees).
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    opts: &ChartOptions,
) -> Result<(), PlotError> {
    let bad = |msg: String| PlotError::BadInput {
        path: path.to_owned(),
        msg,
    };
    if opts.width < MIN_SIDE || opts.height < MIN_SIDE {
        return Err(bad(format!(
            "canvas {}x{} is too small; use at least {MIN_SIDE}x{MIN_SIDE}",
            opts.width, opts.height
        )));
    }
    if series.is_empty() {
        return Err(bad("no series to draw".to_owned()));
    }
    let (mut x_lo, mut x_hi, mut y_lo, mut y_hi) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (i, s) in series.iter().enumerate() {
        if s.points.is_empty() {
            return Err(bad(format!("series {i} ({:?}) has no points", s.label)));
        }
        for (j, &(x, y)) in s.points.iter().enumerate() {
            if !x.is_finite() || !y.is_finite() {
                return Err(bad(format!(
                    "series {i} ({:?}) point {j} is not finite: ({x}, {y})",
                    s.label
                )));
            }
            if (opts.log_x && x <= 0.0) || (opts.log_y && y <= 0.0) {
                return Err(bad(format!(
                    "series {i} ({:?}) point {j} ({x}, {y}) is not positive on a log axis; \
                     drop it or use a linear axis",
                    s.label
                )));
            }
            x_lo = x_lo.min(x);
            x_hi = x_hi.max(x);
            y_lo = y_lo.min(y);
            y_hi = y_hi.max(y);
        }
    }
    let xr = axis_range(x_lo, x_hi, opts.log_x, false);
    let yr = axis_range(y_lo, y_hi, opts.log_y, opts.y_from_zero);

    register_font();
    let (w, h) = (opts.width, opts.height);
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        let labels = Labels {
            title,
            x_label,
            y_label,
        };
        let x = xr.0..xr.1;
        let y = yr.0..yr.1;
        let res = match (opts.log_x, opts.log_y) {
            (false, false) => draw(&root, &labels, series, x, y),
            (true, false) => draw(&root, &labels, series, x.log_scale(), y),
            (false, true) => draw(&root, &labels, series, x, y.log_scale()),
            (true, true) => draw(&root, &labels, series, x.log_scale(), y.log_scale()),
        };
        res.and_then(|()| root.present().map_err(|e| e.to_string()))
            .map_err(|msg| PlotError::Draw {
                path: path.to_owned(),
                msg,
            })?;
    }
    write_png_atomic(path, &rgb, w, h)
}

struct Labels<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
}

fn draw<X, Y>(
    root: &DrawingArea<BitMapBackend<'_>, Shift>,
    labels: &Labels<'_>,
    series: &[Series],
    x: X,
    y: Y,
) -> Result<(), String>
where
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let mut chart = ChartBuilder::on(root)
        .caption(labels.title, (FONT, 24))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(labels.x_label)
        .y_desc(labels.y_label)
        .x_label_formatter(&|v| fmt_tick(*v))
        .y_label_formatter(&|v| fmt_tick(*v))
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 16))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(e)?;
    let mut any_label = false;
    for (i, s) in series.iter().enumerate() {
        let color = PALETTE[s.color.unwrap_or(i) % PALETTE.len()];
        let style = color.stroke_width(2);
        let pts = s.points.iter().copied();
        let anno = if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 8, 6, style))
                .map_err(e)?
        } else {
            chart.draw_series(LineSeries::new(pts, style)).map_err(e)?
        };
        if !s.label.is_empty() {
            any_label = true;
            anno.label(s.label.clone()).legend(move |(lx, ly)| {
                PathElement::new(vec![(lx, ly), (lx + 20, ly)], color.stroke_width(2))
            });
        }
        if s.markers {
            chart
                .draw_series(s.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
    }
    if any_label {
        chart
            .configure_series_labels()
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(e)?;
    }
    Ok(())
}

fn write_png_atomic(path: &Path, rgb: &[u8], w: u32, h: u32) -> Result<(), PlotError> {
    if path.file_name().is_none() {
        return Err(PlotError::BadInput {
            path: path.to_owned(),
            msg: "the output path has no file name".to_owned(),
        });
    }
    let mut encode_error = None;
    let result = crate::fsutil::write_atomic_with(path, &mut |out| {
        image::codecs::png::PngEncoder::new(out)
            .write_image(rgb, w, h, image::ExtendedColorType::Rgb8)
            .map_err(|e| {
                let as_io = std::io::Error::other(e.to_string());
                encode_error = Some(e);
                as_io
            })
    });
    if let Some(source) = encode_error {
        return Err(PlotError::Encode {
            path: path.to_owned(),
            source,
        });
    }
    result.map_err(|source| PlotError::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn curve(n: usize, f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (1..=n).map(|i| (i as f64, f(i as f64))).collect()
    }

    fn count(
        img: &image::RgbImage,
        rows: std::ops::Range<u32>,
        pred: impl Fn(&[u8; 3]) -> bool,
    ) -> usize {
        img.enumerate_pixels()
            .filter(|(_, y, p)| rows.contains(y) && pred(&p.0))
            .count()
    }

    #[test]
    fn draws_series_text_and_legend() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chart.png");
        let series = [
            Series {
                markers: true,
                ..Series::new("loss", curve(50, |x| 1.0 / x))
            },
            Series {
                dashed: true,
                ..Series::new("baseline", vec![(1.0, 0.05), (50.0, 0.05)])
            },
        ];
        let opts = ChartOptions {
            width: 640,
            height: 400,
            log_y: true,
            ..ChartOptions::default()
        };
        line_chart(&path, "Training loss", "iteration", "L1", &series, &opts).unwrap();
        let img = image::open(&path).unwrap().to_rgb8();
        assert_eq!(img.dimensions(), (640, 400));
        // Both series colours are present.
        for c in [PALETTE[0].rgb(), PALETTE[1].rgb()] {
            let want = [c.0, c.1, c.2];
            assert!(
                count(&img, 0..400, |p| *p == want) > 50,
                "colour {want:?} missing"
            );
        }
        // The title band (top 40 px) holds dark anti-aliased glyph pixels: text was rendered.
        let dark = count(&img, 0..40, |p| p.iter().all(|&v| v < 100));
        assert!(dark > 100, "title text not drawn ({dark} dark pixels)");
        // No temporary file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("chart.png")]);
    }

    #[test]
    fn all_axis_combinations_render() {
        let dir = tempfile::tempdir().unwrap();
        let s = [Series::new("a", curve(10, |x| x * x))];
        for (lx, ly) in [(false, false), (true, false), (false, true), (true, true)] {
            let path = dir.path().join(format!("c{lx}{ly}.png"));
            let opts = ChartOptions {
                width: 300,
                height: 200,
                log_x: lx,
                log_y: ly,
                y_from_zero: true,
            };
            line_chart(&path, "t", "x", "y", &s, &opts).unwrap();
            assert_eq!(image::open(&path).unwrap().width(), 300);
        }
        // A single point (degenerate extent) still draws.
        let path = dir.path().join("one.png");
        let one = [Series::new("", vec![(3.0, 3.0)])];
        line_chart(&path, "t", "x", "y", &one, &ChartOptions::default()).unwrap();
    }

    #[test]
    fn bad_input_is_a_typed_error_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keep.png");
        fs::write(&path, b"old").unwrap();
        let o = ChartOptions::default();
        let err =
            |s: &[Series], o: &ChartOptions| line_chart(&path, "t", "x", "y", s, o).unwrap_err();
        assert!(matches!(err(&[], &o), PlotError::BadInput { .. }));
        assert!(err(&[Series::new("e", vec![])], &o)
            .to_string()
            .contains("no points"));
        let nan = [Series::new("n", vec![(1.0, f64::NAN)])];
        assert!(err(&nan, &o).to_string().contains("not finite"));
        let zero = [Series::new("z", vec![(0.0, 1.0), (1.0, 2.0)])];
        let log = ChartOptions {
            log_x: true,
            ..ChartOptions::default()
        };
        assert!(err(&zero, &log).to_string().contains("log axis"));
        let tiny = ChartOptions {
            width: 10,
            ..ChartOptions::default()
        };
        assert!(err(&zero, &tiny).to_string().contains("too small"));
        assert_eq!(fs::read(&path).unwrap(), b"old");
        // A missing directory is an I/O error naming the path.
        let missing = dir.path().join("no/such/dir/c.png");
        let e = line_chart(&missing, "t", "x", "y", &zero, &o).unwrap_err();
        assert!(matches!(e, PlotError::Io { .. }));
        assert!(e.to_string().contains("no/such/dir"));
    }

    #[test]
    fn tick_format() {
        assert_eq!(fmt_tick(0.0), "0");
        assert_eq!(fmt_tick(250.0), "250");
        assert_eq!(fmt_tick(0.125), "0.125");
        assert_eq!(fmt_tick(2.5), "2.5");
        assert_eq!(fmt_tick(3e9), "3e9");
    }
}
