//! Helpers of the point-cloud and importer tests (`tests/las_import.rs`,
//! `tests/e57_import.rs`, `tests/points_transform.rs`, `tests/metashape.rs`,
//! `tests/opensfm.rs`, `tests/bundler.rs`, `tests/meshroom.rs`, `tests/realitycapture.rs`):
//! running `gs-pack`, the
//! synthetic COLMAP workspace an importer is compared against, a synthetic dataset with a
//! cloud of its surfaces, and reading back the points a cloud streams or a pack holds.
//! A test binary includes it with `#[path = "common/gs_pack.rs"] mod gs_pack;` (it is not part
//! of `common`, which other test binaries include); each uses what it needs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ramsplat::dataset::PointSource;
use ramsplat::import::ImportError;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::PointChunkRef;

/// Runs `gs-pack` with `args`.
pub fn gs_pack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args(args)
        .output()
        .expect("run gs-pack")
}

/// A run's status and output, for assertion messages.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `gs-pack convert INPUT -o PACK --max-width 0 EXTRA…`: every view at its photo's size.
pub fn convert_full_size(input: &Path, pack: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "convert",
        input.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--max-width",
        "0",
    ];
    args.extend_from_slice(extra);
    gs_pack(&args)
}

/// The synthetic COLMAP workspace the importer tests compare against: `gs-pack synth -o dir
/// --views V --width W --height H --points P --seed S` (with `--tracks` when `tracks`), its
/// text model read back, and its one camera replaced by `camera` (a `cameras.txt` line of
/// camera 1: the lens the other format's file is given too).
pub fn synth_colmap(
    dir: &Path,
    [views, width, height, points, seed]: [u32; 5],
    tracks: bool,
    camera: &str,
) -> ramsplat::import::colmap::ColmapModel {
    use ramsplat::import::colmap::{read_model, Encoding};
    let (views, width, height) = (views.to_string(), width.to_string(), height.to_string());
    let (points, seed) = (points.to_string(), seed.to_string());
    let mut args = vec![
        "synth",
        "-o",
        dir.to_str().unwrap(),
        "--views",
        &views,
        "--width",
        &width,
        "--height",
        &height,
        "--points",
        &points,
        "--seed",
        &seed,
    ];
    if tracks {
        args.push("--tracks");
    }
    let o = gs_pack(&args);
    assert!(o.status.success(), "{}", text(&o));
    let sparse = dir.join("sparse/0");
    std::fs::write(
        sparse.join("cameras.txt"),
        format!("# Camera list with one line of data per camera:\n{camera}\n"),
    )
    .unwrap();
    read_model(&sparse, Encoding::Text).unwrap()
}

/// An error and its sources joined by ": ", as the binaries print the chain.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

/// `import::open` of `file` as `format` without reading images (metadata only), its error as
/// [`chain`].
pub fn import_metadata(
    file: &Path,
    format: ramsplat::dataset::Format,
) -> Result<ramsplat::import::ImportedScene, String> {
    let options = ramsplat::import::ImportOptions {
        metadata_only: true,
        ..Default::default()
    };
    ramsplat::import::open(file, format, &options).map_err(|e| chain(&e))
}

/// Checks that packs `a` and `b` (the same views, converted with `--sfm-depths` from two
/// encodings of one reconstruction) hold the same sparse depth planes: the same pixels, the
/// same values to a quantization step (their poses may differ in their last bits: a
/// quaternion against an axis-angle or a matrix). Returns the pixels holding a point.
pub fn same_sfm_depth_planes(a: &Path, b: &Path) -> u64 {
    let (a, b) = (Pack::open(a).unwrap(), Pack::open(b).unwrap());
    let (ma, mb) = (a.manifest(), b.manifest());
    assert!(ma.source.sfm_depths && mb.source.sfm_depths);
    assert_eq!(ma.views.len(), mb.views.len());
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let mut held = 0;
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(va.depth_pixels, vb.depth_pixels, "view {i}");
        let (w, h) = (va.width(), va.height());
        let read = |p: &Pack, v: &ramsplat::shard::ViewEntry, out: &mut Vec<f32>| {
            let mut bytes = vec![0u8; v.decoded_len()];
            p.read_view_into(i, &mut bytes).unwrap();
            let planes = v.layout().planes(&bytes, w, h).unwrap();
            v.depth.unwrap().targets_into(planes.depth.unwrap(), out);
        };
        read(&a, va, &mut ta);
        read(&b, vb, &mut tb);
        let step = va.depth.unwrap().scale as f64 / 65536.0;
        for (k, (x, y)) in ta.iter().zip(&tb).enumerate() {
            assert_eq!(x.is_nan(), y.is_nan(), "view {i} pixel {k}");
            if !x.is_nan() {
                held += 1;
                assert!(
                    f64::from((x - y).abs()) <= step + 1e-6 * f64::from(x.abs()),
                    "view {i} pixel {k}: {x} vs {y}"
                );
            }
        }
    }
    held
}

