//! The Agisoft Metashape camera XML importer (`gs-pack convert --format metashape`): a
//! Metashape project written from `gs-pack synth`'s exact cameras must pack the same cameras,
//! pixels and points as the equivalent COLMAP workspace, and hostile XML must be refused with
//! a message naming the file, the record and the fault.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ramsplat::dataset::Format;
use ramsplat::import::colmap::ColmapModel;
use ramsplat::import::{open, ImportOptions};
use ramsplat::scene::camera::Pose;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::PointChunkRef;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{convert_full_size, gs_pack, import_metadata, model_points_ply, synth_colmap, text};

const W: u32 = 64;
const H: u32 = 48;
const VIEWS: usize = 9;

/// The lens a test project is given: the same model, written once as COLMAP and once as
/// Metashape.
#[derive(Clone, Copy)]
enum Lens {
    /// COLMAP OPENCV `fx fy cx cy k1 k2 p1 p2` (OpenCV's p1, p2).
    RadTan { k: [f64; 2], p: [f64; 2] },
    /// COLMAP OPENCV_FISHEYE `fx fy cx cy k1 k2 k3 k4`.
    Fisheye { k: [f64; 4] },
}

/// The shared intrinsics: fx ≠ fy (Metashape's b1) and a principal point off the centre.
const FX: f64 = 61.75;
const FY: f64 = 60.5;
const CX: f64 = 33.25;
const CY: f64 = 23.125;

/// A chunk similarity `x_world = s·R·x + t` with nothing special about it.
fn chunk_similarity() -> ([[f64; 3]; 3], [f64; 3], f64) {
    let r = Pose::from_quaternion_wxyz([0.9, 0.2, -0.3, 0.25], [0.0; 3])
        .unwrap()
        .rotation;
    (r, [3.5, -1.25, 10.0], 2.5)
}

fn transpose(m: [[f64; 3]; 3]) -> [[f64; 3]; 3] {
    [0, 1, 2].map(|i| [0, 1, 2].map(|j| m[j][i]))
}

fn mat_vec(m: &[[f64; 3]; 3], v: [f64; 3]) -> [f64; 3] {
    m.map(|row| row[0] * v[0] + row[1] * v[1] + row[2] * v[2])
}

fn mat_mul(a: &[[f64; 3]; 3], b: &[[f64; 3]; 3]) -> [[f64; 3]; 3] {
    [0, 1, 2].map(|i| [0, 1, 2].map(|j| (0..3).map(|k| a[i][k] * b[k][j]).sum()))
}

