//! Tests of the COLMAP readers, writer and importer: the real statue model (both encodings),
//! round trips of every camera model, and bad input of every kind the module doc promises to
//! refuse with a precise error.

use super::*;
use crate::rng::Rng;

const STATUE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/colmap_statue_of_liberty"
);

/// Bound on |bin − txt| / |bin| for numbers `images.txt` / `cameras.txt` print with C++'s
/// default 6 significant digits: a value in [10^e, 10^(e+1)) is printed to a unit of 10^(e−5),
/// so the rounding error is at most half that, 5·10^(e−6) ≤ 5e-6·|value|. Measured on the statue
/// model: see `statue_bin_and_txt_agree` (it prints the observed maxima).
const SIX_DIGIT_REL: f64 = 5e-6;

fn rel_diff(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(b.abs())
    }
}

/// One camera per supported model and one per refused model, with plausible parameters.
fn cameras_of_every_model() -> Vec<ColmapCamera> {
    CAMERA_MODELS
        .iter()
        .map(|m| {
            let mut params: Vec<f64> = (0..m.num_params)
                .map(|i| 0.01 * (i as f64 + 1.0) - 0.037)
                .collect();
            // Focal lengths and principal point where each model keeps them.
            let (nf, _) = match m.name {
                "SIMPLE_PINHOLE"
                | "SIMPLE_RADIAL"
                | "RADIAL"
                | "SIMPLE_RADIAL_FISHEYE"
                | "RADIAL_FISHEYE" => (1, 0),
                _ => (2, 0),
            };
            for (i, p) in params.iter_mut().take(nf).enumerate() {
                *p = 500.25 + 10.0 * i as f64;
            }
            params[nf] = 320.5;
            params[nf + 1] = 240.125;
            ColmapCamera {
                id: 100 + m.id as u32,
                model_id: m.id,
                width: 640 + m.id as u64,
                height: 480,
                params,
            }
        })
        .collect()
}

fn make_image(id: u32, camera_id: u32, name: &str, rng: &mut Rng) -> ColmapImage {
    let mut q = [rng.normal(), rng.normal(), rng.normal(), rng.normal()];
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    q.iter_mut().for_each(|v| *v /= n);
    ColmapImage {
        id,
        qvec: q,
        tvec: [
            rng.uniform(-5.0, 5.0),
            rng.uniform(-5.0, 5.0),
            rng.uniform(-5.0, 5.0),
        ],
        camera_id,
        name: name.to_owned(),
    }
}

fn points(n: u64, rng: &mut Rng) -> Vec<ColmapPoint> {
    (0..n)
        .map(|i| ColmapPoint {
            id: 1000 + 7 * i,
            xyz: [
                rng.uniform(-10.0, 10.0),
                rng.uniform(-10.0, 10.0),
                rng.uniform(-1e-3, 1e6),
            ],
            rgb: [(i % 256) as u8, (i * 7 % 256) as u8, 255],
            error: rng.uniform(0.0, 2.0),
        })
        .collect()
}

/// A small valid model: cameras of the supported pinhole models, three images, five points.
fn small_model() -> ColmapModel {
    let mut rng = Rng::new(7);
    let cameras: Vec<ColmapCamera> = cameras_of_every_model()
        .into_iter()
        .filter(|c| c.model().unwrap().supported)
        .take(2)
        .collect();
    let images = vec![
        make_image(3, cameras[0].id, "b.png", &mut rng),
        make_image(1, cameras[1].id, "sub/a.png", &mut rng),
        make_image(2, cameras[0].id, "c with space.png", &mut rng),
    ];
    ColmapModel {
        cameras,
        images,
        points: points(5, &mut rng),
    }
}

fn write(dir: &Path, enc: Encoding, m: &ColmapModel) {
    write_model(
        dir,
        enc,
        &m.cameras,
        &m.images,
        &mut m.points.clone().into_iter(),
    )
    .unwrap();
}

fn file_bytes(dir: &Path, name: &str, enc: Encoding) -> Vec<u8> {
    std::fs::read(dir.join(format!("{name}.{}", enc.extension()))).unwrap()
}

