//! Model export formats end to end: `gs-train --export spz,splat` writes both beside the PLY,
//! `gs-render --convert` converts between PLY, SPZ and `.splat`, and renders of the converted
//! models match the PLY's within each format's quantisation (PSNR against the PLY's render,
//! printed and bounded).

use std::path::Path;
use std::process::Command;

use ramsplat::export::ply::{self, LoadOptions};
use ramsplat::export::{splat, spz};
use ramsplat::render::{CpuRasterizer, Rasterizer, RenderOptions, RenderOutput};
use ramsplat::scene::gaussians::Gaussians;
use ramsplat::shard::reader::Pack;
use ramsplat::train::demo::{write_demo_pack, DemoScene};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn run(bin: &str, args: &[&str]) {
    let o = Command::new(bin).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{bin} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
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
    let pack_path = dir.path().join("tiny.pack");
    write_demo_pack(
        &pack_path,
        &DemoScene {
            views: 12,
            width: 64,
            height: 48,
            truth_gaussians: 800,
            sfm_points: 400,
        },
    )
    .unwrap();
    let out = dir.path().join("out");
    run(
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
            "spz,splat",
        ],
    );
    let base = out.join("point_cloud/iteration_300/point_cloud");
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
