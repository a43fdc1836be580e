//! Compute kernels end to end: SUBMIT, the scheduler, the firmware, the
//! CDM walking a control stream of launches, the pipeline's USC control
//! words, and the shader core running assembled AGX code over the grid,
//! all through the GPU MMU. Results are checked against Rust.

mod common;

use common::machine::*;

use std::time::{Duration, Instant};

use agx_hw::formats::{
    CdmBarrier, CdmStreamTerminate, Channels, Layout, Pbe, TextureDimension, TextureType,
    UscControl,
};
use agx_kmd::Errno;

fn terminate() -> Vec<u8> {
    CdmStreamTerminate::default().pack().unwrap().to_vec()
}

fn pair(address: u64) -> [u32; 2] {
    [address as u32, (address >> 32) as u32]
}

const IN: u64 = 0x1_0000;
const OUT: u64 = 0x4_0000;
const UNIFORMS: u64 = 0x8_0000;
const STREAM: u64 = 0x9_0000;

/// out[i] = a * in[i] + b for i < n (u0_u1 in, u2_u3 out, u4 a, u5 b, u6 n).
const AXPB: &str = "
    get_sr r1, sr80
    if_icmp r0l, ult, r1, u6, 1
    jmp_exec_none done
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    fmadd32 r3, u4, r2, u5
    device_store 0, i32, x, r3, u2_u3, r1, unsigned, 0
done:
    pop_exec r0l, 1
    stop";

#[test_log::test]
fn a_preshader_computes_uniforms_before_the_kernel_runs() {
    // Mesa's preambles: the pipeline's words end with a Preshader word,
    // whose program runs once and stores uniforms every thread reads.
    // Here it doubles a (u4).
    let m = Machine::new(5000);
    let n = 100u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32 - 50.0).collect();
    m.poke_u32s(IN, &input.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    let (a, b) = (1.5f32, 0.5f32);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([a.to_bits(), b.to_bits(), n]);
    let pipeline = m.kernel(AXPB, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    let preshader = "
        fmul32 r1, u4, 2.0
        uniform_store 2, i16, xy, 0, r1l_r1h, 8
        stop";
    m.set_preshader(pipeline, 0x2000, preshader);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [128, 1, 1], [64, 1, 1]),
        None
    );
    let expected: Vec<u32> = input
        .iter()
        .map(|x| (2.0 * a).mul_add(*x, b).to_bits())
        .collect();
    assert_eq!(m.peek_u32s(OUT, n as usize), expected);
}

/// Every thread of a 4096-thread grid (64 threadgroups, run on several
/// host threads) updates the same words with device atomics; the words
/// end as the operations combine, and the old values the adds return
/// chain into one serial order. (A lost update needs two host threads to
/// race, so this catches an unserialised atomic only when they do; the
/// chain check makes any lost update visible.)
#[test_log::test]
fn device_atomics_from_every_thread_combine_in_memory() {
    let m = Machine::new(5000);
    let n = 4096u32;
    // Words: 0 sum, 1 umax, 2 imin, 3 or, 4 and, 5 xor, 6 cmpxchg, 7 sub.
    let source = "
        get_sr r1, sr80
        atomic add, 0, r2, u0_u1, 0, signed, r1, 1, 1, 1, 1
        device_store 0, i32, x, r2, u2_u3, r1, unsigned, 0
        atomic umax, 0, 0, u0_u1, 1, signed, r1, 1, 1, 1, 1
        isub r3, 0, r1
        atomic imin, 0, 0, u0_u1, 2, signed, r3, 1, 1, 1, 1
        atomic or, 0, 0, u0_u1, 3, signed, r1, 1, 1, 1, 1
        not r4, r1
        atomic and, 0, 0, u0_u1, 4, signed, r4, 1, 1, 1, 1
        iadd r5, r1, 1
        atomic xor, 0, 0, u0_u1, 5, signed, r5, 1, 1, 1, 1
        mov_imm r6, 0
        atomic cmpxchg, 0, r10, u0_u1, 6, signed, r5_r6, 1, 1, 1, 1
        device_store 0, i32, x, r10, u4_u5, r1, unsigned, 0
        atomic sub, 0, 0, u0_u1, 7, signed, r5, 1, 1, 1, 1
        stop";
    // cmpxchg's data: the new value (r5 = id + 1), then the value
    // compared (r6 = 0).
    const WORDS: u64 = 0x2_0000;
    const CMPXCHG_OLD: u64 = 0x6_0000;
    m.poke_u32s(WORDS, &[0, 0, 0, 0, u32::MAX, 0, 0, 0]);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + WORDS));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend(pair(DATA_VA + CMPXCHG_OLD));
    let pipeline = m.kernel(source, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(m.run_launch(STREAM, pipeline, [n, 1, 1], [64, 1, 1]), None);

    let sum: u64 = (0..u64::from(n)).sum();
    let words = m.peek_u32s(WORDS, 8);
    assert_eq!(words[0], sum as u32, "add");
    assert_eq!(words[1], n - 1, "umax");
    assert_eq!(words[2] as i32, 1 - n as i32, "imin");
    assert_eq!(words[3], 4095, "or of 0..4096");
    assert_eq!(words[4], !4095, "and of the complements");
    assert_eq!(words[5], (1..=n).fold(0, |x, v| x ^ v), "xor");
    assert_eq!(
        words[7],
        0u32.wrapping_sub((sum + u64::from(n)) as u32),
        "sub"
    );
    // The adds happened one at a time: sorted by the old value they
    // returned, each thread's old value is the previous one's plus its id.
    let olds = m.peek_u32s(OUT, n as usize);
    let mut order: Vec<(u32, u32)> = olds.iter().copied().zip(0..n).collect();
    order.sort_unstable();
    assert_eq!(order[0].0, 0);
    for step in order.windows(2) {
        assert_eq!(step[1].0, step[0].0 + step[0].1, "{step:?}");
    }
    // Exactly one compare-exchange found 0 and stored its id + 1; every
    // other one read that value and left it.
    let cmpxchg = m.peek_u32s(CMPXCHG_OLD, n as usize);
    let winners: Vec<u32> = (0..n).filter(|&i| cmpxchg[i as usize] == 0).collect();
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(words[6], winners[0] + 1);
    assert!(cmpxchg.iter().all(|&old| old == 0 || old == words[6]));
}

/// An atomic on a read-only page faults at its address and leaves the
/// word as it was.
#[test_log::test]
fn an_atomic_on_a_read_only_page_faults_without_writing() {
    let m = Machine::new(5000);
    let source = "
        mov_imm r1, 7
        atomic add, 0, r2, u0_u1, 0, signed, r1, 1, 1, 1, 1
        stop";
    let read_only = USC_BASE + 0x8000;
    m.poke(m.usc, 0x8000, &5u32.to_le_bytes());
    let pipeline = m.kernel(source, 0x1000, 0x40, &pair(read_only), UNIFORMS, 0);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, read_only);
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    assert_eq!(m.peek(m.usc, 0x8000, 4), 5u32.to_le_bytes());
}