/// The `(location, message)` of a parse error; panics (test failure) on any other result.
fn parse_err<T: std::fmt::Debug>(r: Result<T, ImportError>) -> (Location, String) {
    match r {
        Err(ImportError::Parse { at, msg, .. }) => (at, msg),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

fn err_text<T: std::fmt::Debug>(r: Result<T, ImportError>) -> String {
    match r {
        Err(e) => format!("{e:#}"),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

fn import_err(path: &Path, options: &ImportOptions) -> String {
    match import(path, options) {
        Err(e) => e.to_string(),
        Ok(s) => panic!("expected an import error, got {s:?}"),
    }
}

const META: ImportOptions = ImportOptions {
    strict: false,
    metadata_only: true,
    images: None,
    depths: None,
    points_transform: None,
    keep_fisheye: false,
};

// ---------------------------------------------------------------- the statue model

#[test]
fn statue_bin_and_txt_agree() {
    let dir = Path::new(STATUE).join("sparse/0");
    let bin = read_model(&dir, Encoding::Binary).unwrap();
    let txt = read_model(&dir, Encoding::Text).unwrap();
    assert_eq!(
        (bin.cameras.len(), bin.images.len(), bin.points.len()),
        (1, 40, 1816)
    );
    assert_eq!(
        (txt.cameras.len(), txt.images.len(), txt.points.len()),
        (1, 40, 1816)
    );

    let c = &bin.cameras[0];
    assert_eq!((c.id, c.model_id, c.width, c.height), (1, 2, 800, 1200));
    assert_eq!(
        c.params,
        vec![2395.646389027504, 400.0, 600.0, -0.6841223679480687]
    );
    let t = &txt.cameras[0];
    assert_eq!((t.id, t.model_id, t.width, t.height), (1, 2, 800, 1200));
    let mut cam_max = 0.0f64;
    for (a, b) in c.params.iter().zip(&t.params) {
        cam_max = cam_max.max(rel_diff(*a, *b));
    }

    let (mut q_max, mut t_max) = (0.0f64, 0.0f64);
    // COLMAP writes records in hash-map order, which differs between the two files.
    let mut bin = bin;
    let mut txt = txt;
    bin.images.sort_by_key(|i| i.id);
    txt.images.sort_by_key(|i| i.id);
    bin.points.sort_by_key(|p| p.id);
    txt.points.sort_by_key(|p| p.id);
    for (a, b) in bin.images.iter().zip(&txt.images) {
        assert_eq!((a.id, a.camera_id, &a.name), (b.id, b.camera_id, &b.name));
        for (x, y) in a.qvec.iter().zip(&b.qvec) {
            q_max = q_max.max(rel_diff(*x, *y));
        }
        for (x, y) in a.tvec.iter().zip(&b.tvec) {
            t_max = t_max.max(rel_diff(*x, *y));
        }
    }
    // points3D.txt prints 17 significant digits, which round-trips every f64 exactly.
    for (a, b) in bin.points.iter().zip(&txt.points) {
        assert_eq!(a, b);
    }
    eprintln!("statue bin vs txt: max relative difference camera {cam_max:.2e}, qvec {q_max:.2e}, tvec {t_max:.2e}");
    assert!(cam_max <= SIX_DIGIT_REL && q_max <= SIX_DIGIT_REL && t_max <= SIX_DIGIT_REL);
    // The text really is rounded (so this test compares two different parses).
    assert!(q_max > 0.0 && t_max > 0.0);

    let names: std::collections::HashSet<_> = bin.images.iter().map(|i| &i.name).collect();
    assert_eq!(names.len(), 40);
}

#[test]
fn statue_import_metadata_only() {
    for root in [
        Path::new(STATUE).to_path_buf(),
        Path::new(STATUE).join("sparse/0"),
    ] {
        let mut scene = import(&root, &META).unwrap();
        assert_eq!(scene.format, Format::Colmap);
        assert_eq!(scene.root, std::fs::canonicalize(STATUE).unwrap());
        assert_eq!(scene.views.len(), 40);
        assert!(scene.missing_images.is_empty());
        assert!(!scene.no_sfm_points);
        let names: Vec<&str> = scene.views.iter().map(|v| v.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        for v in &scene.views {
            assert_eq!((v.camera.width, v.camera.height), (800, 1200));
            let k = v.camera.intrinsics;
            assert_eq!(
                (k.fx, k.fy, k.cx, k.cy),
                (2395.646389027504, 2395.646389027504, 400.0, 600.0)
            );
            assert_eq!(
                radial_tangential(&v.distortion),
                ([-0.6841223679480687, 0.0, 0.0, 0.0, 0.0, 0.0], [0.0; 2])
            );
            assert_eq!(v.image_path, scene.root.join("images").join(&v.name));
        }
        assert_eq!(scene.clouds.len(), 1);
        let cloud = &mut scene.clouds[0];
        assert_eq!(cloud.name(), "sfm");
        assert_eq!(cloud.declared_len(), Some(1816));
        let mut total = 0;
        while let Some(chunk) = cloud.next_chunk(500).unwrap() {
            assert!(chunk.len() <= 500 && !chunk.is_empty());
            assert_eq!(chunk.rgb.len(), chunk.len());
            total += chunk.len();
        }
        assert_eq!(total, 1816);
    }
}

#[test]
fn statue_import_pose_matches_quaternion() {
    // The first image of images.txt: `1 0.842381 0.215061 0.44459 -0.215599 -2.67344 3.07749
    // 0.697147 1 14268549464_8c6bd2338d_o.jpg`.
    let scene = import(Path::new(STATUE), &META).unwrap();
    let v = scene
        .views
        .iter()
        .find(|v| v.name == "14268549464_8c6bd2338d_o.jpg")
        .unwrap();
    let want = Pose::from_quaternion_wxyz(
        [0.842381, 0.215061, 0.44459, -0.215599],
        [-2.67344, 3.07749, 0.697147],
    )
    .unwrap();
    for i in 0..3 {
        assert!(
            (v.camera.world_to_camera.translation[i] - want.translation[i]).abs()
                <= 5e-6 * want.translation[i].abs()
        );
        for j in 0..3 {
            // Entries of a rotation are products of two 6-digit quaternion components.
            assert!((v.camera.world_to_camera.rotation[i][j] - want.rotation[i][j]).abs() < 1e-5);
        }
    }
}

#[test]
fn statue_without_images_reports_all_missing() {
    let msg = import_err(Path::new(STATUE), &ImportOptions::default());
    assert!(msg.contains("40 of the 40 images"), "{msg}");
    assert!(msg.contains("no view remains"), "{msg}");
    let strict = ImportOptions {
        strict: true,
        ..Default::default()
    };
    let msg = import_err(Path::new(STATUE), &strict);
    assert!(
        msg.contains("40 of the 40 images") && msg.contains("--strict"),
        "{msg}"
    );
}

// ---------------------------------------------------------------- round trips

#[test]
fn round_trip_every_camera_model_both_encodings() {
    let mut rng = Rng::new(1);
    let cameras = cameras_of_every_model();
    let images: Vec<ColmapImage> = cameras
        .iter()
        .enumerate()
        .map(|(i, c)| make_image(i as u32 + 1, c.id, &format!("dir/img {i:02}.jpg"), &mut rng))
        .collect();
    let pts = points(300, &mut rng);
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        write_model(
            dir.path(),
            enc,
            &cameras,
            &images,
            &mut pts.clone().into_iter(),
        )
        .unwrap();
        let back = read_model(dir.path(), enc).unwrap();
        assert_eq!(back.cameras, cameras, "{enc:?}");
        assert_eq!(back.images, images, "{enc:?}");
        assert_eq!(back.points, pts, "{enc:?}");
        let r = PointsReader::open(
            &dir.path().join(format!("points3D.{}", enc.extension())),
            enc,
        )
        .unwrap();
        assert_eq!(r.declared_len(), Some(300));
    }
}

#[test]
fn binary_layout_is_colmaps() {
    let m = ColmapModel {
        cameras: vec![ColmapCamera {
            id: 1,
            model_id: 0,
            width: 4,
            height: 2,
            params: vec![2.0, 2.0, 1.0],
        }],
        images: vec![ColmapImage {
            id: 9,
            qvec: [1.0, 0.0, 0.0, 0.0],
            tvec: [0.0, 0.0, 0.0],
            camera_id: 1,
            name: "a".into(),
        }],
        points: vec![ColmapPoint {
            id: 5,
            xyz: [1.0, 2.0, 3.0],
            rgb: [1, 2, 3],
            error: 0.5,
        }],
    };
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Encoding::Binary, &m);
    // count + id + model + w + h + 3 f64
    assert_eq!(
        file_bytes(dir.path(), "cameras", Encoding::Binary).len(),
        8 + 4 + 4 + 8 + 8 + 3 * 8
    );
    // count + id + 7 f64 + camera id + "a\0" + num_points2D
    let img = file_bytes(dir.path(), "images", Encoding::Binary);
    assert_eq!(img.len(), 8 + 4 + 7 * 8 + 4 + 2 + 8);
    assert_eq!(&img[8..12], &9u32.to_le_bytes());
    assert_eq!(&img[72..74], b"a\0");
    // count + id + 3 f64 + rgb + error + track length
    let pts = file_bytes(dir.path(), "points3D", Encoding::Binary);
    assert_eq!(pts.len(), 8 + 8 + 3 * 8 + 3 + 8 + 8);
    assert_eq!(&pts[..8], &1u64.to_le_bytes());
}

#[test]
fn text_files_have_colmap_headers() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Encoding::Text, &small_model());
    let cams = String::from_utf8(file_bytes(dir.path(), "cameras", Encoding::Text)).unwrap();
    assert!(cams.starts_with("# Camera list with one line of data per camera:\n"));
    assert!(cams.contains("# Number of cameras: 2\n"));
    assert!(
        cams.contains("100 SIMPLE_PINHOLE 640 480 500.25 320.5 240.125\n"),
        "{cams}"
    );
    let imgs = String::from_utf8(file_bytes(dir.path(), "images", Encoding::Text)).unwrap();
    assert!(imgs.contains("# Number of images: 3, mean observations per image: 0\n"));
    let pts = String::from_utf8(file_bytes(dir.path(), "points3D", Encoding::Text)).unwrap();
    assert!(pts.contains("# Number of points: 5, mean track length: 0\n"));
    assert!(!dir.path().join("points3D.txt.body.tmp").exists());
}

#[test]
fn writer_refuses_what_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = small_model();
    m.cameras[0].params.pop();
    let e = write_model(
        dir.path(),
        Encoding::Binary,
        &m.cameras,
        &m.images,
        &mut std::iter::empty(),
    );
    assert!(err_text(e).contains("parameters given"));
    let mut m = small_model();
    m.images[0].name = "two\nlines".into();
    let e = write_model(
        dir.path(),
        Encoding::Text,
        &m.cameras,
        &m.images,
        &mut std::iter::empty(),
    );
    assert!(err_text(e).contains("cannot write image"));
}

