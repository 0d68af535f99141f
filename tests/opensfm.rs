//! The OpenSfM / OpenDroneMap importer (`gs-pack convert --format opensfm`): a
//! `reconstruction.json` written from `gs-pack synth`'s exact cameras must pack the same
//! cameras, pixels and points as the equivalent COLMAP workspace, and hostile files must be
//! refused with a message naming the file, the record and the fault.

use std::fmt::Write as _;
use std::path::Path;

use ramsplat::dataset::Format;
use ramsplat::import::colmap::{parse_tracks_bytes, ColmapModel, Encoding};
use ramsplat::import::{open, ImportOptions};
use ramsplat::shard::reader::Pack;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{
    convert_full_size, holds_model_points, import_metadata, same_camera, same_sfm_depth_planes,
    synth_colmap, text,
};

const W: u32 = 64;
const H: u32 = 48;
const VIEWS: usize = 9;

/// The lens a test reconstruction is given: the same model, written once as COLMAP and once as
/// OpenSfM.
#[derive(Clone, Copy)]
enum Lens {
    /// OpenSfM `brown` / COLMAP OPENCV `fx fy cx cy k1 k2 p1 p2` (k3 = 0, which COLMAP's
    /// OPENCV has not).
    Brown { k: [f64; 2], p: [f64; 2] },
    /// OpenSfM `perspective` (one focal length, centred) / COLMAP RADIAL `f cx cy k1 k2`.
    Perspective { k: [f64; 2] },
    /// OpenSfM `fisheye_opencv` / COLMAP OPENCV_FISHEYE `fx fy cx cy k1 k2 k3 k4`.
    Fisheye { k: [f64; 4] },
}

// Intrinsics whose normalised values (divided by the larger side, 64) are exact in binary, so
// both packs hold the same bits: fx ≠ fy and a principal point off the centre.
const FX: f64 = 61.75;
const FY: f64 = 60.5;
const CX: f64 = 33.25;
const CY: f64 = 23.125;

/// The axis-angle vector of the rotation of unit quaternion `q` (w, x, y, z).
fn axis_angle(q: [f64; 4]) -> [f64; 3] {
    let n = q.iter().map(|v| v * v).sum::<f64>().sqrt();
    let [w, x, y, z] = q.map(|v| v / n);
    let s = (x * x + y * y + z * z).sqrt();
    if s == 0.0 {
        return [0.0; 3];
    }
    let angle = 2.0 * s.atan2(w);
    [x, y, z].map(|v| v * angle / s)
}

