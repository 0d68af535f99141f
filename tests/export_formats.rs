//! Model export formats end to end: `gs-train --export spz,splat` writes both beside the PLY,
//! `gs-render --convert` converts between PLY, SPZ, `.splat`, compressed PLY and SOG, and renders of
//! the converted models match the PLY's within each format's quantisation (PSNR against the
//! PLY's render, printed and bounded).

use std::path::{Path, PathBuf};
use std::process::Command;

use ramsplat::export::ply::{self, LoadOptions};
use ramsplat::export::{compressed_ply, sog, splat, spz};
use ramsplat::render::{CpuRasterizer, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::scene::gaussians::Gaussians;
use ramsplat::shard::reader::Pack;
use ramsplat::train::demo::{write_demo_pack, DemoScene};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `bin` and asserts success; returns what it printed (stdout, then stderr).
fn run(bin: &str, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{bin} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
}

/// Trains a tiny demo pack of `views` views in `dir` (300 iterations, SH degree 3) with
/// `--export EXPORT`; returns the pack, the folder of the saved model
/// (`out/point_cloud/iteration_300`) and what gs-train printed.
fn train_tiny(dir: &Path, views: usize, export: &str) -> (PathBuf, PathBuf, String) {
    let pack_path = dir.join("tiny.pack");
    write_demo_pack(
        &pack_path,
        &DemoScene {
            views,
            width: 64,
            height: 48,
            truth_gaussians: 800,
            sfm_points: 400,
        },
    )
    .unwrap();
    let out = dir.join("out");
    let printed = run(
        env!("CARGO_BIN_EXE_gs-train"),
        &[
            s(&pack_path),
            "-o",
            s(&out),
            "--iterations",
            "300",
            "--sh-degree",
            "3",
            "--save-iterations",
            "300",
            "--ram-budget",
            "512M",
            "--export",
            export,
        ],
    );
    (pack_path, out.join("point_cloud/iteration_300"), printed)
}

/// Mean PSNR (8-bit) of `g`'s renders against `reference`'s over every view of the pack.
fn psnr_against(pack: &Pack, reference: &Gaussians, g: &Gaussians, sh_degree: u32) -> f64 {
    let mut raster = CpuRasterizer::new();
    let options = RenderOptions {
        sh_degree,
        ..RenderOptions::default()
    };
    let q = |img: &[f32]| -> Vec<u8> {
        img.iter()
            .map(|&v| (v * 255.0 + 0.5).clamp(0.0, 255.0) as u8)
            .collect()
    };
    let mut total = 0.0;
    let views = &pack.manifest().views;
    for v in views {
        let mut a = RenderOutput::default();
        let mut b = RenderOutput::default();
        raster
            .forward(reference, &v.camera, &options, &mut a)
            .unwrap();
        raster.forward(g, &v.camera, &options, &mut b).unwrap();
        let p = ramsplat::metrics::psnr_u8(&q(&b.image), &q(&a.image)).unwrap();
        total += p.min(99.0);
    }
    total / views.len() as f64
}

#[test]
fn spz_and_splat_export_round_trip_within_their_quantisation() {
    let dir = tempfile::tempdir().unwrap();
    let (pack_path, saved, _) = train_tiny(dir.path(), 12, "spz,splat");
    let base = saved.join("point_cloud");
    let model = ply::load(&base.with_extension("ply"), &LoadOptions::default()).unwrap();
    let from_spz = spz::load(&base.with_extension("spz")).unwrap();
    let from_splat = splat::load(&base.with_extension("splat")).unwrap();
    assert_eq!(from_spz.len(), model.len());
    assert_eq!(from_spz.sh_degree, 3);
    assert_eq!(from_splat.len(), model.len());
    assert_eq!(from_splat.sh_degree, 0);

    let pack = Pack::open(&pack_path).unwrap();
    let spz_psnr = psnr_against(&pack, &model, &from_spz, 3);
    let splat_psnr = psnr_against(&pack, &model, &from_splat, 0);
    eprintln!(
        "{} Gaussians: SPZ renders at {spz_psnr:.1} dB PSNR against the PLY's (SH 3); \
         .splat at {splat_psnr:.1} dB (SH 0 both)",
        model.len()
    );
    assert!(spz_psnr > 45.0, "SPZ: {spz_psnr} dB");
    assert!(splat_psnr > 50.0, ".splat: {splat_psnr} dB");

    // gs-render --convert: PLY → SPZ gives the trainer's bytes; SPZ → PLY keeps what SPZ holds
    // exactly (PLY is lossless); .splat likewise.
    let render = env!("CARGO_BIN_EXE_gs-render");
    let spz2 = dir.path().join("m.spz");
    run(
        render,
        &[
            "--ply",
            s(&base.with_extension("ply")),
            "--convert",
            s(&spz2),
        ],
    );
    assert_eq!(
        std::fs::read(&spz2).unwrap(),
        std::fs::read(base.with_extension("spz")).unwrap()
    );
    let back = dir.path().join("back.ply");
    run(render, &["--ply", s(&spz2), "--convert", s(&back)]);
    assert_eq!(ply::load(&back, &LoadOptions::default()).unwrap(), from_spz);
    let splat2 = dir.path().join("m.splat");
    run(render, &["--ply", s(&back), "--convert", s(&splat2)]);
    let back2 = dir.path().join("back2.ply");
    run(render, &["--ply", s(&splat2), "--convert", s(&back2)]);
    let g2 = ply::load(&back2, &LoadOptions::default()).unwrap();
    assert_eq!(g2.len(), model.len());

    // A bad output extension is refused by name.
    let o = Command::new(render)
        .args(["--ply", s(&back), "--convert"])
        .arg(dir.path().join("m.obj"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("m.obj"));
}

/// Every PNG `gs-render --pack` wrote into `dir`, by file name, as 8-bit RGB.
fn pngs(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "png"))
        .map(|p| {
            let img = image::open(&p).unwrap().to_rgb8().into_raw();
            (p.file_name().unwrap().to_string_lossy().into_owned(), img)
        })
        .collect();
    out.sort();
    out
}