#[test_log::test]
fn a_kernel_runs_over_a_grid_with_a_partial_last_threadgroup() {
    let m = Machine::new(5000);
    let n = 1000u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 - 40.0).collect();
    m.poke_u32s(IN, &input.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    let (a, b) = (3.5f32, -1.25f32);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([a.to_bits(), b.to_bits(), n]);
    let pipeline = m.kernel(AXPB, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    // 1000 threads in groups of 64: 16 groups, the last one partial; the
    // grid is rounded up to 1024 so the kernel's own bounds check matters.
    assert_eq!(
        m.run_launch(STREAM, pipeline, [1024, 1, 1], [64, 1, 1]),
        None
    );
    let expected: Vec<u32> = input.iter().map(|x| a.mul_add(*x, b).to_bits()).collect();
    assert_eq!(m.peek_u32s(OUT, n as usize), expected);
    assert_eq!(
        m.peek_u32s(OUT + 4 * u64::from(n), 1),
        [0],
        "nothing past n"
    );
}

#[test_log::test]
fn threadgroup_memory_is_shared_across_simd_groups_at_a_barrier() {
    let m = Machine::new(5000);
    // out[i] = in[i] + in[mirror of i within its threadgroup of 64].
    let source = "
        get_sr r1, sr80
        get_sr r5l, sr51
        get_sr r6, sr51
        device_load 0, i32, x, r2, u0_u1, r1, unsigned
        wait 0
        threadgroup_store i32, x, r2, 0, r5l
        threadgroup_barrier
        isub r3, 63, r6
        threadgroup_load i32, x, r4, 0, r3l
        iadd r4, r4, r2
        device_store 0, i32, x, r4, u2_u3, r1, unsigned, 0
        stop";
    let input: Vec<u32> = (0..256u32).map(|i| i * i + 7).collect();
    m.poke_u32s(IN, &input);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    let pipeline = m.kernel(source, 0x1000, 0x80, &uniforms, UNIFORMS, 256);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [256, 1, 1], [64, 1, 1]),
        None
    );
    let expected: Vec<u32> = (0..256usize)
        .map(|i| {
            let (group, t) = (i / 64, i % 64);
            input[i].wrapping_add(input[group * 64 + 63 - t])
        })
        .collect();
    assert_eq!(m.peek_u32s(OUT, 256), expected);
}