#[test]
fn points_stream_in_bounded_chunks() {
    let mut rng = Rng::new(3);
    let pts = points(10, &mut rng);
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        write_model(dir.path(), enc, &[], &[], &mut pts.clone().into_iter()).unwrap();
        let mut r = PointsReader::open(
            &dir.path().join(format!("points3D.{}", enc.extension())),
            enc,
        )
        .unwrap();
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        while let Some(c) = r.next_chunk(3).unwrap() {
            sizes.push(c.len());
            assert!(c.labels.is_none() && c.normals.is_none());
            all.extend(c.xyz.iter().copied().zip(c.rgb.iter().copied()));
        }
        assert_eq!(sizes, vec![3, 3, 3, 1], "{enc:?}");
        for (p, (xyz, rgb)) in pts.iter().zip(&all) {
            assert_eq!(*xyz, p.xyz.map(|v| v as f32));
            assert_eq!(*rgb, p.rgb);
        }
        assert!(r.next_chunk(3).unwrap().is_none());
    }
}

// ---------------------------------------------------------------- camera models

/// The coefficients of a radial–tangential lens (panics on any other).
fn radial_tangential(d: &Distortion) -> ([f64; 6], [f64; 2]) {
    match *d {
        Distortion::RadialTangential { k, p } => (k, p),
        Distortion::Fisheye { .. } | Distortion::Brown { .. } => panic!("not OpenCV's: {d:?}"),
    }
}

#[test]
fn supported_models_map_to_pinhole_and_opencv_distortion() {
    let cams = cameras_of_every_model();
    let get = |name: &str| {
        cams.iter()
            .find(|c| c.model().unwrap().name == name)
            .unwrap()
    };
    let (k, d) = get("SIMPLE_PINHOLE").pinhole().unwrap();
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (500.25, 500.25, 320.5, 240.125));
    assert!(d.is_none());
    let (k, d) = get("PINHOLE").pinhole().unwrap();
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (500.25, 510.25, 320.5, 240.125));
    assert!(d.is_none());
    let c = get("SIMPLE_RADIAL");
    let (k, d) = c.pinhole().unwrap();
    assert_eq!((k.fx, k.fy), (500.25, 500.25));
    assert_eq!(
        radial_tangential(&d),
        ([c.params[3], 0.0, 0.0, 0.0, 0.0, 0.0], [0.0; 2])
    );
    let c = get("RADIAL");
    let (_, d) = c.pinhole().unwrap();
    assert_eq!(
        radial_tangential(&d),
        ([c.params[3], c.params[4], 0.0, 0.0, 0.0, 0.0], [0.0; 2])
    );
    let c = get("OPENCV");
    let p = &c.params;
    let (k, d) = c.pinhole().unwrap();
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (p[0], p[1], p[2], p[3]));
    assert_eq!(
        radial_tangential(&d),
        ([p[4], p[5], 0.0, 0.0, 0.0, 0.0], [p[6], p[7]])
    );
    let c = get("FULL_OPENCV");
    let p = &c.params;
    let (_, d) = c.pinhole().unwrap();
    assert_eq!(
        radial_tangential(&d),
        ([p[4], p[5], p[8], p[9], p[10], p[11]], [p[6], p[7]])
    );
}

#[test]
fn fisheye_models_map_to_opencvs_fisheye_lens() {
    let cams = cameras_of_every_model();
    let get = |name: &str| {
        cams.iter()
            .find(|c| c.model().unwrap().name == name)
            .unwrap()
    };
    let c = get("OPENCV_FISHEYE");
    let p = &c.params;
    let (k, d) = c.pinhole().unwrap();
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (p[0], p[1], p[2], p[3]));
    assert_eq!(
        d,
        Distortion::Fisheye {
            k: [p[4], p[5], p[6], p[7]]
        }
    );
    let c = get("SIMPLE_RADIAL_FISHEYE");
    let (k, d) = c.pinhole().unwrap();
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (500.25, 500.25, 320.5, 240.125));
    assert_eq!(
        d,
        Distortion::Fisheye {
            k: [c.params[3], 0.0, 0.0, 0.0]
        }
    );
    let c = get("RADIAL_FISHEYE");
    let (k, d) = c.pinhole().unwrap();
    assert_eq!((k.fx, k.fy), (500.25, 500.25));
    assert_eq!(
        d,
        Distortion::Fisheye {
            k: [c.params[3], c.params[4], 0.0, 0.0]
        }
    );
    // COLMAP's own formula (colmap/sensor/models.h, OpenCVFisheyeCameraModel::Distortion):
    // θ = atan(r), θ_d = θ·(1 + k1θ² + k2θ⁴ + k3θ⁶ + k4θ⁸), the point scaled by θ_d / r.
    let d = Distortion::Fisheye {
        k: [0.1, -0.02, 0.003, -0.0004],
    };
    let (u, v) = (0.3, 0.4);
    let theta = 0.5f64.atan();
    let theta_d = theta
        * (1.0 + 0.1 * theta.powi(2) - 0.02 * theta.powi(4) + 0.003 * theta.powi(6)
            - 0.0004 * theta.powi(8));
    let (x, y) = d.distort(u, v);
    assert!((x - u * theta_d / 0.5).abs() < 1e-15 && (y - v * theta_d / 0.5).abs() < 1e-15);
}

#[test]
fn other_models_are_refused_at_import() {
    let mut rng = Rng::new(2);
    let refused: Vec<&str> = CAMERA_MODELS
        .iter()
        .filter(|m| !m.supported)
        .map(|m| m.name)
        .collect();
    assert_eq!(
        refused,
        ["FOV", "THIN_PRISM_FISHEYE", "RAD_TAN_THIN_PRISM_FISHEYE"]
    );
    for m in CAMERA_MODELS.iter().filter(|m| !m.supported) {
        let cam = cameras_of_every_model()
            .into_iter()
            .find(|c| c.model_id == m.id)
            .unwrap();
        let msg = cam.pinhole().unwrap_err();
        assert!(
            msg.contains(m.name) && msg.contains(&format!("camera {}", cam.id)),
            "{msg}"
        );
        let dir = tempfile::tempdir().unwrap();
        let model = ColmapModel {
            images: vec![make_image(1, cam.id, "a.png", &mut rng)],
            cameras: vec![cam],
            points: vec![],
        };
        write(dir.path(), Encoding::Text, &model);
        let msg = import_err(dir.path(), &META);
        assert!(
            msg.contains(m.name)
                && msg.contains("image_undistorter")
                && msg.contains("cameras.txt"),
            "{msg}"
        );
    }
}

#[test]
fn unknown_model_id_and_name() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_model();
    write(dir.path(), Encoding::Binary, &m);
    let mut bytes = file_bytes(dir.path(), "cameras", Encoding::Binary);
    // The first record starts after the 8-byte count; its model id follows the 4-byte id.
    bytes[12..16].copy_from_slice(&99i32.to_le_bytes());
    let (at, msg) = parse_err(parse_cameras_bytes(&bytes, Encoding::Binary));
    assert_eq!(at, Location::Byte(8));
    assert!(
        msg.contains("unknown camera model id 99") && msg.contains("camera record 0"),
        "{msg}"
    );

    let text = "# Number of cameras: 1\n1 PINHOLEX 10 10 1 1 5 5\n";
    let (at, msg) = parse_err(parse_cameras_bytes(text.as_bytes(), Encoding::Text));
    assert_eq!(at, Location::Line(2));
    assert!(
        msg.contains("\"PINHOLEX\"") && msg.contains("SIMPLE_RADIAL"),
        "{msg}"
    );
}