/// Synthesises a COLMAP workspace at `dir` (its images in `dir/images`), gives it `lens` in
/// `sparse/0/cameras.txt`, and writes the same reconstruction as OpenSfM JSON to `json`:
/// the camera at half the images' size (as OpenDroneMap records the size features were
/// extracted at), one shot whose image is missing, and a second reconstruction of two shots.
fn write_reconstruction(dir: &Path, json: &Path, lens: Lens) -> ColmapModel {
    let size = f64::from(W.max(H));
    let (cx, cy) = (
        (CX - f64::from(W) / 2.0) / size,
        (CY - f64::from(H) / 2.0) / size,
    );
    let half = format!("\"width\": {}, \"height\": {}", W / 2, H / 2);
    let (colmap_line, camera) = match lens {
        Lens::Brown { k, p } => (
            format!(
                "1 OPENCV {W} {H} {FX} {FY} {CX} {CY} {} {} {} {}",
                k[0], k[1], p[0], p[1]
            ),
            format!(
                "{{\"projection_type\": \"brown\", {half}, \"focal_x\": {}, \"focal_y\": {}, \
                 \"c_x\": {cx}, \"c_y\": {cy}, \"k1\": {}, \"k2\": {}, \"k3\": 0.0, \"p1\": {}, \
                 \"p2\": {}}}",
                FX / size,
                FY / size,
                k[0],
                k[1],
                p[0],
                p[1]
            ),
        ),
        Lens::Perspective { k } => (
            format!(
                "1 RADIAL {W} {H} {FX} {} {} {} {}",
                f64::from(W) / 2.0,
                f64::from(H) / 2.0,
                k[0],
                k[1]
            ),
            // No projection_type: OpenSfM's default is perspective.
            format!(
                "{{{half}, \"focal\": {}, \"k1\": {}, \"k2\": {}}}",
                FX / size,
                k[0],
                k[1]
            ),
        ),
        Lens::Fisheye { k } => (
            format!(
                "1 OPENCV_FISHEYE {W} {H} {FX} {FY} {CX} {CY} {} {} {} {}",
                k[0], k[1], k[2], k[3]
            ),
            format!(
                "{{\"projection_type\": \"fisheye_opencv\", {half}, \"focal_x\": {}, \
                 \"focal_y\": {}, \"c_x\": {cx}, \"c_y\": {cy}, \"k1\": {}, \"k2\": {}, \
                 \"k3\": {}, \"k4\": {}}}",
                FX / size,
                FY / size,
                k[0],
                k[1],
                k[2],
                k[3]
            ),
        ),
    };
    let model = synth_colmap(dir, [VIEWS as u32, W, H, 300, 6], true, &colmap_line);

    let shot = |name: &str, q: [f64; 4], t: [f64; 3]| {
        format!(
            "\"{name}\": {{\"rotation\": {:?}, \"translation\": {t:?}, \"camera\": \"v2 synth\", \
             \"orientation\": 1, \"capture_time\": 0.0, \"gps_dop\": 15.0}}",
            axis_angle(q)
        )
    };
    let mut shots: Vec<String> = model
        .images
        .iter()
        .map(|im| shot(&im.name, im.qvec, im.tvec))
        .collect();
    shots.push(shot("lost.png", [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 4.0]));
    let mut points = String::new();
    for (i, p) in model.points.iter().enumerate() {
        if i > 0 {
            points.push_str(", ");
        }
        write!(
            points,
            "\"{i}\": {{\"color\": [{}.0, {}.0, {}.0], \"coordinates\": {:?}}}",
            p.rgb[0], p.rgb[1], p.rgb[2], p.xyz
        )
        .unwrap();
    }
    let other = format!(
        "{{\"cameras\": {{\"v2 synth\": {camera}}}, \"shots\": {{{}, {}}}, \"points\": {{\"0\": \
         {{\"color\": [1, 2, 3], \"coordinates\": [0, 0, 0]}}}}}}",
        shot("x.png", [1.0, 0.0, 0.0, 0.0], [0.0; 3]),
        shot("y.png", [1.0, 0.0, 0.0, 0.0], [0.0; 3])
    );
    let text = format!(
        "[{{\"cameras\": {{\"v2 synth\": {camera}}}, \"shots\": {{{}}}, \"points\": {{{points}}}, \
         \"biases\": {{}}, \"rig_cameras\": {{}}, \"rig_instances\": {{}}, \"reference_lla\": \
         {{\"latitude\": 52.5, \"longitude\": 13.4, \"altitude\": 0.0}}}}, {other}]",
        shots.join(", ")
    );
    std::fs::create_dir_all(json.parent().unwrap()).unwrap();
    std::fs::write(json, text).unwrap();
    model
}

/// Packs the reconstruction of `write_reconstruction(lens)` from COLMAP and from OpenSfM (as
/// an OpenDroneMap project folder, `opensfm/reconstruction.json`, or the JSON file itself) and
/// compares.
fn opensfm_packs_like_colmap(lens: Lens, odm: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let json = if odm {
        scene.join("opensfm/reconstruction.json")
    } else {
        scene.join("reconstruction.json")
    };
    let model = write_reconstruction(&scene, &json, lens);
    // Loss masks in OpenSfM's masks/ beside the JSON (`<image name>.png`, black = ignored):
    // for every image where that is COLMAP's masks/ too (which needs one per image), else for
    // the first three only (an OpenSfM image without a mask trains on every pixel).
    let masks = json.parent().unwrap().join("masks");
    std::fs::create_dir_all(&masks).unwrap();
    let masked = if odm { 3 } else { VIEWS };
    for (i, im) in model.images.iter().take(masked).enumerate() {
        let mask = image::GrayImage::from_fn(W, H, |x, y| {
            // A block near the centre, which every lens's packed image keeps.
            let inside = (24..26 + 2 * i as u32).contains(&x) && (18..30).contains(&y);
            image::Luma([if inside { 0 } else { 255 }])
        });
        mask.save(masks.join(format!("{}.png", im.name))).unwrap();
    }
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(&scene, &colmap_pack, &["--format", "colmap"]);
    assert!(o.status.success(), "{}", text(&o));
    let sfm_pack = tmp.path().join("opensfm.pack");
    let o = if odm {
        convert_full_size(&scene, &sfm_pack, &["--format", "opensfm"])
    } else {
        // The JSON itself, the format told by its name.
        convert_full_size(&json, &sfm_pack, &[])
    };
    assert!(o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains("1 of 10 shots have no image file") && all.contains("lost.png"),
        "{all}"
    );
    assert!(
        all.contains("holds 2 reconstructions") && all.contains("the other 1 (2 shots)"),
        "{all}"
    );
    assert_eq!(all.contains("6 of 9 images have no mask"), odm, "{all}");

    let a = Pack::open(&colmap_pack).unwrap();
    let b = Pack::open(&sfm_pack).unwrap();
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(mb.source.format, Format::Opensfm);
    assert_eq!(ma.views.len(), VIEWS);
    assert_eq!(mb.views.len(), VIEWS);
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(va.name, vb.name, "view {i}");
        // Names sort as the synth's images do, so the first `masked` views have masks.
        assert_eq!(vb.mask, i < masked, "view {i}");
        if odm {
            // COLMAP sees none of OpenDroneMap's masks: compare the pixels alone.
            assert!(!va.mask);
        }
        assert_eq!(va.split, vb.split, "view {i}");
        let (pa, pb) = same_camera(&a, &b, i, 1e-9);
        // The pixels, then (where both have one) the mask.
        let n = pa.len().min(pb.len());
        assert!(pa[..n] == pb[..n], "view {i}: the packed pixels differ");
        if va.mask == vb.mask {
            assert!(pa == pb, "view {i}: the packed masks differ");
        }
    }
    // The reconstruction's points are the SfM cloud.
    holds_model_points(&sfm_pack, &model);
}