/// Synthesises a COLMAP workspace at `dir` (PINHOLE), then gives it `lens` in
/// `sparse/0/cameras.txt` and writes the same project as `dir/cameras.xml` (chunk transform
/// with scale, cameras in the chunk's internal frame, one unaligned camera, some labels
/// without extension) and `dir/points.ply` (the COLMAP points). Returns the model.
fn write_project(dir: &Path, lens: Lens) -> ColmapModel {
    let (colmap_line, sensor) = match lens {
        Lens::RadTan { k, p } => (
            format!(
                "1 OPENCV {W} {H} {FX} {FY} {CX} {CY} {} {} {} {}",
                k[0], k[1], p[0], p[1]
            ),
            // Metashape's P1 is OpenCV's p2 and the other way round.
            format!(
                "<sensor id=\"0\" label=\"synth\" type=\"frame\"><resolution width=\"{W}\" \
                 height=\"{H}\"/><calibration type=\"frame\" class=\"initial\"><resolution \
                 width=\"{W}\" height=\"{H}\"/><f>1</f></calibration><calibration type=\"frame\" \
                 class=\"adjusted\"><resolution width=\"{W}\" height=\"{H}\"/><f>{FY}</f>\
                 <cx>{}</cx><cy>{}</cy><b1>{}</b1><b2>0</b2><k1>{}</k1><k2>{}</k2><k3>0</k3>\
                 <k4>0</k4><p1>{}</p1><p2>{}</p2></calibration></sensor>",
                CX - f64::from(W) / 2.0,
                CY - f64::from(H) / 2.0,
                FX - FY,
                k[0],
                k[1],
                p[1],
                p[0]
            ),
        ),
        Lens::Fisheye { k } => (
            format!(
                "1 OPENCV_FISHEYE {W} {H} {FX} {FY} {CX} {CY} {} {} {} {}",
                k[0], k[1], k[2], k[3]
            ),
            format!(
                "<sensor id=\"0\" label=\"fish\" type=\"fisheye\"><resolution width=\"{W}\" \
                 height=\"{H}\"/><calibration type=\"fisheye\" class=\"adjusted\"><resolution \
                 width=\"{W}\" height=\"{H}\"/><f>{FY}</f><cx>{}</cx><cy>{}</cy><b1>{}</b1>\
                 <k1>{}</k1><k2>{}</k2><k3>{}</k3><k4>{}</k4></calibration></sensor>",
                CX - f64::from(W) / 2.0,
                CY - f64::from(H) / 2.0,
                FX - FY,
                k[0],
                k[1],
                k[2],
                k[3]
            ),
        ),
    };
    let model = synth_colmap(dir, [VIEWS as u32, W, H, 300, 5], false, &colmap_line);

    let (rs, ts, s) = chunk_similarity();
    let rs_t = transpose(rs);
    let mut cams = String::new();
    for (i, im) in model.images.iter().enumerate() {
        let pose = Pose::from_quaternion_wxyz(im.qvec, im.tvec).unwrap();
        let c2w = transpose(pose.rotation);
        let centre = pose.centre();
        // Internal frame: x_int = Rᵀ·(x_world − t)/s.
        let a = mat_mul(&rs_t, &c2w);
        let c = mat_vec(&rs_t, [0, 1, 2].map(|k| (centre[k] - ts[k]) / s));
        let m = [
            a[0][0], a[0][1], a[0][2], c[0], a[1][0], a[1][1], a[1][2], c[1], a[2][0], a[2][1],
            a[2][2], c[2], 0.0, 0.0, 0.0, 1.0,
        ];
        let numbers: Vec<String> = m.iter().map(|v| format!("{v:e}")).collect();
        // Every other label without its extension, as Metashape often stores them.
        let label = if i % 2 == 1 {
            im.name.trim_end_matches(".png").to_owned()
        } else {
            format!("C:\\photos\\{}", im.name)
        };
        let enabled = if i == 3 { "false" } else { "true" };
        writeln!(
            cams,
            "<camera id=\"{i}\" sensor_id=\"0\" label=\"{label}\" enabled=\"{enabled}\">\
             <transform>{}</transform></camera>",
            numbers.join(" ")
        )
        .unwrap();
    }
    let r: Vec<String> = rs.iter().flatten().map(|v| format!("{v:e}")).collect();
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<document version=\"1.5.0\">\n<chunk \
         label=\"Chunk 1\" enabled=\"true\">\n<sensors next_id=\"1\">{sensor}</sensors>\n\
         <cameras next_id=\"{}\"><group id=\"0\" label=\"g\" type=\"folder\">\n{cams}</group>\
         <camera id=\"99\" sensor_id=\"0\" label=\"not_aligned.png\"/></cameras>\n<transform>\
         <rotation locked=\"true\">{}</rotation><translation>{:e} {:e} {:e}</translation>\
         <scale>{s:e}</scale></transform>\n</chunk>\n</document>\n",
        VIEWS + 1,
        r.join(" "),
        ts[0],
        ts[1],
        ts[2]
    );
    std::fs::write(dir.join("cameras.xml"), xml).unwrap();

    std::fs::write(dir.join("points.ply"), model_points_ply(&model)).unwrap();
    model
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * (1.0 + b.abs())
}