#[test]
fn wrong_parameter_count_in_text() {
    let text = "1 SIMPLE_RADIAL 10 10 1 5 5\n";
    let (at, msg) = parse_err(parse_cameras_bytes(text.as_bytes(), Encoding::Text));
    assert_eq!(at, Location::Line(1));
    assert!(
        msg.contains("has 3 parameters, but that model takes 4"),
        "{msg}"
    );
}

// ---------------------------------------------------------------- bad input

#[test]
fn every_truncated_binary_prefix_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Encoding::Binary, &small_model());
    for name in ["cameras", "images", "points3D"] {
        let bytes = file_bytes(dir.path(), name, Encoding::Binary);
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let r = match name {
                "cameras" => parse_cameras_bytes(prefix, Encoding::Binary).map(|v| v.len()),
                "images" => parse_images_bytes(prefix, Encoding::Binary).map(|v| v.len()),
                _ => parse_points_bytes(prefix, Encoding::Binary).map(|v| v.len()),
            };
            let (at, msg) = parse_err(r);
            // The error points at the end of the data, where the file was cut.
            assert_eq!(at, Location::Byte(cut as u64), "{name} cut at {cut}: {msg}");
            assert!(
                msg.contains("truncated") || msg.contains("file ends"),
                "{msg}"
            );
        }
        // The whole file parses.
        let full = match name {
            "cameras" => parse_cameras_bytes(&bytes, Encoding::Binary).map(|v| v.len()),
            "images" => parse_images_bytes(&bytes, Encoding::Binary).map(|v| v.len()),
            _ => parse_points_bytes(&bytes, Encoding::Binary).map(|v| v.len()),
        };
        assert!(full.is_ok(), "{name}: {full:?}");
    }
}

#[test]
fn truncated_text_files_never_panic_and_lose_no_record_silently() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_model();
    write(dir.path(), Encoding::Text, &m);
    for name in ["cameras", "images", "points3D"] {
        let bytes = file_bytes(dir.path(), name, Encoding::Text);
        let text = std::str::from_utf8(&bytes).unwrap();
        // Byte offset where the last data line starts.
        let last_data = text
            .lines()
            .scan(0, |off, l| {
                let start = *off;
                *off += l.len() + 1;
                Some((start, l))
            })
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|(s, _)| s)
            .last()
            .unwrap();
        // Byte offset just past the `# Number of ...` line.
        let count_at = text.find("# Number of").unwrap();
        let header_end = count_at + text[count_at..].find('\n').unwrap() + 1;
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let r = match name {
                "cameras" => parse_cameras_bytes(prefix, Encoding::Text).map(|v| v.len()),
                "images" => parse_images_bytes(prefix, Encoding::Text).map(|v| v.len()),
                _ => parse_points_bytes(prefix, Encoding::Text).map(|v| v.len()),
            };
            if cut < header_end {
                // No record reached: an empty model, or a truncation error once the count's
                // digits are in.
                match r {
                    Ok(n) => assert_eq!(n, 0, "{name} cut {cut}"),
                    Err(e) => assert!(e.to_string().contains("header comment declares"), "{e}"),
                }
            } else if cut <= last_data {
                let e = err_text(r);
                // Whatever the cut broke, the error names the line.
                assert!(e.contains(": line "), "{name} cut {cut}: {e}");
            }
        }
    }
}

#[test]
fn random_corruption_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_model();
    let mut rng = Rng::new(99);
    for enc in [Encoding::Binary, Encoding::Text] {
        write(dir.path(), enc, &m);
        for name in ["cameras", "images", "points3D"] {
            let clean = file_bytes(dir.path(), name, enc);
            for _ in 0..300 {
                let mut b = clean.clone();
                for _ in 0..1 + rng.below(4) {
                    let i = rng.below(b.len() as u64) as usize;
                    b[i] = rng.next_u64() as u8;
                }
                // Only "no panic, no huge allocation" is asserted; a flip may leave valid data.
                let _ = parse_cameras_bytes(&b, enc);
                let _ = parse_images_bytes(&b, enc);
                let _ = parse_points_bytes(&b, enc);
            }
        }
    }
}

#[test]
fn huge_counts_do_not_allocate() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Encoding::Binary, &small_model());
    let huge = 1u64 << 60;
    for name in ["cameras", "images", "points3D"] {
        let mut b = file_bytes(dir.path(), name, Encoding::Binary);
        b[..8].copy_from_slice(&huge.to_le_bytes());
        let len = b.len() as u64;
        let r = match name {
            "cameras" => parse_cameras_bytes(&b, Encoding::Binary).map(|v| v.len()),
            "images" => parse_images_bytes(&b, Encoding::Binary).map(|v| v.len()),
            _ => parse_points_bytes(&b, Encoding::Binary).map(|v| v.len()),
        };
        let (at, msg) = parse_err(r);
        assert_eq!(at, Location::Byte(len), "{name}: {msg}");
        assert!(msg.contains(&format!("declares {huge}")), "{msg}");
    }
    // A reader reports the declared count without acting on it.
    let mut b = file_bytes(dir.path(), "points3D", Encoding::Binary);
    b[..8].copy_from_slice(&huge.to_le_bytes());
    let r = PointsReader::from_reader(Cursor::new(b), "p", Encoding::Binary).unwrap();
    assert_eq!(r.declared_len(), Some(huge));

    // Observation and track counts: 2^60 × 24 bytes overflows, 2^58 × 8 runs past the end.
    let mut b = file_bytes(dir.path(), "images", Encoding::Binary);
    // First image: count 8 + id 4 + 7 f64 + camera 4 + "b.png\0" 6, then num_points2D.
    let at = 8 + 4 + 56 + 4 + 6;
    b[at..at + 8].copy_from_slice(&huge.to_le_bytes());
    let (_, msg) = parse_err(parse_images_bytes(&b, Encoding::Binary));
    assert!(msg.contains("impossibly large"), "{msg}");
    let mut b = file_bytes(dir.path(), "points3D", Encoding::Binary);
    // First point: count 8 + id 8 + 3 f64 + rgb 3 + error 8, then the track length.
    let at = 8 + 8 + 24 + 3 + 8;
    b[at..at + 8].copy_from_slice(&(1u64 << 58).to_le_bytes());
    let (at_err, msg) = parse_err(parse_points_bytes(&b, Encoding::Binary));
    assert_eq!(at_err, Location::Byte(b.len() as u64));
    assert!(msg.contains("point record 0"), "{msg}");

    // Text: a header count far beyond the data.
    let text = "# Number of points: 1152921504606846976, mean track length: 0\n1 0 0 0 1 2 3 0.5\n";
    let r = PointsReader::from_reader(Cursor::new(text.as_bytes().to_vec()), "p", Encoding::Text)
        .unwrap();
    assert_eq!(r.declared_len(), Some(huge));
    let (at, msg) = parse_err(parse_points_bytes(text.as_bytes(), Encoding::Text));
    assert_eq!(at, Location::Line(2));
    assert!(msg.contains("after 1 points"), "{msg}");
}