#[test]
fn brown_reconstruction_packs_like_its_colmap_workspace() {
    opensfm_packs_like_colmap(
        Lens::Brown {
            k: [0.08, -0.02],
            p: [0.004, -0.003],
        },
        false,
    );
}

#[test]
fn perspective_reconstruction_of_an_odm_project_packs_like_its_colmap_workspace() {
    opensfm_packs_like_colmap(Lens::Perspective { k: [-0.05, 0.01] }, true);
}

#[test]
fn fisheye_reconstruction_packs_like_its_colmap_workspace() {
    opensfm_packs_like_colmap(
        Lens::Fisheye {
            k: [0.03, -0.01, 0.002, -0.0005],
        },
        true,
    );
}

/// `--sfm-depths` of an OpenSfM reconstruction, whose observations come from `tracks.csv`
/// (written here from the COLMAP model's tracks, with an observation of a track the
/// reconstruction did not triangulate and one by an image it did not register, which are not
/// kept), packs the same sparse depth planes as of the COLMAP workspace.
#[test]
fn sfm_depths_come_from_opensfm_tracks_as_from_colmap_tracks() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let json = scene.join("reconstruction.json");
    let model = write_reconstruction(
        &scene,
        &json,
        Lens::Brown {
            k: [0.05, -0.01],
            p: [0.002, 0.001],
        },
    );
    let bytes = std::fs::read(scene.join("sparse/0/points3D.txt")).unwrap();
    let tracks = parse_tracks_bytes(&bytes, Encoding::Text).unwrap();
    let name_of: std::collections::HashMap<u32, &str> = model
        .images
        .iter()
        .map(|im| (im.id, im.name.as_str()))
        .collect();
    let mut csv = String::from("OPENSFM_TRACKS_VERSION_v2\n");
    let mut elements = 0;
    for (i, (_, track)) in tracks.iter().enumerate() {
        for (f, e) in track.iter().enumerate() {
            writeln!(
                csv,
                "{}\t{i}\t{f}\t0.1\t-0.2\t0.004\t10\t20\t30\t-1\t-1",
                name_of[&e.image_id]
            )
            .unwrap();
            elements += 1;
        }
    }
    assert!(elements > 300, "{elements}");
    csv.push_str("00000.png\t99999\t1\t0.1\t0.1\t0.004\t1\t2\t3\t-1\t-1\n");
    csv.push_str("elsewhere.png\t0\t1\t0.1\t0.1\t0.004\t1\t2\t3\t-1\t-1\n");
    std::fs::write(scene.join("tracks.csv"), csv).unwrap();

    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(
        &scene,
        &colmap_pack,
        &["--format", "colmap", "--sfm-depths"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let sfm_pack = tmp.path().join("opensfm.pack");
    let o = convert_full_size(&json, &sfm_pack, &["--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    let held = same_sfm_depth_planes(&colmap_pack, &sfm_pack);
    assert!(held > 100, "{held}");
    // Without tracks.csv the option is refused, naming the file.
    std::fs::remove_file(scene.join("tracks.csv")).unwrap();
    let o = convert_full_size(&json, &tmp.path().join("none.pack"), &["--sfm-depths"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("no tracks.csv beside"), "{}", text(&o));
}

/// Imports `json` (written as `dir/reconstruction.json`) without reading images, giving the
/// error's whole chain on failure.
fn import_json(dir: &Path, json: &str) -> Result<ramsplat::import::ImportedScene, String> {
    let file = dir.join("reconstruction.json");
    std::fs::write(&file, json).unwrap();
    import_metadata(&file, Format::Opensfm)
}

const CAMERA: &str = "\"c\": {\"projection_type\": \"brown\", \"width\": 40, \"height\": 30, \
     \"focal_x\": 0.9, \"focal_y\": 0.9, \"c_x\": 0.01, \"c_y\": -0.02, \"k1\": 0.01}";
const SHOT_A: &str = "\"a.png\": {\"camera\": \"c\", \"rotation\": [0.0, 0.0, 0.0], \
     \"translation\": [0.0, 0.0, 5.0]}";

fn reconstruction(cameras: &str, shots: &str, points: &str) -> String {
    format!("[{{\"cameras\": {{{cameras}}}, \"shots\": {{{shots}}}, \"points\": {{{points}}}}}]")
}

/// A valid reconstruction reads (intrinsics from the normalised values, the axis-angle
/// rotation, the default perspective projection), and each hostile one is refused naming the
/// file, where, and what to do.
#[test]
fn hostile_reconstructions_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ok = import_json(
        dir,
        &reconstruction(
            CAMERA,
            &format!(
                "{SHOT_A}, \"b.png\": {{\"camera\": \"c\", \"rotation\": [0.0, 1.5707963267948966, \
                 0.0], \"translation\": [1.0, 0.0, 5.0]}}"
            ),
            "\"7\": {\"coordinates\": [1, 2, 3], \"color\": [300, -4, 10.6]}",
        ),
    )
    .unwrap();
    assert_eq!(ok.format, Format::Opensfm);
    assert_eq!(ok.views.len(), 2);
    let a = &ok.views[0];
    assert_eq!(a.name, "a.png");
    assert_eq!((a.camera.width, a.camera.height), (40, 30));
    let k = a.camera.intrinsics;
    assert!((k.fx - 36.0).abs() < 1e-12 && (k.fy - 36.0).abs() < 1e-12);
    assert!((k.cx - 20.4).abs() < 1e-12 && (k.cy - 14.2).abs() < 1e-12);
    assert_eq!(a.camera.world_to_camera.translation, [0.0, 0.0, 5.0]);
    // A quarter turn about y: camera x is world −z.
    let r = ok.views[1].camera.world_to_camera.rotation;
    assert!(
        (r[0][2] - 1.0).abs() < 1e-12 && (r[2][0] + 1.0).abs() < 1e-12,
        "{r:?}"
    );

    let refused = |json: String, want: &[&str]| {
        let e = import_json(dir, &json).map(|_| ()).unwrap_err();
        assert!(e.contains("reconstruction.json"), "{e}");
        for w in want {
            assert!(e.contains(w), "missing {w:?} in: {e}");
        }
    };
    refused(
        reconstruction(
            CAMERA,
            "\"a.png\": {\"camera\": \"other\", \"rotation\": [0, 0, 0]}",
            "",
        ),
        &["shot \"a.png\"", "camera \"other\" is not among"],
    );
    refused(
        reconstruction(
            "\"c\": {\"projection_type\": \"spherical\", \"width\": 40, \"height\": 20}",
            SHOT_A,
            "",
        ),
        &["camera \"c\"", "360° panorama"],
    );
    refused(
        reconstruction(
            "\"c\": {\"projection_type\": \"fisheye624\", \"width\": 40, \"height\": 20, \
             \"focal_x\": 1, \"focal_y\": 1}",
            SHOT_A,
            "",
        ),
        &["\"fisheye624\"", "brown or fisheye_opencv"],
    );
    refused(
        reconstruction(
            "\"c\": {\"projection_type\": \"brown\", \"width\": 40, \"height\": 30, \
             \"focal_x\": 0.9}",
            SHOT_A,
            "",
        ),
        &["camera \"c\"", "needs focal_y, which is missing"],
    );
    refused(
        reconstruction(
            "\"c\": {\"width\": 40.5, \"height\": 30, \"focal\": 0.9}",
            SHOT_A,
            "",
        ),
        &["width 40.5 is not a positive whole number"],
    );
    refused(
        reconstruction(
            "\"c\": {\"width\": 40, \"height\": 30, \"focal\": -0.9}",
            SHOT_A,
            "",
        ),
        &["focal -0.9 is not a positive number"],
    );
    refused(
        reconstruction(
            CAMERA,
            SHOT_A,
            "\"9\": {\"coordinates\": [1e39, 0, 0], \"color\": [0, 0, 0]}",
        ),
        &["line 1", "point \"9\"", "not finite in single precision"],
    );
    refused(
        reconstruction(
            CAMERA,
            "\"a.png\": {\"camera\": \"c\", \"rotation\": [0, 0]}",
            "",
        ),
        &["line 1", "not what OpenSfM writes", "invalid length 2"],
    );
    refused(
        reconstruction(
            CAMERA,
            "\"../a.png\": {\"camera\": \"c\", \"rotation\": [0, 0, 0]}",
            "",
        ),
        &["shot \"../a.png\"", "not a plain file name"],
    );
    let whole = reconstruction(CAMERA, SHOT_A, "");
    refused(
        format!("{}\n", &whole[..whole.len() - 1]),
        &["line 2", "ends early"],
    );
    refused("[]".into(), &["lists no reconstruction"]);
    refused(
        "{\"frames\": []}".into(),
        &["line 1", "expected a list of reconstructions"],
    );
    refused(reconstruction(CAMERA, "", ""), &["has no shots"]);
}

/// A photo whose EXIF orientation a pack would apply (OpenSfM reads the stored pixels) is
/// refused by name; a quarter turn, whose stored order a pack keeps, is read; a photo of
/// another shape than its camera is refused.
#[test]
fn photos_are_read_as_opensfm_read_them() {
    use image::ImageEncoder;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("images")).unwrap();
    // A 40×30 PNG with EXIF orientation `o` (0: no tag).
    let photo = |o: u8, w: u32, h: u32| {
        let img = image::RgbImage::from_fn(w, h, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let mut enc = image::codecs::png::PngEncoder::new(
            std::fs::File::create(dir.join("images/a.png")).unwrap(),
        );
        if o > 0 {
            let mut exif = vec![
                b'I', b'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0,
            ];
            exif.extend_from_slice(&[o, 0, 0, 0, 0, 0, 0, 0]);
            enc.set_exif_metadata(exif).unwrap();
        }
        enc.write_image(img.as_raw(), w, h, image::ExtendedColorType::Rgb8)
            .unwrap();
    };
    std::fs::write(
        dir.join("reconstruction.json"),
        reconstruction(CAMERA, SHOT_A, ""),
    )
    .unwrap();
    let import = || open(dir, Format::Auto, &ImportOptions::default()).map_err(|e| format!("{e}"));
    for o in [0, 1, 6, 8] {
        photo(o, 40, 30);
        let scene = import().unwrap_or_else(|e| panic!("orientation {o}: {e}"));
        assert_eq!(scene.views[0].image_path, dir.join("images/a.png"));
        assert_eq!(
            (scene.views[0].camera.width, scene.views[0].camera.height),
            (40, 30)
        );
    }
    // An image at twice the camera's size: the intrinsics follow the file.
    photo(1, 80, 60);
    let k = import().unwrap().views[0].camera.intrinsics;
    assert!(
        (k.fx - 72.0).abs() < 1e-12 && (k.cx - 40.8).abs() < 1e-12,
        "{k:?}"
    );
    for o in [2, 3, 4] {
        photo(o, 40, 30);
        let e = import().unwrap_err();
        assert!(
            e.contains("a.png") && e.contains("EXIF orientation") && e.contains("exiftool"),
            "orientation {o}: {e}"
        );
    }
    photo(1, 40, 40);
    let e = import().unwrap_err();
    assert!(e.contains("is 40x40 but its camera is 40x30"), "{e}");
}

/// Every truncation of a valid reconstruction is refused, and seeded corruptions of it are
/// read or refused, never a panic.
#[test]
fn truncated_and_corrupted_files_are_refused_without_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let whole = reconstruction(
        CAMERA,
        &format!(
            "{SHOT_A}, \"b.png\": {{\"camera\": \"c\", \"rotation\": [0.1, 0.2, 0.3], \
             \"translation\": [1.0, 0.0, 5.0]}}"
        ),
        "\"7\": {\"coordinates\": [1, 2, 3], \"color\": [30, 40, 50]}",
    );
    assert!(import_json(dir, &whole).is_ok());
    for n in 0..whole.len() {
        if whole.is_char_boundary(n) {
            assert!(import_json(dir, &whole[..n]).is_err(), "cut at {n}");
        }
    }
    let bytes = whole.as_bytes();
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut read = 0;
    for _ in 0..2000 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + next() % 3 {
            let i = (next() % b.len() as u64) as usize;
            b[i] = b"0123456789.-e,:[]{}\" x"[(next() % 22) as usize];
        }
        let text = String::from_utf8(b).unwrap();
        read += usize::from(import_json(dir, &text).is_ok());
    }
    // Most corruptions break the JSON or a value; some leave a valid reconstruction.
    assert!(read < 2000, "{read}");
}
