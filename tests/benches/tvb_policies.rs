//! The parameter-buffer growth policies measured: each workload (a
//! sequence of frames of the layered scene at given triangle counts) runs
//! under each policy from the same small buffer, and the program reports,
//! per policy and workload: frames with partial renders, partial renders,
//! peak and final buffer size against the true demand, grow events and
//! frame time. It prints a Markdown table and writes an SVG plot of the
//! buffer size per frame to `target/tvb-policies.svg` (or the path in
//! `TVB_PLOT`). Run with `cargo bench -p agx-tests --bench tvb_policies`;
//! the results are in Documentation/parameter-buffer.md.

use std::fmt::Write as _;
use std::time::Duration;

use agx_kmd::tvb::{GrowthPolicy, BLOCK_BYTES, BLOCK_PAGES, INITIAL_BLOCKS};
use agx_tests::scene::{device, LayeredScene};
use agx_umd::{PassDebug, Queue};

const SIZE: (u32, u32) = (96, 96);
/// Two sheets of 160^2 quads: 102 400 triangles at most.
const GRID: u32 = 160;
const VARYINGS: u32 = 12;

/// A workload: its name, the triangles of each frame, and how many
/// queues run it side by side.
struct Workload {
    name: &'static str,
    frames: Vec<u32>,
    queues: usize,
}

fn workloads() -> Vec<Workload> {
    let light = 1_000;
    vec![
        Workload {
            name: "constant heavy",
            frames: vec![100_000; 6],
            queues: 1,
        },
        Workload {
            name: "10x jump",
            frames: [vec![light; 3], vec![10 * light; 5]].concat(),
            queues: 1,
        },
        Workload {
            name: "100x jump",
            frames: [vec![light; 3], vec![100 * light; 5]].concat(),
            queues: 1,
        },
        Workload {
            name: "one spike",
            frames: [vec![light; 3], vec![100 * light], vec![light; 12]].concat(),
            queues: 1,
        },
        Workload {
            name: "8 small queues",
            frames: vec![light; 3],
            queues: 8,
        },
    ]
}

/// What one policy did on one workload.
#[derive(Debug, Default, Clone)]
struct Outcome {
    frames_with_partials: usize,
    partial_renders: u64,
    /// Buffer blocks after each frame (summed over queues).
    blocks: Vec<u64>,
    grows: u64,
    shrinks: u64,
    time: Duration,
}

fn run(policy: GrowthPolicy, workload: &Workload) -> Outcome {
    let d = device(policy, INITIAL_BLOCKS);
    let scene = LayeredScene::new(&d, GRID, VARYINGS, SIZE).unwrap();
    let queues: Vec<Queue> = (0..workload.queues)
        .map(|_| Queue::new(&d).unwrap())
        .collect();
    let mut outcome = Outcome::default();
    let mut seen = vec![0u64; queues.len()];
    let mut grows = vec![0u64; queues.len()];
    let mut shrinks = vec![0u64; queues.len()];
    for &triangles in &workload.frames {
        let mut any_partial = false;
        let mut blocks = 0;
        for (q, queue) in queues.iter().enumerate() {
            let frame = scene
                .render_part(queue, PassDebug::default(), triangles)
                .unwrap();
            let partials = frame.tvb.partial_renders - seen[q];
            seen[q] = frame.tvb.partial_renders;
            any_partial |= partials > 0;
            outcome.partial_renders += partials;
            outcome.time += frame.time;
            blocks += frame.tvb.blocks;
            grows[q] = frame.tvb.grows;
            shrinks[q] = frame.tvb.shrinks;
        }
        outcome.frames_with_partials += usize::from(any_partial);
        outcome.blocks.push(blocks);
    }
    outcome.grows = grows.iter().sum();
    outcome.shrinks = shrinks.iter().sum();
    outcome
}

/// The pages each frame needs: measured with a buffer nothing overflows.
fn demand_pages(workload: &Workload) -> Vec<u64> {
    let d = device(GrowthPolicy::Asahi, 1024);
    let scene = LayeredScene::new(&d, GRID, VARYINGS, SIZE).unwrap();
    let queue = Queue::new(&d).unwrap();
    workload
        .frames
        .iter()
        .map(|&t| {
            let frame = scene.render_part(&queue, PassDebug::default(), t).unwrap();
            assert_eq!(frame.tvb.partial_renders, 0);
            frame.tvb.last_wanted_pages * workload.queues as u64
        })
        .collect()
}

const POLICIES: [(GrowthPolicy, &str, &str); 3] = [
    (GrowthPolicy::Asahi, "asahi", "#d62728"),
    (GrowthPolicy::Demand, "demand", "#2ca02c"),
    (GrowthPolicy::Sync, "sync", "#1f77b4"),
];