#[test]
fn a_binary_name_without_nul_is_capped() {
    let mut b = Vec::new();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&[0u8; 56]);
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend(std::iter::repeat_n(b'x', MAX_NAME_BYTES + 10));
    let (_, msg) = parse_err(parse_images_bytes(&b, Encoding::Binary));
    assert!(msg.contains("no NUL terminator"), "{msg}");
}

#[test]
fn trailing_bytes_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), Encoding::Binary, &small_model());
    let mut b = file_bytes(dir.path(), "cameras", Encoding::Binary);
    let len = b.len() as u64;
    b.push(0);
    let (at, msg) = parse_err(parse_cameras_bytes(&b, Encoding::Binary));
    assert_eq!(at, Location::Byte(len));
    assert!(msg.contains("after the last of the 2 cameras"), "{msg}");
}

/// A change that corrupts a model.
type Edit = fn(&mut ColmapModel);

#[test]
fn non_finite_values_and_zero_quaternions() {
    let mut rng = Rng::new(5);
    let good = small_model();
    let cases: [(&str, Edit, &str); 3] = [
        (
            "NaN qvec",
            |m: &mut ColmapModel| m.images[1].qvec[2] = f64::NAN,
            "not finite",
        ),
        (
            "Inf tvec",
            |m: &mut ColmapModel| m.images[1].tvec[0] = f64::INFINITY,
            "not finite",
        ),
        (
            "zero quaternion",
            |m: &mut ColmapModel| m.images[1].qvec = [0.0; 4],
            "zero quaternion",
        ),
    ];
    for (what, edit, want) in &cases {
        for enc in [Encoding::Binary, Encoding::Text] {
            let mut m = good.clone();
            edit(&mut m);
            let dir = tempfile::tempdir().unwrap();
            write(dir.path(), enc, &m);
            let (at, msg) = parse_err(read_images(
                &dir.path().join(format!("images.{}", enc.extension())),
                enc,
            ));
            assert!(
                msg.contains(want) && msg.contains("image 1 "),
                "{what} {enc:?}: {msg}"
            );
            match enc {
                // Record 1 starts after the count and record 0 ("b.png": 4 + 56 + 4 + 6 + 8 bytes).
                Encoding::Binary => assert_eq!(at, Location::Byte(8 + 78)),
                // Four header lines, then two lines per image.
                Encoding::Text => assert_eq!(at, Location::Line(7)),
            }
            let msg = import_err(dir.path(), &META);
            assert!(msg.contains(want), "{msg}");
        }
    }
    // Non-finite camera parameters and points.
    for enc in [Encoding::Binary, Encoding::Text] {
        let mut m = good.clone();
        m.cameras[1].params[0] = f64::NAN;
        m.points = points(3, &mut rng);
        m.points[2].xyz[1] = f64::NEG_INFINITY;
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), enc, &m);
        let (_, msg) = parse_err(read_cameras(
            &dir.path().join(format!("cameras.{}", enc.extension())),
            enc,
        ));
        assert!(msg.contains("parameter 0 is NaN"), "{msg}");
        let (_, msg) = parse_err(parse_points_bytes(
            &file_bytes(dir.path(), "points3D", enc),
            enc,
        ));
        assert!(msg.contains("non-finite"), "{msg}");
    }
}

#[test]
fn image_with_unknown_camera() {
    let mut m = small_model();
    m.images[2].camera_id = 77;
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), enc, &m);
        let (at, msg) = parse_err(read_model(dir.path(), enc));
        assert_eq!(at, Location::Record(2));
        assert!(
            msg.contains("refers to camera 77") && msg.contains("defines 100, 101"),
            "{msg}"
        );
        let msg = import_err(dir.path(), &META);
        assert!(msg.contains("refers to camera 77"), "{msg}");
    }
}

#[test]
fn duplicate_ids_and_names() {
    let base = small_model();
    for enc in [Encoding::Binary, Encoding::Text] {
        let mut m = base.clone();
        m.cameras[1].id = m.cameras[0].id;
        m.images
            .iter_mut()
            .for_each(|i| i.camera_id = m.cameras[0].id);
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), enc, &m);
        let msg = err_text(read_model(dir.path(), enc));
        assert!(msg.contains("camera id 100 appears twice"), "{msg}");

        let mut m = base.clone();
        m.images[2].id = m.images[0].id;
        write(dir.path(), enc, &m);
        let msg = err_text(read_model(dir.path(), enc));
        assert!(msg.contains("image id 3 appears twice"), "{msg}");

        let mut m = base.clone();
        m.images[2].name = m.images[0].name.clone();
        write(dir.path(), enc, &m);
        let msg = err_text(read_model(dir.path(), enc));
        assert!(msg.contains("already used by image 3"), "{msg}");

        let mut m = base.clone();
        m.points[4].id = m.points[1].id;
        write(dir.path(), enc, &m);
        let (at, msg) = parse_err(read_model(dir.path(), enc));
        assert_eq!(at, Location::Record(4));
        assert!(msg.contains("appears twice"), "{msg}");
    }
}

#[test]
fn text_field_errors_name_the_line() {
    let (at, msg) = parse_err(parse_images_bytes(
        b"# c\n\n1 1 0 0 0 0 0 0 1\n\n",
        Encoding::Text,
    ));
    assert_eq!(at, Location::Line(3));
    assert!(msg.contains("found 9 field(s)"), "{msg}");
    let (at, msg) = parse_err(parse_images_bytes(
        b"1 1 0 0 x 0 0 0 1 a.png\n\n",
        Encoding::Text,
    ));
    assert_eq!(at, Location::Line(1));
    assert!(msg.contains("QZ \"x\""), "{msg}");
    let (_, msg) = parse_err(parse_points_bytes(b"1 0 0 0 300 0 0 0.5\n", Encoding::Text));
    assert!(msg.contains("R \"300\""), "{msg}");
    // An image line cut before its newline (the name may be cut too).
    let (_, msg) = parse_err(parse_images_bytes(
        b"1 1 0 0 0 0 0 0 1 a.pn",
        Encoding::Text,
    ));
    assert!(msg.contains("truncated"), "{msg}");
    // A long observation line is skipped, not stored, and does not count as an image.
    let mut long = b"# Number of images: 1\n1 1 0 0 0 0 0 0 1 a.png\n".to_vec();
    long.extend(std::iter::repeat_n(b"1.5 2.5 -1 ".as_slice(), 20_000).flatten());
    long.push(b'\n');
    assert_eq!(parse_images_bytes(&long, Encoding::Text).unwrap().len(), 1);
    // So is a long track, even past the kept-line limit.
    let mut long = b"1 0.5 1 2 3 4 5 0.25".to_vec();
    long.extend(std::iter::repeat_n(b" 12 345".as_slice(), 20_000).flatten());
    long.push(b'\n');
    let p = parse_points_bytes(&long, Encoding::Text).unwrap();
    assert_eq!(p[0].xyz, [0.5, 1.0, 2.0]);
    // A clipped line whose fields do not fit is refused.
    let long = vec![b'1'; text::MAX_LINE_BYTES + 5];
    let (_, msg) = parse_err(parse_cameras_bytes(&long, Encoding::Text));
    assert!(msg.contains("longer than"), "{msg}");
}

#[test]
fn crlf_text_files_parse() {
    let text = "# Number of cameras: 1\r\n1 PINHOLE 10 20 5 6 5 10\r\n";
    let c = parse_cameras_bytes(text.as_bytes(), Encoding::Text).unwrap();
    assert_eq!(c[0].params, vec![5.0, 6.0, 5.0, 10.0]);
    let imgs = parse_images_bytes(b"1 1 0 0 0 0 0 0 1 a b.png\r\n\r\n", Encoding::Text).unwrap();
    assert_eq!(imgs[0].name, "a b.png");
}