#[test_log::test]
fn launches_in_one_stream_run_in_order() {
    let m = Machine::new(5000);
    let n = 300u32;
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    m.poke_u32s(IN, &input.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
    // First: tmp = 2x + 1; second reads tmp: out = 0.5 * tmp - 3.
    let tmp = 0x2_0000u64;
    let mut first = Vec::new();
    first.extend(pair(DATA_VA + IN));
    first.extend(pair(DATA_VA + tmp));
    first.extend([2.0f32.to_bits(), 1.0f32.to_bits(), n]);
    let mut second = Vec::new();
    second.extend(pair(DATA_VA + tmp));
    second.extend(pair(DATA_VA + OUT));
    second.extend([0.5f32.to_bits(), (-3.0f32).to_bits(), n]);
    let p1 = m.kernel(AXPB, 0x1000, 0x40, &first, UNIFORMS, 0);
    let p2 = m.kernel(AXPB, 0x1000, 0x80, &second, UNIFORMS + 0x100, 0);
    let mut stream = launch(p1, [n, 1, 1], [32, 1, 1]);
    stream.extend(CdmBarrier::default().pack().unwrap());
    stream.extend(launch(p2, [n, 1, 1], [128, 1, 1]));
    stream.extend(terminate());
    m.poke(m.data, STREAM, &stream);
    assert_eq!(m.run(STREAM), None);
    let expected: Vec<u32> = input
        .iter()
        .map(|x| 0.5f32.mul_add(2.0f32.mul_add(*x, 1.0), -3.0).to_bits())
        .collect();
    assert_eq!(m.peek_u32s(OUT, n as usize), expected);
}

#[test_log::test]
fn a_kernel_store_to_an_unmapped_address_faults_there() {
    let m = Machine::new(5000);
    let bad = 0x7_0000_0000u64;
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(bad));
    uniforms.extend([1.0f32.to_bits(), 0, 64]);
    let pipeline = m.kernel(AXPB, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [64, 1, 1], [64, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, bad, "the first faulting lane's address");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    // A pipeline of zero words (no valid control word) is refused at its
    // address.
    assert_eq!(
        m.run_launch(STREAM, 0x3_0000, [32, 1, 1], [32, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, _, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(
        address,
        USC_BASE + 0x3_0000,
        "the pipeline is outside the mapping"
    );
}

#[test_log::test]
fn a_kernel_cannot_reach_the_firmware_half_of_the_address_space() {
    let m = Machine::new(5000);
    // The firmware's init structure sits at the start of its range, in
    // the kernel half (ttb1) every context shares.
    let firmware = agx_kmd::firmware::FW_VA_START;
    let mut uniforms = Vec::new();
    uniforms.extend(pair(firmware));
    uniforms.extend(pair(firmware));
    uniforms.extend([1.0f32.to_bits(), 0, 64]);
    let pipeline = m.kernel(AXPB, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [64, 1, 1], [64, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, firmware, "refused at the first kernel-half read");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    // The firmware is intact: the next submission runs.
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([1.0f32.to_bits(), 0, 64]);
    let pipeline = m.kernel(AXPB, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(m.run_launch(STREAM, pipeline, [64, 1, 1], [64, 1, 1]), None);
}

#[test_log::test]
fn a_kernel_that_never_stops_meets_the_watchdog() {
    let m = Machine::new(300);
    let source = "
    top:
        jmp_exec_any top
        stop";
    let pipeline = m.kernel(source, 0x1000, 0x40, &[0], UNIFORMS, 0);
    let mut stream = launch(pipeline, [32, 1, 1], [32, 1, 1]);
    stream.extend(terminate());
    m.poke(m.data, STREAM, &stream);
    let started = Instant::now();
    assert_eq!(m.run(STREAM), Some(Errno::ETIMEDOUT));
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// One tree-reduction step: threads below `stride` (in `u`) add the value
/// `stride` above them.
fn reduce_step(u: &str) -> String {
    format!(
        "
    if_icmp r0l, ult, r6, {u}, 1
    iadd r8, r6, {u}
    threadgroup_load i32, x, r7, 0, r8l
    threadgroup_load i32, x, r9, 0, r6l
    wait 0
    iadd r9, r9, r7
    threadgroup_store i32, x, r9, 0, r6l
    pop_exec r0l, 1
    threadgroup_barrier"
    )
}

/// Sums each threadgroup's 64 values: out[group] = sum(in[64 group ..]).
fn reduction_source() -> String {
    let mut source = String::from(
        "
    get_sr r1, sr80
    get_sr r6, sr51
    get_sr r10, sr0
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    threadgroup_store i32, x, r2, 0, r6l
    threadgroup_barrier",
    );
    for u in ["u4", "u5", "u6", "u7", "u8", "u9"] {
        source.push_str(&reduce_step(u));
    }
    source.push_str(
        "
    if_icmp r0l, ueq, r6, u10, 1
    threadgroup_load i32, x, r11, 0, r6l
    wait 0
    device_store 0, i32, x, r11, u2_u3, r10, unsigned, 0
    pop_exec r0l, 1
    stop",
    );
    source
}

fn reduction(m: &Machine, input: &[u32]) -> Option<Errno> {
    m.poke_u32s(IN, input);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([32, 16, 8, 4, 2, 1, 0]);
    let pipeline = m.kernel(&reduction_source(), 0x1000, 0x40, &uniforms, UNIFORMS, 256);
    m.run_launch(STREAM, pipeline, [input.len() as u32, 1, 1], [64, 1, 1])
}

#[test_log::test]
fn a_tree_reduction_in_threadgroup_memory_matches_rust() {
    let m = Machine::new(5000);
    let input: Vec<u32> = (0..64 * 40u32)
        .map(|i| i.wrapping_mul(2_654_435_761) >> 7)
        .collect();
    assert_eq!(reduction(&m, &input), None);
    let expected: Vec<u32> = input
        .chunks(64)
        .map(|c| c.iter().fold(0u32, |a, b| a.wrapping_add(*b)))
        .collect();
    assert_eq!(m.peek_u32s(OUT, 40), expected);
}

#[test_log::test]
fn an_inclusive_prefix_sum_per_threadgroup_matches_rust() {
    let m = Machine::new(5000);
    // Hillis-Steele: for each offset, v = tg[t] (+ tg[t - offset] if
    // t >= offset); barrier; tg[t] = v; barrier.
    let mut source = String::from(
        "
    get_sr r1, sr80
    get_sr r6, sr51
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    threadgroup_store i32, x, r2, 0, r6l
    threadgroup_barrier",
    );
    for u in ["u4", "u5", "u6", "u7", "u8", "u9"] {
        source.push_str(&format!(
            "
    threadgroup_load i32, x, r9, 0, r6l
    wait 0
    if_icmp r0l, ugte, r6, {u}, 1
    isub r8, r6, {u}
    threadgroup_load i32, x, r7, 0, r8l
    wait 0
    iadd r9, r9, r7
    pop_exec r0l, 1
    threadgroup_barrier
    threadgroup_store i32, x, r9, 0, r6l
    threadgroup_barrier"
        ));
    }
    source.push_str(
        "
    device_store 0, i32, x, r9, u2_u3, r1, unsigned, 0
    stop",
    );
    let input: Vec<u32> = (0..64 * 8u32).map(|i| (i * 7919) % 1000).collect();
    m.poke_u32s(IN, &input);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([1, 2, 4, 8, 16, 32]);
    let pipeline = m.kernel(&source, 0x1000, 0x40, &uniforms, UNIFORMS, 256);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [input.len() as u32, 1, 1], [64, 1, 1]),
        None
    );
    let expected: Vec<u32> = input
        .chunks(64)
        .flat_map(|c| {
            c.iter()
                .scan(0u32, |sum, v| {
                    *sum = sum.wrapping_add(*v);
                    Some(*sum)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(m.peek_u32s(OUT, input.len()), expected);
}

#[test_log::test]
fn a_matrix_multiply_staging_rows_in_threadgroup_memory_matches_rust() {
    let m = Machine::new(5000);
    const N: usize = 48;
    // One threadgroup per row i of C, one thread per column t: stage row
    // i of A in threadgroup memory, then C[i][t] = sum_k A[i][k] B[k][t]
    // (fused multiply-adds in k order).
    let source = "
    get_sr r6, sr51
    get_sr r5, sr0
    imadd r1, r5, u6, r6
    device_load 0, i32, x, r2, u0_u1, r1, unsigned
    wait 0
    threadgroup_store i32, x, r2, 0, r6l
    threadgroup_barrier
    mov_imm r10, 0
    mov_imm r11, 0
    mov r13, r6
    if_icmp r0l, ult, r10, u6, 1
    jmp_exec_none done
loop:
    threadgroup_load i32, x, r12, 0, r10l
    device_load 0, i32, x, r14, u2_u3, r13, unsigned
    wait 0
    fmadd32 r11, r12, r14, r11
    iadd r10, r10, 1
    iadd r13, r13, u6
    while_icmp r0l, ult, r10, u6, 1
    jmp_exec_any loop
done:
    pop_exec r0l, 1
    device_store 0, i32, x, r11, u4_u5, r1, unsigned, 0
    stop";
    let a: Vec<f32> = (0..N * N)
        .map(|i| ((i * 37) % 101) as f32 / 13.0 - 3.0)
        .collect();
    let b: Vec<f32> = (0..N * N)
        .map(|i| ((i * 53) % 89) as f32 / 7.0 - 6.0)
        .collect();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let (a_at, b_at, c_at) = (0x1_0000u64, 0x2_0000u64, 0x4_0000u64);
    m.poke_u32s(a_at, &bits(&a));
    m.poke_u32s(b_at, &bits(&b));
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + a_at));
    uniforms.extend(pair(DATA_VA + b_at));
    uniforms.extend(pair(DATA_VA + c_at));
    uniforms.push(N as u32);
    let pipeline = m.kernel(source, 0x1000, 0x40, &uniforms, UNIFORMS, 256);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [(N * N) as u32, 1, 1], [N as u32, 1, 1]),
        None
    );
    let mut expected = vec![0f32; N * N];
    for i in 0..N {
        for t in 0..N {
            let mut acc = 0f32;
            for k in 0..N {
                acc = a[i * N + k].mul_add(b[k * N + t], acc);
            }
            expected[i * N + t] = acc;
        }
    }
    assert_eq!(m.peek_u32s(c_at, N * N), bits(&expected));
}

#[test_log::test]
fn results_do_not_depend_on_how_many_host_threads_run_threadgroups() {
    let input: Vec<u32> = (0..64 * 64u32).map(|i| i ^ (i >> 3)).collect();
    let mut outputs = Vec::new();
    for threads in [1, 2, 3] {
        let m = Machine::with_threads(5000, threads);
        assert_eq!(reduction(&m, &input), None);
        outputs.push(m.peek_u32s(OUT, 64));
    }
    assert_eq!(outputs[0], outputs[1]);
    assert_eq!(outputs[0], outputs[2]);
}

/// Mesa's block blit, in miniature: each thread computes its pixel with
/// `pixel` (from its grid position in r1, r2, into `data`) and writes it
/// into the threadgroup's 32x32 image block with `st_tile` at its
/// position in the threadgroup; after a barrier, thread 0 stores the
/// whole block with `image_write_block` at its own grid position (the
/// block's origin).
fn block_source(pixel: &str, data: &str, format: &str, mask: &str, offset_bytes: u32) -> String {
    format!(
        "
    get_sr r1, sr80
    get_sr r2, sr81
{pixel}
    get_sr r3, sr48
    get_sr r8, sr49
    mov r9l, r3l
    mov r9h, r8l
    st_tile {data}, {format}, 1, {mask}, {offset_bytes}, 1, r9, 1
    threadgroup_barrier
    get_sr r10, sr51
    if_icmp r0l, ueq, r10, 0, 1
    mov r12, r1
    mov r13, r2
    mov_imm r11, {offset_bytes}
    image_write_block r11, r12_r13, 0, None, ts0, tex_2d, rte, {format}, 1, 9, 1
    pop_exec r0l, 1
    stop"
    )
}

/// [`block_source`]'s colour for the blit: x/128, y/128, 0.25, 1.
const BLIT_PIXEL: &str = "
    convert u32_to_f, r3, r1, rte
    fmul32 r4, r3, u0
    convert u32_to_f, r3, r2, rte
    fmul32 r5, r3, u0
    mov r6, u1
    mov r7, u2";

const BLOCK_PBE: u64 = 0xA_0000;
const BLOCK_IMAGE: u64 = 0xB_0000;
const BLOCK_STRIDE: u32 = 64 * 4;

/// The block blit's pipeline: threadgroup memory as a 32x32 image block
/// of 8-byte records (Mesa's Shared word for its blits), the PBE
/// descriptor of a `width` x `height` linear RGBA8 image at ts0.
fn block_blit(m: &Machine, width: u32, height: u32, shared_bytes: u32) -> u64 {
    block_kernel(
        m,
        &block_source(BLIT_PIXEL, "r4_r5_r6_r7", "u8norm", "xyzw", 0),
        (Channels::R8G8B8A8, TextureType::Unorm),
        (width, height),
        shared_bytes,
    )
}

/// A kernel `source` storing its 32x32 image block (8-byte records) to a
/// `size` linear image of `format` through the PBE descriptor at ts0.
fn block_kernel(
    m: &Machine,
    source: &str,
    format: (Channels, TextureType),
    (width, height): (u32, u32),
    shared_bytes: u32,
) -> u64 {
    let pbe = Pbe {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: format.0,
        data_type: format.1,
        width,
        height,
        buffer: DATA_VA + BLOCK_IMAGE,
        stride: BLOCK_STRIDE,
        ..Pbe::default()
    };
    block_kernel_for(m, source, &pbe, shared_bytes)
}

/// [`block_kernel`] storing through the PBE descriptor `pbe`.
fn block_kernel_for(m: &Machine, source: &str, pbe: &Pbe, shared_bytes: u32) -> u64 {
    use agx_hw::formats::{SharedLayout, UscShared};
    m.poke(m.data, BLOCK_PBE, &pbe.pack().unwrap());
    let uniforms = [
        (1.0f32 / 128.0).to_bits(),
        0.25f32.to_bits(),
        1.0f32.to_bits(),
    ];
    let pipeline = m.program(
        source,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        shared_bytes,
        Some((1, DATA_VA + BLOCK_PBE)),
    );
    // Give the Shared word the tile layout.
    let at = m.control_word(pipeline, UscControl::Shared);
    let shared = UscShared {
        uses_shared_memory: true,
        layout: SharedLayout::Tile32x32,
        sample_count: 1,
        sample_stride_bytes: 8,
        bytes_per_threadgroup: shared_bytes,
    };
    m.poke(m.usc, at, &shared.pack().unwrap());
    pipeline
}

/// Runs `pipeline` over a `width` x `height` grid of 32x32 threadgroups
/// (one image block each), then terminates.
fn run_blocks(m: &Machine, pipeline: u64, (width, height): (u32, u32)) -> Option<agx_kmd::Errno> {
    m.run_launch(STREAM, pipeline, [width, height, 1], [32, 32, 1])
}

/// [`BLIT_PIXEL`]'s colour at pixel (x, y) of an RGBA8 unorm image.
fn blit_colour(x: usize, y: usize) -> [u8; 4] {
    [
        unorm8(x as f32 / 128.0),
        unorm8(y as f32 / 128.0),
        unorm8(0.25),
        255,
    ]
}

/// The unorm8 encoding of `v` (round to nearest; no ties here).
fn unorm8(v: f32) -> u8 {
    (v * 255.0).round() as u8
}

#[test_log::test]
fn a_kernel_stores_its_image_block_to_an_image_clipped_to_its_size() {
    let m = Machine::new(5000);
    // 40 x 36: the right and bottom threadgroups are partial, and the
    // block stores of those are clipped to the image.
    let (width, height) = (40u32, 36u32);
    m.poke(m.data, BLOCK_IMAGE, &[0xAA; 64 * 4 * 40]);
    let pipeline = block_blit(&m, width, height, 8192);
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    let image = m.peek(m.data, BLOCK_IMAGE, 64 * 4 * 40);
    for y in 0..40usize {
        for x in 0..64usize {
            let at = y * BLOCK_STRIDE as usize + 4 * x;
            let want = if x < width as usize && y < height as usize {
                blit_colour(x, y)
            } else {
                [0xAA; 4]
            };
            assert_eq!(image[at..at + 4], want, "pixel ({x}, {y})");
        }
    }
}

/// A block stored to a layer past the image's writes nothing, and the
/// kernel goes on: a grid of four 32x32 layers stored, each threadgroup
/// to the layer of its z, into a linear 2D array of two. Mesa's layered
/// clears store every layer of the framebuffer to each attachment, those
/// with fewer layers included (piglit's
/// `clear-color-mismatched-layer-count`).
#[test_log::test]
fn a_block_stored_past_the_images_layers_writes_nothing() {
    let m = Machine::new(5000);
    let layer_bytes = 32 * BLOCK_STRIDE as usize;
    m.poke(m.data, BLOCK_IMAGE, &vec![0xAA; 4 * layer_bytes]);
    let source = block_source(BLIT_PIXEL, "r4_r5_r6_r7", "u8norm", "xyzw", 0)
        .replace("mov r13, r2\n", "mov r13, r2\n    get_sr r14, sr82\n")
        .replace(
            "r12_r13, 0, None, ts0, tex_2d,",
            "r12_r13_r14, 0, None, ts0, tex_2d_array,",
        );
    let pbe = Pbe {
        dimension: TextureDimension::D2Array,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width: 32,
        height: 32,
        buffer: DATA_VA + BLOCK_IMAGE,
        stride: BLOCK_STRIDE,
        extended: true,
        depth_linear: 2,
        layer_stride_linear: layer_bytes as u64,
        ..Pbe::default()
    };
    let pipeline = block_kernel_for(&m, &source, &pbe, 8192);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [32, 32, 4], [32, 32, 1]),
        None
    );
    let image = m.peek(m.data, BLOCK_IMAGE, 4 * layer_bytes);
    for layer in 0..4 {
        for (y, x) in [(0usize, 0usize), (5, 7), (31, 31)] {
            let at = layer * layer_bytes + y * BLOCK_STRIDE as usize + 4 * x;
            let want = if layer < 2 {
                blit_colour(x, y)
            } else {
                [0xAA; 4]
            };
            assert_eq!(image[at..at + 4], want, "layer {layer} pixel ({x}, {y})");
        }
    }
}

/// Block stores of the packed float formats: st_tile packs (x/128,
/// y/128, 0.25) into the block record and image_write_block copies the
/// word to an image of the same format, bit for bit. The expected words
/// are packed from the formats' bit layouts here.
#[test_log::test]
fn packed_float_blocks_store_bit_exactly() {
    let (width, height) = (32u32, 32u32);
    for (format, channels) in [
        ("rg11b10f", Channels::R11G11B10),
        ("rgb9e5", Channels::R9G9B9E5),
    ] {
        let m = Machine::new(5000);
        let pipeline = block_kernel(
            &m,
            &block_source(BLIT_PIXEL, "r4_r5_r6", format, "xyz", 0),
            (channels, TextureType::Float),
            (width, height),
            8192,
        );
        assert_eq!(run_blocks(&m, pipeline, (width, height)), None, "{format}");
        for y in 0..height {
            for x in 0..width {
                let want = if channels == Channels::R11G11B10 {
                    common::small_float_bits(f64::from(x) / 128.0, 6)
                        | common::small_float_bits(f64::from(y) / 128.0, 6) << 11
                        | common::small_float_bits(0.25, 5) << 22
                } else {
                    // The largest component, 0.25, sets the shared
                    // exponent: 14, a scale of 2^(14 - 24); x/128 is
                    // then 8x.
                    (8 * x) | ((8 * y) << 9) | (256 << 18) | (14 << 27)
                };
                let at = BLOCK_IMAGE + u64::from(y * BLOCK_STRIDE + 4 * x);
                assert_eq!(m.peek_u32s(at, 1), [want], "{format} pixel ({x}, {y})");
            }
        }
    }
}

#[test_log::test]
fn an_image_block_larger_than_threadgroup_memory_is_refused() {
    let m = Machine::new(5000);
    // 32 x 32 x 8 bytes do not fit in 4 KiB.
    let pipeline = block_blit(&m, 32, 32, 4096);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [32, 32, 1], [32, 32, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    assert_eq!(address, USC_BASE + pipeline, "at the pipeline");
}

#[test_log::test]
fn a_single_channel_element_fits_a_record_smaller_than_four_channels() {
    // Mesa sizes a blit's record to the format (8 bytes for R32): a
    // 4-byte element at offset 4 fits, although four of them would not.
    let m = Machine::new(5000);
    let (width, height) = (32u32, 32u32);
    // One 32-bit channel per pixel, x + 1000 y, at offset 4.
    let pixel = "    imadd r4, r2, u0, r1";
    let pipeline = block_kernel(
        &m,
        &block_source(pixel, "r4", "i32", "x", 4),
        (Channels::R32, TextureType::Uint),
        (width, height),
        8192,
    );
    m.poke_u32s(UNIFORMS, &[1000]);
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    for (x, y) in [(0u32, 0u32), (31, 0), (5, 17), (31, 31)] {
        let at = BLOCK_IMAGE + u64::from(y * BLOCK_STRIDE + 4 * x);
        assert_eq!(m.peek_u32s(at, 1), [x + 1000 * y], "pixel ({x}, {y})");
    }
}

/// Block stores to the 16-bit packed formats: the blit's unorm8 records
/// (x/128, y/128, 0.25, 1) converted to each format's fields, channel 0
/// in the low bits, rounded to nearest.
#[test_log::test]
fn packed_16_bit_blocks_store_each_channel_in_its_field() {
    let (width, height) = (32u32, 32u32);
    for (channels, fields) in [
        (Channels::R5G6B5, [(0, 5), (5, 6), (11, 5), (0, 0)]),
        (Channels::R4G4B4A4, [(0, 4), (4, 4), (8, 4), (12, 4)]),
        (Channels::R5G5B5A1, [(0, 5), (5, 5), (10, 5), (15, 1)]),
        (Channels::A1R5G5B5, [(0, 1), (1, 5), (6, 5), (11, 5)]),
    ] {
        let m = Machine::new(5000);
        let pipeline = block_kernel(
            &m,
            &block_source(BLIT_PIXEL, "r4_r5_r6_r7", "u8norm", "xyzw", 0),
            (channels, TextureType::Unorm),
            (width, height),
            8192,
        );
        assert_eq!(
            run_blocks(&m, pipeline, (width, height)),
            None,
            "{channels:?}"
        );
        let image = m.peek(m.data, BLOCK_IMAGE, (BLOCK_STRIDE * height) as usize);
        for y in 0..height {
            for x in 0..width {
                let record = [
                    unorm8(x as f32 / 128.0),
                    unorm8(y as f32 / 128.0),
                    unorm8(0.25),
                    255,
                ];
                let want = fields
                    .iter()
                    .zip(record)
                    .fold(0u16, |w, (&(shift, bits), v)| {
                        if bits == 0 {
                            return w;
                        }
                        let max = f64::from((1u16 << bits) - 1);
                        w | ((f64::from(v) / 255.0 * max).round() as u16) << shift
                    });
                let at = (y * BLOCK_STRIDE + 2 * x) as usize;
                let have = u16::from_le_bytes([image[at], image[at + 1]]);
                assert_eq!(have, want, "{channels:?} pixel ({x}, {y})");
            }
        }
    }
}

/// A 2-sample image block stored to a GPU-tiled 2-sample image: each
/// pixel's element holds its samples side by side (8 bytes), tiled as
/// any 8-byte element is.
#[test_log::test]
fn multisampled_blocks_store_to_tiled_images_sample_by_sample() {
    use agx_hw::formats::{Layout, Pbe, SampleCount, SharedLayout, TextureDimension, UscShared};
    use agx_hw::layout::ImageLayout;
    let m = Machine::new(5000);
    let (width, height) = (32u32, 32u32);
    // Both samples of each pixel written (sample mask 0b11).
    let source = block_source(BLIT_PIXEL, "r4_r5_r6_r7", "u8norm", "xyzw", 0)
        .replace(", 0, 1, r9, 1", ", 0, 3, r9, 1");
    let pbe = Pbe {
        dimension: TextureDimension::D2Multisampled,
        layout: Layout::Gpu,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width,
        height,
        samples: SampleCount::Two,
        buffer: DATA_VA + BLOCK_IMAGE,
        page_aligned_layers: true,
        ..Pbe::default()
    };
    m.poke(m.data, BLOCK_PBE, &pbe.pack().unwrap());
    let uniforms = [
        (1.0f32 / 128.0).to_bits(),
        0.25f32.to_bits(),
        1.0f32.to_bits(),
    ];
    let shared_bytes = 32 * 32 * 2 * 8;
    let pipeline = m.program(
        &source,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        shared_bytes,
        Some((1, DATA_VA + BLOCK_PBE)),
    );
    let at = m.control_word(pipeline, UscControl::Shared);
    let shared = UscShared {
        uses_shared_memory: true,
        layout: SharedLayout::Tile32x32,
        sample_count: 2,
        sample_stride_bytes: 8,
        bytes_per_threadgroup: shared_bytes,
    };
    m.poke(m.usc, at, &shared.pack().unwrap());
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    let layout = ImageLayout::gpu_tiled(width, height, 1, 8, true).unwrap();
    let image = m.peek(m.data, BLOCK_IMAGE, layout.layer_bytes() as usize);
    for y in 0..height {
        for x in 0..width {
            let pixel = [
                unorm8(x as f32 / 128.0),
                unorm8(y as f32 / 128.0),
                unorm8(0.25),
                255,
            ];
            let at = layout.offset(0, x, y, 0).unwrap() as usize;
            assert_eq!(image[at..at + 4], pixel, "pixel ({x}, {y}) sample 0");
            assert_eq!(image[at + 4..at + 8], pixel, "pixel ({x}, {y}) sample 1");
        }
    }
}

/// Mesa stores an f16 render target's tiles with the i16 block format
/// (agx_compile.c turns F16 into I16 for every block store), and the
/// hardware writes the image correctly: the tile's 16-bit values reach
/// an R16G16B16A16 float image bit for bit, not converted as integers or
/// as 32-bit floats. The expected halves are the exact f16 encodings of
/// x/128, y/128, 0.25 and 1.
#[test_log::test]
fn f16_tiles_stored_with_the_i16_block_format_keep_their_bits() {
    let (width, height) = (32u32, 32u32);
    let m = Machine::new(5000);
    let source =
        block_source(BLIT_PIXEL, "r4_r5_r6_r7", "f16", "xyzw", 0).replace("rte, f16,", "rte, i16,");
    assert!(source.contains("rte, i16,"));
    let pipeline = block_kernel(
        &m,
        &source,
        (Channels::R16G16B16A16, TextureType::Float),
        (width, height),
        8192,
    );
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    // n/128 for 0 < n < 32: n = m 2^k with m odd, so the half is
    // 2^(k - 7) (1 + (m - 1) / 2^bits) with exponent k + floor(log2 m) - 7.
    let half = |n: u32| -> u16 {
        if n == 0 {
            return 0;
        }
        let e = 31 - n.leading_zeros(); // n = 2^e (1 + f)
        let fraction = (n - (1 << e)) << (10 - e);
        ((e + 15 - 7) << 10 | fraction) as u16
    };
    assert_eq!(half(32), 0x3400, "0.25");
    assert_eq!(half(128), 0x3C00, "1.0");
    let image = m.peek(m.data, BLOCK_IMAGE, (BLOCK_STRIDE * height) as usize);
    for y in 0..height {
        for x in 0..width {
            let at = (y * BLOCK_STRIDE + 8 * x) as usize;
            let got: Vec<u16> = image[at..at + 8]
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            assert_eq!(got, [half(x), half(y), 0x3400, 0x3C00], "pixel ({x}, {y})");
        }
    }
}

/// An srgba8 tile holds sRGB-encoded bytes (the encoding happens when
/// the tilebuffer is written), and a block store moves them as they are:
/// cmdbuf.xml says block stores ignore the PBE's sRGB bit. Mesa's
/// readback of an sRGB texture samples it (decoding) and stores the
/// tile as srgba8 (encoding): the bytes must survive the round trip.
#[test_log::test]
fn srgba8_tiles_store_their_encoded_bytes() {
    let (width, height) = (32u32, 32u32);
    let m = Machine::new(5000);
    let pipeline = block_kernel(
        &m,
        &block_source(BLIT_PIXEL, "r4_r5_r6_r7", "srgba8", "xyzw", 0),
        (Channels::R8G8B8A8, TextureType::Unorm),
        (width, height),
        8192,
    );
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    // The sRGB transfer function (IEC 61966-2-1), to the nearest byte.
    let encode = |c: f64| -> u8 {
        let s = if c <= 0.003_130_8 {
            12.92 * c
        } else {
            1.055 * c.powf(1.0 / 2.4) - 0.055
        };
        (s * 255.0).round() as u8
    };
    assert_eq!(encode(0.25), 137);
    let image = m.peek(m.data, BLOCK_IMAGE, (BLOCK_STRIDE * height) as usize);
    for y in 0..height {
        for x in 0..width {
            let at = (y * BLOCK_STRIDE + 4 * x) as usize;
            let want = [
                encode(f64::from(x) / 128.0),
                encode(f64::from(y) / 128.0),
                137,
                255,
            ];
            assert_eq!(image[at..at + 4], want, "pixel ({x}, {y})");
        }
    }
}

/// The PBE's swizzle says which component each stored channel gets: a
/// B8G8R8A8 image (Mesa: swizzle_r = 2, swizzle_b = 0, stored channel 0
/// gets blue) stores the blit's (x/128, y/128, 0.25, 1) as B, G, R, A.
#[test_log::test]
fn block_stores_apply_the_pbe_swizzle() {
    use agx_hw::formats::{Channel, Layout, Pbe, TextureDimension};
    let m = Machine::new(5000);
    let (width, height) = (32u32, 32u32);
    let pipeline = block_blit(&m, width, height, 8192);
    let pbe = Pbe {
        dimension: TextureDimension::D2,
        layout: Layout::Linear,
        channels: Channels::R8G8B8A8,
        data_type: TextureType::Unorm,
        width,
        height,
        buffer: DATA_VA + BLOCK_IMAGE,
        stride: BLOCK_STRIDE,
        swizzle_r: Channel::B,
        swizzle_g: Channel::G,
        swizzle_b: Channel::R,
        swizzle_a: Channel::A,
        ..Pbe::default()
    };
    m.poke(m.data, BLOCK_PBE, &pbe.pack().unwrap());
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    let image = m.peek(m.data, BLOCK_IMAGE, (BLOCK_STRIDE * height) as usize);
    for y in 0..height as usize {
        for x in 0..width as usize {
            let at = y * BLOCK_STRIDE as usize + 4 * x;
            let want = [
                unorm8(0.25),
                unorm8(y as f32 / 128.0),
                unorm8(x as f32 / 128.0),
                255,
            ];
            assert_eq!(image[at..at + 4], want, "pixel ({x}, {y})");
        }
    }
}

/// out[i] = (thread position in its threadgroup) + 100 x (threads per
/// threadgroup) for i < n (u2_u3 out, u6 n).
const GROUPS: &str = "
    get_sr r1, sr80
    if_icmp r0l, ult, r1, u6, 1
    jmp_exec_none done
    get_sr r2, sr48
    get_sr r3, sr4
    imadd r4, r3, 100, r2
    device_store 0, i32, x, r4, u2_u3, r1, unsigned, 0
done:
    pop_exec r0l, 1
    stop";

#[test_log::test]
fn indirect_launches_read_their_grid_and_threadgroup_sizes() {
    use agx_hw::formats::{
        CdmBlock, CdmIndirect, CdmLaunch, CdmLaunchWord0, CdmLaunchWord1, CdmLocalSize, CdmMode,
    };
    const SIZES: u64 = 0x7_0000;
    let m = Machine::new(5000);
    let n = 100u32;
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend([0, 0, n]);
    let pipeline = m.kernel(GROUPS, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    // Indirect global: threadgroup counts from memory (what
    // glDispatchComputeIndirect's buffer holds: Mesa hands it over as it
    // is), the threadgroup size from the block: 13 groups of 8 cover the
    // 100 threads. Indirect local (Mesa's geometry set-up kernels): six
    // words, the grid in threads and then the threadgroup.
    for (mode, sizes, local) in [
        (
            CdmMode::IndirectGlobal,
            vec![n.div_ceil(8), 1, 1],
            Some([8u32, 1, 1]),
        ),
        (CdmMode::IndirectLocal, vec![n, 1, 1, 12, 1, 1], None),
    ] {
        m.poke_u32s(OUT, &vec![0xFFFF_FFFF; n as usize]);
        m.poke_u32s(SIZES, &sizes);
        let mut stream = Vec::new();
        CdmBlock::Launch(CdmLaunch {
            header: CdmLaunchWord0 {
                mode,
                ..CdmLaunchWord0::default()
            },
            word1: CdmLaunchWord1 { pipeline },
            global: None,
            indirect: Some(CdmIndirect {
                address: DATA_VA + SIZES,
            }),
            local: local.map(|[x, y, z]| CdmLocalSize { x, y, z }),
        })
        .build(&mut stream)
        .unwrap();
        stream.extend(terminate());
        m.poke(m.data, STREAM, &stream);
        assert_eq!(m.run(STREAM), None, "{mode:?}");
        let group = local.map_or(12, |l| l[0]);
        let want: Vec<u32> = (0..n).map(|i| i % group + 100 * group).collect();
        assert_eq!(m.peek_u32s(OUT, n as usize), want, "{mode:?}");
    }
}

/// Mesa's blits of 8-byte formats store four 32-bit components into the
/// 8-byte records of their image block: the two that fit are kept, the
/// others dropped, and no neighbouring record is touched.
#[test_log::test]
fn tile_stores_past_the_sample_record_keep_what_fits() {
    let (width, height) = (32u32, 32u32);
    let m = Machine::new(5000);
    let pipeline = block_kernel(
        &m,
        &block_source(BLIT_PIXEL, "r4_r5_r6_r7", "i32", "xyzw", 0),
        (Channels::R32G32, TextureType::Uint),
        (width, height),
        8192,
    );
    assert_eq!(run_blocks(&m, pipeline, (width, height)), None);
    for y in 0..height {
        for x in 0..width {
            let at = BLOCK_IMAGE + u64::from(y * BLOCK_STRIDE + 8 * x);
            let want = [(x as f32 / 128.0).to_bits(), (y as f32 / 128.0).to_bits()];
            assert_eq!(m.peek_u32s(at, 2), want, "pixel ({x}, {y})");
        }
    }
}

/// Registers start at zero in every threadgroup and every launch, whichever
/// worker ran a threadgroup before (workers reuse their SIMD-groups'
/// register files): each thread stores `r9` before writing it.
#[test_log::test]
fn registers_start_at_zero_in_every_threadgroup_and_launch() {
    let source = "
        get_sr r1, sr80
        device_store 0, i32, x, r9, u0_u1, r1, unsigned, 0
        iadd r9, r1, u4
        mov_imm r20, 77
        device_store 0, i32, x, r9, u2_u3, r1, unsigned, 0
        stop";
    let out2 = 0x6_0000u64;
    let touched = 0x2_0000u64;
    for threads in [1, 2] {
        let m = Machine::with_threads(5000, threads);
        let mut first = Vec::new();
        first.extend(pair(DATA_VA + OUT));
        first.extend(pair(DATA_VA + touched));
        first.push(1000);
        let mut second = Vec::new();
        second.extend(pair(DATA_VA + out2));
        second.extend(pair(DATA_VA + touched));
        second.push(1000);
        let p1 = m.kernel(source, 0x1000, 0x40, &first, UNIFORMS, 0);
        let p2 = m.kernel(source, 0x1000, 0x80, &second, UNIFORMS + 0x100, 0);
        // 100 threads in threadgroups of 64: the second threadgroup's
        // second SIMD-group has 4 lanes.
        let mut stream = launch(p1, [100, 1, 1], [64, 1, 1]);
        stream.extend(CdmBarrier::default().pack().unwrap());
        stream.extend(launch(p2, [100, 1, 1], [64, 1, 1]));
        stream.extend(terminate());
        m.poke_u32s(OUT, &[0xdead_beef; 100]);
        m.poke_u32s(out2, &[0xdead_beef; 100]);
        m.poke(m.data, STREAM, &stream);
        assert_eq!(m.run(STREAM), None);
        assert_eq!(m.peek_u32s(OUT, 100), vec![0; 100], "{threads} threads");
        assert_eq!(m.peek_u32s(out2, 100), vec![0; 100], "{threads} threads");
        let written: Vec<u32> = (0..100).map(|i| i + 1000).collect();
        assert_eq!(m.peek_u32s(touched, 100), written, "{threads} threads");
    }
}

/// A SIMD-group's image writes go through the descriptor each one names,
/// as memory holds it when the write runs: writes alternating between two
/// descriptors land in their own images, and a write through a descriptor
/// the kernel has just pointed at another image lands there (each lane's
/// write decodes the descriptor it reads, or a copy of the same bytes).
#[test_log::test]
fn image_writes_follow_their_descriptor_as_memory_holds_it() {
    let m = Machine::new(5000);
    const PBES: u64 = 0x7_0000;
    let images = [0x2_0000u64, 0x3_0000, 0x5_0000];
    let descriptor = |image: u64| Pbe {
        channels: Channels::R32,
        data_type: TextureType::Float,
        layout: Layout::Linear,
        width: 64,
        height: 1,
        stride: 256,
        buffer: DATA_VA + image,
        ..Pbe::default()
    };
    let (a, b, c) = (
        descriptor(images[0]).pack().unwrap(),
        descriptor(images[1]).pack().unwrap(),
        descriptor(images[2]).pack().unwrap(),
    );
    m.poke(m.data, PBES, &a);
    m.poke(m.data, PBES + a.len() as u64, &b);
    for image in images {
        m.poke_u32s(image, &[0xdead_beef; 64]);
    }
    // The 32-bit words in which the descriptor of the third image differs
    // from the first's: the kernel stores them over the first.
    let word =
        |bytes: &[u8], i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().unwrap());
    let changed: Vec<(u32, u32)> = (0..a.len() / 4)
        .filter(|&i| word(&a, i) != word(&c, i))
        .map(|i| (i as u32, word(&c, i)))
        .collect();
    assert!((1..=2).contains(&changed.len()), "{changed:?}");
    let mut uniforms = pair(DATA_VA + PBES).to_vec();
    uniforms.push(100.0f32.to_bits());
    let mut stores = String::new();
    for (n, (index, value)) in changed.iter().enumerate() {
        uniforms.push(*index);
        uniforms.push(*value);
        let (u_index, u_value) = (3 + 2 * n, 4 + 2 * n);
        stores += &format!(
            "mov r8, u{u_index}\n mov r9, u{u_value}\n device_store 0, i32, x, r9, u0_u1, r8, unsigned, 0\n"
        );
    }
    let source = format!(
        "
        get_sr r1, sr80
        convert u32_to_f, r2, r1, rte
        mov r3, r2
        mov r4, r2
        mov r5, r2
        mov r6, r1
        mov_imm r7, 0
        image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
        image_write r2_r3_r4_r5, r6_r7, 0, None, ts1, tex_2d, rte, 9, 1
        image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
        {stores}
        fadd32 r2, r2, u2
        image_write r2_r3_r4_r5, r6_r7, 0, None, ts0, tex_2d, rte, 9, 1
        stop"
    );
    let pipeline = m.program(
        &source,
        0x1000,
        0x40,
        &uniforms,
        UNIFORMS,
        0,
        Some((2, DATA_VA + PBES)),
    );
    // One SIMD-group (a second would run after the first had changed the
    // descriptor).
    assert_eq!(m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]), None);
    let untouched = [0xdead_beef; 32];
    let ramp: Vec<u32> = (0..32)
        .map(|i| (i as f32).to_bits())
        .chain(untouched)
        .collect();
    let raised: Vec<u32> = (0..32)
        .map(|i| (i as f32 + 100.0).to_bits())
        .chain(untouched)
        .collect();
    assert_eq!(m.peek_u32s(images[0], 64), ramp, "the first image");
    assert_eq!(m.peek_u32s(images[1], 64), ramp, "the second image");
    assert_eq!(m.peek_u32s(images[2], 64), raised, "the third image");
}

/// Device loads read every lane's elements in lane order, then component
/// order, translating the pages they lie on: lanes 16 KiB pages apart get
/// their own words, a load whose address is the same in every lane gives
/// each active lane the same words and leaves inactive lanes' registers
/// alone, and the first element that faults is the one a lane-by-lane
/// load meets (lane 7's `z` just past the mapping, not lane 8's `x` and
/// not the `y` the load does not name).
#[test_log::test]
fn device_loads_read_lane_by_lane_across_pages() {
    let source = "
        get_sr r1, sr80
        bfi r8, 0, r1, 10
        device_load 0, i32, xz, r2_r3, u0_u1, r8, unsigned
        wait 0
        if_icmp r0l, ult, r1, 16, 1
        device_load 0, i32, xyzw, r4_r5_r6_r7, u4_u5, 3, signed
        wait 0
        pop_exec r0l, 1
        bfi r9, 0, r1, 3
        device_store 0, i32, xyzw, r2_r3_r4_r5, u2_u3, r9, unsigned, 0
        iadd r10, r9, 4
        device_store 0, i32, xy, r6_r7, u2_u3, r10, unsigned, 0
        stop";
    let shared = 0x3_F000u64;
    let m = Machine::new(5000);
    // Each input word holds its own offset in the data buffer.
    let words: Vec<u32> = (0..0x8000u32).map(|i| 0x1_0000 + 4 * i).collect();
    m.poke_u32s(IN, &words);
    m.poke_u32s(shared, &[11, 12, 13, 14, 15, 16, 17, 18]);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + IN));
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend(pair(DATA_VA + shared));
    let pipeline = m.kernel(source, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]), None);
    let out = m.peek_u32s(OUT, 32 * 8);
    for lane in 0..32u32 {
        let at = IN as u32 + 4096 * lane;
        let invariant = if lane < 16 { [14, 15, 16, 17] } else { [0; 4] };
        let expected = [
            at,
            at + 8,
            invariant[0],
            invariant[1],
            invariant[2],
            invariant[3],
        ];
        let lane_out = &out[lane as usize * 8..][..6];
        assert_eq!(lane_out, expected, "lane {lane}");
    }

    // The same load from 7 pages before the end of the mapping, lane 7's
    // `x` in its last word.
    let end = DATA_VA + DATA_BYTES;
    uniforms[..2].copy_from_slice(&pair(end - 4 - 7 * 4096));
    let pipeline = m.kernel(source, 0x1000, 0x80, &uniforms, UNIFORMS + 0x100, 0);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, end + 4, "lane 7's z");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
}

