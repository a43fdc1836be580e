//! Sizing the parameter buffer (the tiled vertex buffer, TVB).
//!
//! The vertex stage bins transformed primitives into per-tile lists in
//! the TVB, which the fragment stage then consumes. The kmd owns one TVB
//! per queue: a heap of 128 KiB blocks (four 32 KiB pages) that the
//! firmware allocates pages from during a render. When the heap runs dry
//! mid-render the firmware must either get more memory or do a partial
//! render (shade what is binned so far, store it, free the TVB, resume),
//! which costs a full store and reload of the render targets. How the kmd
//! grows the heap is therefore a policy, and this module holds the
//! policies and the heap-size bookkeeping (the memory itself is mapped by
//! the queue); the firmware half reports the statistics they read.
//!
//! - [`GrowthPolicy::Asahi`] is upstream's rule: before each render, read
//!   the peak number of pages the previous render used; if twice the peak
//!   exceeds the heap, grow to three times the peak (capped at the
//!   upstream limit without memoryless render targets, 2193 blocks).
//! - [`GrowthPolicy::Demand`]: the firmware reports the pages the last
//!   render would have used in one segment (every segment's geometry, the
//!   header and list heads once); grow to that plus an eighth of headroom.
//!   One frame of partial renders per jump in geometry, within 1.25x of
//!   the demand (Documentation/parameter-buffer.md has the measurements).
//! - [`GrowthPolicy::Sync`]: the firmware asks (GrowTVB) when the heap runs
//!   dry mid-render and waits for the answer; each request adds at least
//!   the upstream 10 blocks. A partial render happens only at the maximum.
//!
//! The heap shrinks only under `Demand` (after [`SHRINK_AFTER_RENDERS`]
//! renders that needed at most half of it), starts at 8 blocks, and is never larger than
//! 6579 blocks (upstream's maximum, 862 322 688 bytes). Before every render
//! it is at least the render's minimum, derived from its tile count.

use std::fmt;

/// Bytes per TVB page.
pub const PAGE_BYTES: u64 = 32 * 1024;
/// Pages per block.
pub const BLOCK_PAGES: u64 = 4;
/// Bytes per block.
pub const BLOCK_BYTES: u64 = PAGE_BYTES * BLOCK_PAGES;
/// Blocks a new heap starts with (upstream's `initial_tvb_size`).
pub const INITIAL_BLOCKS: u64 = 8;
/// The largest heap.
pub const MAX_BLOCKS: u64 = 6579;
/// The smallest heap a queue may be configured to start with: every
/// render needs at least this many ([`min_blocks_for_render`] rounds up to
/// a multiple of 8), so a smaller start would only be grown before the
/// first render.
pub const MIN_INITIAL_BLOCKS: u64 = 8;
/// Upstream's automatic-growth cap without memoryless render targets.
pub const ASAHI_CAP_BLOCKS: u64 = 2193;
/// Consecutive renders needing at most half the heap after which the
/// demand policy gives the rest back.
pub const SHRINK_AFTER_RENDERS: u32 = 8;
/// Blocks upstream adds for a synchronous grow request.
pub const SYNC_GROW_BLOCKS: u64 = 10;

/// How the heap grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum GrowthPolicy {
    /// Upstream's: grow to 3x the last peak when 2x the peak exceeds the
    /// heap.
    Asahi,
    /// Grow to what the last render wanted plus an eighth. The default:
    /// one frame of partial renders per jump, within 1.25x of the demand
    /// (Documentation/parameter-buffer.md).
    #[default]
    Demand,
    /// Grow when the firmware asks, mid-render.
    Sync,
}

impl fmt::Display for GrowthPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GrowthPolicy::Asahi => "asahi",
            GrowthPolicy::Demand => "demand",
            GrowthPolicy::Sync => "sync",
        })
    }
}

/// A policy name that is not one of `asahi`, `demand`, `sync`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown growth policy {0:?} (asahi, demand, sync)")]
pub struct UnknownPolicy(pub String);

impl std::str::FromStr for GrowthPolicy {
    type Err = UnknownPolicy;

    fn from_str(name: &str) -> Result<GrowthPolicy, UnknownPolicy> {
        match name {
            "asahi" => Ok(GrowthPolicy::Asahi),
            "demand" => Ok(GrowthPolicy::Demand),
            "sync" => Ok(GrowthPolicy::Sync),
            _ => Err(UnknownPolicy(name.to_string())),
        }
    }
}

/// What the firmware reports about a finished render.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RenderReport {
    /// The most pages in use at once.
    pub peak_pages: u64,
    /// The pages the render would have used without partial renders (the
    /// sum over its segments).
    pub wanted_pages: u64,
    /// Times the heap ran dry.
    pub overflows: u64,
    /// Partial renders done.
    pub partial_renders: u64,
    /// Tiles those partial renders visited.
    pub partial_render_tiles: u64,
}