// ---------------------------------------------------------------- workspaces

/// Writes a 3DGS-layout workspace: `sparse/` (one camera per image, varying sizes) and
/// `images/` with real PNGs. Returns the sizes by name.
fn gs_workspace(root: &Path, enc: Encoding) -> Vec<(String, u32, u32)> {
    let mut rng = Rng::new(11);
    let sizes = [(16u32, 12u32), (9, 7), (20, 5), (3, 30)];
    let mut cameras = Vec::new();
    let mut images = Vec::new();
    let mut out = Vec::new();
    for (i, (w, h)) in sizes.iter().enumerate() {
        let id = i as u32 + 1;
        cameras.push(ColmapCamera {
            id: 10 + id,
            model_id: 1,
            width: *w as u64,
            height: *h as u64,
            params: vec![20.0 + i as f64, 21.0, *w as f64 / 2.0, *h as f64 / 2.0],
        });
        let name = if i == 2 {
            format!("sub/v{i}.png")
        } else {
            format!("v{i}.png")
        };
        images.push(make_image(10 - id, 10 + id, &name, &mut rng));
        let path = root.join("images").join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::RgbImage::from_pixel(*w, *h, image::Rgb([i as u8 * 40, 7, 9]))
            .save(&path)
            .unwrap();
        out.push((name, *w, *h));
    }
    let pts = points(25, &mut rng);
    write_model(
        &root.join("sparse"),
        enc,
        &cameras,
        &images,
        &mut pts.into_iter(),
    )
    .unwrap();
    out.sort();
    out
}

#[test]
fn gs_layout_workspace_imports_with_sizes() {
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        let want = gs_workspace(dir.path(), enc);
        // The workspace root and the model folder itself find the same images.
        for path in [dir.path().to_path_buf(), dir.path().join("sparse")] {
            let mut scene = import(&path, &ImportOptions::default()).unwrap();
            assert_eq!(scene.root, std::fs::canonicalize(dir.path()).unwrap());
            assert!(
                scene.missing_images.is_empty() && scene.warnings.is_empty(),
                "{:?}",
                scene.warnings
            );
            let got: Vec<(String, u32, u32)> = scene
                .views
                .iter()
                .map(|v| (v.name.clone(), v.camera.width, v.camera.height))
                .collect();
            assert_eq!(got, want);
            for v in &scene.views {
                let img = image::open(&v.image_path).unwrap();
                assert_eq!(
                    (img.width(), img.height()),
                    (v.camera.width, v.camera.height)
                );
                assert!(v.distortion.is_none() && v.split.is_none());
            }
            assert!(!scene.no_sfm_points);
            let mut n = 0;
            while let Some(c) = scene.clouds[0].next_chunk(10).unwrap() {
                n += c.len();
            }
            assert_eq!(n, 25);
        }
    }
}

#[test]
fn missing_images_are_skipped_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    gs_workspace(dir.path(), Encoding::Binary);
    std::fs::remove_file(dir.path().join("images/sub/v2.png")).unwrap();
    let scene = import(dir.path(), &ImportOptions::default()).unwrap();
    assert_eq!(scene.views.len(), 3);
    assert_eq!(scene.missing_images, vec!["sub/v2.png".to_owned()]);
    assert!(
        scene
            .warnings
            .iter()
            .any(|w| w.contains("1 of the 4 images")),
        "{:?}",
        scene.warnings
    );
    let strict = ImportOptions {
        strict: true,
        ..Default::default()
    };
    let msg = import_err(dir.path(), &strict);
    assert!(
        msg.contains("sub/v2.png") && msg.contains("--strict"),
        "{msg}"
    );
    // metadata_only does not look at image files at all.
    assert_eq!(import(dir.path(), &META).unwrap().views.len(), 4);
}

#[test]
fn colmap_layout_and_encoding_preference() {
    let dir = tempfile::tempdir().unwrap();
    let m = small_model();
    let model_dir = dir.path().join("sparse/0");
    write(&model_dir, Encoding::Text, &m);
    // A binary model with one image fewer: preferred when both exist.
    let mut fewer = m.clone();
    fewer.images.pop();
    write(&model_dir, Encoding::Binary, &fewer);
    std::fs::create_dir_all(dir.path().join("sparse/1")).unwrap();
    let scene = import(dir.path(), &META).unwrap();
    assert_eq!(scene.views.len(), 2);
    assert_eq!(scene.root, std::fs::canonicalize(dir.path()).unwrap());
    assert!(
        scene.warnings.iter().any(|w| w.contains("several models")),
        "{:?}",
        scene.warnings
    );
    // The model folder itself, and the `sparse/` folder holding it, find the same root.
    for p in [model_dir.clone(), dir.path().join("sparse")] {
        let views = import(&p, &META).unwrap().views;
        assert_eq!(views.len(), 2);
        assert_eq!(
            views[0].image_path,
            scene.root.join("images").join(&views[0].name)
        );
    }

    // Without points3D: no_sfm_points and a note saying training starts from random points.
    for enc in [Encoding::Binary, Encoding::Text] {
        std::fs::remove_file(model_dir.join(format!("points3D.{}", enc.extension()))).unwrap();
    }
    let scene = import(dir.path(), &META).unwrap();
    assert!(scene.no_sfm_points && scene.clouds.is_empty());
    assert!(
        scene
            .random_start_note
            .as_ref()
            .is_some_and(|w| w.contains("random points") && w.contains("--points FILE")),
        "{:?}",
        scene.random_start_note
    );
}

#[test]
fn empty_and_unsafe_models_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = small_model();
    m.images.clear();
    write(dir.path(), Encoding::Binary, &m);
    assert!(import_err(dir.path(), &META).contains("registers no images"));

    let mut m = small_model();
    m.images[0].name = "../escape.png".into();
    write(dir.path(), Encoding::Binary, &m);
    assert!(import_err(dir.path(), &META).contains("relative path"));

    let empty = tempfile::tempdir().unwrap();
    assert!(import_err(empty.path(), &META).contains("no COLMAP model"));
}

// ---------------------------------------------------------------- measurement

#[test]
fn a_missing_observation_line_is_an_error_not_a_lost_image() {
    // Image 1's (empty) observation line was deleted: image 2's line sits where it belongs.
    let text = "1 1 0 0 0 0 0 0 1 a.jpg\n2 1 0 0 0 0 0 1 1 b.jpg\n\n3 1 0 0 0 0 0 2 1 c.jpg\n\n";
    let (at, msg) = parse_err(parse_images_bytes(text.as_bytes(), Encoding::Text));
    assert_eq!(at, Location::Line(2));
    assert!(
        msg.contains("2D-observation line of image 1") && msg.contains("insert an empty line"),
        "{msg}"
    );
    // Observation lines that are triples of numbers (or empty, or absent at the end) pass.
    let ok = "1 1 0 0 0 0 0 0 1 a.jpg\n10.5 20 -1 3 4 7\n2 1 0 0 0 0 0 1 1 b.jpg\n\n\
              3 1 0 0 0 0 0 2 1 c.jpg\n";
    let images = parse_images_bytes(ok.as_bytes(), Encoding::Text).unwrap();
    assert_eq!(images.len(), 3);
    // A broken triple is named too.
    let bad = "1 1 0 0 0 0 0 0 1 a.jpg\n10.5 20\n";
    let (at, msg) = parse_err(parse_images_bytes(bad.as_bytes(), Encoding::Text));
    assert_eq!(at, Location::Line(2));
    assert!(msg.contains("2 numbers, not a multiple of 3"), "{msg}");
}

