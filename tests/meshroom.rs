//! The Meshroom / AliceVision importer (`gs-pack convert --format meshroom`): an SfMData file
//! written from `gs-pack synth`'s exact cameras, in the layouts of several AliceVision
//! versions, must pack the same cameras, pixels and points as the equivalent COLMAP
//! workspace, and hostile files must be refused with a message naming the file, the record
//! and the fault.

use std::path::Path;

use ramsplat::dataset::Format;
use ramsplat::import::colmap::{parse_tracks_bytes, ColmapModel, Encoding};
use ramsplat::scene::maths::quat_to_rot;
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

// Intrinsics whose every form below is exact in binary, so both packs hold the same bits:
// fx ≠ fy (their ratio 0.9375 = 15/16) and a principal point off the centre.
const FX: f64 = 64.0;
const FY: f64 = 60.0;
const CX: f64 = 33.25;
const CY: f64 = 23.125;

/// The lens a test file is given: the same model, written once as COLMAP and once as
/// AliceVision.
#[derive(Clone, Copy)]
enum Lens {
    /// `radialk3` / COLMAP FULL_OPENCV with `k1 k2 k3`.
    Radial3([f64; 3]),
    /// `brown` (`k1 k2 k3 t1 t2`) / COLMAP FULL_OPENCV with `k1 k2 p1 p2 k3`.
    Brown([f64; 5]),
    /// `fisheye` (`fisheye4` before 1.2.8) / COLMAP OPENCV_FISHEYE.
    Fisheye([f64; 4]),
}

/// The SfMData layout a test file is written in.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    /// 1.2.11, every value a string as AliceVision's own writer puts it (`"1.5"`, `""` for an
    /// empty list), the focal length in millimetres of the vertical axis, a rig.
    Strings1_2_11,
    /// 1.2.5, plain numbers, `pixelRatio` as `fy/fx`, the principal point as `{x, y}`.
    Numbers1_2_5,
    /// 1.2.0, plain numbers, `pxFocalLength` per axis, the principal point from the top-left
    /// corner, the lens as one `type` name.
    Numbers1_2_0,
}

/// The rotation and translation of a COLMAP image.
fn pose_of(q: [f64; 4], t: [f64; 3]) -> ([[f64; 3]; 3], [f64; 3]) {
    (quat_to_rot(q), t)
}

/// `x_cam = R x + t` → AliceVision's (rotation column by column, centre `−Rᵀ t`).
fn alicevision_pose(r: &[[f64; 3]; 3], t: &[f64; 3]) -> (Vec<f64>, [f64; 3]) {
    let rotation = (0..9).map(|i| r[i % 3][i / 3]).collect();
    let centre = std::array::from_fn(|c| -(0..3).map(|k| r[k][c] * t[k]).sum::<f64>());
    (rotation, centre)
}