/// The heap's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TvbStats {
    /// Current size in blocks.
    pub blocks: u64,
    /// The largest peak any render reported, in pages.
    pub peak_pages: u64,
    /// Heap overflows over all renders.
    pub overflows: u64,
    /// Partial renders over all renders.
    pub partial_renders: u64,
    /// Tiles the partial renders visited, over all renders (a partial render
    /// visits only the tiles its segment binned geometry into, after the
    /// pass's first).
    pub partial_render_tiles: u64,
    /// Times the heap grew.
    pub grows: u64,
    /// The pages the last reported render wanted in all (the sum over its
    /// segments: its true demand).
    pub last_wanted_pages: u64,
    /// Renders reported.
    pub renders: u64,
    /// Times the heap shrank.
    pub shrinks: u64,
}

impl TvbStats {
    /// Current size in bytes.
    pub fn allocated_bytes(&self) -> u64 {
        self.blocks * BLOCK_BYTES
    }
}

/// A grow request the policy refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GrowRefused {
    /// The heap is at its maximum: the firmware must do a partial render.
    #[error("the TVB is at its maximum of {max_blocks} blocks")]
    AtMaximum {
        /// The maximum.
        max_blocks: u64,
    },
    /// The policy does not grow mid-render.
    #[error("the {policy} policy does not grow mid-render")]
    NotSynchronous {
        /// The policy.
        policy: GrowthPolicy,
    },
}

/// The blocks a render needs at least: one block per 128 tiles of 32x32
/// pixels, rounded up to a multiple of 8; on multi-cluster GPUs at least
/// 7 + 2 per layer.
pub fn min_blocks_for_render(width_px: u32, height_px: u32, layers: u32, clusters: u32) -> u64 {
    let tiles = u64::from(width_px.div_ceil(32)) * u64::from(height_px.div_ceil(32));
    let mut blocks = tiles.div_ceil(128).next_multiple_of(8);
    if clusters > 1 {
        blocks = blocks.max(7 + 2 * u64::from(layers));
    }
    blocks.min(MAX_BLOCKS)
}

/// One queue's heap size and history.
#[derive(Debug, Clone)]
pub struct Tvb {
    policy: GrowthPolicy,
    stats: TvbStats,
    /// Consecutive reported renders that needed at most half the heap.
    small_renders: u32,
}

