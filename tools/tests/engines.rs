//! The compiled engine against the interpreter on whole frames: the
//! renderer's scene (the torus, and the Stanford bunny from Debian's
//! glmark2-data), drawn through our umd on the simulated GPU once with
//! each engine, must give the same image bit for bit: every vertex,
//! fragment and tile program the umd generates runs its ALU blocks
//! compiled in one and interpreted in the other.

use agx_sim::{ShaderEngine, SystemConfig};
use agx_tools::mesh::Mesh;
use agx_tools::render::Renderer;

fn image(mesh: &Mesh, (w, h): (u32, u32), frame: u32, shader_engine: ShaderEngine) -> Vec<u8> {
    let device = agx_umd::Device::open_simulated(SystemConfig {
        gpu_threads: 2,
        shader_engine,
        ..SystemConfig::default()
    })
    .unwrap();
    let renderer = Renderer::new(&device, mesh, w, h).unwrap();
    renderer.frame(frame).unwrap();
    renderer.pixels().unwrap()
}

fn same_on_both_engines(name: &str, mesh: &Mesh, size: (u32, u32)) {
    for frame in [0, 7] {
        let interpreted = image(mesh, size, frame, ShaderEngine::Interpreter);
        let compiled = image(mesh, size, frame, ShaderEngine::Compiled);
        let differing = interpreted
            .chunks_exact(4)
            .zip(compiled.chunks_exact(4))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(differing, 0, "{name} frame {frame}: pixels that differ");
        let colours: std::collections::HashSet<&[u8]> = interpreted.chunks_exact(4).collect();
        assert!(colours.len() > 500, "{name}: a scene, not a blank image");
    }
}

#[test]
fn frames_are_the_same_on_both_engines() {
    same_on_both_engines("torus", &Mesh::torus(300, 100), (256, 192));
    let bunny = std::path::Path::new("/usr/share/glmark2/models/bunny.obj");
    let bunny =
        Mesh::load(bunny).unwrap_or_else(|e| panic!("{e} (Debian: apt-get install glmark2-data)"));
    same_on_both_engines("bunny", &bunny, (256, 256));
}