/// Packs the project of `write_project(lens)` from COLMAP and from Metashape and compares.
fn metashape_packs_like_colmap(lens: Lens) {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let model = write_project(&scene, lens);
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(&scene, &colmap_pack, &["--format", "colmap"]);
    assert!(o.status.success(), "{}", text(&o));
    // The XML itself, format detected from the extension.
    let ms_pack = tmp.path().join("metashape.pack");
    let o = convert_full_size(&scene.join("cameras.xml"), &ms_pack, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    let all = format!("{}{stderr}", String::from_utf8_lossy(&o.stdout));
    assert!(
        all.contains("1 of 10 cameras have no pose") && all.contains("not_aligned.png"),
        "{all}"
    );
    assert!(all.contains("1 cameras are disabled"), "{all}");
    assert!(!all.contains("another coordinate system"), "{all}");

    let a = Pack::open(&colmap_pack).unwrap();
    let b = Pack::open(&ms_pack).unwrap();
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(mb.source.format, Format::Metashape);
    assert_eq!(ma.views.len(), VIEWS);
    assert_eq!(mb.views.len(), VIEWS);
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(va.name, vb.name, "view {i}");
        assert_eq!(va.split, vb.split, "view {i}");
        let (ca, cb) = (va.camera, vb.camera);
        assert_eq!((ca.width, ca.height), (cb.width, cb.height), "view {i}");
        let ka = [
            ca.intrinsics.fx,
            ca.intrinsics.fy,
            ca.intrinsics.cx,
            ca.intrinsics.cy,
        ];
        let kb = [
            cb.intrinsics.fx,
            cb.intrinsics.fy,
            cb.intrinsics.cx,
            cb.intrinsics.cy,
        ];
        let ra = ca.world_to_camera;
        let rb = cb.world_to_camera;
        let ga = ka
            .iter()
            .chain(ra.rotation.iter().flatten())
            .chain(&ra.translation);
        let gb = kb
            .iter()
            .chain(rb.rotation.iter().flatten())
            .chain(&rb.translation);
        for (x, y) in ga.zip(gb) {
            assert!(close(*y, *x), "view {i}: {ca:?} vs {cb:?}");
        }
        let mut pa = vec![0u8; va.decoded_len()];
        let mut pb = vec![0u8; vb.decoded_len()];
        a.read_view_into(i, &mut pa).unwrap();
        b.read_view_into(i, &mut pb).unwrap();
        assert!(pa == pb, "view {i}: the packed pixels differ");
    }
    // The camera centres are the synth's world positions (the chunk's scale applied).
    let first = Pose::from_quaternion_wxyz(model.images[0].qvec, model.images[0].tvec).unwrap();
    let got = mb.views[0].camera.centre();
    for k in 0..3 {
        assert!(
            close(got[k], first.centre()[k]),
            "{got:?} vs {:?}",
            first.centre()
        );
    }
    // points.ply beside the XML is the SfM cloud, unchanged.
    assert!(!mb.scene.no_sfm_points);
    assert_eq!(mb.clouds.len(), 1);
    assert_eq!(mb.clouds[0].name, "sfm");
    assert_eq!(mb.clouds[0].points, model.points.len() as u64);
    let mut k = 0;
    for (ci, ch) in mb.clouds[0].chunks.iter().enumerate() {
        let mut buf = vec![0u8; ch.record.decoded_len as usize];
        let layout = b.read_chunk_into(0, ci, &mut buf).unwrap();
        let r = PointChunkRef::new(layout, &buf).unwrap();
        for j in 0..r.len() {
            assert_eq!(r.xyz(j), model.points[k].xyz.map(|v| v as f32));
            assert_eq!(r.rgb(j), model.points[k].rgb);
            k += 1;
        }
    }
    assert_eq!(k, model.points.len());
}

#[test]
fn radial_tangential_project_packs_like_its_colmap_workspace() {
    metashape_packs_like_colmap(Lens::RadTan {
        k: [0.08, -0.02],
        p: [0.004, -0.003],
    });
}

#[test]
fn fisheye_project_packs_like_its_colmap_workspace() {
    metashape_packs_like_colmap(Lens::Fisheye {
        k: [0.03, -0.01, 0.002, -0.0005],
    });
}

#[test]
fn points_in_another_frame_than_the_cameras_get_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    write_project(
        &scene,
        Lens::RadTan {
            k: [0.0, 0.0],
            p: [0.0, 0.0],
        },
    );
    let convert_it = |name: &str| {
        let o = convert_full_size(&scene.join("cameras.xml"), &tmp.path().join(name), &[]);
        assert!(o.status.success(), "{}", text(&o));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let warned = |err: &str| err.contains("Is the cloud in the cameras' coordinate frame?");
    let err = convert_it("local.pack");
    assert!(!warned(&err), "{err}");
    assert!(err.contains("(100.0 % of a sample in view)"), "{err}");
    // The same points in a projected CRS's metres: far from every camera.
    let ply = std::fs::read_to_string(scene.join("points.ply")).unwrap();
    let (header, body) = ply.split_once("end_header\n").unwrap();
    let mut moved = format!("{header}end_header\n");
    for line in body.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let x: f32 = w[0].parse().unwrap();
        writeln!(
            moved,
            "{} {} {} {}",
            x + 500_000.0,
            w[1],
            w[2],
            w[3..].join(" ")
        )
        .unwrap();
    }
    std::fs::write(scene.join("points.ply"), moved).unwrap();
    let err = convert_it("moved.pack");
    assert!(
        warned(&err) && err.contains("none of the dataset's points"),
        "{err}"
    );
}

