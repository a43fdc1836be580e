//! The renderer's scene handed to llvmpipe (`agx-llvmpipe`): the same
//! mesh, texture and per-frame numbers `agx_tools::render::Renderer`
//! draws, shared by the image test and the side-by-side benchmark.

use agx_llvmpipe::{FrameDesc, Llvmpipe, SceneDesc};
use agx_tools::mesh::Mesh;
use agx_tools::render::{
    albedo_texels, interleaved_vertices, FrameSetup, CLEAR_COLOUR, TEXTURE_PX,
};

/// `mesh` with the renderer's texture on llvmpipe, for `width` x
/// `height` frames.
pub(crate) fn scene(mesh: &Mesh, width: u32, height: u32) -> Result<Llvmpipe, agx_llvmpipe::Error> {
    let vertices = interleaved_vertices(mesh);
    let texels = albedo_texels();
    Llvmpipe::new(&SceneDesc {
        vertices: &vertices,
        indices: &mesh.indices,
        texture_rgba8: &texels,
        texture_size_px: TEXTURE_PX,
        width_px: width,
        height_px: height,
    })
}

/// Frame `frame` of a `width` x `height` target, as the renderer draws it.
pub(crate) fn frame(frame: u32, width: u32, height: u32) -> FrameDesc {
    let s = FrameSetup::new(frame, width, height);
    FrameDesc {
        mvp: s.mvp,
        normal_matrix: s.normal_matrix,
        light: s.light,
        ambient: s.ambient,
        shininess: s.shininess,
        specular: s.specular,
        alpha: s.alpha,
        clear_colour: CLEAR_COLOUR,
    }
}