/// Synthesises a COLMAP workspace at `dir` (its images in `dir/images`), gives it `lens` in
/// `sparse/0/cameras.txt`, and writes the same reconstruction as an SfMData file `sfm` in
/// `layout`: absolute image paths (as Meshroom writes them), the landmarks with their
/// observations, a view that was not reconstructed (its pose is not in the file) and one whose
/// image is missing. In the 1.2.11 layout every other view is the second camera of a rig (its
/// pose the rig's, composed with a sub-pose), and one more rig view has an uninitialised
/// sub-pose.
fn write_sfm(dir: &Path, sfm: &Path, lens: Lens, layout: Layout) -> ColmapModel {
    let sparse = dir.join("sparse/0");
    let colmap_line = match lens {
        Lens::Radial3(k) => format!(
            "1 FULL_OPENCV {W} {H} {FX} {FY} {CX} {CY} {} {} 0 0 {} 0 0 0",
            k[0], k[1], k[2]
        ),
        Lens::Brown(k) => format!(
            "1 FULL_OPENCV {W} {H} {FX} {FY} {CX} {CY} {} {} {} {} {} 0 0 0",
            k[0], k[1], k[3], k[4], k[2]
        ),
        Lens::Fisheye(k) => format!(
            "1 OPENCV_FISHEYE {W} {H} {FX} {FY} {CX} {CY} {} {} {} {}",
            k[0], k[1], k[2], k[3]
        ),
    };
    let model = synth_colmap(dir, [VIEWS as u32, W, H, 300, 6], true, &colmap_line);

    let strings = layout == Layout::Strings1_2_11;
    // A number as the layout writes it.
    let n = |v: f64| {
        if strings {
            format!("\"{v:?}\"")
        } else {
            format!("{v:?}")
        }
    };
    let list = |vs: &[f64]| {
        if vs.is_empty() && strings {
            "\"\"".to_owned()
        } else {
            format!(
                "[{}]",
                vs.iter().map(|v| n(*v)).collect::<Vec<_>>().join(", ")
            )
        }
    };
    let (kind, params): (&str, Vec<f64>) = match lens {
        Lens::Radial3(k) => ("radial", k.to_vec()),
        Lens::Brown(k) => ("brown", k.to_vec()),
        Lens::Fisheye(k) => ("fisheye", k.to_vec()),
    };
    // AliceVision's principal point: pixel centres at whole coordinates.
    let (ppx, ppy) = (CX - 0.5, CY - 0.5);
    let (w, h) = (f64::from(W), f64::from(H));
    let intrinsic = match layout {
        Layout::Strings1_2_11 => format!(
            "{{\"intrinsicId\": \"4\", \"width\": \"{W}\", \"height\": \"{H}\", \"sensorWidth\": \
             \"64\", \"sensorHeight\": \"48\", \"serialNumber\": \"synth\", \"type\": \
             \"pinhole\", \"initializationMode\": \"estimated\", \"initialFocalLength\": \"-1\", \
             \"focalLength\": {}, \"pixelRatio\": {}, \"pixelRatioLocked\": \"true\", \
             \"offsetLocked\": \"false\", \"scaleLocked\": \"false\", \"principalPoint\": {}, \
             \"distortionInitializationMode\": \"none\", \"distortionParams\": {}, \
             \"undistortionOffset\": [\"0\", \"0\"], \"undistortionParams\": \"\", \
             \"distortionType\": \"{}\", \"undistortionType\": \"none\", \"distortionLocked\": \
             \"false\", \"locked\": \"false\"}}",
            n(FY),
            n(FY / FX),
            list(&[ppx - w / 2.0, ppy - h / 2.0]),
            list(&params),
            if kind == "radial" { "radialk3" } else { kind }
        ),
        Layout::Numbers1_2_5 => format!(
            "{{\"intrinsicId\": 4, \"width\": {W}, \"height\": {H}, \"sensorWidth\": 32, \
             \"type\": \"{}\", \"initialFocalLength\": -1, \"focalLength\": {}, \"pixelRatio\": \
             {}, \"pixelRatioLocked\": true, \"principalPoint\": {{\"x\": {}, \"y\": {}}}, \
             \"distortionParams\": {}, \"locked\": false}}",
            match kind {
                "radial" => "radial3",
                "fisheye" => "fisheye4",
                k => k,
            },
            FX / 2.0,
            FY / FX,
            ppx - w / 2.0,
            ppy - h / 2.0,
            list(&params)
        ),
        Layout::Numbers1_2_0 => format!(
            "{{\"intrinsicId\": 4, \"width\": {W}, \"height\": {H}, \"type\": \"{}\", \
             \"pxInitialFocalLength\": -1, \"pxFocalLength\": [{FX:?}, {FY:?}], \
             \"principalPoint\": [{ppx:?}, {ppy:?}], \"distortionParams\": {}, \"locked\": \
             false}}",
            match kind {
                "radial" => "radial3",
                "fisheye" => "fisheye4",
                k => k,
            },
            list(&params)
        ),
    };
    let version = match layout {
        Layout::Strings1_2_11 => "[\"1\", \"2\", \"11\"]",
        Layout::Numbers1_2_5 => "[1, 2, 5]",
        Layout::Numbers1_2_0 => "[1, 2, 0]",
    };
    let id = |v: u32| {
        if strings {
            format!("\"{v}\"")
        } else {
            v.to_string()
        }
    };
    let pose_json = |r: &[[f64; 3]; 3], t: &[f64; 3]| {
        let (rotation, centre) = alicevision_pose(r, t);
        format!(
            "{{\"rotation\": {}, \"center\": {}}}",
            list(&rotation),
            list(&centre)
        )
    };
    // The rig's second camera: a quarter-radian turn about y, 0.3 to the right.
    let sub_r = ramsplat::scene::maths::rotation_exp([0.0, 0.25, 0.0]);
    let sub_t = [-0.3, 0.0, 0.05];
    let mut views = Vec::new();
    let mut poses = Vec::new();
    let images = dir.join("images");
    for (i, im) in model.images.iter().enumerate() {
        let (r, t) = pose_of(im.qvec, im.tvec);
        let path = images.join(&im.name);
        let path = path.to_str().unwrap();
        let pose_id = 100 + im.id;
        if strings && i % 2 == 1 {
            // Rig pose = sub-pose⁻¹ ∘ pose: R_r = R_sᵀ R, t_r = R_sᵀ (t − t_s).
            let rr: [[f64; 3]; 3] = std::array::from_fn(|a| {
                std::array::from_fn(|b| (0..3).map(|k| sub_r[k][a] * r[k][b]).sum())
            });
            let tr: [f64; 3] =
                std::array::from_fn(|a| (0..3).map(|k| sub_r[k][a] * (t[k] - sub_t[k])).sum());
            views.push(format!(
                "{{\"viewId\": {}, \"poseId\": {}, \"frameId\": {}, \"intrinsicId\": {}, \
                 \"rigId\": \"0\", \"subPoseId\": \"1\", \"isPoseIndependant\": \"0\", \"path\": \
                 \"{path}\", \"width\": \"{W}\", \"height\": \"{H}\", \"metadata\": \"\"}}",
                id(im.id),
                id(pose_id),
                id(pose_id),
                id(4)
            ));
            poses.push(format!(
                "{{\"poseId\": {}, \"pose\": {{\"transform\": {}, \"locked\": \"false\"}}}}",
                id(pose_id),
                pose_json(&rr, &tr)
            ));
        } else {
            views.push(format!(
                "{{\"viewId\": {}, \"poseId\": {}, \"intrinsicId\": {}, \"path\": \"{path}\", \
                 \"width\": {}, \"height\": {}, \"metadata\": {{\"Make\": \"synth\"}}}}",
                id(im.id),
                id(pose_id),
                id(4),
                id(W),
                id(H)
            ));
            let locked = if strings { "\"false\"" } else { "false" };
            poses.push(format!(
                "{{\"poseId\": {}, \"pose\": {{\"transform\": {}, \"locked\": {locked}}}}}",
                id(pose_id),
                pose_json(&r, &t)
            ));
        }
    }
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    // Not reconstructed: its pose is not in the file.
    views.push(format!(
        "{{\"viewId\": {}, \"poseId\": {}, \"intrinsicId\": {}, \"path\": \"{}\"}}",
        id(900),
        id(900),
        id(4),
        images.join("unposed.png").display()
    ));
    // Reconstructed, but its image is gone.
    views.push(format!(
        "{{\"viewId\": {}, \"poseId\": {}, \"intrinsicId\": {}, \"path\": \"{}\"}}",
        id(901),
        id(901),
        id(4),
        images.join("lost.png").display()
    ));
    poses.push(format!(
        "{{\"poseId\": {}, \"pose\": {{\"transform\": {}}}}}",
        id(901),
        pose_json(&identity, &[0.0, 0.0, 4.0])
    ));
    let mut rigs = String::new();
    if strings {
        // A rig view whose sub-pose was never estimated.
        views.push(format!(
            "{{\"viewId\": \"902\", \"poseId\": \"901\", \"intrinsicId\": \"4\", \"rigId\": \
             \"0\", \"subPoseId\": \"2\", \"isPoseIndependant\": \"false\", \"path\": \"{}\"}}",
            images.join("uninitialised.png").display()
        ));
        rigs = format!(
            ", \"rigs\": [{{\"rigId\": \"0\", \"subPoses\": [{{\"status\": \"constant\", \
             \"pose\": {}}}, {{\"status\": \"estimated\", \"pose\": {}}}, {{\"status\": \
             \"uninitialized\", \"pose\": {}}}]}}]",
            pose_json(&identity, &[0.0; 3]),
            pose_json(&sub_r, &sub_t),
            pose_json(&identity, &[0.0; 3])
        );
    }
    // The landmarks, observed by the views of their COLMAP tracks.
    let bytes = std::fs::read(sparse.join("points3D.txt")).unwrap();
    let tracks = parse_tracks_bytes(&bytes, Encoding::Text).unwrap();
    let mut structure = Vec::new();
    for (i, (p, (_, track))) in model.points.iter().zip(&tracks).enumerate() {
        let mut observations = Vec::new();
        for (f, e) in track.iter().enumerate() {
            observations.push(format!(
                "{{\"observationId\": {}, \"featureId\": {}, \"x\": {}, \"scale\": {}}}",
                id(e.image_id),
                id(f as u32),
                list(&[10.5, 20.25]),
                n(1.5)
            ));
        }
        let observations = if observations.is_empty() && strings {
            "\"\"".to_owned()
        } else {
            format!("[{}]", observations.join(", "))
        };
        structure.push(format!(
            "{{\"landmarkId\": {}, \"descType\": \"dspsift\", \"color\": {}, \"X\": {}, \
             \"observations\": {observations}}}",
            id(i as u32),
            list(&p.rgb.map(f64::from)),
            list(&p.xyz)
        ));
    }
    let text = format!(
        "{{\"version\": {version}, \"featuresFolders\": [\"../FeatureExtraction/1\"], \
         \"views\": [{}], \"intrinsics\": [{intrinsic}], \"poses\": [{}]{rigs}, \"structure\": \
         [{}]}}",
        views.join(",\n"),
        poses.join(",\n"),
        structure.join(",\n")
    );
    std::fs::create_dir_all(sfm.parent().unwrap()).unwrap();
    std::fs::write(sfm, text).unwrap();
    model
}