/// A tiny, valid project: one frame sensor, two aligned cameras, a chunk transform.
const SENSOR: &str = "<sensor id=\"0\" label=\"cam\" type=\"frame\"><resolution width=\"40\" \
     height=\"30\"/><calibration type=\"frame\" class=\"adjusted\"><resolution width=\"40\" \
     height=\"30\"/><f>35</f><cx>0.5</cx><cy>-0.25</cy><k1>0.01</k1><p1>0.001</p1>\
     <p2>0.002</p2></calibration></sensor>";
const CAM_A: &str = "<camera id=\"0\" sensor_id=\"0\" label=\"a.png\">\
     <transform>1 0 0 0 0 1 0 0 0 0 1 -5 0 0 0 1</transform></camera>";
const CAM_B: &str = "<camera id=\"1\" sensor_id=\"0\" label=\"b\">\
     <transform>1 0 0 1 0 1 0 0 0 0 1 -5 0 0 0 1</transform></camera>";
const CHUNK_T: &str =
    "<transform><rotation>0 -1 0 1 0 0 0 0 1</rotation><translation>1 2 3</translation><scale>2</scale></transform>";

fn project(sensors: &str, cameras: &str, extra: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?><document version=\"2.0.0\"><chunk><sensors>{sensors}</sensors>\
         <cameras>{cameras}</cameras>{extra}</chunk></document>"
    )
}

/// Imports `xml` (written as `dir/cameras.xml`) without reading images.
fn import_xml(dir: &Path, xml: &str) -> Result<ramsplat::import::ImportedScene, String> {
    let file = dir.join("cameras.xml");
    std::fs::write(&file, xml).unwrap();
    import_metadata(&file, Format::Metashape)
}

#[test]
fn a_valid_project_maps_the_calibration_and_the_chunk_transform() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = import_xml(
        tmp.path(),
        &project(SENSOR, &(CAM_A.to_owned() + CAM_B), CHUNK_T),
    )
    .unwrap();
    assert_eq!(scene.format, Format::Metashape);
    assert!(scene.no_sfm_points);
    let names: Vec<&str> = scene.views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["a.png", "b"]);
    let v = &scene.views[0];
    let k = v.camera.intrinsics;
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (35.0, 35.0, 20.5, 14.75));
    assert_eq!(
        v.distortion,
        ramsplat::dataset::Distortion::RadialTangential {
            k: [0.01, 0.0, 0.0, 0.0, 0.0, 0.0],
            p: [0.002, 0.001]
        }
    );
    // A frame sensor's r⁸ term (real exports have one), which OpenCV's model cannot hold, makes
    // the lens the four-term Brown model, with the same swap of the tangential terms.
    let k4_dir = tmp.path().join("k4");
    std::fs::create_dir(&k4_dir).unwrap();
    let k4 = import_xml(
        &k4_dir,
        &project(&SENSOR.replace("<k1>", "<k4>-0.076</k4><k1>"), CAM_A, ""),
    )
    .unwrap();
    assert_eq!(
        k4.views[0].distortion,
        ramsplat::dataset::Distortion::Brown {
            k: [0.01, 0.0, 0.0, -0.076],
            p: [0.002, 0.001]
        }
    );
    // Camera b's centre (1, 0, -5) in the chunk frame: world = 2·R·c + t with R a quarter turn
    // about z: R·c = (0, 1, -5), so (1, 4, -7).
    let c = scene.views[1].camera.centre();
    for (g, w) in c.iter().zip([1.0, 4.0, -7.0]) {
        assert!((g - w).abs() < 1e-12, "{c:?}");
    }
    // The camera's axes turn with the chunk: its x axis (1, 0, 0) becomes (0, 1, 0) in world.
    let r = scene.views[1].camera.world_to_camera.rotation;
    assert!((r[0][1] - 1.0).abs() < 1e-12, "{r:?}");
}

#[test]
fn a_component_transform_takes_the_place_of_the_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let cam = CAM_B.replace("sensor_id=\"0\"", "sensor_id=\"0\" component_id=\"0\"");
    let comp = "<components><component id=\"0\"><transform><translation>10 0 0</translation>\
                <scale>3</scale></transform></component></components>";
    let scene = import_xml(tmp.path(), &project(SENSOR, &cam, comp)).unwrap();
    let c = scene.views[0].camera.centre();
    assert!(
        (c[0] - 13.0).abs() < 1e-12 && (c[2] + 15.0).abs() < 1e-12,
        "{c:?}"
    );
}