/// `gs-render --ply MODEL --pack PACK --split all --backend cpu -o TO`: every view of the
/// pack rendered from the model by gs-render itself.
fn render_views(model: &Path, pack: &Path, to: &Path) {
    run(
        env!("CARGO_BIN_EXE_gs-render"),
        &[
            "--ply",
            s(model),
            "--pack",
            s(pack),
            "--split",
            "all",
            "--backend",
            "cpu",
            "-o",
            s(to),
        ],
    );
}

/// Mean PSNR of the PNGs `b` against `a` (same names, same order; 99 for identical ones).
fn mean_psnr(a: &[(String, Vec<u8>)], b: &[(String, Vec<u8>)]) -> f64 {
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    a.iter()
        .zip(b)
        .map(|((_, x), (_, y))| ramsplat::metrics::psnr_u8(y, x).unwrap().min(99.0))
        .sum::<f64>()
        / a.len() as f64
}

/// `gs-train --export compressed-ply` writes `point_cloud.compressed.ply` beside the PLY;
/// `gs-render --convert OUT.compressed.ply` writes the same bytes (and `--convert-format
/// compressed-ply` does under any name); `gs-render` renders the compressed model, and its
/// renders of every view match the PLY's within the format's quantisation (PSNR printed and
/// bounded); converting it back to PLY keeps what it holds exactly.
#[test]
fn compressed_ply_converts_and_renders_within_its_quantisation() {
    let dir = tempfile::tempdir().unwrap();
    let (pack_path, base, printed) = train_tiny(dir.path(), 8, "compressed-ply");
    let ply_path = base.join("point_cloud.ply");
    let trained = base.join("point_cloud.compressed.ply");
    let model = ply::load(&ply_path, &LoadOptions::default()).unwrap();
    let from_file = compressed_ply::load(&trained).unwrap();
    assert_eq!(from_file.len(), model.len());
    assert_eq!(model.sh_degree, 3);
    // Bands still within half a step of 0 (not yet trained) are left out, and gs-train says
    // so (300 iterations train no band above 0).
    let stored = compressed_ply::stored_sh_degree(&model);
    assert_eq!(from_file.sh_degree, stored);
    assert!(stored < 3);
    let said = format!("SH degree {stored} of the model's 3");
    assert!(printed.contains(&said), "no {said:?} in:\n{printed}");

    let render = env!("CARGO_BIN_EXE_gs-render");
    let converted = dir.path().join("M.Compressed.PLY");
    run(render, &["--ply", s(&ply_path), "--convert", s(&converted)]);
    assert_eq!(
        std::fs::read(&converted).unwrap(),
        std::fs::read(&trained).unwrap()
    );
    let named = dir.path().join("as-named.ply");
    run(
        render,
        &[
            "--ply",
            s(&ply_path),
            "--convert",
            s(&named),
            "--convert-format",
            "compressed_ply",
        ],
    );
    assert_eq!(
        std::fs::read(&named).unwrap(),
        std::fs::read(&trained).unwrap()
    );

    // Render every view from the PLY and from the compressed PLY with gs-render itself.
    let ply_dir = dir.path().join("r-ply");
    let cply_dir = dir.path().join("r-cply");
    for (model_path, to) in [(&ply_path, &ply_dir), (&converted, &cply_dir)] {
        render_views(model_path, &pack_path, to);
    }
    let (a, b) = (pngs(&ply_dir), pngs(&cply_dir));
    assert_eq!(a.len(), 8);
    let mean = mean_psnr(&a, &b);
    let pack = Pack::open(&pack_path).unwrap();
    // In process, both at the file's degree (the rasterizer needs the model to hold it).
    let in_process = psnr_against(&pack, &model, &from_file, from_file.sh_degree);
    eprintln!(
        "{} Gaussians: compressed PLY ({} bytes; the PLY {}) renders (gs-render, PNG) at \
         {mean:.1} dB PSNR against the PLY's (SH 3; the file keeps degree {}); in process \
         {in_process:.1} dB",
        model.len(),
        std::fs::metadata(&converted).unwrap().len(),
        std::fs::metadata(&ply_path).unwrap().len(),
        from_file.sh_degree
    );
    assert!(mean > 40.0, "compressed PLY: {mean} dB");
    assert!(in_process > 40.0, "compressed PLY: {in_process} dB");

    // Back to PLY: what the compressed file holds, exactly.
    let back = dir.path().join("back.ply");
    run(render, &["--ply", s(&converted), "--convert", s(&back)]);
    assert_eq!(
        ply::load(&back, &LoadOptions::default()).unwrap(),
        from_file
    );
}