/// `masks/` beside `images/`: each image's mask is found by COLMAP's naming (`v0.png.png`)
/// or by the image's own file name (for these PNG images the stem rule gives the same name;
/// see `mask_candidates_cover_the_stem_convention`); without `masks/` no view has one; a
/// missing mask is an error naming the image and the paths looked at.
#[test]
fn masks_beside_images_are_found_by_every_convention() {
    let dir = tempfile::tempdir().unwrap();
    gs_workspace(dir.path(), Encoding::Binary);
    let scene = import(dir.path(), &ImportOptions::default()).unwrap();
    assert!(scene.views.iter().all(|v| v.mask_path.is_none()));
    let masks = dir.path().join("masks");
    std::fs::create_dir_all(masks.join("sub")).unwrap();
    // v0: COLMAP's `<name>.png`; v1: the same name; sub/v2: COLMAP's, in the subfolder.
    for m in ["v0.png.png", "v1.png", "sub/v2.png.png"] {
        std::fs::write(masks.join(m), b"not read at import").unwrap();
    }
    let msg = import_err(dir.path(), &ImportOptions::default());
    assert!(
        msg.contains("v3.png") && msg.contains("has no mask") && msg.contains("v3.png.png"),
        "{msg}"
    );
    // Metadata-only imports do not need the masks.
    let meta = ImportOptions {
        metadata_only: true,
        ..Default::default()
    };
    assert!(import(dir.path(), &meta).is_ok());
    std::fs::write(masks.join("v3.png"), b"x").unwrap();
    let scene = import(dir.path(), &ImportOptions::default()).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("masks");
    let got: Vec<(String, PathBuf)> = scene
        .views
        .iter()
        .map(|v| (v.name.clone(), v.mask_path.clone().unwrap()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("sub/v2.png".to_owned(), root.join("sub/v2.png.png")),
            ("v0.png".to_owned(), root.join("v0.png.png")),
            ("v1.png".to_owned(), root.join("v1.png")),
            ("v3.png".to_owned(), root.join("v3.png")),
        ]
    );
    // COLMAP's name wins over the others when several exist.
    std::fs::write(masks.join("v3.png.png"), b"x").unwrap();
    let scene = import(dir.path(), &ImportOptions::default()).unwrap();
    assert_eq!(
        scene.views[3].mask_path.as_deref(),
        Some(root.join("v3.png.png").as_path())
    );
}

#[test]
fn mask_candidates_cover_the_stem_convention() {
    let [colmap, stem, same] = mask_candidates(Path::new("/m"), "a/b.jpg");
    assert_eq!(colmap, PathBuf::from("/m/a/b.jpg.png"));
    assert_eq!(stem, PathBuf::from("/m/a/b.png"));
    assert_eq!(same, PathBuf::from("/m/a/b.jpg"));
}

// ---------------------------------------------------------------- tracks (--sfm-depths)

/// `n` points, point `k` with a track of `k % 4` elements over image ids 1..=3, and (when
/// `long` is set) one point whose track is far longer than a text line's kept prefix.
fn points_with_tracks(n: u64, long: bool) -> Vec<(ColmapPoint, Vec<TrackElement>)> {
    let mut rng = Rng::new(5);
    let mut out: Vec<(ColmapPoint, Vec<TrackElement>)> = points(n, &mut rng)
        .into_iter()
        .enumerate()
        .map(|(k, p)| {
            let track = (0..k as u32 % 4)
                .map(|e| TrackElement {
                    image_id: 1 + (k as u32 + e) % 3,
                    point2d_idx: 1_000_000 * e + k as u32,
                })
                .collect();
            (p, track)
        })
        .collect();
    if long {
        // ~20 bytes per element: 9,000 elements are ~180 KB, beyond MAX_LINE_BYTES.
        let track = (0..9_000u32)
            .map(|e| TrackElement {
                image_id: 4_000_000_000 - e,
                point2d_idx: u32::MAX - e,
            })
            .collect();
        out[1].1 = track;
    }
    out
}

fn write_with_tracks(dir: &Path, enc: Encoding, pts: &[(ColmapPoint, Vec<TrackElement>)]) {
    let m = small_model();
    write_model_with_tracks(
        dir,
        enc,
        &m.cameras,
        &m.images,
        &[],
        &mut pts.iter().cloned(),
    )
    .unwrap();
}

#[test]
fn tracks_read_back_in_both_encodings_and_agree() {
    let want = points_with_tracks(9, true);
    const { assert!(text::MAX_LINE_BYTES < 9_000 * 20) };
    let mut got = Vec::new();
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        write_with_tracks(dir.path(), enc, &want);
        let bytes = file_bytes(dir.path(), "points3D", enc);
        let read = parse_tracks_bytes(&bytes, enc).unwrap();
        assert_eq!(read, want, "{enc:?}");
        // Without tracks the same file reads as the same points, tracks skipped.
        let plain = parse_points_bytes(&bytes, enc).unwrap();
        assert_eq!(plain, want.iter().map(|p| p.0.clone()).collect::<Vec<_>>());
        got.push(read);
    }
    assert_eq!(got[0], got[1]);
    // The text header gives the mean track length.
    let dir = tempfile::tempdir().unwrap();
    write_with_tracks(dir.path(), Encoding::Text, &points_with_tracks(4, false));
    let text = String::from_utf8(file_bytes(dir.path(), "points3D", Encoding::Text)).unwrap();
    assert!(
        text.contains("# Number of points: 4, mean track length: 1.5\n"),
        "{text}"
    );
}

#[test]
fn observations_are_written_in_both_encodings_and_images_still_parse() {
    let m = small_model();
    let obs = vec![
        vec![
            Point2D {
                xy: [1.5, 2.25],
                point3d_id: 1000,
            },
            Point2D {
                xy: [0.0, 7.0],
                point3d_id: 1007,
            },
        ],
        vec![],
        vec![Point2D {
            xy: [3.0, 4.0],
            point3d_id: 1014,
        }],
    ];
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        write_model_with_tracks(
            dir.path(),
            enc,
            &m.cameras,
            &m.images,
            &obs,
            &mut std::iter::empty(),
        )
        .unwrap();
        let bytes = file_bytes(dir.path(), "images", enc);
        assert_eq!(
            parse_images_bytes(&bytes, enc).unwrap(),
            m.images,
            "{enc:?}"
        );
        if enc == Encoding::Text {
            let text = String::from_utf8(bytes).unwrap();
            assert!(
                text.contains(" b.png\n1.5 2.25 1000 0.0 7.0 1007\n1 "),
                "{text}"
            );
            assert!(text.contains(" sub/a.png\n\n2 "), "{text}");
            assert!(text.contains("mean observations per image: 1\n"), "{text}");
        } else {
            // Image 0's observation count and first observation follow its name's NUL.
            let at = bytes.windows(6).position(|w| w == b"b.png\0").unwrap() + 6;
            assert_eq!(&bytes[at..at + 8], &2u64.to_le_bytes());
            assert_eq!(&bytes[at + 8..at + 16], &1.5f64.to_le_bytes());
            assert_eq!(&bytes[at + 24..at + 32], &1000u64.to_le_bytes());
        }
    }
    // Without observations the files are byte for byte write_model's.
    for enc in [Encoding::Binary, Encoding::Text] {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write(a.path(), enc, &m);
        write_model_with_tracks(
            b.path(),
            enc,
            &m.cameras,
            &m.images,
            &[],
            &mut m.points.clone().into_iter().map(|p| (p, Vec::new())),
        )
        .unwrap();
        for name in ["cameras", "images", "points3D"] {
            assert_eq!(
                file_bytes(a.path(), name, enc),
                file_bytes(b.path(), name, enc)
            );
        }
    }
}

