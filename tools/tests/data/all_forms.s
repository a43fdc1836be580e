jmp_if_skipping_doorbell 0x0
jmp_incomplete 0x0
mov_imm r0l, 0
get_sr r1, sr80 (thread_position_in_grid.x)
mov_imm r2h, 4660
mov_imm r3, 3735928559
mov_imm r3, 7, 0b1
fadd32 r4, r1, r2
fadd32.sat r5, r1.abs, 0.5
fmul32 r6, r1.neg, u7
fadd16 r7l, r7h, r8l
fmul16 r7h, r8h.abs, 0.25
fmadd32 r9, r1, r2, r3
fmadd16 r10l, r1l, r2h, r3l.neg
floor r11, r1
ceil r11, r1
trunc r11, r1
rint r11, r1
rcp r12, r1
rsqrt r12, r1
log2 r12, r1
exp2.sat r12, r1
dfdx r13, r1
dfdy r13, r1
rsqrt_special r13, r1
sin_pt_1 r13, r1
sin_pt_2 r13, r1
funop r13, r1, 0b000010
iadd r14, r1, 4, lsl 2
isub.sat r14, r1.sx, r2
iadd r20_r21, r22_r23, r1.sx
imadd r15, r1, r2, r3
imsub r15, r1, 3, r2, lsl 1
convert u32_to_f, r16, r1, rte
convert f_to_s32, r16, r1, rtz
mov r17, r1
not r17, r1
and r17, r1, r2
or r17, r1, 255
xor r17, r1, u3
nand r17, r1, r2
nor r17, r1, r2
xnor r17, r1, r2
bitop 1101, r17, r1, r2
bfi r18, 0, r1, 4, mask 0xFF
bitrev r19, r1
popcount r19l, r1h
ffs r19, u3
intl r19, r1l, r2h
iunop r19, r1, 0b01, 0b00
bfeil r18, 0, r1, 3
extr r18, r1, r2, 8
shlhi r18, r1, r2, 40
shrhi r18, r1, r2, 40
asr r18, r1, 3
asrh r18, r1, 40
icmpsel ult, r19, r1, r2, r3, r4
fcmpsel gtn, r19, r1, 0.0, r1, 0
quad_iadd r20, r1
simd_fadd r20, r1
quad_prefix_min.s r20l, r1l
simd_prefix_xor r20, u4
simd_op 0b0, 0b0000000000000011, r20, r1
quad_shuffle r20, r1, 2
quad_shuffle_xor r20, r1, r2l
quad_shuffle_up r20, r1, 1
quad_shuffle_down r20, r1, 1
quad_shuffle_rotate_up r20, r1, 1
simd_shuffle r20, r1, u5
simd_shuffle_xor r20l, r1l, 16
simd_shuffle_up r20, r1, 4
simd_shuffle_down r20, r1, 4
simd_shuffle_rotate_up r20, r1, 4
simd_matrix_fmadd16 r4h_r5l.cache, r8_r9.neg, 0.5, r12l_r12h.abs
simd_matrix_fmadd32 r4_r5, r8_r9.abs, u3, r12l_r12h
simd_shuf_op 0b0, 0b00, 0b11, r20, r1, r2
icmp_ballot r20, ult, r1, 20
icmp_quad_ballot r20l, nseq, r1, r2
fcmp_ballot r20, gt, r1.abs, 0.5
fcmp_quad_ballot r20, nltn, r1, r2
fadd32 r20, undef_1000_2, r2
if_icmp r0l, ult, r1, r2, 1
else_icmp r0l, ueq, 0, 0, 1
while_icmp r0l, nueq, r1, 1, 1
pop_exec r0l, 1
if_fcmp r0l, lt, r1, 1.0, 1
else_fcmp r0l, eq, 0.0, 0.0, 1
while_fcmp r0l, ngte, r1, r2, 1
pop_exec r0l, 1
jmp_exec_any 0x0
jmp_exec_none 0x0
call 0x0
call r15
ret r1
device_load 0, i32, xyzw, r4_r5_r6_r7, u2_u3, r1, unsigned
device_load 1, i16, x, r3l, r0_r1, 8, signed, lsl 1
wait 0
device_store 0, i32, xy, r2_r3, u4_u5, r6, unsigned, 0
device_load.TODO 0, i32, x, r4, u2_u3, 8, signed, 1, 0, 5, 0
device_store.TODO 0, i32, x, r4, u2_u3, 8, signed, 0, 1, 0, 3, 0
async_load copy_1d, r4_r5, r8_r9_r10
async_store copy_2d, u6_u7, u20_u21_u22_u23_u24
device_load 0, rg11b10f.rtz, xyz, r4_r5_r6, u2_u3, 0, signed
atomic add, 0, r2, u0_u1, r3, signed, r5, 1, 1, 1, 1
atomic cmpxchg, 1, 0, r8_r9, -4, unsigned, r5_r6, 3, 0, 0, 0
tex_state_store 3, u8_u9, r4, 0
sampler_state_store 1, u0_u1, 4096, 1
uniform_store 2, i16, xy, 0, r0l_r0h, 12
threadgroup_load i32, xyzw, r0_r1_r2_r3, 0, r2l
threadgroup_store i16, x, r5l, r1l, 4
threadgroup_atomic add, r3, 0, 0, r4, 0, 2, 128, 0
threadgroup_atomic cmpxchg, r1l, u4l, r2l, r4_r5, 0, 2, 129, 0
stack_adjust 0, 1, 2, 0, 0, -16
stack_adjust 0, 1, 2, 0, 0, r6
stack_load r4_r5_r6, i32, 1, 0, xyz, 4, 12, 0
stack_store i16, 1, 0, xy, 4, r4h_r5l, r2, 0
stack_unmap target0, r4, 2, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
stack_map target1, r5, 3, 0b00, 0b0, 0b000, 0b10000, 0b00010000, 1
stack_map_op 7, 2, 1, 0, target0, r5, -1, 0b01, 0b1, 0b000, 0b10000, 0b00010000, 0
threadgroup_barrier
memory_barrier 1, 2, 9
texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r0_r1_r2_r3, None, ts0, ss0, tex_2d, r4_r5, auto_lod, 0, 0, r0
texture_sample 1, 0b1100, 0, gather_g, xyzw, 0b00, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, auto_lod, 0, 1, r6_r7
texture_sample 0, 0b1100, 0, none, xyzw, 0b10, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, lod_grad_min, r10_r11_r12_r13_r14, 0, r0
texture_sample 0, 0b1100, 0, none, xyzw, 0b00, r8_r9_r10_r11, None, ts3, ss1, tex_2d, r2_r3, auto_lod_bias_min, r5, 1, r6
texture_load 0, 0b1100, 1, none, xy, 0b00, r8l_r8h, None, ts3, ss0, tex_2d_array, r4_r5_r6, lod_min, r6l, 0, r0
image_write r0_r1_r2_r3, r4_r5, 0, None, ts1, tex_2d, rte, 9, 1
image_write_block r2, r4, 0, None, ts0, tex_2d, rte, u8norm, 0, 9, 1
ld_tile r0l_r0h_r1l_r1h, u8norm, 1, xyzw, 8, 255, r0, 0
st_tile r0_r1_r2_r3, u8norm, 0, xyzw, 0, 255, r0, 0
iter r0_r1_r2_r3, cf1, center, 0, 0, 0, 0, 0
iterproj r4_r5, cf2, cf0, center, 0, 0, 0, 0, 0
ldcf r0_r1_r2, cf4, 0
st_var 1, r3, 4
st_var_final 1, r2, 7
no_var 1, r0, r0l
wait_pix 1, 0
sample_mask 255, 0
zs_emit 255, z, r2l_r2h, 0
doorbell 7
signal_pix 1, 0
trap
stop
unk_101c
unk_62cc
unk_e800
unk_0c00
unk_c0000000
unk_30c0 67305985
unk_40c0
unk_sr 3, 4660
