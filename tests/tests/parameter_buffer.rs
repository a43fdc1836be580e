//! "The impossible bug" as a regression suite: dense geometry with many
//! varyings overflows the parameter buffer, and everything the GPU then
//! does (partial renders through partial_eot/partial_bg, depth flushed and
//! reloaded, the buffer grown for later frames) is checked through the
//! userspace driver and the whole stack. The deliberate mistakes (umd
//! `PassDebug`) must each produce their specific symptom.

use agx_kmd::tvb::{GrowthPolicy, INITIAL_BLOCKS};
use agx_tests::scene::{device, LayeredScene, CLEAR_RGBA, FAR_RGBA, NEAR_RGBA};
use agx_umd::{Errno, Error, PassDebug, Queue};

/// 96x96 pixels; two sheets of 160 x 160 quads: 102 400 triangles.
const GRID: u32 = 160;
const SIZE: (u32, u32) = (96, 96);
/// A buffer no frame here overflows: 1024 blocks (128 MiB).
const HUGE_BLOCKS: u64 = 1024;

#[test]
fn a_frame_that_overflows_matches_one_that_does_not_bit_for_bit() {
    let tiny = device(GrowthPolicy::Asahi, INITIAL_BLOCKS);
    let huge = device(GrowthPolicy::Asahi, HUGE_BLOCKS);
    let (scene_tiny, scene_huge) = (
        LayeredScene::new(&tiny, GRID, 12, SIZE).unwrap(),
        LayeredScene::new(&huge, GRID, 12, SIZE).unwrap(),
    );
    assert!(scene_tiny.triangles() >= 100_000);
    let overflowed = scene_tiny
        .render(&Queue::new(&tiny).unwrap(), PassDebug::default())
        .unwrap();
    let reference = scene_huge
        .render(&Queue::new(&huge).unwrap(), PassDebug::default())
        .unwrap();
    assert!(
        overflowed.tvb.partial_renders > 0,
        "the small buffer overflowed: {:?}",
        overflowed.tvb
    );
    assert_eq!(reference.tvb.partial_renders, 0, "{:?}", reference.tvb);
    assert!(
        overflowed.colour == reference.colour,
        "bit-identical colour"
    );
    assert!(overflowed.depth == reference.depth, "bit-identical depth");
    // And it is the right picture.
    assert_eq!(reference.count(NEAR_RGBA), 96 * 96);
    // The sheets are drawn row by row, so a segment's geometry is a band
    // at most 2 of the 3 rows of 32x32 tiles tall: after the first
    // partial render (the pass clears, so it processes empty tiles and
    // visits all 9) each visits at most 6.
    let tvb = overflowed.tvb;
    assert!(
        tvb.partial_render_tiles >= 9 + (tvb.partial_renders - 1)
            && tvb.partial_render_tiles <= 9 + 6 * (tvb.partial_renders - 1),
        "partial renders visit the tiles holding geometry: {tvb:?}"
    );
}

#[test]
fn moving_the_overflow_point_with_the_varyings_changes_nothing_visible() {
    let d = device(GrowthPolicy::Sync, INITIAL_BLOCKS);
    let queue = Queue::new(&d).unwrap();
    let mut demand = Vec::new();
    let mut frames = Vec::new();
    for varyings in [3, 8, 24] {
        // A fresh queue per count, so each starts from the small buffer.
        let queue_for = Queue::new(&d).unwrap();
        let scene = LayeredScene::new(&d, 80, varyings, SIZE).unwrap();
        let frame = scene.render(&queue_for, PassDebug::default()).unwrap();
        demand.push(frame.tvb.peak_pages);
        frames.push(frame);
    }
    drop(queue);
    assert!(
        demand[0] < demand[1] && demand[1] < demand[2],
        "more varyings, more parameter buffer: {demand:?} pages"
    );
    assert!(frames.iter().all(|f| f.colour == frames[0].colour));
    assert!(frames.iter().all(|f| f.depth == frames[0].depth));
}

#[test]
fn the_resumed_pass_keeps_what_the_partial_render_stored() {
    let d = device(GrowthPolicy::Asahi, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, GRID, 12, SIZE).unwrap();
    let right = scene
        .render(&Queue::new(&d).unwrap(), PassDebug::default())
        .unwrap();
    assert!(right.tvb.partial_renders > 0);
    assert_eq!(right.count(CLEAR_RGBA), 0, "the pass began with a clear");
    // A partial_bg that clears: what the near sheet drew before each
    // partial render is gone, and the far sheet, still behind the
    // reloaded depth, cannot cover it.
    let wrong = scene
        .render(
            &Queue::new(&d).unwrap(),
            PassDebug {
                clearing_partial_bg: true,
                ..PassDebug::default()
            },
        )
        .unwrap();
    assert!(wrong.tvb.partial_renders > 0);
    let lost = wrong.count(CLEAR_RGBA);
    assert!(lost > 0, "geometry drawn before the overflow was lost");
    assert_eq!(wrong.count(FAR_RGBA), 0, "depth still hides the far sheet");
    assert_eq!(lost + wrong.count(NEAR_RGBA), 96 * 96);
    assert!(wrong.depth == right.depth, "depth itself is intact");
}