#[test]
fn every_truncated_binary_track_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    write_with_tracks(dir.path(), Encoding::Binary, &points_with_tracks(6, false));
    let bytes = file_bytes(dir.path(), "points3D", Encoding::Binary);
    for cut in 0..bytes.len() {
        let (at, msg) = parse_err(parse_tracks_bytes(&bytes[..cut], Encoding::Binary));
        assert_eq!(at, Location::Byte(cut as u64), "cut at {cut}: {msg}");
        assert!(msg.contains("file ends"), "{msg}");
    }
    // A track length far beyond the file is an error at the end, not an allocation.
    let mut huge = bytes.clone();
    // Point 0: 8 id + 24 xyz + 3 rgb + 8 error = byte 43 of the record, after the count.
    huge[8 + 43..8 + 51].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let (at, msg) = parse_err(parse_tracks_bytes(&huge, Encoding::Binary));
    assert_eq!(
        at,
        Location::Byte(bytes.len() as u64),
        "where the file ends"
    );
    assert!(msg.contains("point record 0"), "{msg}");
}

#[test]
fn bad_text_tracks_are_named_by_line() {
    let head = "# Number of points: 2\n1 0.5 0.5 0.5 1 2 3 0.1 1 0\n";
    for (tail, want) in [
        ("2 1.0 2.0 3.0 4 5 6 0.2 1 0 3\n", "no POINT2D_IDX"),
        ("2 1.0 2.0 3.0 4 5 6 0.2 1 0 3", "no POINT2D_IDX"),
        ("2 1.0 2.0 3.0 4 5 6 0.2 1 x\n", "\"x\" is not a valid u32"),
        ("2 1.0 2.0 3.0 4 5 6 0.2 4294967296 1\n", "IMAGE_ID"),
        (
            "2 1.0 2.0 3.0 4 5 6 0.2 1 0000000000000000000000000000001\n",
            "POINT2D_IDX",
        ),
    ] {
        let text = format!("{head}{tail}");
        let (at, msg) = parse_err(parse_tracks_bytes(text.as_bytes(), Encoding::Text));
        assert_eq!(at, Location::Line(3), "{tail:?}: {msg}");
        assert!(
            msg.contains("point 1 (id 2)") && msg.contains(want),
            "{tail:?}: {msg}"
        );
        // Without tracks the line is fine: its track is not read.
        assert_eq!(
            parse_points_bytes(text.as_bytes(), Encoding::Text)
                .unwrap()
                .len(),
            2
        );
    }
    // Tracks with CRLF line ends and extra blanks read as written.
    let crlf = "1 0.5 0.5 0.5 1 2 3 0.1  7   3 \t 8 4\r\n";
    let got = parse_tracks_bytes(crlf.as_bytes(), Encoding::Text).unwrap();
    assert_eq!(
        got[0].1,
        vec![
            TrackElement {
                image_id: 7,
                point2d_idx: 3
            },
            TrackElement {
                image_id: 8,
                point2d_idx: 4
            }
        ]
    );
}

/// Rewrites the gs_workspace model's points with `tracks` (per point: image ids).
fn workspace_tracks(root: &Path, enc: Encoding, tracks: &[&[u32]]) {
    let m = read_model(&root.join("sparse"), enc).unwrap();
    let pts: Vec<(ColmapPoint, Vec<TrackElement>)> = m
        .points
        .into_iter()
        .zip(tracks.iter().chain(std::iter::repeat(&&[][..])))
        .map(|(p, ids)| {
            let track = ids
                .iter()
                .enumerate()
                .map(|(e, &image_id)| TrackElement {
                    image_id,
                    point2d_idx: e as u32,
                })
                .collect();
            (p, track)
        })
        .collect();
    write_model_with_tracks(
        &root.join("sparse"),
        enc,
        &m.cameras,
        &m.images,
        &[],
        &mut pts.into_iter(),
    )
    .unwrap();
}

#[test]
fn observations_list_each_views_points_once() {
    // gs_workspace's image ids: v0.png 9, v1.png 8, sub/v2.png 7, v3.png 6; views sort by
    // name: sub/v2 (0), v0 (1), v1 (2), v3 (3).
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        gs_workspace(dir.path(), enc);
        let all = read_model(&dir.path().join("sparse"), enc).unwrap().points;
        // Point 0 seen by v0 twice (a duplicate in its track) and sub/v2; point 1 by nobody;
        // point 2 by v3 only; point 3 by v1.png only, whose file is then removed.
        workspace_tracks(dir.path(), enc, &[&[9, 7, 9], &[], &[6], &[8]]);
        std::fs::remove_file(dir.path().join("images/v1.png")).unwrap();
        let scene = import(dir.path(), &ImportOptions::default()).unwrap();
        assert_eq!(scene.views.len(), 3, "v1.png is missing and skipped");
        let obs = read_observations(dir.path(), &ImportOptions::default(), &scene.views).unwrap();
        assert_eq!(obs.track_elements, 5);
        // Only the points some packed view observes are kept, in file order.
        assert_eq!(obs.xyz, vec![all[0].xyz, all[2].xyz]);
        assert_eq!(obs.views, vec![vec![0], vec![0], vec![1]], "{enc:?}");
        assert_eq!(obs.observations(), 3);
    }
}

#[test]
fn dangling_track_images_and_trackless_models_are_refused() {
    for enc in [Encoding::Binary, Encoding::Text] {
        let dir = tempfile::tempdir().unwrap();
        gs_workspace(dir.path(), enc);
        let scene = import(dir.path(), &ImportOptions::default()).unwrap();
        let points = format!("points3D.{}", enc.extension());
        // gs_workspace writes no tracks.
        let e = read_observations(dir.path(), &ImportOptions::default(), &scene.views)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&points) && e.contains("has no tracks"), "{e}");
        // Point 2 (id 1014) names image 42, which images.bin/txt does not register.
        workspace_tracks(dir.path(), enc, &[&[9], &[], &[8, 42]]);
        let e = read_observations(dir.path(), &ImportOptions::default(), &scene.views).unwrap_err();
        let (at, msg) = match &e {
            ImportError::Parse { at, msg, path } => {
                assert!(path.ends_with(format!("sparse/{points}")), "{e}");
                (*at, msg.clone())
            }
            other => panic!("{other:?}"),
        };
        assert!(
            msg.contains("point 1014") && msg.contains("image 42") && msg.contains("images."),
            "{msg}"
        );
        match enc {
            // Line 6: three header comments, then points 1000, 1007 and 1014.
            Encoding::Text => assert_eq!(at, Location::Line(6)),
            Encoding::Binary => assert!(matches!(at, Location::Byte(b) if b > 8)),
        }
        // No points file at all.
        std::fs::remove_file(dir.path().join("sparse").join(&points)).unwrap();
        let e = read_observations(dir.path(), &ImportOptions::default(), &scene.views)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no points3D.bin or points3D.txt"), "{e}");
    }
}
