//! End-to-end tests of the `gs-pack` binary on real and generated datasets.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data")
        .join(rel)
}

fn gs_pack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .args(args)
        .output()
        .expect("run gs-pack")
}

/// A full-resolution, one-worker convert of the fox photos into `pack`, slow enough (several
/// seconds) for a test to act while it runs; the caller sets stdio and spawns it.
fn slow_fox_convert(pack: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gs-pack"));
    c.args([
        "convert",
        shared("fox").to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--max-width",
        "0",
        "--workers",
        "1",
    ]);
    c
}

/// `gs-pack synth -o DIR --views N --width W --height H --points P EXTRA…`, which must succeed.
fn synth(dir: &Path, views: u32, width: u32, height: u32, points: u32, extra: &[&str]) {
    let numbers = [views, width, height, points].map(|n| n.to_string());
    let mut args = vec!["synth", "-o", dir.to_str().unwrap()];
    for (flag, n) in ["--views", "--width", "--height", "--points"]
        .iter()
        .zip(&numbers)
    {
        args.extend([*flag, n.as_str()]);
    }
    args.extend_from_slice(extra);
    let o = gs_pack(&args);
    assert!(o.status.success(), "{}", text(&o));
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `gs-pack convert INPUT -o PACK EXTRA...`
fn convert(input: &Path, pack: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "convert",
        input.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    gs_pack(&args)
}

fn info_json(pack: &Path) -> serde_json::Value {
    let o = gs_pack(&["info", pack.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("info --json prints one JSON object")
}

#[test]
fn fox_packs_50_views_reports_17_missing_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let o = convert(&shared("fox"), &pack, &["--downscale", "4"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("17"),
        "the 17 missing images are reported: {err}"
    );
    let info = info_json(&pack);
    assert_eq!(info["views"], 50);
    assert_eq!(
        info["test_views"], 7,
        "every 8th of 50 views: indices 0, 8, …, 48"
    );
    assert_eq!(info["train_views"], 43);
    assert_eq!(info["points"], 0);
    assert_eq!(info["no_sfm_points"], true);
    // The undistorted 1080×1920 photos are cropped to the 1067×1902 the lens fills (said
    // once for the camera they share), then shrunk 4×.
    assert!(
        err.contains(
            "50 views (the first: images/0001.jpg): the undistorted image's edges would show \
             pixels outside the photo, so it is cropped to 1067x1902 of 1080x1920 (97.9 %"
        ),
        "{err}"
    );
    assert_eq!(info["resolutions"][0]["width"], 267);
    assert_eq!(info["resolutions"][0]["height"], 476);
    assert!(info["bytes_on_disk"].as_u64().unwrap() > 0);
    assert_eq!(info["decoded_bytes"], 50 * 267 * 476 * 3);

    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    // Without --force the existing pack is left alone.
    let o = convert(&shared("fox"), &pack, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--force"),
        "{}",
        text(&o)
    );

    // One flipped byte in the middle of the shard makes verify fail naming the shard.
    let shard = pack.join("shard-00000.gss");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&shard, &bytes).unwrap();
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("shard-00000.gss"),
        "{}",
        text(&o)
    );
}

#[test]
fn fox_strict_refuses_missing_images_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let o = convert(&shared("fox"), &pack, &["--strict"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("17"),
        "{}",
        text(&o)
    );
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "no partial output"
    );
}

#[test]
fn labelled_kinect_scans_pack_as_three_labelled_clouds() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("mosd.pack");
    let o = convert(&shared("mosd_kinect_labeled/ply"), &pack, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let info = info_json(&pack);
    assert_eq!(info["views"], 0);
    let clouds = info["clouds"].as_array().unwrap();
    assert_eq!(clouds.len(), 3);
    let test63 = clouds
        .iter()
        .find(|c| c["name"] == "test63")
        .expect("test63 cloud");
    assert_eq!(test63["points"], 182_372);
    assert_eq!(test63["has_labels"], true);
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
}