fn mib(blocks: u64) -> f64 {
    (blocks * BLOCK_BYTES) as f64 / f64::from(1 << 20)
}

fn main() {
    // `cargo bench` passes --bench; `cargo test` runs benches with no
    // argument as a smoke test: keep that quick.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let mut table = String::from(
        "| workload | policy | frames with partial renders | partial renders | peak / peak demand | final / last demand | grows | shrinks | GPU time |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut plots = Vec::new();
    for workload in workloads() {
        let demand = demand_pages(&workload);
        let peak_demand_blocks = demand
            .iter()
            .max()
            .copied()
            .unwrap_or(1)
            .div_ceil(BLOCK_PAGES);
        let last_demand_blocks = demand
            .last()
            .copied()
            .unwrap_or(1)
            .div_ceil(BLOCK_PAGES)
            .max(1);
        let mut series = Vec::new();
        for (policy, name, colour) in POLICIES {
            let o = run(policy, &workload);
            let peak = o.blocks.iter().max().copied().unwrap_or(0);
            let last = o.blocks.last().copied().unwrap_or(0);
            let _ = writeln!(
                table,
                "| {} | {name} | {} of {} | {} | {:.2}x ({:.1} MiB) | {:.2}x ({:.1} MiB) | {} | {} | {:.2} s |",
                workload.name,
                o.frames_with_partials,
                workload.frames.len(),
                o.partial_renders,
                peak as f64 / peak_demand_blocks as f64,
                mib(peak),
                last as f64 / last_demand_blocks as f64,
                mib(last),
                o.grows,
                o.shrinks,
                o.time.as_secs_f64(),
            );
            series.push((name, colour, o.blocks.clone()));
        }
        let demand_blocks: Vec<u64> = demand.iter().map(|p| p.div_ceil(BLOCK_PAGES)).collect();
        plots.push((workload.name, demand_blocks, series));
    }
    println!("{table}");
    let path = std::env::var("TVB_PLOT")
        .unwrap_or_else(|_| format!("{}/../target/tvb-policies.svg", env!("CARGO_MANIFEST_DIR")));
    std::fs::write(&path, svg(&plots)).expect("write the plot");
    println!("plot: {path}");
}

type Plot<'a> = (&'a str, Vec<u64>, Vec<(&'a str, &'a str, Vec<u64>)>);

/// One panel per workload: buffer MiB per frame for each policy, and the
/// demand as a dashed line.
fn svg(plots: &[Plot<'_>]) -> String {
    let (panel_w, panel_h, margin) = (300.0, 200.0, 40.0);
    let width = plots.len() as f64 * (panel_w + margin) + margin;
    let height = panel_h + 3.0 * margin;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    for (i, (name, demand, series)) in plots.iter().enumerate() {
        let x0 = margin + i as f64 * (panel_w + margin);
        let y0 = margin;
        let frames = demand.len().max(2);
        let top = series
            .iter()
            .flat_map(|(_, _, b)| b.iter())
            .chain(demand.iter())
            .copied()
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        let px = |f: usize| x0 + panel_w * f as f64 / (frames - 1) as f64;
        let py = |b: u64| y0 + panel_h - panel_h * b as f64 / top;
        let _ = writeln!(
            s,
            "<rect x=\"{x0}\" y=\"{y0}\" width=\"{panel_w}\" height=\"{panel_h}\" fill=\"none\" stroke=\"#999\"/>\n<text x=\"{x0}\" y=\"{}\">{name}</text>\n<text x=\"{x0}\" y=\"{}\" fill=\"#666\">max {:.1} MiB; x: frame</text>",
            y0 - 8.0,
            y0 + panel_h + 16.0,
            mib(top as u64)
        );
        let line = |values: &[u64]| {
            values
                .iter()
                .enumerate()
                .map(|(f, &b)| format!("{:.1},{:.1}", px(f), py(b)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#000\" stroke-dasharray=\"4 3\"/>",
            line(demand)
        );
        for (name, colour, blocks) in series {
            let _ = writeln!(
                s,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"><title>{name}</title></polyline>",
                line(blocks)
            );
        }
    }
    // Legend.
    let ly = height - 12.0;
    let mut lx = margin;
    for (name, colour) in POLICIES
        .iter()
        .map(|(_, n, c)| (*n, *c))
        .chain([("demand", "#000")])
    {
        let _ = writeln!(
            s,
            "<line x1=\"{lx}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{colour}\" stroke-width=\"2\"/><text x=\"{}\" y=\"{ly}\">{name}</text>",
            ly - 4.0,
            lx + 20.0,
            ly - 4.0,
            lx + 24.0
        );
        lx += 90.0;
    }
    s.push_str("</svg>\n");
    s
}