/// Each hostile variant of the tiny project, and words its error must contain.
#[test]
fn hostile_xml_is_refused_naming_the_record() {
    let tmp = tempfile::tempdir().unwrap();
    let ok_cams = CAM_A.to_owned() + CAM_B;
    let sensor_with = |calib: &str| SENSOR.replace("<k1>0.01</k1>", calib);
    let cases: Vec<(String, String, Vec<&str>)> = vec![
        (
            "not xml".into(),
            project(SENSOR, &ok_cams, "<unclosed>"),
            vec!["cameras.xml", "line", "not well-formed XML"],
        ),
        (
            "root".into(),
            "<?xml version=\"1.0\"?><notadoc/>".into(),
            vec!["<notadoc>", "not <document>"],
        ),
        (
            "two chunks".into(),
            "<document><chunk/><chunks><chunk/></chunks></document>".into(),
            vec!["2 chunks", "one chunk at a time"],
        ),
        (
            "no label".into(),
            project(SENSOR, &CAM_A.replace(" label=\"a.png\"", ""), ""),
            vec!["camera id 0 has no label"],
        ),
        (
            "unknown sensor".into(),
            project(SENSOR, &CAM_A.replace("sensor_id=\"0\"", "sensor_id=\"7\""), ""),
            vec!["camera 0 (a.png)", "sensor_id 7"],
        ),
        (
            "unknown component".into(),
            project(SENSOR, &CAM_A.replace("sensor_id=\"0\"", "sensor_id=\"0\" component_id=\"4\""), ""),
            vec!["camera 0 (a.png)", "component_id 4"],
        ),
        (
            "non-numeric".into(),
            project(SENSOR, &CAM_A.replace("-5", "abc"), ""),
            vec!["camera 0 (a.png)", "\"abc\" is not a number"],
        ),
        (
            "nan".into(),
            project(SENSOR, &CAM_A.replace("-5", "NaN"), ""),
            vec!["camera 0 (a.png)", "not a finite number"],
        ),
        (
            "short".into(),
            project(SENSOR, &CAM_A.replace(" 0 0 0 1<", " 0 0 1<"), ""),
            vec!["camera 0 (a.png)", "15 numbers; expected 16"],
        ),
        (
            "scaled camera".into(),
            project(SENSOR, &CAM_A.replace("1 0 0 0 0 1 0 0 0 0 1", "2 0 0 0 0 2 0 0 0 0 2"), ""),
            vec!["camera 0 (a.png)", "not a proper rotation"],
        ),
        (
            "bottom row".into(),
            project(SENSOR, &CAM_A.replace(" 0 0 0 1<", " 0 0 1 1<"), ""),
            vec!["camera 0 (a.png)", "bottom row"],
        ),
        (
            "sheared chunk".into(),
            project(SENSOR, &ok_cams, &CHUNK_T.replace("0 -1 0 1 0 0", "0 -1 0 1 0.5 0")),
            vec!["the chunk's <transform>", "not a proper rotation"],
        ),
        (
            "zero scale".into(),
            project(SENSOR, &ok_cams, &CHUNK_T.replace("<scale>2", "<scale>0")),
            vec!["the chunk's <transform>", "scale 0"],
        ),
        (
            "zero focal".into(),
            project(&SENSOR.replace("<f>35", "<f>0"), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "focal length <f> 0"],
        ),
        (
            "infinite focal".into(),
            project(&SENSOR.replace("<f>35", "<f>inf"), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "<f>", "not a finite number"],
        ),
        (
            "zero width".into(),
            project(&SENSOR.replace("width=\"40\"", "width=\"0\""), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "width=\"0\""],
        ),
        (
            "no calibration".into(),
            project(
                "<sensor id=\"0\" label=\"cam\" type=\"frame\"><resolution width=\"4\" height=\"3\"/></sensor>",
                &ok_cams,
                "",
            ),
            vec!["sensor 0 (\"cam\")", "no <calibration>"],
        ),
        (
            "spherical".into(),
            project(&SENSOR.replace("type=\"frame\"", "type=\"spherical\""), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "\"spherical\" is not supported"],
        ),
        (
            "skew".into(),
            project(&sensor_with("<b2>0.5</b2>"), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "skew b2 = 0.5"],
        ),
        (
            "fisheye tangential".into(),
            project(&SENSOR.replace("type=\"frame\"", "type=\"fisheye\""), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "tangential terms p1 = 0.001"],
        ),
        (
            "photoscan fx".into(),
            project(&SENSOR.replace("<f>35</f>", "<fx>35</fx><fy>35</fy>"), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "PhotoScan"],
        ),
        (
            "rig".into(),
            project(&SENSOR.replace("type=\"frame\"", "type=\"frame\" master_id=\"1\""), &ok_cams, ""),
            vec!["sensor 0 (\"cam\")", "multi-camera rig"],
        ),
        (
            "no aligned camera".into(),
            project(SENSOR, "<camera id=\"0\" sensor_id=\"0\" label=\"a\"/>", ""),
            vec!["no aligned camera", "1 cameras listed"],
        ),
        (
            "duplicate sensor".into(),
            project(&(SENSOR.to_owned() + SENSOR), &ok_cams, ""),
            vec!["a second <sensor> with id \"0\""],
        ),
        (
            "exif orientation".into(),
            project(
                SENSOR,
                &CAM_A.replace("</transform>", "</transform><orientation>6</orientation>"),
                "",
            ),
            vec!["camera 0 (a.png)", "orientation is \"6\""],
        ),
        (
            "dot label".into(),
            project(SENSOR, &CAM_A.replace("a.png", ".."), ""),
            vec!["camera 0 (..)", "names no image file"],
        ),
    ];
    for (what, xml, words) in cases {
        let msg = match import_xml(tmp.path(), &xml) {
            Ok(_) => panic!("{what}: accepted"),
            Err(m) => m,
        };
        for w in words {
            assert!(msg.contains(w), "{what}: {w:?} not in {msg:?}");
        }
    }
}

