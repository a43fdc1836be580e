//! Reading the scene the vertex half binned into the parameter buffer:
//! the scene header, the per-tile list heads, and a tile's primitive
//! chunks. The scene lives in GPU-writable memory, so nothing read from
//! it is trusted: counts are capped and cycles are refused.

use agx_fwif::messages::{FaultUnit, TvbInfo, TVB_PAGE_BYTES};
use zerocopy::FromBytes;

use crate::fault::unsupported;
use crate::fault::EngineResult;
use crate::memory::read_words;
use crate::memory::GpuVm;
use crate::tiler;

/// The scene the vertex stage binned: its header and list-head pages.
pub(super) struct Scene {
    pub(super) header: tiler::SceneHeader,
    pub(super) head_pages: Vec<u64>,
}

/// The scene of this pass, or `None` if its vertex half did not finish
/// one (it faulted or timed out: the submission has failed already, and
/// the fragment half renders nothing).
pub(super) fn read_scene(
    vm: &GpuVm<'_>,
    info: &TvbInfo,
    area: (u32, u32),
) -> Result<Option<Scene>, EngineResult> {
    let alloc = tiler::PageAllocator::new(vm.clone(), info);
    let page = alloc.page(0)?;
    let bytes: [u8; size_of::<tiler::SceneHeader>()] = read_words(vm, page)?;
    let header = tiler::SceneHeader::read_from_bytes(&bytes)
        .map_err(|_| unsupported(page, FaultUnit::Tiler, "a scene header that does not parse"))?;
    if (header.tiles_x, header.tiles_y)
        != (
            area.0.div_ceil(tiler::TILE_PX),
            area.1.div_ceil(tiler::TILE_PX),
        )
    {
        return Ok(None);
    }
    // The scene lives in GPU-writable memory: a shader can corrupt it, so
    // nothing read from it is trusted.
    if header.state_count as usize > tiler::MAX_STATES
        || u64::from(header.pages_used) > alloc.page_count()
    {
        return Err(unsupported(
            page,
            FaultUnit::Tiler,
            format_args!(
                "a corrupt scene header: {} states (at most {}) and {} pages used of the buffer's {}",
                header.state_count,
                tiler::MAX_STATES,
                header.pages_used,
                alloc.page_count()
            ),
        ));
    }
    let tiles = u64::from(header.tiles_x) * u64::from(header.tiles_y);
    let pages = tiles.div_ceil(tiler::TVB_HEADS_PER_PAGE);
    let mut head_pages = Vec::new();
    for i in 0..pages {
        let at = page + size_of::<tiler::SceneHeader>() as u64 + 8 * i;
        head_pages.push(u64::from_le_bytes(read_words(vm, at)?));
    }
    Ok(Some(Scene { header, head_pages }))
}

/// The primitives binned to a tile, in draw order.
pub(super) fn tile_primitives(
    vm: &GpuVm<'_>,
    scene: &Scene,
    tile: u64,
) -> Result<Vec<u64>, EngineResult> {
    let Some(&page) = usize::try_from(tile / tiler::TVB_HEADS_PER_PAGE)
        .ok()
        .and_then(|at| scene.head_pages.get(at))
    else {
        // A tile outside the scene the vertex half binned.
        return Err(unsupported(
            scene.header.states,
            FaultUnit::Tiler,
            format_args!(
                "tile {tile}, past the scene's {} list-head pages",
                scene.head_pages.len()
            ),
        ));
    };
    let mut chunk = u64::from_le_bytes(read_words(
        vm,
        page + 8 * (tile % tiler::TVB_HEADS_PER_PAGE),
    )?);
    let mut out = Vec::new();
    let mut guard = 0u64;
    while chunk != 0 {
        let bytes: [u8; tiler::CHUNK_BYTES as usize] = read_words(vm, chunk)?;
        let next = u64::from_le_bytes(bytes[0..8].try_into().unwrap_or_default());
        let count = u32::from_le_bytes(bytes[8..12].try_into().unwrap_or_default()) as usize;
        for i in 0..count.min(tiler::CHUNK_PRIMITIVES) {
            let at = 16 + 8 * i;
            out.push(u64::from_le_bytes(
                bytes[at..at + 8].try_into().unwrap_or_default(),
            ));
        }
        chunk = next;
        guard += 1;
        // More chunks than the scene's pages hold is a corrupt (cyclic)
        // list: the GPU's own data was overwritten.
        if guard > u64::from(scene.header.pages_used) * (TVB_PAGE_BYTES / tiler::CHUNK_BYTES) {
            return Err(unsupported(
                chunk,
                FaultUnit::Tiler,
                format_args!(
                    "tile {tile}'s primitive list of more chunks than the scene's {} pages hold (a cycle)",
                    scene.header.pages_used
                ),
            ));
        }
    }
    Ok(out)
}