/// Packs the reconstruction of `write_sfm(lens, layout)` from COLMAP and from the SfMData
/// file (as a node's cache folder, or the file itself) and compares.
fn meshroom_packs_like_colmap(lens: Lens, layout: Layout, as_folder: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let sfm = if as_folder {
        tmp.path()
            .join("MeshroomCache/StructureFromMotion/5e1f/cameras.sfm")
    } else {
        scene.join("sfm.json")
    };
    let model = write_sfm(&scene, &sfm, lens, layout);
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(&scene, &colmap_pack, &["--format", "colmap"]);
    assert!(o.status.success(), "{}", text(&o));
    let sfm_pack = tmp.path().join("meshroom.pack");
    let o = if as_folder {
        convert_full_size(sfm.parent().unwrap(), &sfm_pack, &[])
    } else {
        convert_full_size(&sfm, &sfm_pack, &["--format", "alicevision"])
    };
    assert!(o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains("1 of 10 reconstructed views have no image file") && all.contains("lost.png"),
        "{all}"
    );
    let unposed = if layout == Layout::Strings1_2_11 {
        2
    } else {
        1
    };
    assert!(
        all.contains(&format!("{unposed} of {} views of", VIEWS + 1 + unposed))
            && all.contains("were not reconstructed"),
        "{all}"
    );

    let a = Pack::open(&colmap_pack).unwrap();
    let b = Pack::open(&sfm_pack).unwrap();
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(mb.source.format, Format::Meshroom);
    assert_eq!(ma.views.len(), VIEWS);
    assert_eq!(mb.views.len(), VIEWS);
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(va.name, vb.name, "view {i}");
        assert_eq!(va.split, vb.split, "view {i}");
        let (pa, pb) = same_camera(&a, &b, i, 1e-9);
        assert!(pa == pb, "view {i}: the packed pixels differ");
    }
    // The landmarks are the SfM cloud.
    holds_model_points(&sfm_pack, &model);
}