/// Device stores write every lane's element in lane order until one
/// faults: lanes 0-15 reach a writable page, lane 16 a read-only one,
/// whose address the fault names; what lanes 0-15 stored stays, and
/// nothing reaches the read-only pages.
#[test_log::test]
fn device_stores_land_in_lane_order_up_to_the_faulting_lane() {
    let source = "
        get_sr r1, sr80
        device_load 0, i32, x, r2, u2_u3, r1, unsigned
        wait 0
        iadd r3, r1, 100
        device_store 0, i32, x, r3, u0_u1, r2, unsigned, 0
        stop";
    let table = 0x3_F000u64;
    let read_only = USC_BASE + 0x8000;
    let m = Machine::new(5000);
    let to_read_only = ((read_only - (DATA_VA + OUT)) / 4) as u32;
    let indices: Vec<u32> = (0..32)
        .map(|lane| {
            if lane < 16 {
                lane * 4096
            } else {
                to_read_only + lane
            }
        })
        .collect();
    m.poke_u32s(table, &indices);
    m.poke(m.usc, 0x8000, &[0x5a; 256]);
    let mut uniforms = Vec::new();
    uniforms.extend(pair(DATA_VA + OUT));
    uniforms.extend(pair(DATA_VA + table));
    let pipeline = m.kernel(source, 0x1000, 0x40, &uniforms, UNIFORMS, 0);
    assert_eq!(
        m.run_launch(STREAM, pipeline, [32, 1, 1], [32, 1, 1]),
        Some(Errno::EIO)
    );
    let (address, unit, _) = m.system.device().scheduler().stats().last_fault.unwrap();
    assert_eq!(address, read_only + 64, "lane 16's element");
    assert_eq!(unit, agx_fwif::messages::FaultUnit::Usc as u32);
    for lane in 0..16u32 {
        let offset = OUT + u64::from(lane) * 16384;
        assert_eq!(m.peek_u32s(offset, 1), [100 + lane], "lane {lane}");
    }
    assert_eq!(m.peek(m.usc, 0x8000, 256), vec![0x5a; 256]);
}