/// Checks that view `i` of packs `a` and `b` (one scene imported from two formats) has the
/// same camera: size, intrinsics and projection bit for bit, the pose's rotation and
/// translation within `pose_tol` relative (a quaternion, an axis-angle and a matrix round
/// differently). Returns both views' packed bytes, for the caller's own comparison.
pub fn same_camera(a: &Pack, b: &Pack, i: usize, pose_tol: f64) -> (Vec<u8>, Vec<u8>) {
    let (va, vb) = (&a.manifest().views[i], &b.manifest().views[i]);
    let (ca, cb) = (va.camera, vb.camera);
    assert_eq!((ca.width, ca.height), (cb.width, cb.height), "view {i}");
    assert_eq!(ca.intrinsics, cb.intrinsics, "view {i}");
    assert_eq!(ca.projection, cb.projection, "view {i}");
    let (ra, rb) = (ca.world_to_camera, cb.world_to_camera);
    let ga = ra.rotation.iter().flatten().chain(&ra.translation);
    let gb = rb.rotation.iter().flatten().chain(&rb.translation);
    for (x, y) in ga.zip(gb) {
        assert!(
            (x - y).abs() <= pose_tol * (1.0 + x.abs()),
            "view {i}: {ca:?} vs {cb:?}"
        );
    }
    let mut pa = vec![0u8; va.decoded_len()];
    let mut pb = vec![0u8; vb.decoded_len()];
    a.read_view_into(i, &mut pa).unwrap();
    b.read_view_into(i, &mut pb).unwrap();
    (pa, pb)
}

/// Checks that `pack`'s only cloud is the SfM cloud holding `model`'s points, in order
/// (positions rounded to f32, colours as they are).
pub fn holds_model_points(pack: &Path, model: &ramsplat::import::colmap::ColmapModel) {
    let p = Pack::open(pack).unwrap();
    let m = p.manifest();
    assert!(!m.scene.no_sfm_points);
    assert_eq!(m.clouds.len(), 1);
    assert_eq!(m.clouds[0].name, "sfm");
    assert_eq!(m.clouds[0].points, model.points.len() as u64);
    let want: Vec<_> = model
        .points
        .iter()
        .map(|p| (p.xyz.map(|v| v as f32), p.rgb, None))
        .collect();
    assert_eq!(packed(pack, 0), want);
}

/// `model`'s points as an ASCII PLY (positions rounded to f32, which [`holds_model_points`]
/// expects back; colours as they are), as a tool exports a reconstruction's points beside
/// cameras that hold none.
pub fn model_points_ply(model: &ramsplat::import::colmap::ColmapModel) -> String {
    use std::fmt::Write as _;
    let mut ply = format!(
        "ply\nformat ascii 1.0\nelement vertex {}\nproperty float x\nproperty float y\n\
         property float z\nproperty uchar red\nproperty uchar green\nproperty uchar blue\n\
         end_header\n",
        model.points.len()
    );
    for p in &model.points {
        let [x, y, z] = p.xyz.map(|v| v as f32);
        let [r, g, b] = p.rgb;
        writeln!(ply, "{x} {y} {z} {r} {g} {b}").unwrap();
    }
    ply
}

/// Every point of `pack`'s cloud `cloud`: position, colour, label.
pub fn packed(pack: &Path, cloud: usize) -> Vec<([f32; 3], [u8; 3], Option<i32>)> {
    let p = Pack::open(pack).unwrap();
    let mut out = Vec::new();
    for (ci, ch) in p.manifest().clouds[cloud].chunks.iter().enumerate() {
        let mut buf = vec![0u8; ch.record.decoded_len as usize];
        let layout = p.read_chunk_into(cloud, ci, &mut buf).unwrap();
        let r = PointChunkRef::new(layout, &buf).unwrap();
        for j in 0..r.len() {
            out.push((r.xyz(j), r.rgb(j), r.label(j)));
        }
    }
    out
}

/// Points with colours, as `SynthScene::sample_points` gives them.
pub type Surface = Vec<([f32; 3], [u8; 3])>;

/// A synthetic COLMAP dataset in `dir/scene` (9 views of 64×48, 300 SfM points, seed 5) and
/// 2,500 points sampled on its surfaces, as a dense reconstruction or a scan would give them.
pub fn scene_and_surface(dir: &Path) -> (PathBuf, Surface) {
    let scene = dir.join("scene");
    let o = gs_pack(&[
        "synth",
        "-o",
        scene.to_str().unwrap(),
        "--views",
        "9",
        "--width",
        "64",
        "--height",
        "48",
        "--points",
        "300",
        "--format",
        "colmap",
        "--seed",
        "5",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let mut rng = ramsplat::rng::Rng::new(11);
    let dense = ramsplat::synth::SynthScene::new(5).sample_points(2_500, &mut rng);
    (scene, dense)
}

/// Every point of a source: position, colour, label.
pub type Points = Vec<([f32; 3], [u8; 3], i32)>;

/// Streams a labelled cloud to its end in chunks of `chunk` points.
pub fn stream(src: &mut dyn PointSource<Error = ImportError>, chunk: usize) -> Points {
    let mut out = Vec::new();
    while let Some(c) = src.next_chunk(chunk).unwrap() {
        assert!(!c.is_empty() && c.len() <= chunk && c.is_consistent());
        let labels = c.labels.as_ref().expect("the cloud's points carry labels");
        for ((xyz, rgb), label) in c.xyz.iter().zip(&c.rgb).zip(labels) {
            out.push((*xyz, *rgb, *label));
        }
    }
    out
}