#[test]
fn radial3_file_of_alicevision_1_2_11_with_a_rig_packs_like_its_colmap_workspace() {
    meshroom_packs_like_colmap(
        Lens::Radial3([0.06, -0.02, 0.004]),
        Layout::Strings1_2_11,
        true,
    );
}

#[test]
fn brown_file_of_alicevision_1_2_5_packs_like_its_colmap_workspace() {
    meshroom_packs_like_colmap(
        Lens::Brown([0.08, -0.02, 0.003, 0.004, -0.003]),
        Layout::Numbers1_2_5,
        false,
    );
}

#[test]
fn fisheye_file_of_alicevision_1_2_0_packs_like_its_colmap_workspace() {
    meshroom_packs_like_colmap(
        Lens::Fisheye([0.03, -0.01, 0.002, -0.0005]),
        Layout::Numbers1_2_0,
        false,
    );
}

/// `--sfm-depths` from the landmarks' observations packs the same sparse depth planes as from
/// the COLMAP workspace's tracks; a file without observations is refused, naming it.
#[test]
fn sfm_depths_come_from_landmark_observations_as_from_colmap_tracks() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let sfm = scene.join("sfm.sfm");
    write_sfm(
        &scene,
        &sfm,
        Lens::Brown([0.05, -0.01, 0.0, 0.002, 0.001]),
        Layout::Strings1_2_11,
    );
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(
        &scene,
        &colmap_pack,
        &["--format", "colmap", "--sfm-depths"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let sfm_pack = tmp.path().join("meshroom.pack");
    let o = convert_full_size(&sfm, &sfm_pack, &["--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    let held = same_sfm_depth_planes(&colmap_pack, &sfm_pack);
    assert!(held > 100, "{held}");

    // The same file with its observations dropped.
    let whole = std::fs::read_to_string(&sfm).unwrap();
    let mut bare = String::new();
    let mut rest = whole.as_str();
    while let Some(at) = rest.find("\"observations\": ") {
        bare.push_str(&rest[..at]);
        bare.push_str("\"observations\": \"\"");
        let tail = &rest[at + "\"observations\": ".len()..];
        rest = match tail.strip_prefix("\"\"") {
            Some(after) => after,
            None => &tail[tail.find("]}").unwrap() + 1..],
        };
    }
    bare.push_str(rest);
    std::fs::write(&sfm, bare).unwrap();
    let o = convert_full_size(&sfm, &tmp.path().join("none.pack"), &["--sfm-depths"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("has an observation by a packed view"),
        "{}",
        text(&o)
    );
}

/// Imports `json` (written as `dir/sfm.json`) without reading images, giving the error's
/// whole chain on failure.
fn import_json(dir: &Path, json: &str) -> Result<ramsplat::import::ImportedScene, String> {
    let file = dir.join("sfm.json");
    std::fs::write(&file, json).unwrap();
    import_metadata(&file, Format::Meshroom)
}

const VIEW_A: &str = "{\"viewId\": \"1\", \"poseId\": \"1\", \"intrinsicId\": \"0\", \"path\": \
     \"/photos/a.jpg\"}";
const POSE_A: &str = "{\"poseId\": \"1\", \"pose\": {\"transform\": {\"rotation\": [\"1\", \"0\", \
     \"0\", \"0\", \"1\", \"0\", \"0\", \"0\", \"1\"], \"center\": [\"0\", \"0\", \"-5\"]}}}";

/// An intrinsic of the 1.2.11 layout with `fields` replacing or adding to its defaults.
fn intrinsic(fields: &str) -> String {
    let mut base: Vec<(String, String)> = [
        ("intrinsicId", "\"0\""),
        ("width", "\"40\""),
        ("height", "\"30\""),
        ("sensorWidth", "\"36\""),
        ("type", "\"pinhole\""),
        ("focalLength", "\"36\""),
        ("pixelRatio", "\"1\""),
        ("principalPoint", "[\"0.5\", \"-1\"]"),
        ("distortionParams", "[\"0.01\", \"0\", \"0\"]"),
        ("distortionType", "\"radialk3\""),
        ("undistortionType", "\"none\""),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let parsed: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&format!("{{{fields}}}")).unwrap();
    for (k, v) in parsed {
        match base.iter_mut().find(|(b, _)| *b == k) {
            Some(slot) => slot.1 = v.to_string(),
            None => base.push((k, v.to_string())),
        }
    }
    let body: Vec<String> = base.iter().map(|(k, v)| format!("\"{k}\": {v}")).collect();
    format!("{{{}}}", body.join(", "))
}

fn sfm_file(version: &str, views: &str, intrinsics: &str, poses: &str, structure: &str) -> String {
    format!(
        "{{\"version\": {version}, \"views\": [{views}], \"intrinsics\": [{intrinsics}], \
         \"poses\": [{poses}], \"structure\": [{structure}]}}"
    )
}

/// A valid file reads (the focal length from millimetres, the principal point from the centre
/// plus half a pixel, the pose from the column-major rotation and the centre), and each
/// hostile one is refused naming the file, where, and what to do.
#[test]
fn hostile_sfmdata_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let v11 = "[\"1\", \"2\", \"11\"]";
    let ok = import_json(
        dir,
        &sfm_file(
            v11,
            &format!(
                "{VIEW_A}, {{\"viewId\": \"2\", \"poseId\": \"2\", \"intrinsicId\": \"0\", \
                 \"path\": \"b.jpg\"}}"
            ),
            &intrinsic(""),
            &format!(
                "{POSE_A}, {{\"poseId\": \"2\", \"pose\": {{\"transform\": {{\"rotation\": [0, \
                 0, -1, 0, 1, 0, 1, 0, 0], \"center\": [5, 0, 0]}}}}}}"
            ),
            "{\"X\": [\"1\", \"2\", \"3\"], \"color\": [\"300\", \"-4\", \"10.6\"], \
             \"observations\": \"\"}",
        ),
    )
    .unwrap();
    assert_eq!(ok.format, Format::Meshroom);
    assert_eq!(ok.views.len(), 2);
    let a = &ok.views[0];
    assert_eq!(a.name, "a.jpg");
    assert_eq!(a.image_path, Path::new("/photos/a.jpg"));
    assert_eq!(ok.views[1].image_path, dir.join("b.jpg"));
    assert_eq!((a.camera.width, a.camera.height), (40, 30));
    let k = a.camera.intrinsics;
    // 36 mm of a 36 mm sensor 40 pixels wide; centre (20, 15) + (0.5, −1) + 0.5.
    assert_eq!((k.fx, k.fy, k.cx, k.cy), (40.0, 40.0, 21.0, 14.5));
    assert_eq!(a.camera.world_to_camera.translation, [0.0, 0.0, 5.0]);
    // Stored column by column: camera x is world +z, and the camera at (5, 0, 0) looks down
    // −x, at the origin 5 ahead.
    let r = ok.views[1].camera.world_to_camera.rotation;
    assert_eq!(r[0], [0.0, 0.0, 1.0], "{r:?}");
    assert_eq!(r[2], [-1.0, 0.0, 0.0], "{r:?}");
    assert_eq!(ok.views[1].camera.world_to_camera.translation[2], 5.0);

    let refused = |json: String, want: &[&str]| {
        let e = import_json(dir, &json).map(|_| ()).unwrap_err();
        assert!(e.contains("sfm.json"), "{e}");
        for w in want {
            assert!(e.contains(w), "missing {w:?} in: {e}");
        }
    };
    let with = |fields: &str| sfm_file(v11, VIEW_A, &intrinsic(fields), POSE_A, "");
    refused(
        with("\"type\": \"equidistant\", \"distortionType\": \"none\""),
        &["intrinsic 0", "equidistant camera", "fisheye4"],
    );
    refused(
        with("\"distortionType\": \"none\", \"undistortionType\": \"3deanamorphic4\""),
        &["intrinsic 0", "\"3deanamorphic4\"", "no OpenCV equivalent"],
    );
    refused(
        with("\"distortionType\": \"fisheye1\""),
        &["intrinsic 0", "\"fisheye1\" has no OpenCV equivalent"],
    );
    refused(
        with("\"distortionType\": \"warp\""),
        &["distortionType \"warp\" is not one AliceVision writes"],
    );
    refused(
        with("\"distortionParams\": [\"0.1\", \"0.2\"]"),
        &["radialk3 lens has 3 distortion parameters but the file lists 2"],
    );
    refused(
        with("\"focalLength\": \"-1\""),
        &[
            "intrinsic 0",
            "focalLength -1 is not a positive number",
            "uncalibrated",
        ],
    );
    refused(
        with("\"width\": \"40.5\""),
        &["width 40.5 is not a positive whole"],
    );
    refused(
        with("\"principalPoint\": [\"1\"]"),
        &["principalPoint has 1 values, not 2"],
    );
    refused(
        sfm_file(
            "[\"1\", \"2\", \"7\"]",
            VIEW_A,
            &intrinsic("\"type\": \"radial9\""),
            POSE_A,
            "",
        ),
        &["type \"radial9\" is not one AliceVision 1.2.7 writes"],
    );
    refused(
        sfm_file(
            v11,
            VIEW_A,
            &intrinsic("\"intrinsicId\": \"5\""),
            POSE_A,
            "",
        ),
        &[
            "view 1 (\"a.jpg\")",
            "intrinsic 0 is not among the file's intrinsics",
        ],
    );
    refused(
        sfm_file(
            v11,
            VIEW_A,
            &intrinsic(""),
            &POSE_A.replace(
                "[\"1\", \"0\", \"0\", \"0\", \"1\"",
                "[\"2\", \"0\", \"0\", \"0\", \"1\"",
            ),
            "",
        ),
        &["view 1 (\"a.jpg\")"],
    );
    refused(
        sfm_file(
            v11,
            VIEW_A,
            &intrinsic(""),
            POSE_A,
            "{\"X\": [1e39, 0, 0], \"color\": [0, 0, 0]}",
        ),
        &["line 1", "landmark 0", "not finite in single precision"],
    );
    refused(
        sfm_file(
            v11,
            VIEW_A,
            &intrinsic(""),
            &POSE_A.replace(
                "\"center\": [\"0\", \"0\", \"-5\"]",
                "\"center\": [\"0\", \"0\"]",
            ),
            "",
        ),
        &["line 1", "pose 1", "a center of 2"],
    );
    refused(
        sfm_file(v11, VIEW_A, &intrinsic(""), POSE_A, "")
            .replace("\"1\", \"2\", \"11\"", "\"2\", \"0\", \"0\""),
        &["SfMData version 2.0.0 is a layout this ramsplat does not know"],
    );
    refused(
        sfm_file(v11, VIEW_A, &intrinsic(""), POSE_A, "")
            .replace("\"version\": [\"1\", \"2\", \"11\"], ", ""),
        &["no \"version\"", "not an AliceVision SfMData file"],
    );
    refused(
        sfm_file(
            v11,
            &format!("{VIEW_A}, {}", VIEW_A.replace("\"1\"", "\"3\"")),
            &intrinsic(""),
            &format!("{POSE_A}, {}", POSE_A.replace("\"1\"", "\"3\"")),
            "",
        ),
        &["two reconstructed views use the same image \"/photos/a.jpg\""],
    );
    refused(
        sfm_file(v11, VIEW_A, &intrinsic(""), "", ""),
        &["no reconstructed view: the file lists 1 views and 0 poses"],
    );
    refused(
        sfm_file(
            v11,
            &VIEW_A.replace("\"1\", \"poseId\"", "\"x\", \"poseId\""),
            &intrinsic(""),
            POSE_A,
            "",
        ),
        &[
            "line 1",
            "not what AliceVision writes",
            "invalid value: string \"x\"",
        ],
    );
    let whole = sfm_file(v11, VIEW_A, &intrinsic(""), POSE_A, "");
    refused(
        format!("{}\n", &whole[..whole.len() - 1]),
        &["line 2", "ends early"],
    );
    refused(
        "{\"frames\": [], \"camera_model\": \"OPENCV\"}".into(),
        &["no \"version\""],
    );

    // A newer 1.2 revision reads as 1.2.11, with a warning.
    let newer = import_json(
        dir,
        &sfm_file("[1, 2, 14]", VIEW_A, &intrinsic(""), POSE_A, ""),
    )
    .unwrap();
    assert!(
        newer
            .warnings
            .iter()
            .any(|w| w.contains("version 1.2.14, newer")),
        "{:?}",
        newer.warnings
    );
    // No landmarks: a note says how to get them.
    assert!(newer.no_sfm_points);
    assert!(newer
        .random_start_note
        .unwrap()
        .contains("ConvertSfMFormat"));
}

/// Every truncation of a valid file is refused (never a panic), and so is every corruption
/// that breaks it; 2,000 seeded corruptions run without a panic.
#[test]
fn truncated_and_corrupted_sfmdata_never_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let whole = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/meshroom/rig_1.2.11.sfm"),
    )
    .unwrap();
    let accepted = import_json(dir, &whole).unwrap();
    assert_eq!(accepted.views.len(), 3);
    let bytes = whole.as_bytes();
    for cut in (0..bytes.len() - 1).step_by(7) {
        let text = String::from_utf8_lossy(&bytes[..cut]).into_owned();
        // The trailing newline aside, every shorter file is incomplete JSON.
        if text.trim_end() != whole.trim_end() {
            assert!(import_json(dir, &text).is_err(), "cut at {cut}");
        }
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet = b"0123456789.-e\"[]{},: xtruefalsn";
    for _ in 0..2000 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + next() % 4 {
            let at = (next() % b.len() as u64) as usize;
            b[at] = alphabet[(next() % alphabet.len() as u64) as usize];
        }
        if let Ok(scene) = import_json(dir, &String::from_utf8_lossy(&b)) {
            for v in &scene.views {
                v.camera.validate().unwrap();
            }
        }
    }
}