/// `gs-train --export sog` writes `point_cloud.sog` beside the PLY; `gs-render --convert
/// OUT.sog` writes the same bytes; `gs-render` renders the SOG, bundled and unbundled (from
/// its `meta.json`), within the format's quantisation of the PLY's renders (PSNR printed and
/// bounded); converting it back to PLY keeps what it holds exactly.
#[test]
fn sog_converts_and_renders_within_its_quantisation() {
    let dir = tempfile::tempdir().unwrap();
    let (pack_path, base, _) = train_tiny(dir.path(), 8, "sog");
    let ply_path = base.join("point_cloud.ply");
    let trained = base.join("point_cloud.sog");
    let model = ply::load(&ply_path, &LoadOptions::default()).unwrap();
    let (from_file, info) = sog::load_with_info(&trained).unwrap();
    assert_eq!((from_file.len(), from_file.sh_degree), (model.len(), 3));
    assert!(!info.antialiased);

    let render = env!("CARGO_BIN_EXE_gs-render");
    let converted = dir.path().join("m.SOG");
    run(render, &["--ply", s(&ply_path), "--convert", s(&converted)]);
    let bytes = std::fs::read(&converted).unwrap();
    assert_eq!(bytes, std::fs::read(&trained).unwrap());

    // The same SOG unbundled: its members as files beside a meta.json.
    let folder = dir.path().join("unbundled");
    std::fs::create_dir(&folder).unwrap();
    let zip = ramsplat::export::zip::Archive::new(&bytes).unwrap();
    for name in zip.names() {
        std::fs::write(folder.join(name), zip.read(name).unwrap()).unwrap();
    }

    let ply_dir = dir.path().join("r-ply");
    let sog_dir = dir.path().join("r-sog");
    let folder_dir = dir.path().join("r-folder");
    let meta = folder.join("meta.json");
    for (model_path, to) in [
        (&ply_path, &ply_dir),
        (&converted, &sog_dir),
        (&meta, &folder_dir),
    ] {
        render_views(model_path, &pack_path, to);
    }
    let (a, b) = (pngs(&ply_dir), pngs(&sog_dir));
    assert_eq!(a.len(), 8);
    assert_eq!(b, pngs(&folder_dir), "bundled and unbundled render alike");
    let mean = mean_psnr(&a, &b);
    let pack = Pack::open(&pack_path).unwrap();
    let in_process = psnr_against(&pack, &model, &from_file, 3);
    eprintln!(
        "{} Gaussians: SOG ({} bytes; the PLY {}) renders (gs-render, PNG) at {mean:.1} dB PSNR \
         against the PLY's (SH 3); in process {in_process:.1} dB",
        model.len(),
        bytes.len(),
        std::fs::metadata(&ply_path).unwrap().len(),
    );
    assert!(mean > 40.0, "SOG: {mean} dB");
    assert!(in_process > 40.0, "SOG: {in_process} dB");

    // Back to PLY: what the SOG holds, exactly; and a model marked antialiased stays so.
    let back = dir.path().join("back.ply");
    run(render, &["--ply", s(&converted), "--convert", s(&back)]);
    assert_eq!(
        ply::load(&back, &LoadOptions::default()).unwrap(),
        from_file
    );
    let aa = dir.path().join("aa.sog");
    run(
        render,
        &[
            "--ply",
            s(&ply_path),
            "--convert",
            s(&aa),
            "--rasterize-mode",
            "antialiased",
        ],
    );
    assert!(sog::load_with_info(&aa).unwrap().1.antialiased);
}