#[test]
fn images_are_found_by_label_and_duplicates_missing_files_and_depths_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::create_dir(dir.join("photos")).unwrap();
    // --images reads each file's size (the camera is scaled to a resized copy).
    let photo = image::RgbImage::new(40, 30);
    photo
        .save_with_format(dir.join("photos/a.png"), image::ImageFormat::Png)
        .unwrap();
    photo
        .save_with_format(dir.join("photos/b.JPG"), image::ImageFormat::Jpeg)
        .unwrap();
    let xml = project(SENSOR, &(CAM_A.to_owned() + CAM_B), "");
    let file = dir.join("cameras.xml");
    std::fs::write(&file, &xml).unwrap();
    let opts = ImportOptions {
        images: Some(PathBuf::from("photos")),
        ..Default::default()
    };
    let scene = open(dir, Format::Metashape, &opts).unwrap();
    let names: Vec<&str> = scene.views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["a.png", "b.JPG"]);
    assert_eq!(scene.views[1].image_path, dir.join("photos/b.JPG"));

    // Labels "a.png" and "a" read one file.
    let dup = project(
        SENSOR,
        &(CAM_A.to_owned() + &CAM_B.replace("\"b\"", "\"a\"")),
        "",
    );
    std::fs::write(&file, dup).unwrap();
    let e = open(dir, Format::Metashape, &opts).unwrap_err().to_string();
    assert!(e.contains("cameras 'a.png' and 'a' both read"), "{e}");

    // A missing image: skipped with a warning, refused under --strict.
    std::fs::remove_file(dir.join("photos/b.JPG")).unwrap();
    std::fs::write(&file, &xml).unwrap();
    let scene = open(dir, Format::Metashape, &opts).unwrap();
    assert_eq!(scene.views.len(), 1);
    assert_eq!(scene.missing_images, ["b"]);
    assert!(scene
        .warnings
        .iter()
        .any(|w| w.contains("1 of 2 aligned cameras have no image")));
    let strict = ImportOptions {
        strict: true,
        ..opts.clone()
    };
    let e = open(dir, Format::Metashape, &strict)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--strict") && e.contains("first: b"), "{e}");

    let depths = ImportOptions {
        depths: Some(PathBuf::from("depths")),
        ..opts
    };
    let e = open(dir, Format::Metashape, &depths)
        .unwrap_err()
        .to_string();
    assert!(e.contains("--depths depths is not supported"), "{e}");
}

#[test]
fn convert_of_a_broken_project_fails_naming_the_camera_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let xml = tmp.path().join("cameras.xml");
    std::fs::write(&xml, project(SENSOR, &CAM_A.replace("-5", "NaN"), "")).unwrap();
    let pack = tmp.path().join("out.pack");
    let o = gs_pack(&[
        "convert",
        tmp.path().to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--format",
        "metashape",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cameras.xml") && err.contains("camera 0 (a.png)"),
        "{}",
        text(&o)
    );
    assert!(!pack.exists());
}