impl Tvb {
    /// A new heap of `initial_blocks` (at least 1, at most
    /// [`MAX_BLOCKS`]).
    pub fn new(policy: GrowthPolicy, initial_blocks: u64) -> Tvb {
        Tvb {
            policy,
            stats: TvbStats {
                blocks: initial_blocks.clamp(1, MAX_BLOCKS),
                ..TvbStats::default()
            },
            small_renders: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> GrowthPolicy {
        self.policy
    }

    /// The statistics.
    pub fn stats(&self) -> TvbStats {
        self.stats
    }

    fn grow_to(&mut self, blocks: u64) -> bool {
        let blocks = blocks.min(MAX_BLOCKS);
        if blocks > self.stats.blocks {
            tracing::debug!(policy = %self.policy, from = self.stats.blocks, to = blocks, "TVB grows");
            self.stats.blocks = blocks;
            self.stats.grows += 1;
            true
        } else {
            false
        }
    }

    /// Undoes the last growth to `blocks` when the memory for it could not
    /// be mapped (the heap really is still `blocks` large).
    pub fn growth_failed(&mut self, blocks: u64) {
        if blocks < self.stats.blocks {
            self.stats.blocks = blocks;
            self.stats.grows = self.stats.grows.saturating_sub(1);
        }
    }

    /// Records what the firmware reported about the last render.
    pub fn record(&mut self, report: &RenderReport) {
        self.stats.peak_pages = self.stats.peak_pages.max(report.peak_pages);
        self.stats.last_wanted_pages = report.wanted_pages;
        self.stats.renders += 1;
        self.stats.overflows += report.overflows;
        self.stats.partial_renders += report.partial_renders;
        self.stats.partial_render_tiles += report.partial_render_tiles;
    }

    /// Sizes the heap before a render: applies the policy to the previous
    /// render's report (if any) and the render's minimum. Returns the size
    /// in blocks the heap should have: more than now is a growth (already
    /// counted); less is a request to shrink, which the caller carries out
    /// when it can and reports with [`Tvb::shrunk`].
    pub fn before_render(&mut self, last: Option<&RenderReport>, min_blocks: u64) -> u64 {
        if let Some(report) = last {
            match self.policy {
                GrowthPolicy::Asahi => {
                    let need = (2 * report.peak_pages)
                        .div_ceil(BLOCK_PAGES)
                        .min(ASAHI_CAP_BLOCKS);
                    let want = (3 * report.peak_pages)
                        .div_ceil(BLOCK_PAGES)
                        .min(ASAHI_CAP_BLOCKS);
                    if need > self.stats.blocks {
                        self.grow_to(want);
                    }
                }
                GrowthPolicy::Demand => {
                    // What the last render wanted in one segment, plus an
                    // eighth for frames that grow a little.
                    let wanted_blocks = report.wanted_pages.div_ceil(BLOCK_PAGES);
                    let target = (wanted_blocks + wanted_blocks.div_ceil(8)).max(min_blocks);
                    self.grow_to(target);
                    // A run of renders that need at most half of it: the
                    // rest goes back (the scheduler shrinks when the queue
                    // is idle, and reports what it managed).
                    if 2 * target <= self.stats.blocks {
                        self.small_renders += 1;
                    } else {
                        self.small_renders = 0;
                    }
                    if self.small_renders >= SHRINK_AFTER_RENDERS {
                        return target.max(min_blocks);
                    }
                }
                GrowthPolicy::Sync => {}
            }
        }
        self.grow_to(min_blocks);
        self.stats.blocks
    }

    /// The heap was shrunk to `blocks` (at the demand policy's request).
    pub fn shrunk(&mut self, blocks: u64) {
        if blocks < self.stats.blocks {
            tracing::debug!(from = self.stats.blocks, to = blocks, "TVB shrinks");
            self.stats.blocks = blocks;
            self.stats.shrinks += 1;
            self.small_renders = 0;
        }
    }

    /// A shrink the policy asked for could not be done (nothing to give
    /// back in whole chunks, or no memory for the smaller replacement):
    /// the heap stays, and the count of small renders starts again.
    pub fn shrink_declined(&mut self) {
        self.small_renders = 0;
    }

    /// A mid-render request (GrowTVB) for `wanted_blocks` more blocks.
    /// Returns the new size, or why the firmware must partially render.
    pub fn grow_request(&mut self, wanted_blocks: u64) -> Result<u64, GrowRefused> {
        if self.policy != GrowthPolicy::Sync {
            return Err(GrowRefused::NotSynchronous {
                policy: self.policy,
            });
        }
        if self.stats.blocks >= MAX_BLOCKS {
            return Err(GrowRefused::AtMaximum {
                max_blocks: MAX_BLOCKS,
            });
        }
        self.grow_to(
            self.stats
                .blocks
                .saturating_add(wanted_blocks.max(SYNC_GROW_BLOCKS)),
        );
        Ok(self.stats.blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peak(pages: u64) -> RenderReport {
        RenderReport {
            peak_pages: pages,
            wanted_pages: pages,
            ..RenderReport::default()
        }
    }

    #[test]
    fn render_minimum_follows_the_tile_count() {
        // 1920x1080: 60x34 tiles = 2040 -> 16 blocks -> multiple of 8.
        assert_eq!(min_blocks_for_render(1920, 1080, 1, 1), 16);
        assert_eq!(min_blocks_for_render(32, 32, 1, 1), 8);
        assert_eq!(min_blocks_for_render(16384, 16384, 1, 1), 2048);
        assert_eq!(
            min_blocks_for_render(32, 32, 6, 4),
            19,
            "multi-cluster: 7 + 2 per layer"
        );
    }

    #[test]
    fn asahi_grows_to_three_times_the_peak_when_twice_it_does_not_fit() {
        let mut tvb = Tvb::new(GrowthPolicy::Asahi, INITIAL_BLOCKS);
        assert_eq!(tvb.before_render(None, 8), 8);
        // Peak 16 pages = 4 blocks: 2x = 8 blocks fits, no growth.
        assert_eq!(tvb.before_render(Some(&peak(16)), 8), 8);
        // Peak 20 pages = 5 blocks: 2x = 10 > 8: grow to 3x = 15 blocks.
        assert_eq!(tvb.before_render(Some(&peak(20)), 8), 15);
        // A smaller peak never shrinks the heap.
        assert_eq!(tvb.before_render(Some(&peak(4)), 8), 15);
        // Capped at upstream's 2193 blocks.
        assert_eq!(tvb.before_render(Some(&peak(100_000)), 8), ASAHI_CAP_BLOCKS);
        // The render minimum still applies beyond the cap, up to the max.
        assert_eq!(tvb.before_render(None, 3000), 3000);
        assert_eq!(tvb.stats().grows, 3);
        assert_eq!(tvb.stats().allocated_bytes(), 3000 * 128 * 1024);
        assert!(tvb.grow_request(5).is_err(), "not a synchronous policy");
    }

    #[test]
    fn demand_gives_memory_back_after_a_run_of_small_renders() {
        let mut tvb = Tvb::new(GrowthPolicy::Demand, INITIAL_BLOCKS);
        assert_eq!(tvb.before_render(Some(&peak(640)), 8), 180);
        // Seven small renders: still 180.
        for _ in 0..SHRINK_AFTER_RENDERS - 1 {
            assert_eq!(tvb.before_render(Some(&peak(16)), 8), 180);
        }
        // The eighth asks for 8 (4 blocks + an eighth, at least the
        // render minimum).
        assert_eq!(tvb.before_render(Some(&peak(16)), 8), 8);
        tvb.shrunk(8);
        let stats = tvb.stats();
        assert_eq!((stats.blocks, stats.shrinks), (8, 1));
        // One large render in a run starts the count again.
        for _ in 0..SHRINK_AFTER_RENDERS - 1 {
            tvb.before_render(Some(&peak(16)), 8);
        }
        assert_eq!(tvb.before_render(Some(&peak(640)), 8), 180);
    }

    #[test]
    fn a_declined_shrink_waits_for_another_run_of_small_renders() {
        let mut tvb = Tvb::new(GrowthPolicy::Demand, INITIAL_BLOCKS);
        assert_eq!(tvb.before_render(Some(&peak(640)), 8), 180);
        for _ in 0..SHRINK_AFTER_RENDERS - 1 {
            tvb.before_render(Some(&peak(16)), 8);
        }
        assert_eq!(tvb.before_render(Some(&peak(16)), 8), 8);
        tvb.shrink_declined();
        // The heap is still 180 and the next small render does not ask
        // again: the count restarted.
        assert_eq!(tvb.stats().blocks, 180);
        assert_eq!(tvb.stats().shrinks, 0);
        for _ in 0..SHRINK_AFTER_RENDERS - 1 {
            assert_eq!(tvb.before_render(Some(&peak(16)), 8), 180);
        }
        assert_eq!(tvb.before_render(Some(&peak(16)), 8), 8);
    }

    #[test]
    fn demand_grows_to_the_total_wanted_plus_headroom() {
        let mut tvb = Tvb::new(GrowthPolicy::Demand, INITIAL_BLOCKS);
        let report = RenderReport {
            peak_pages: 32,
            wanted_pages: 160,
            overflows: 3,
            partial_renders: 3,
            partial_render_tiles: 12,
        };
        tvb.record(&report);
        // 160 pages = 40 blocks, + 1/8 = 45.
        assert_eq!(tvb.before_render(Some(&report), 8), 45);
        assert_eq!(tvb.before_render(Some(&peak(8)), 8), 45, "never shrinks");
        assert_eq!(tvb.before_render(Some(&peak(u64::MAX / 8)), 8), MAX_BLOCKS);
        let stats = tvb.stats();
        assert_eq!(
            (
                stats.overflows,
                stats.partial_renders,
                stats.partial_render_tiles,
                stats.peak_pages
            ),
            (3, 3, 12, 32)
        );
    }

    #[test]
    fn sync_grows_on_request_until_the_maximum() {
        let mut tvb = Tvb::new(GrowthPolicy::Sync, INITIAL_BLOCKS);
        assert_eq!(
            tvb.before_render(Some(&peak(1000)), 8),
            8,
            "sync does not grow ahead of time"
        );
        assert_eq!(
            tvb.grow_request(1),
            Ok(18),
            "at least 10 blocks per request"
        );
        assert_eq!(tvb.grow_request(100), Ok(118));
        assert_eq!(tvb.grow_request(10_000), Ok(MAX_BLOCKS));
        assert_eq!(
            tvb.grow_request(1),
            Err(GrowRefused::AtMaximum {
                max_blocks: MAX_BLOCKS
            })
        );
        assert_eq!(tvb.stats().grows, 3);
    }

    #[test]
    fn no_sequence_of_reports_shrinks_the_heap_or_passes_the_maximum() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for policy in [
            GrowthPolicy::Asahi,
            GrowthPolicy::Demand,
            GrowthPolicy::Sync,
        ] {
            let mut tvb = Tvb::new(policy, INITIAL_BLOCKS);
            let mut last = tvb.stats().blocks;
            for _ in 0..2000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let pages = state % 40_000;
                let size = if state & 1 == 0 {
                    tvb.before_render(Some(&peak(pages)), state % 64)
                } else {
                    tvb.grow_request(state % 50).unwrap_or(tvb.stats().blocks)
                };
                assert!(
                    size >= last && size <= MAX_BLOCKS,
                    "{policy}: {last} -> {size}"
                );
                last = size;
            }
        }
    }
}