/// `gs-train --init model.ply`: the model a short run saved, re-loaded, is what the new run's
/// first step renders (its first-step loss is the saved model's loss on one of the pack's
/// views, rendered at the model's full SH degree), and training continues from it; an
/// activated PLY is refused with the activated-file explanation; `--init` excludes `--resume`.
#[test]
fn init_from_a_saved_model_continues_it() {
    use ramsplat::render::CpuRasterizer;
    use ramsplat::train::report::read_metrics;
    use ramsplat::train::trainer::{Engine, Trainer};
    use ramsplat::train::TrainConfig;

    let dir = tempfile::tempdir().unwrap();
    let pack_path = dir.path().join("tiny.pack");
    write_demo_pack(
        &pack_path,
        &DemoScene {
            views: 6,
            width: 48,
            height: 36,
            truth_gaussians: 400,
            sfm_points: 200,
        },
    )
    .unwrap();
    let train = env!("CARGO_BIN_EXE_gs-train");
    let common = [
        "--backend",
        "cpu",
        "--ram-budget",
        "512M",
        "--sh-degree",
        "3",
        "--metrics-every",
        "1",
    ];
    let first = dir.path().join("first");
    let mut args = vec![s(&pack_path), "-o", s(&first), "--iterations", "200"];
    args.extend(["--save-iterations", "200"]);
    args.extend(common);
    run(train, &args);
    let model_path = first.join("point_cloud/iteration_200/point_cloud.ply");
    let model = ply::load(&model_path, &LoadOptions::default()).unwrap();
    let first_rows = read_metrics(&first.join("metrics.jsonl")).unwrap();

    // The saved model's loss on every view, at SH degree 3 from the first step.
    let pack = Pack::open(&pack_path).unwrap();
    let config = TrainConfig {
        iterations: 10,
        sh_degree: 3,
        initial_sh_degree: 3,
        ..TrainConfig::default()
    };
    let mut view_losses = Vec::new();
    for (i, v) in pack.manifest().views.iter().enumerate() {
        let mut rgb = vec![0u8; v.decoded_len()];
        pack.read_view_into(i, &mut rgb).unwrap();
        let mut t = Trainer::new(
            config.clone(),
            model.clone(),
            pack.manifest().scene.extent,
            Engine::host(CpuRasterizer::new()),
        )
        .unwrap();
        view_losses.push(t.step(&v.camera, &rgb).unwrap().loss);
    }

    let second = dir.path().join("second");
    let mut args = vec![s(&pack_path), "-o", s(&second), "--iterations", "100"];
    args.extend(["--init", s(&model_path), "--save-iterations", "100"]);
    args.extend(common);
    run(train, &args);
    let rows = read_metrics(&second.join("metrics.jsonl")).unwrap();
    let loss1 = rows[0].loss;
    eprintln!(
        "--init: first-step loss {loss1:.6}; the saved model's per-view losses {view_losses:.6?}; \
         the fresh run's first-step loss {:.6}, its last {:.6}; the --init run's last {:.6}",
        first_rows[0].loss,
        first_rows.last().unwrap().loss,
        rows.last().unwrap().loss
    );
    assert!(
        view_losses
            .iter()
            .any(|&l| (l - loss1).abs() <= 1e-6 * l.abs().max(1e-3)),
        "the first step does not render the saved model: {loss1} vs {view_losses:?}"
    );
    assert!(loss1 < 0.5 * first_rows[0].loss);
    assert_eq!(rows[0].num_gaussians as usize, model.len());
    let last = ply::load(
        &second.join("point_cloud/iteration_100/point_cloud.ply"),
        &LoadOptions::default(),
    )
    .unwrap();
    assert_ne!(last, model, "training continued");
    assert_eq!(last.sh_degree, 3);

    // --max-gaussians caps the initial model (the plan and the first row say so).
    let capped = dir.path().join("capped");
    let cap = (model.len() / 2).to_string();
    let mut args = vec![s(&pack_path), "-o", s(&capped), "--iterations", "2"];
    args.extend(["--init", s(&model_path), "--max-gaussians", &cap]);
    args.extend(common);
    run(train, &args);
    let rows = read_metrics(&capped.join("metrics.jsonl")).unwrap();
    assert!(rows[0].num_gaussians as usize <= model.len() / 2);

    // An activated PLY is refused, naming the file and the activated-file evidence.
    let mut activated = model.clone();
    for o in &mut activated.logit_opacities {
        *o = 1.0 / (1.0 + (-*o).exp());
    }
    for s in activated.log_scales.iter_mut().flatten() {
        *s = s.exp() * 100.0;
    }
    let bad = dir.path().join("activated.ply");
    ply::save(&bad, &activated, ply::PlyEncoding::BinaryLittleEndian).unwrap();
    let out3 = dir.path().join("third");
    let o = Command::new(train)
        .args([
            s(&pack_path),
            "-o",
            s(&out3),
            "--iterations",
            "5",
            "--init",
            s(&bad),
        ])
        .args(common)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("activated.ply") && err.contains("ACTIVATED"),
        "{err}"
    );
    assert!(
        !err.contains("allow-activated"),
        "gs-train has no such flag, its advice must not name one: {err}"
    );
    assert!(!out3.exists(), "a refused run writes nothing");
    // gs-render refuses the same file naming its own flag, and reads it with the flag.
    let render = env!("CARGO_BIN_EXE_gs-render");
    let converted = dir.path().join("activated.spz");
    let o = Command::new(render)
        .args(["--ply", s(&bad), "--convert", s(&converted)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("ACTIVATED") && err.contains("--allow-activated"),
        "{err}"
    );
    let o = Command::new(render)
        .args([
            "--ply",
            s(&bad),
            "--convert",
            s(&converted),
            "--allow-activated",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // --init and --resume exclude each other (command line).
    let o = Command::new(train)
        .args([
            s(&pack_path),
            "-o",
            s(&second),
            "--resume",
            "--init",
            s(&model_path),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A model as Mip-Splatting's trainer saves it (unfiltered scales and opacities, its 3D filter
/// in a `filter_3D` property) renders and converts with the filter folded in, which both
/// commands say; the converted file is a standard 3DGS PLY that renders the same.
#[test]
// Rows index several arrays of the model in lockstep.
#[allow(clippy::needless_range_loop)]
fn a_mip_splatting_model_renders_with_its_filter_and_converts_to_a_fused_ply() {
    use ramsplat::scene::filter3d;
    use ramsplat::scene::gaussians::sh_coeffs;
    use ramsplat::synth::SynthScene;
    use ramsplat::train::demo::truth_gaussians;

    let dir = tempfile::tempdir().unwrap();
    let scene = SynthScene::new(7);
    let truth = truth_gaussians(&scene, 600);
    let cam0 = scene.cameras(2, 96, 72)[0];
    // Filters of 0 to 0.75 of each Gaussian's size (Mip-Splatting's are about a training
    // pixel's footprint, small beside most Gaussians; these make the filter visible).
    let filters: Vec<f32> = (0..truth.len())
        .map(|i| truth.log_scales[i][0].exp() * 0.25 * (i % 4) as f32)
        .collect();
    let mut names = ply::property_names(truth.sh_degree);
    names.push(ply::FILTER_3D_PROPERTY.to_owned());
    let k = sh_coeffs(truth.sh_degree);
    let mut bytes = format!(
        "ply\nformat binary_little_endian 1.0\nelement vertex {}\n",
        truth.len()
    );
    for n in &names {
        bytes.push_str(&format!("property float {n}\n"));
    }
    bytes.push_str("end_header\n");
    let mut bytes = bytes.into_bytes();
    for i in 0..truth.len() {
        let sh = &truth.sh[i * k..(i + 1) * k];
        let mut row: Vec<f32> = truth.means[i].to_vec();
        row.extend([0.0; 3]);
        row.extend(sh[0]);
        for c in 0..3 {
            row.extend(sh[1..].iter().map(|coef| coef[c]));
        }
        row.push(truth.logit_opacities[i]);
        row.extend(truth.log_scales[i]);
        row.extend(truth.rotations[i]);
        row.push(filters[i]);
        assert_eq!(row.len(), names.len());
        bytes.extend(row.iter().flat_map(|v| v.to_le_bytes()));
    }
    let mip = dir.path().join("mip.ply");
    std::fs::write(&mip, bytes).unwrap();

    let render = env!("CARGO_BIN_EXE_gs-render");
    let fused = dir.path().join("fused.ply");
    let said = run(render, &["--ply", s(&mip), "--convert", s(&fused)]);
    assert!(
        said.contains("Mip-Splatting's 3D smoothing filter"),
        "{said}"
    );
    let (g, info) = ply::load_with_info(&fused, &LoadOptions::default()).unwrap();
    // The converted file says the filter is in its values (so `gs-train --init --filter-3d`
    // can take it out again).
    assert!(
        info.antialiased && !info.fused_filter_3d && info.folded_filter_3d,
        "{info:?}"
    );
    for i in 0..truth.len() {
        let want = filter3d::fuse(truth.log_scales[i], truth.logit_opacities[i], filters[i]);
        assert_eq!(
            (g.log_scales[i], g.logit_opacities[i]),
            want,
            "Gaussian {i}"
        );
    }

    // Both files render the same image, antialiased; the filter visibly changes it.
    let cam = dir.path().join("cam.json");
    let json = serde_json::json!({
        "width": cam0.width, "height": cam0.height,
        "fx": cam0.intrinsics.fx, "fy": cam0.intrinsics.fy,
        "cx": cam0.intrinsics.cx, "cy": cam0.intrinsics.cy,
        "world_to_camera": cam0.world_to_camera.to_matrix4(),
    });
    std::fs::write(&cam, json.to_string()).unwrap();
    let png = |model: &Path, name: &str, extra: &[&str]| {
        let out = dir.path().join(name);
        let mut args = vec!["--ply", s(model), "--camera", s(&cam), "-o", s(&out)];
        args.extend_from_slice(extra);
        let said = run(render, &args);
        (image::open(&out).unwrap().to_rgb8().into_raw(), said)
    };
    let (from_mip, said) = png(&mip, "mip.png", &[]);
    assert!(
        said.contains("filter_3D") && said.contains("antialiased"),
        "{said}"
    );
    let (from_fused, _) = png(&fused, "fused.png", &[]);
    assert_eq!(from_mip, from_fused);
    let raw = dir.path().join("raw.ply");
    ply::save(&raw, &truth, ply::PlyEncoding::BinaryLittleEndian).unwrap();
    let (unfiltered, _) = png(&raw, "raw.png", &["--rasterize-mode", "antialiased"]);
    let changed = unfiltered
        .iter()
        .zip(&from_mip)
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        changed * 10 > unfiltered.len(),
        "{changed} of {} values",
        unfiltered.len()
    );
}

/// `gs-render --convert` with `--crop`, `--min-opacity` and `--sh-degree`: the Gaussians inside
/// the box and at or above the opacity are written, in order and bit for bit, with the bands
/// above the degree dropped; a conversion that would leave nothing writes nothing, and the
/// impossible requests are refused before anything is read.
#[test]
fn convert_crops_prunes_and_drops_sh_bands() {
    use ramsplat::export::{load_model, save_model, ModelFormat, ModelInfo};
    use ramsplat::scene::maths::logit;
    let dir = tempfile::tempdir().unwrap();
    // 40 Gaussians along x from −2 to 1.9, opacities cycling through 0.001..0.9.
    let n = 40;
    let mut g = Gaussians::zeros(n, 3);
    let opacities = [0.001f32, 0.004, 0.006, 0.5, 0.9];
    for i in 0..n {
        g.means[i] = [-2.0 + 0.1 * i as f32, 0.5, (i % 3) as f32];
        g.logit_opacities[i] = logit(opacities[i % 5]);
        g.log_scales[i] = [-3.0, -2.5 + 0.01 * i as f32, -2.0];
        g.rotations[i] = [1.0, 0.0, 0.0, 0.0];
        for (k, c) in g.sh[16 * i..16 * (i + 1)].iter_mut().enumerate() {
            *c = [0.01 * k as f32, -0.02 * i as f32, 0.5];
        }
    }
    let model = dir.path().join("model.ply");
    save_model(&model, &g, ModelFormat::Ply, ModelInfo::with_mode(false)).unwrap();
    let out = dir.path().join("cut.ply");
    let printed = run(
        env!("CARGO_BIN_EXE_gs-render"),
        &[
            "--ply",
            s(&model),
            "--convert",
            s(&out),
            "--crop",
            "-1,0,0,1,1,1.5",
            "--min-opacity",
            "0.005",
            "--sh-degree",
            "1",
        ],
    );
    // Inside: x in [−1, 1] (i = 10..=30) and z ∈ {0, 1} (i % 3 ≠ 2); then opacity ≥ 0.005.
    let inside: Vec<usize> = (10..=30).filter(|i| i % 3 != 2).collect();
    let kept: Vec<usize> = inside.iter().copied().filter(|i| i % 5 >= 2).collect();
    assert!(
        printed.contains(&format!(
            "{} Gaussians of 40; left out {} outside the crop box, {} below opacity 0.005, SH \
             degree 1",
            kept.len(),
            40 - inside.len(),
            inside.len() - kept.len()
        )),
        "{printed}"
    );
    let (cut, _) = load_model(&out, &LoadOptions::default()).unwrap();
    assert_eq!((cut.len(), cut.sh_degree), (kept.len(), 1));
    for (r, &i) in kept.iter().enumerate() {
        assert_eq!(cut.means[r], g.means[i], "row {r}");
        assert_eq!(cut.logit_opacities[r], g.logit_opacities[i]);
        assert_eq!(cut.log_scales[r], g.log_scales[i]);
        assert_eq!(cut.sh[4 * r..4 * r + 4], g.sh[16 * i..16 * i + 4]);
    }

    let refused = |args: &[&str], want: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_gs-render"))
            .args(args)
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{args:?}: {e}");
    };
    let none = dir.path().join("none.ply");
    let ply = s(&model);
    refused(
        &["--ply", ply, "--convert", s(&none), "--crop", "5,5,5,6,6,6"],
        "no Gaussian of the 40 is left (40 outside the crop box); nothing was written",
    );
    assert!(!none.exists());
    refused(
        &["--ply", ply, "--convert", s(&none), "--min-opacity", "0.95"],
        "no Gaussian of the 40 is left (40 below opacity 0.95)",
    );
    refused(
        &["--ply", s(&out), "--convert", s(&none), "--sh-degree", "2"],
        "--sh-degree 2 is above the model's stored SH degree 1",
    );
    refused(
        &[
            "--ply",
            ply,
            "--convert",
            s(&none),
            "--crop",
            "1,0,0,-1,1,1",
        ],
        "the minimum 1 of axis x is above its maximum -1",
    );
    refused(
        &["--ply", ply, "--convert", s(&none), "--crop", "1,2,3"],
        "holds 3 numbers, not six",
    );
    refused(
        &["--ply", ply, "--convert", s(&none), "--min-opacity", "2"],
        "is not a number in [0, 1]",
    );
    refused(
        &[
            "--ply",
            ply,
            "--camera",
            "c.json",
            "-o",
            "x.png",
            "--crop",
            "0,0,0,1,1,1",
        ],
        "'--camera <CAM.json>' cannot be used with '--crop",
    );
    assert!(!none.exists());
}

/// `gs-render --convert --prune-to N --prune-views PACK`: the kept Gaussians are the N the
/// library's significance ranks first over the pack's training views (not its test views),
/// written in their order and bit for bit; a Gaussian no view sees goes first, a percentage
/// counts from the model. Without --prune-views the N most opaque are kept (the unseen one
/// among them). Impossible requests are refused.
#[test]
fn convert_prunes_to_the_most_opaque_or_significant() {
    use ramsplat::export::{load_model, save_model, ModelFormat, ModelInfo};
    use ramsplat::render::significance::{keep_highest, Significance};
    use ramsplat::scene::maths::logit;
    let dir = tempfile::tempdir().unwrap();
    let pack_dir = dir.path().join("p.pack");
    let scene = DemoScene {
        views: 8,
        width: 48,
        height: 36,
        truth_gaussians: 300,
        sfm_points: 50,
    };
    write_demo_pack(&pack_dir, &scene).unwrap();
    let pack = Pack::open(&pack_dir).unwrap();
    let views = &pack.manifest().views;
    // Per view, 12 Gaussians on a line in front of its camera, of mixed sizes and opacities,
    // then one far behind every camera, which no view sees.
    let mut g = Gaussians::zeros(12 * views.len() + 1, 1);
    for (v, view) in views.iter().enumerate() {
        let c = view.camera.centre();
        let r = view.camera.world_to_camera.rotation;
        let (right, forward) = ([r[0][0], r[0][1], r[0][2]], [r[2][0], r[2][1], r[2][2]]);
        for k in 0..12 {
            let i = 12 * v + k;
            let (side, depth) = (0.15 * (k as f64 - 5.5), 2.0 + 0.1 * k as f64);
            g.means[i] =
                std::array::from_fn(|a| (c[a] + depth * forward[a] + side * right[a]) as f32);
            g.log_scales[i] = [-3.5 + 0.2 * (k % 4) as f32; 3];
            g.rotations[i] = [1.0, 0.0, 0.0, 0.0];
            g.logit_opacities[i] = logit([0.05f32, 0.3, 0.9][k % 3]);
            g.sh[4 * i] = [0.3, -0.2, 0.1 * k as f32];
        }
    }
    let far = g.len() - 1;
    g.means[far] = [1e4, 1e4, 1e4];
    g.rotations[far] = [1.0, 0.0, 0.0, 0.0];
    g.logit_opacities[far] = logit(0.99);
    let model = dir.path().join("model.ply");
    save_model(&model, &g, ModelFormat::Ply, ModelInfo::with_mode(false)).unwrap();

    // The library's ranking over the training views.
    let options = RenderOptions {
        sh_degree: 0,
        ..RenderOptions::default()
    };
    let mut scores = Significance::new(g.len());
    let train: Vec<_> = views
        .iter()
        .filter(|v| v.split == ramsplat::dataset::Split::Train)
        .collect();
    assert!(!train.is_empty() && train.len() < views.len());
    for v in &train {
        scores.add_view(&g, &v.camera, &options).unwrap();
    }
    assert_eq!(scores.scores()[far], 0.0);
    assert!(scores.scores().iter().filter(|&&s| s > 0.0).count() > g.len() / 2);

    let render = env!("CARGO_BIN_EXE_gs-render");
    for (arg, n) in [
        ("40", 40),
        ("25%", (g.len() as f64 * 0.25).round() as usize),
    ] {
        let out = dir.path().join(format!("pruned-{n}.ply"));
        let printed = run(
            render,
            &[
                "--ply",
                s(&model),
                "--convert",
                s(&out),
                "--prune-to",
                arg,
                "--prune-views",
                s(&pack_dir),
            ],
        );
        assert!(
            printed.contains(&format!(
                "{n} Gaussians of {}; left out {} least significant to the {} training views",
                g.len(),
                g.len() - n,
                train.len()
            )),
            "{printed}"
        );
        let keep = keep_highest(scores.scores(), n);
        assert!(!keep[far]);
        let kept: Vec<usize> = (0..g.len()).filter(|&i| keep[i]).collect();
        let (pruned, _) = load_model(&out, &LoadOptions::default()).unwrap();
        assert_eq!(pruned.len(), n);
        for (row, &i) in kept.iter().enumerate() {
            assert_eq!(pruned.means[row], g.means[i], "row {row}");
            assert_eq!(pruned.logit_opacities[row], g.logit_opacities[i]);
            assert_eq!(pruned.sh[4 * row..4 * row + 4], g.sh[4 * i..4 * i + 4]);
        }
    }

    // Without --prune-views: the most opaque, ties (the opacities repeat) to the lower index.
    let out = dir.path().join("opaque.ply");
    let printed = run(
        render,
        &["--ply", s(&model), "--convert", s(&out), "--prune-to", "50"],
    );
    assert!(
        printed.contains(&format!(
            "50 Gaussians of {}; left out {} least opaque",
            g.len(),
            g.len() - 50
        )),
        "{printed}"
    );
    let mut by_opacity: Vec<usize> = (0..g.len()).collect();
    by_opacity.sort_by(|&a, &b| {
        g.logit_opacities[b]
            .total_cmp(&g.logit_opacities[a])
            .then(a.cmp(&b))
    });
    let mut kept = by_opacity[..50].to_vec();
    kept.sort();
    let (pruned, _) = load_model(&out, &LoadOptions::default()).unwrap();
    let rows: Vec<[f32; 3]> = kept.iter().map(|&i| g.means[i]).collect();
    assert_eq!(pruned.means, rows);
    assert!(
        kept.contains(&far),
        "the most opaque Gaussian, whatever no view sees of it"
    );

    let refused = |args: &[&str], want: &str| {
        let o = Command::new(render).args(args).output().unwrap();
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && e.contains(want), "{args:?}: {e}");
    };
    let none = dir.path().join("none.ply");
    let (ply, p) = (s(&model), s(&pack_dir));
    let prune = |to: &'static str| -> Vec<&str> {
        vec![
            "--ply",
            ply,
            "--convert",
            s(&none),
            "--prune-to",
            to,
            "--prune-views",
            p,
        ]
    };
    refused(&prune("0"), "is neither a count of Gaussians");
    refused(&prune("150%"), "is not a percentage in (0, 100]");
    refused(
        &["--ply", ply, "--convert", s(&none), "--prune-views", p],
        "--prune-to <N|P%>",
    );
    refused(
        &[
            "--ply",
            ply,
            "--pack",
            p,
            "-o",
            s(&none),
            "--prune-to",
            "10",
            "--prune-views",
            p,
        ],
        "cannot be used with",
    );
    refused(
        &[
            "--ply",
            ply,
            "--convert",
            p,
            "--prune-to",
            "10",
            "--prune-views",
            p,
        ],
        "is the --prune-views file",
    );
    assert!(!none.exists());
}