/// A PCD cloud converts like a PLY one, and `info` shows it with its labels.
#[test]
fn a_pcd_cloud_packs_with_its_labels_and_info_shows_them() {
    let tmp = tempfile::tempdir().unwrap();
    // PCL's ASCII layout: label first, packed rgb as its integer, a pixel without a
    // measurement as NaN.
    let cloud = tmp.path().join("scan.pcd");
    std::fs::write(
        &cloud,
        "# .PCD v0.7 - Point Cloud Data file format\nVERSION 0.7\nFIELDS label x y z rgb\nSIZE 4 4 4 4 4\nTYPE U F F F U\nCOUNT 1 1 1 1 1\nWIDTH 2\nHEIGHT 2\nVIEWPOINT 0 0 0 1 0 0 0\nPOINTS 4\nDATA ascii\n\
         20 0.1 0.2 1.5 16744512\n0 nan nan nan 0\n21 -0.3 0.1 1.25 255\n30 0.05 -0.2 2 65280\n",
    )
    .unwrap();
    let pack = tmp.path().join("scan.pack");
    let o = convert(&cloud, &pack, &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("1 of 4 points have NaN coordinates"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["info", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("(PCD)"), "{out}");
    assert!(out.contains("points      \"scan\": 3, labels"), "{out}");
    let info = info_json(&pack);
    assert_eq!(info["source"]["format"], "pcd", "{info}");
    assert_eq!(info["clouds"][0]["points"], 3);
    assert_eq!(info["clouds"][0]["has_labels"], true);
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));

    // A real Kinect frame (binary_compressed, 640x480 with NaN pixels), when the data is here.
    let frame = shared("mosd_kinect_labeled/pcd/test63.pcd");
    if !frame.is_file() {
        eprintln!("skipped the Kinect frame: {} is absent", frame.display());
        return;
    }
    let pack = tmp.path().join("test63.pack");
    let o = convert(&frame, &pack, &["--format", "pcd"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("124,828 of 307,200 points have NaN"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["info", pack.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("points      \"test63\": 182372, labels"),
        "{}",
        text(&o)
    );
}

#[test]
fn statue_model_without_images_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("statue.pack");
    let o = convert(&shared("colmap_statue_of_liberty"), &pack, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!pack.exists());
}

#[test]
fn unknown_dataset_and_missing_pack_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let o = convert(tmp.path(), &tmp.path().join("x"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--format"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["info", tmp.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a ramsplat pack"),
        "{}",
        text(&o)
    );
    let o = gs_pack(&["convert"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Synthesises a dataset with `gs-pack synth`, packs it without resizing and checks that the
/// pack hands back exactly the pixels, cameras and points that were written.
fn synth_round_trip(format: &str) {
    use ramsplat::import::colmap::{read_model, Encoding};
    use ramsplat::shard::reader::Pack;
    use ramsplat::shard::PointChunkRef;

    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let pack = tmp.path().join("scene.pack");
    synth(&scene, 9, 64, 48, 300, &["--format", format, "--seed", "5"]);
    let o = convert(&scene, &pack, &["--max-width", "0", "--codec", "zstd"]);
    assert!(o.status.success(), "{}", text(&o));
    let p = Pack::open(&pack).unwrap();
    let m = p.manifest();
    assert_eq!(m.views.len(), 9);
    assert_eq!(m.split_indices(ramsplat::dataset::Split::Test), vec![0, 8]);
    let synth = ramsplat::synth::SynthScene::new(5);
    for (i, v) in m.views.iter().enumerate() {
        let file = ramsplat::import::image::load_rgb8(
            &scene
                .join("images")
                .join(std::path::Path::new(&v.name).file_name().unwrap()),
        )
        .unwrap();
        let mut got = vec![0u8; v.decoded_len()];
        p.read_view_into(i, &mut got).unwrap();
        assert_eq!(got, file.pixels, "view {i} pixels");
        // The packed camera is the one the generator rendered with (up to the text
        // precision of the metadata file).
        let want = synth.camera(i, 9, 64, 48);
        let c = v.camera;
        assert_eq!((c.width, c.height), (want.width, want.height));
        for (a, b) in [
            (c.intrinsics.fx, want.intrinsics.fx),
            (c.intrinsics.cy, want.intrinsics.cy),
            (c.centre()[0], want.centre()[0]),
            (c.centre()[2], want.centre()[2]),
        ] {
            assert!(
                (a - b).abs() < 1e-6 * (1.0 + b.abs()),
                "view {i}: {a} vs {b}"
            );
        }
    }
    if format == "colmap" {
        let model = read_model(&scene.join("sparse/0"), Encoding::Text).unwrap();
        let cloud = &m.clouds[0];
        assert_eq!(cloud.points, model.points.len() as u64);
        let mut k = 0;
        for (ci, ch) in cloud.chunks.iter().enumerate() {
            let mut buf = vec![0u8; ch.record.decoded_len as usize];
            let layout = p.read_chunk_into(0, ci, &mut buf).unwrap();
            let r = PointChunkRef::new(layout, &buf).unwrap();
            for j in 0..r.len() {
                let want = &model.points[k];
                assert_eq!(r.xyz(j), want.xyz.map(|v| v as f32));
                assert_eq!(r.rgb(j), want.rgb);
                k += 1;
            }
        }
        assert_eq!(k, model.points.len());
    } else {
        // The NeRF importer reads the points through `ply_file_path` (the nerfstudio key).
        assert!(!m.scene.no_sfm_points);
        assert_eq!(m.clouds.len(), 1);
        assert_eq!(
            (m.clouds[0].name.as_str(), m.clouds[0].points),
            ("sfm", 300)
        );
    }
}

#[test]
fn synth_colmap_round_trips_pixels_cameras_and_points() {
    synth_round_trip("colmap");
}

#[test]
fn synth_nerf_round_trips_pixels_and_cameras() {
    synth_round_trip("nerf");
}

#[test]
fn a_killed_convert_leaves_nothing_that_looks_like_a_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let mut child = slow_fox_convert(&pack)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the first shard is being written (its `.partial` file exists), then kill.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let partial_shard = loop {
        let found = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .find_map(|e| {
                let dir = e.path();
                let shard = dir.join("shard-00000.gss.partial");
                shard.exists().then_some(dir)
            });
        if let Some(dir) = found {
            break dir;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "convert finished before it could be killed"
        );
        assert!(std::time::Instant::now() < deadline, "no shard appeared");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        !pack.exists(),
        "the destination must not exist after a killed convert"
    );
    let name = partial_shard
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(name.starts_with(".fox.pack.partial-"), "{name}");
    assert!(!partial_shard.join("manifest.json").exists());
    assert!(ramsplat::shard::reader::Pack::open(&partial_shard).is_err());
    // A new convert to the same destination works; the stale hidden directory of the killed
    // process (another pid) does not disturb it.
    let o = convert(&shared("fox"), &pack, &["--downscale", "8"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(ramsplat::shard::reader::Pack::open(&pack).is_ok());
    // ... and removes it, since its process is gone.
    assert!(!partial_shard.exists(), "stale {name} was not cleaned up");
}

#[test]
fn a_corrupt_image_fails_the_convert_naming_the_file_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let pack = tmp.path().join("scene.pack");
    synth(&scene, 6, 32, 24, 50, &[]);
    std::fs::write(scene.join("images/00003.png"), b"definitely not a png").unwrap();
    let o = convert(&scene, &pack, &["--workers", "2"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("00003.png"),
        "{}",
        text(&o)
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("scene")],
        "nothing but the input remains"
    );
}

/// A small synthetic COLMAP dataset at `dir`.
/// Synthesizes a 9-view 65×49 dataset of `format` at `dir` and writes `dir/images_2`, each image
/// downscaled by 2 with the area filter `--downscale 2` uses (33×25: odd sides round up).
/// Returns the original image files.
fn scene_with_half_size_copy(dir: &Path, format: &str) -> Vec<PathBuf> {
    use ramsplat::import::image::{load_rgb8, resize_area, target_size, Resize};
    synth(dir, 9, 65, 49, 300, &["--seed", "5", "--format", format]);
    let copy = dir.join("images_2");
    std::fs::create_dir(&copy).unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("images"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 9);
    for f in &files {
        let img = load_rgb8(f).unwrap();
        let (w, h) = target_size(img.width, img.height, Resize::Downscale(2));
        assert_eq!((w, h), (33, 25));
        let small = resize_area(&img, w, h);
        ramsplat::eval::write_png(&copy.join(f.file_name().unwrap()), &small.pixels, w, h).unwrap();
    }
    files
}

/// A COLMAP workspace shot through a fisheye lens (OPENCV_FISHEYE, what COLMAP estimates for
/// action-camera captures) packs as pinhole views of the same size and focal length: the
/// packed camera has the fisheye's intrinsics and no distortion, the packed pixels are the
/// ideal pinhole image of the scene (an analytic pattern over ray directions, to within the
/// resampling error), and `convert` says how much of each camera's field of view that keeps.
#[test]
fn fisheye_photos_pack_as_pinhole_views() {
    use ramsplat::dataset::Distortion;
    use ramsplat::import::colmap::{read_model, write_model, Encoding};
    use ramsplat::import::image::{covered_rect, field_of_view, PixelRect};
    use ramsplat::scene::camera::Projection;
    use ramsplat::shard::reader::Pack;

    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    synth(
        &scene,
        9,
        160,
        120,
        300,
        &["--format", "colmap", "--seed", "5"],
    );
    let sparse = scene.join("sparse/0");
    let mut model = read_model(&sparse, Encoding::Text).unwrap();
    let k = [0.03, -0.01, 0.002, -0.0005];
    let lens = Distortion::Fisheye { k };
    for c in &mut model.cameras {
        c.model_id = 5; // OPENCV_FISHEYE: fx, fy, cx, cy, k1..k4
        let (fx, fy, cx, cy) = match c.params.len() {
            3 => (c.params[0], c.params[0], c.params[1], c.params[2]),
            _ => (c.params[0], c.params[1], c.params[2], c.params[3]),
        };
        // A wide lens: half the generator's focal length.
        c.params = vec![fx / 2.0, fy / 2.0, cx, cy, k[0], k[1], k[2], k[3]];
    }
    let points = std::mem::take(&mut model.points);
    write_model(
        &sparse,
        Encoding::Text,
        &model.cameras,
        &model.images,
        &mut points.into_iter(),
    )
    .unwrap();
    // The scene: a smooth pattern over ideal (pinhole) normalised coordinates.
    let g = |x: f64, y: f64| -> [f64; 3] {
        [
            127.5 + 100.0 * (11.0 * x + 0.3).sin() * (10.0 * y).cos(),
            127.5 + 100.0 * (9.0 * x - 8.0 * y).cos(),
            127.5 + 100.0 * (10.0 * y + 1.0).sin(),
        ]
    };
    // OpenCV's fisheye model, written out here so the photos do not depend on the code under
    // test: the ray at angle θ lands at radius θ_d(θ).
    let theta_d = |t: f64| {
        t * (1.0 + k[0] * t.powi(2) + k[1] * t.powi(4) + k[2] * t.powi(6) + k[3] * t.powi(8))
    };
    let distort = |x: f64, y: f64| -> (f64, f64) {
        let r = x.hypot(y);
        let scale = if r == 0.0 { 1.0 } else { theta_d(r.atan()) / r };
        (x * scale, y * scale)
    };
    // The ideal ray a fisheye photo's normalised point sees: θ from θ_d by bisection.
    let undistort_point = |xd: f64, yd: f64| -> (f64, f64) {
        let rd = xd.hypot(yd);
        let (mut lo, mut hi) = (0.0f64, std::f64::consts::FRAC_PI_2 - 1e-9);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            if theta_d(mid) < rd {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let scale = if rd == 0.0 { 1.0 } else { lo.tan() / rd };
        (xd * scale, yd * scale)
    };
    let camera = &model.cameras[0];
    let (w, h) = (camera.width as u32, camera.height as u32);
    let [fx, fy, cx, cy] = [0, 1, 2, 3].map(|i| camera.params[i]);
    assert!(model.cameras.iter().all(|c| c.params == camera.params));
    let mut photo = vec![0u8; (w * h * 3) as usize];
    for j in 0..h {
        for i in 0..w {
            let xd = (i as f64 + 0.5 - cx) / fx;
            let yd = (j as f64 + 0.5 - cy) / fy;
            let (x, y) = undistort_point(xd, yd);
            let at = ((j * w + i) * 3) as usize;
            for (c, v) in g(x, y).iter().enumerate() {
                photo[at + c] = v.round() as u8;
            }
        }
    }
    for image in &model.images {
        ramsplat::eval::write_png(&scene.join("images").join(&image.name), &photo, w, h).unwrap();
    }

    let pack = tmp.path().join("fisheye.pack");
    let o = convert(&scene, &pack, &["--max-width", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    let intrinsics = ramsplat::scene::camera::Intrinsics { fx, fy, cx, cy };
    // θ_d(θ) < tan θ: every pinhole pixel's ray lands in the photo, nothing is cropped.
    let full = PixelRect::full(w, h);
    assert_eq!(
        covered_rect(w, h, &intrinsics, &lens, Projection::Pinhole),
        full
    );
    let fov = field_of_view(w, h, &intrinsics, &lens, Projection::Pinhole, full);
    let [ph, pv] = fov.photo.map(Option::unwrap);
    let note = format!(
        "9 views (the first: {}): a fisheye lens, resampled to a pinhole image of the same \
         focal length, which keeps {:.0}°×{:.0}° of the photo's {ph:.0}°×{pv:.0}°",
        model.images.iter().map(|i| i.name.as_str()).min().unwrap(),
        fov.kept[0],
        fov.kept[1]
    );
    assert!(text(&o).contains(&note), "{note:?} not in {}", text(&o));
    // 117°×88° photos, of which the pinhole keeps 92°×76°.
    assert!(
        fov.kept[0] < ph - 20.0 && fov.kept[1] < pv - 10.0,
        "{fov:?}"
    );

    let p = Pack::open(&pack).unwrap();
    for (index, v) in p.manifest().views.iter().enumerate() {
        assert_eq!((v.camera.width, v.camera.height), (w, h));
        assert_eq!(v.camera.intrinsics, intrinsics);
        let mut got = vec![0u8; v.decoded_len()];
        p.read_view_into(index, &mut got).unwrap();
        // Tolerance: bilinear interpolation error, which grows towards the corners where the
        // photo compresses the pattern (by dθ/dr = 1/(1 + r²), 0.36 at the corners here),
        // plus source quantisation and output rounding: 2.3 levels measured; 3.5 leaves room
        // for a rounding flip of a libm ulp. A wrong lens model or a half-pixel slip costs
        // tens of levels.
        let (mut worst, mut checked) = (0.0f64, 0);
        for j in 0..h {
            for i in 0..w {
                let x = (i as f64 + 0.5 - cx) / fx;
                let y = (j as f64 + 0.5 - cy) / fy;
                let (xd, yd) = distort(x, y);
                let (u, v) = (fx * xd + cx, fy * yd + cy);
                if !(u >= 2.0 && u <= w as f64 - 2.0 && v >= 2.0 && v <= h as f64 - 2.0) {
                    continue;
                }
                let at = ((j * w + i) * 3) as usize;
                for (c, want) in g(x, y).iter().enumerate() {
                    worst = worst.max((got[at + c] as f64 - want).abs());
                }
                checked += 1;
            }
        }
        assert!(
            checked > (w * h) as usize * 3 / 4,
            "{checked} pixels checked"
        );
        assert!(worst <= 3.5, "view {index}: worst error {worst} levels");
    }

    // --keep-fisheye: the same photos packed as the ideal equidistant fisheye image of their
    // size and intrinsics (the lens's k1..k4 removed). Its pixel at normalised (a, b) sees the
    // ray θ = |(a, b)| off the axis, whose pinhole point is tan θ · (a, b)/θ.
    let kept = tmp.path().join("kept.pack");
    let o = convert(&scene, &kept, &["--max-width", "0", "--keep-fisheye"]);
    assert!(o.status.success(), "{}", text(&o));
    let rect = covered_rect(w, h, &intrinsics, &lens, Projection::Fisheye);
    let fov = field_of_view(w, h, &intrinsics, &lens, Projection::Fisheye, rect);
    let note = format!(
        "9 views (the first: {}): a fisheye lens, kept as a fisheye view (--keep-fisheye): \
         resampled to the ideal equidistant fisheye image of the same focal length (the lens's \
         k1..k4 removed), which keeps {:.0}°×{:.0}° of the photo's {ph:.0}°×{pv:.0}°",
        model.images.iter().map(|i| i.name.as_str()).min().unwrap(),
        fov.kept[0],
        fov.kept[1]
    );
    assert!(text(&o).contains(&note), "{note:?} not in {}", text(&o));
    // Nearly all of the photo's field of view, where the pinhole kept 92°×76° of 117°×88°.
    assert!(
        fov.kept[0] > ph - 3.0 && fov.kept[1] > pv - 3.0,
        "{fov:?} of {ph}×{pv}"
    );
    let info = info_json(&kept);
    assert_eq!(info["fisheye_views"], 9, "{info}");
    assert_eq!(info_json(&pack)["fisheye_views"], 0);
    let p = Pack::open(&kept).unwrap();
    for (index, v) in p.manifest().views.iter().enumerate() {
        assert_eq!(v.camera.projection, Projection::Fisheye);
        assert_eq!(
            (v.camera.width, v.camera.height),
            (rect.width(), rect.height())
        );
        assert_eq!(v.camera.intrinsics.fx, fx);
        assert_eq!(v.camera.intrinsics.cx, cx - rect.x0 as f64);
        let mut got = vec![0u8; v.decoded_len()];
        p.read_view_into(index, &mut got).unwrap();
        let (mut worst, mut checked) = (0.0f64, 0);
        for j in 0..rect.height() {
            for i in 0..rect.width() {
                let a = ((rect.x0 + i) as f64 + 0.5 - cx) / fx;
                let b = ((rect.y0 + j) as f64 + 0.5 - cy) / fy;
                let t = a.hypot(b);
                // Within 50° of the axis: further out the pattern, defined over tan θ,
                // oscillates faster than the photo samples it (11·sec²θ rad per radian, 0.8
                // rad per pixel at the corners), and bilinear error alone reaches ~9 levels.
                if t > 50f64.to_radians() {
                    continue;
                }
                let s = if t == 0.0 { 1.0 } else { t.tan() / t };
                let (x, y) = (a * s, b * s);
                let (xd, yd) = distort(x, y);
                let (u, v) = (fx * xd + cx, fy * yd + cy);
                if !(u >= 2.0 && u <= w as f64 - 2.0 && v >= 2.0 && v <= h as f64 - 2.0) {
                    continue;
                }
                let at = ((j * rect.width() + i) * 3) as usize;
                for (c, want) in g(x, y).iter().enumerate() {
                    worst = worst.max((got[at + c] as f64 - want).abs());
                }
                checked += 1;
            }
        }
        assert!(
            checked > (rect.width() * rect.height()) as usize / 2,
            "{checked} pixels checked"
        );
        assert!(
            worst <= 3.5,
            "fisheye view {index}: worst error {worst} levels"
        );
    }
}

/// `gs-pack synth --camera-model fisheye` writes ideal equidistant fisheye images as
/// OPENCV_FISHEYE cameras with zero coefficients; `convert --keep-fisheye` packs them as
/// fisheye views whose pixels (and masks) are the files' exactly, and says so; `info`
/// counts them. Without the flag the same dataset packs as pinhole views, as before.
#[test]
fn synthetic_fisheye_views_pack_exactly_with_keep_fisheye() {
    use ramsplat::import::colmap::{read_model, Encoding};
    use ramsplat::scene::camera::Projection;
    use ramsplat::shard::reader::Pack;

    let tmp = tempfile::tempdir().unwrap();
    for format in ["colmap", "nerf"] {
        let scene = tmp.path().join(format);
        synth(
            &scene,
            5,
            48,
            36,
            200,
            &["--format", format, "--camera-model", "fisheye"],
        );
        if format == "colmap" {
            let model = read_model(&scene.join("sparse/0"), Encoding::Text).unwrap();
            assert_eq!(model.cameras.len(), 1);
            assert_eq!(model.cameras[0].model_id, 5, "OPENCV_FISHEYE");
            assert_eq!(&model.cameras[0].params[4..], &[0.0; 4]);
            // Loss masks (COLMAP's masks/<name>.png): view 2's excludes its left half, the
            // others nothing (so they are dropped).
            std::fs::create_dir_all(scene.join("masks")).unwrap();
            for i in 0..5 {
                let mask = image::GrayImage::from_fn(48, 36, |x, _| {
                    image::Luma([if i == 2 && x < 24 { 0 } else { 255 }])
                });
                mask.save(scene.join(format!("masks/{i:05}.png.png")))
                    .unwrap();
            }
        } else {
            let doc: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(scene.join("transforms.json")).unwrap(),
            )
            .unwrap();
            assert_eq!(doc["camera_model"], "OPENCV_FISHEYE");
            for k in ["k1", "k2", "k3", "k4"] {
                assert_eq!(doc[k].as_f64(), Some(0.0), "{k}");
            }
        }
        let pack = tmp.path().join(format!("{format}.pack"));
        let o = convert(
            &scene,
            &pack,
            &["--keep-fisheye", "--max-width", "0", "--test-every", "0"],
        );
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains(
                "5 views (the first: images/00000.png): a fisheye lens, kept as a fisheye view"
            ) || text(&o)
                .contains("5 views (the first: 00000.png): a fisheye lens, kept as a fisheye view"),
            "{}",
            text(&o)
        );
        // 150° across the diagonal: 120°×90° through the centre, all of it kept.
        assert!(
            text(&o).contains("which keeps 120°×90° of the photo's 120°×90°"),
            "{}",
            text(&o)
        );
        let p = Pack::open(&pack).unwrap();
        let m = p.manifest();
        assert_eq!(m.views.len(), 5);
        for (i, v) in m.views.iter().enumerate() {
            assert_eq!(v.camera.projection, Projection::Fisheye);
            assert_eq!((v.camera.width, v.camera.height), (48, 36));
            let file = scene.join("images").join(format!("{i:05}.png"));
            let want = image::open(&file).unwrap().to_rgb8().into_raw();
            let mut got = vec![0u8; v.decoded_len()];
            p.read_view_into(i, &mut got).unwrap();
            assert_eq!(
                &got[..want.len()],
                &want[..],
                "{format} view {i}: the file's pixels"
            );
            if format == "colmap" && i == 2 {
                assert!(v.mask);
                let mask = &got[want.len()..];
                assert!(mask
                    .chunks(48)
                    .all(|row| row[..24].iter().all(|&m| m == 0)
                        && row[24..].iter().all(|&m| m == 255)));
            } else {
                assert!(!v.mask && got.len() == want.len());
            }
        }
        let info = info_json(&pack);
        assert_eq!(info["fisheye_views"], 5);
        let o = gs_pack(&["info", pack.to_str().unwrap()]);
        assert!(o.status.success());
        assert!(
            text(&o).contains("5 fisheye (ideal equidistant projection"),
            "{}",
            text(&o)
        );

        // Without --keep-fisheye: pinhole views of the same size and focal length, resampled.
        let pinhole = tmp.path().join(format!("{format}-pinhole.pack"));
        let o = convert(&scene, &pinhole, &["--max-width", "0", "--test-every", "0"]);
        assert!(o.status.success(), "{}", text(&o));
        assert!(
            text(&o).contains("a fisheye lens, resampled to a pinhole image"),
            "{}",
            text(&o)
        );
        let q = Pack::open(&pinhole).unwrap();
        assert_eq!(info_json(&pinhole)["fisheye_views"], 0);
        for (a, b) in m.views.iter().zip(&q.manifest().views) {
            assert_eq!(b.camera.projection, Projection::Pinhole);
            assert_eq!((b.camera.width, b.camera.height), (48, 36));
            assert_eq!(a.camera.intrinsics, b.camera.intrinsics);
        }
        assert_ne!(m.content_fingerprint(), q.manifest().content_fingerprint());
    }
}

/// `--images images_2` reads a resized copy of the images (Mip-NeRF 360's and nerfstudio's
/// `images_N`), in a COLMAP workspace and a transforms.json dataset: each camera is scaled to
/// its file, so a copy made with the area filter `--downscale 2` uses packs exactly what
/// `--downscale 2` makes from the originals (same names, cameras and pixels: the same content
/// fingerprint), at odd sizes too. A file that is no resize of its camera's image, an absent
/// folder, an output inside the images folder and a PLY input are refused, leaving no pack.
#[test]
fn images_reads_a_resized_copy_with_scaled_cameras() {
    use ramsplat::shard::reader::Pack;

    let tmp = tempfile::tempdir().unwrap();
    for format in ["colmap", "nerf"] {
        let scene = tmp.path().join(format);
        scene_with_half_size_copy(&scene, format);
        let (a, b) = (
            tmp.path().join(format!("{format}-a.pack")),
            tmp.path().join(format!("{format}-b.pack")),
        );
        let o = convert(&scene, &a, &["--downscale", "2"]);
        assert!(o.status.success(), "{}", text(&o));
        let o = convert(&scene, &b, &["--images", "images_2", "--max-width", "0"]);
        assert!(o.status.success(), "{}", text(&o));
        let (pa, pb) = (Pack::open(&a).unwrap(), Pack::open(&b).unwrap());
        let (ma, mb) = (pa.manifest(), pb.manifest());
        assert_eq!(ma.views.len(), 9);
        for (va, vb) in ma.views.iter().zip(&mb.views) {
            assert_eq!((va.camera.width, va.camera.height), (33, 25));
            assert_eq!((&va.name, va.camera), (&vb.name, vb.camera), "{format}");
        }
        assert_eq!(
            ma.content_fingerprint(),
            mb.content_fingerprint(),
            "{format}"
        );
        assert_eq!(mb.source.images.as_deref(), Some("images_2"));
        assert_eq!(ma.source.images, None);
    }

    // Refusals, each leaving no pack behind.
    let scene = tmp.path().join("colmap");
    let copy = scene.join("images_2");
    let c = tmp.path().join("c.pack");
    let refused = |o: &Output, want: &[&str]| {
        assert!(!o.status.success(), "{}", text(o));
        let msg = text(o);
        for w in want {
            assert!(msg.contains(w), "{w:?} not in {msg}");
        }
        assert!(!c.exists());
    };
    let o = convert(&scene, &c, &["--images", "images_8"]);
    refused(&o, &["--images images_8", "no such folder"]);
    // The images folder is source data too, also outside the workspace.
    let outside = tmp.path().join("outside");
    std::fs::rename(&copy, &outside).unwrap();
    let inside = outside.join("x.pack");
    let o = convert(&scene, &inside, &["--images", outside.to_str().unwrap()]);
    assert!(
        !o.status.success() && text(&o).contains("lies inside"),
        "{}",
        text(&o)
    );
    assert!(!inside.exists());
    std::fs::rename(&outside, &copy).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&copy)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    ramsplat::eval::write_png(&files[3], &[0u8; 33 * 30 * 3], 33, 30).unwrap();
    let o = convert(&scene, &c, &["--images", "images_2"]);
    let name = files[3].file_name().unwrap().to_str().unwrap();
    refused(&o, &[name, "33x30", "65x49", "not a resized copy"]);
    let ply = tmp.path().join("nerf/points3d.ply");
    let o = convert(&ply, &c, &["--images", "images"]);
    refused(&o, &["PLY point cloud", "drop --images"]);
}

/// `--images` on a transforms.json dataset takes each `file_path`'s file name in the folder
/// (nerfstudio's layout): two frames whose names share a file name (Blender's `train/r_0` and
/// `test/r_0`) would read one file under two names, so that is refused; and a focal length in
/// pixels without the `w`/`h` it belongs to cannot be scaled, so that is refused too.
#[test]
fn images_on_transforms_json_refuses_what_it_cannot_resolve() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("nerf");
    scene_with_half_size_copy(&scene, "nerf");
    let json_path = scene.join("transforms.json");
    let original = std::fs::read_to_string(&json_path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&original).unwrap();
    let c = tmp.path().join("c.pack");
    let try_with = |doc: &serde_json::Value| {
        std::fs::write(&json_path, serde_json::to_string_pretty(doc).unwrap()).unwrap();
        let o = convert(&scene, &c, &["--images", "images_2"]);
        assert!(!o.status.success(), "{}", text(&o));
        assert!(!c.exists());
        text(&o)
    };
    // Frame 1 renamed into another folder with frame 0's file name.
    let mut dup = doc.clone();
    let first = dup["frames"][0]["file_path"].as_str().unwrap().to_owned();
    let file = Path::new(&first)
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    std::fs::create_dir(scene.join("other")).unwrap();
    std::fs::copy(scene.join(&first), scene.join("other").join(&file)).unwrap();
    dup["frames"][1]["file_path"] = serde_json::Value::from(format!("other/{file}"));
    let msg = try_with(&dup);
    assert!(
        msg.contains("both read this file") && msg.contains(&file),
        "{msg}"
    );
    // fl_x without w/h.
    let mut bare = doc.clone();
    let top = bare.as_object_mut().unwrap();
    top.remove("w");
    top.remove("h");
    let msg = try_with(&bare);
    assert!(
        msg.contains("\"fl_x\"") && msg.contains("add \"w\" and \"h\""),
        "{msg}"
    );
    // camera_angle_x alone is resolution-free: the copy's own size is the camera's.
    top_angle_only(&mut bare);
    std::fs::write(&json_path, serde_json::to_string_pretty(&bare).unwrap()).unwrap();
    let o = convert(&scene, &c, &["--images", "images_2"]);
    assert!(o.status.success(), "{}", text(&o));
    let info = info_json(&c);
    assert_eq!(info["views"].as_u64(), Some(9), "{info}");
}

/// Leaves `camera_angle_x` as the only intrinsic of a transforms document.
fn top_angle_only(doc: &mut serde_json::Value) {
    let top = doc.as_object_mut().unwrap();
    for k in ["fl_x", "fl_y", "cx", "cy", "w", "h"] {
        top.remove(k);
    }
}

fn small_scene(dir: &Path) {
    synth(dir, 6, 32, 24, 100, &["--seed", "3"]);
}

/// Sorted names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn force_never_replaces_a_folder_that_is_not_a_pack() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let user = tmp.path().join("work");
    std::fs::create_dir_all(user.join("sub")).unwrap();
    std::fs::write(user.join("thesis.txt"), b"years of work").unwrap();
    let o = convert(&scene, &user, &["--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a ramsplat pack"), "{}", text(&o));
    assert_eq!(
        std::fs::read(user.join("thesis.txt")).unwrap(),
        b"years of work"
    );
    assert!(user.join("sub").is_dir());
    // A pack with a user's file dropped into it is not replaced either.
    let pack = tmp.path().join("scene.pack");
    assert!(convert(&scene, &pack, &[]).status.success());
    std::fs::write(pack.join("notes.txt"), b"mine").unwrap();
    let o = convert(&scene, &pack, &["--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("notes.txt"));
    assert_eq!(std::fs::read(pack.join("notes.txt")).unwrap(), b"mine");
    assert_eq!(names(tmp.path()), ["scene", "scene.pack", "work"]);
}

/// An empty folder made for the pack (`mkdir out && gs-pack convert … -o out`) is filled
/// without `--force`, and with it; a folder that is empty when the convert starts but not when
/// it ends keeps what was put there (the convert is refused as raced).
#[test]
fn an_empty_folder_becomes_the_pack_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    for flags in [&[][..], &["--force"][..]] {
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let o = convert(&scene, &empty, flags);
        assert!(o.status.success(), "{flags:?}: {}", text(&o));
        assert_eq!(info_json(&empty)["views"].as_u64(), Some(6), "{flags:?}");
        std::fs::remove_dir_all(&empty).unwrap();
    }
    // A link to an empty folder is not taken for one.
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = convert(&scene, &link, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(link.is_symlink() && std::fs::read_dir(&target).unwrap().next().is_none());
}

#[test]
fn force_never_replaces_a_regular_file_and_hides_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let file = tmp.path().join("afile.txt");
    std::fs::write(&file, b"keep me").unwrap();
    let o = convert(&scene, &file, &["--force"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a regular file"));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
    // No hidden `.afile.txt.old` or partial directory left behind.
    assert_eq!(names(tmp.path()), ["afile.txt", "scene"]);
}

#[test]
fn force_never_touches_the_source_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let before = names(&scene);
    let inside = scene.join("pack");
    let dotted = format!("{}/.", scene.display());
    for (out, relation) in [
        (scene.clone(), "is the input"),
        (PathBuf::from(&dotted), "is the input"),
        (tmp.path().to_owned(), "contains the input"),
        (inside.clone(), "lies inside the input"),
    ] {
        let o = convert(&scene, &out, &["--force"]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(relation),
            "{relation}: {}",
            text(&o)
        );
        assert_eq!(names(&scene), before);
    }
    assert!(!inside.exists());
    // The dataset still converts.
    let pack = tmp.path().join("scene.pack");
    assert!(convert(&scene, &pack, &[]).status.success());
}

#[test]
fn force_replaces_an_old_pack_atomically_and_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let pack = tmp.path().join("scene.pack");
    assert!(convert(&scene, &pack, &["--codec", "raw"]).status.success());
    let o = convert(&scene, &pack, &["--force", "--codec", "zstd"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let m = ramsplat::shard::reader::Pack::open(&pack).unwrap();
    assert_eq!(m.manifest().views[0].codec, ramsplat::shard::Codec::Zstd);
    assert_eq!(names(tmp.path()), ["scene", "scene.pack"]);
}

#[test]
fn a_destination_created_during_the_convert_survives() {
    let tmp = tempfile::tempdir().unwrap();
    let pack = tmp.path().join("fox.pack");
    let mut child = slow_fox_convert(&pack)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !names(tmp.path())
        .iter()
        .any(|n| n.starts_with(".fox.pack.partial-"))
    {
        assert!(child.try_wait().unwrap().is_none(), "finished too early");
        assert!(std::time::Instant::now() < deadline, "no partial appeared");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::create_dir(&pack).unwrap();
    std::fs::write(pack.join("report.txt"), b"someone else's").unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("while this pack was being written"),
        "{}",
        text(&o)
    );
    assert_eq!(names(&pack), ["report.txt"]);
    assert_eq!(names(tmp.path()), ["fox.pack"]);
}

#[test]
fn two_concurrent_converts_into_one_destination_give_one_pack_and_one_error() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let pack = tmp.path().join("scene.pack");
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_gs-pack"))
            .args([
                "convert",
                scene.to_str().unwrap(),
                "-o",
                pack.to_str().unwrap(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let ok = [&a, &b].iter().filter(|o| o.status.success()).count();
    assert_eq!(ok, 1, "{}\n{}", text(&a), text(&b));
    let loser = if a.status.success() { &b } else { &a };
    assert_eq!(loser.status.code(), Some(1), "{}", text(loser));
    let err = String::from_utf8_lossy(&loser.stderr);
    assert!(
        err.contains("already exists") || err.contains("while this pack was being written"),
        "{}",
        text(loser)
    );
    let o = gs_pack(&["verify", pack.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(names(tmp.path()), ["scene", "scene.pack"]);
}

#[test]
fn meaningless_option_values_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    small_scene(&scene);
    let pack = tmp.path().join("p");
    let o = convert(&scene, &pack, &["--downscale", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = convert(&scene, &pack, &["--test-every", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("leaving none to train on"),
        "{}",
        text(&o)
    );
    assert!(!pack.exists());
    assert_eq!(names(tmp.path()), ["scene"]);
}

/// `gs-pack info PACK | head -1`: a reader that closes the pipe early stops the command quietly
/// with 141 (as `SIGPIPE` stops a Unix tool), where `println!` used to panic. The pipe's read
/// end is closed before the command starts, so the first write fails every time.
#[test]
fn a_closed_stdout_stops_info_and_verify_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("scene");
    small_scene(&src);
    let pack = dir.path().join("scene.pack");
    let o = convert(&src, &pack, &[]);
    assert!(o.status.success(), "{}", text(&o));
    for args in [
        vec!["info", pack.to_str().unwrap()],
        vec!["info", pack.to_str().unwrap(), "--json"],
        vec!["verify", pack.to_str().unwrap()],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_gs-pack"))
            .args(&args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(141), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A point-cloud PLY of `points` at `path` (x y z float, red green blue uchar).
fn write_cloud(path: &Path, points: &[([f32; 3], [u8; 3])]) {
    use ramsplat::export::ply::{write_point_row, write_points_header};
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    write_points_header(&mut w, points.len() as u64, "test cloud").unwrap();
    for (xyz, rgb) in points {
        write_point_row(&mut w, *xyz, *rgb).unwrap();
    }
    std::io::Write::flush(&mut w).unwrap();
}

#[test]
fn points_replaces_the_dataset_points_and_says_how_many_the_views_see() {
    use ramsplat::shard::reader::Pack;
    use ramsplat::shard::PointChunkRef;

    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    synth(
        &scene,
        9,
        64,
        48,
        300,
        &["--format", "colmap", "--seed", "5"],
    );
    // A denser cloud of the same surfaces, as a dense reconstruction would give.
    let mut rng = ramsplat::rng::Rng::new(11);
    let dense = ramsplat::synth::SynthScene::new(5).sample_points(2_500, &mut rng);
    std::fs::create_dir(scene.join("dense")).unwrap();
    write_cloud(&scene.join("dense/fused.ply"), &dense);

    // Relative to the dataset root, as --images and --depths are.
    let pack = tmp.path().join("dense.pack");
    let o = convert(&scene, &pack, &["--points", "dense/fused.ply"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("its 2500 points replace the dataset's 300 SfM points"),
        "{err}"
    );
    assert!(err.contains("(100.0 % of a sample in view)"), "{err}");
    assert!(!err.contains("lie in front of a view"), "{err}");
    let p = Pack::open(&pack).unwrap();
    let m = p.manifest();
    assert_eq!(m.clouds.len(), 1);
    assert_eq!(
        (m.clouds[0].name.as_str(), m.clouds[0].points),
        ("sfm", 2500)
    );
    assert_eq!(m.source.points.as_deref(), Some("dense/fused.ply"));
    assert!(!m.scene.no_sfm_points);
    let mut k = 0;
    for (ci, ch) in m.clouds[0].chunks.iter().enumerate() {
        let mut buf = vec![0u8; ch.record.decoded_len as usize];
        let layout = p.read_chunk_into(0, ci, &mut buf).unwrap();
        let r = PointChunkRef::new(layout, &buf).unwrap();
        for j in 0..r.len() {
            assert_eq!((r.xyz(j), r.rgb(j)), dense[k], "point {k}");
            k += 1;
        }
    }
    assert_eq!(k, dense.len());
    let info = info_json(&pack);
    assert_eq!(info["points_in_view"]["sampled"], 2500);
    assert_eq!(info["points_in_view"]["seen"], 2500);
    let o = gs_pack(&["info", pack.to_str().unwrap()]);
    let info = String::from_utf8_lossy(&o.stdout);
    assert!(
        info.contains("in view     100.0 % of a sample of 2500")
            && info.contains("from --points dense/fused.ply (in place of the dataset's own)"),
        "{}",
        text(&o)
    );
    // gs-train starts from them.
    let o = Command::new(env!("CARGO_BIN_EXE_gs-train"))
        .args([pack.to_str().unwrap(), "-o"])
        .arg(tmp.path().join("run"))
        .arg("--dry-run")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let plan = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        plan.contains("initial model: 2500 Gaussians") && plan.contains("2500 points read × 48 B"),
        "{plan}"
    );

    // The same cloud in georeferenced coordinates (offset by kilometres): no view sees it.
    let far: Vec<_> = dense
        .iter()
        .map(|&([x, y, z], c)| ([x + 5.0e5, y + 4.0e6, z], c))
        .collect();
    write_cloud(&scene.join("dense/utm.ply"), &far);
    let abs = scene.join("dense/utm.ply");
    let o = convert(
        &scene,
        &tmp.path().join("far.pack"),
        &["--points", abs.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("none of the points of --points")
            && err.contains("(a sample of 2500 of its 2500 points) lie in front of a view")
            && err.contains("Is the cloud in the cameras' coordinate frame?"),
        "{err}"
    );
    // In millimetres where the cameras are in metres: most lie far beyond the cameras.
    let mm: Vec<_> = dense
        .iter()
        .map(|&(p, c)| (p.map(|v| v * 1000.0), c))
        .collect();
    write_cloud(&scene.join("dense/mm.ply"), &mm);
    let o = convert(
        &scene,
        &tmp.path().join("mm.pack"),
        &["--points", "dense/mm.ply"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("only ") && err.contains("% of the points of --points dense/mm.ply"),
        "{err}"
    );

    // A dataset without points of its own starts from the cloud, and is not told it starts
    // from random points.
    let nerf = tmp.path().join("nerf");
    synth(&nerf, 9, 64, 48, 0, &["--format", "nerf", "--seed", "5"]);
    let o = convert(&nerf, &tmp.path().join("nerf.pack"), &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("training will start from random points"));
    let fused = scene.join("dense/fused.ply");
    let o = convert(
        &nerf,
        &tmp.path().join("nerf-dense.pack"),
        &["--points", fused.to_str().unwrap()],
    );
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("training starts from its 2500 points (the dataset has no points of its own)")
            && !err.contains("random points")
            && err.contains("(100.0 % of a sample in view)"),
        "{err}"
    );

    // A path from the working directory, not the dataset root: refused, saying which is which.
    let o = Command::new(env!("CARGO_BIN_EXE_gs-pack"))
        .current_dir(tmp.path())
        .args([
            "convert",
            "scene",
            "-o",
            "cwd.pack",
            "--points",
            "scene/dense/fused.ply",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the --points cloud does not exist")
            && err.contains("scene/dense/fused.ply exists from the working directory")
            && err.contains("relative to the dataset root"),
        "{err}"
    );
    assert!(!tmp.path().join("cwd.pack").exists());

    // A PCD cloud (the real Kinect frame, when the shared data is there) works the same way.
    let kinect = shared("mosd_kinect_labeled/pcd/test63.pcd");
    if kinect.is_file() {
        let o = convert(
            &scene,
            &tmp.path().join("kinect.pack"),
            &["--points", kinect.to_str().unwrap()],
        );
        assert!(o.status.success(), "{}", text(&o));
        let m = Pack::open(&tmp.path().join("kinect.pack")).unwrap();
        let m = m.manifest();
        assert_eq!(
            (m.clouds[0].name.as_str(), m.clouds[0].points),
            ("sfm", 182_372)
        );
        assert!(m.clouds[0].has_labels);
    } else {
        eprintln!("skipping the PCD case: {} is absent", kinect.display());
    }

    // A point cloud has no cameras to give points to; another kind of file is named.
    let o = convert(
        &scene.join("dense/fused.ply"),
        &tmp.path().join("cloud.pack"),
        &["--points", "utm.ply"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a point cloud without views"),
        "{}",
        text(&o)
    );
    let o = convert(
        &scene,
        &tmp.path().join("txt.pack"),
        &["--points", "sparse/0/points3D.txt"],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("points3D.txt: not a point cloud file"),
        "{}",
        text(&o)
    );
}