#[test]
fn without_partial_bg_the_submission_faults_at_address_zero_and_other_queues_work() {
    let d = device(GrowthPolicy::Asahi, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, GRID, 12, SIZE).unwrap();
    let (broken, healthy) = (Queue::new(&d).unwrap(), Queue::new(&d).unwrap());
    let err = scene
        .render(
            &broken,
            PassDebug {
                no_partial_bg: true,
                ..PassDebug::default()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, Error::GpuFault { errno } if errno == Errno::EIO),
        "{err}"
    );
    let stats = d.simulated().unwrap().system().device().scheduler().stats();
    let (address, unit, _) = stats.last_fault.unwrap();
    assert_eq!(address, 0, "the fault is at the missing program's address");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    // The other queue renders the same frame correctly.
    let frame = scene.render(&healthy, PassDebug::default()).unwrap();
    assert_eq!(frame.count(NEAR_RGBA), 96 * 96);
    // And so does the faulted queue, once the driver is fixed.
    let frame = scene.render(&broken, PassDebug::default()).unwrap();
    assert_eq!(frame.count(NEAR_RGBA), 96 * 96);
}

#[test]
fn without_depth_store_and_reload_later_geometry_shows_through() {
    let d = device(GrowthPolicy::Asahi, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, GRID, 12, SIZE).unwrap();
    let right = scene
        .render(&Queue::new(&d).unwrap(), PassDebug::default())
        .unwrap();
    let wrong = scene
        .render(
            &Queue::new(&d).unwrap(),
            PassDebug {
                no_partial_zls: true,
                ..PassDebug::default()
            },
        )
        .unwrap();
    assert!(wrong.tvb.partial_renders > 0);
    // Every pixel that differs from the reference shows the far sheet:
    // the geometry the lost depth should have hidden.
    let mut artefacts = 0;
    for (got, want) in wrong
        .colour
        .chunks_exact(4)
        .zip(right.colour.chunks_exact(4))
    {
        if got != want {
            assert_eq!(got, FAR_RGBA, "a difference that is not the far sheet");
            artefacts += 1;
        }
    }
    assert!(artefacts > 0, "depth artefacts");
}

/// Frames of the heavy scene rendered one after another until one has no
/// partial render; returns the partial renders of each frame.
fn partials_per_frame(policy: GrowthPolicy, frames: usize) -> Vec<u64> {
    let d = device(policy, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, GRID, 12, SIZE).unwrap();
    let queue = Queue::new(&d).unwrap();
    let mut seen = 0;
    (0..frames)
        .map(|_| {
            let frame = scene.render(&queue, PassDebug::default()).unwrap();
            let partials = frame.tvb.partial_renders - seen;
            seen = frame.tvb.partial_renders;
            partials
        })
        .collect()
}

#[test]
fn the_buffer_grows_until_partial_renders_stop_under_each_policy() {
    // Upstream's rule: grow to 3x the last peak when 2x the peak exceeds
    // the buffer; the peak of a frame that overflowed is the buffer size,
    // so it takes several frames.
    let asahi = partials_per_frame(GrowthPolicy::Asahi, 5);
    eprintln!("partial renders per frame, asahi: {asahi:?}");
    assert!(asahi[..3].iter().all(|&p| p > 0), "{asahi:?}");
    assert_eq!(
        asahi[3..],
        [0, 0],
        "asahi: three frames with partial renders"
    );
    // Demand: the first frame reports what it wanted in all; the second
    // has room for it.
    let demand = partials_per_frame(GrowthPolicy::Demand, 3);
    eprintln!("partial renders per frame, demand: {demand:?}");
    assert!(demand[0] > 0, "{demand:?}");
    assert_eq!(
        demand[1..],
        [0, 0],
        "demand: one frame with partial renders"
    );
    // Sync: the firmware asks mid-render and the kmd grows at once.
    let sync = partials_per_frame(GrowthPolicy::Sync, 2);
    assert_eq!(sync, [0, 0], "sync: none");
}

#[test]
fn after_a_spike_the_demand_policy_gives_the_memory_back() {
    let d = device(GrowthPolicy::Demand, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, 120, 12, SIZE).unwrap();
    let queue = Queue::new(&d).unwrap();
    let light = 1_000;
    // The spike renders with partial renders, then the buffer grows.
    let spike = scene.render(&queue, PassDebug::default()).unwrap();
    assert!(spike.tvb.partial_renders > 0);
    let grown = scene
        .render_part(&queue, PassDebug::default(), light)
        .unwrap();
    assert!(grown.tvb.blocks > 4 * INITIAL_BLOCKS, "{:?}", grown.tvb);
    // A run of light frames: the memory goes back, and the frames after
    // the shrink still render right, without partial renders.
    let mut frame = grown.clone();
    for _ in 0..agx_kmd::tvb::SHRINK_AFTER_RENDERS + 1 {
        frame = scene
            .render_part(&queue, PassDebug::default(), light)
            .unwrap();
    }
    assert_eq!(frame.tvb.shrinks, 1, "{:?}", frame.tvb);
    assert!(frame.tvb.blocks <= 2 * INITIAL_BLOCKS, "{:?}", frame.tvb);
    assert_eq!(frame.tvb.partial_renders, spike.tvb.partial_renders);
    assert!(frame.colour == grown.colour && frame.depth == grown.depth);
    // The spike again: it has to grow again (one frame of partial renders).
    let again = scene.render(&queue, PassDebug::default()).unwrap();
    assert!(again.tvb.partial_renders > spike.tvb.partial_renders);
    assert!(again.colour == spike.colour && again.depth == spike.depth);
}
