//! Typed ioctl calls and the VM layout the kmd's tests use. Shared with
//! the GPU tests in `sim/tests`, which include this file.
#![allow(dead_code, unreachable_pub)]

use agx_kmd::{Errno, File};
use agx_uapi::asahi::{self, GemBindOp, GemCreate, VmBind, VmCreate};
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// The kernel range every test VM reserves (512 MiB just below the
/// dummy page).
pub const KERNEL_START: u64 = 0x7F_0000_0000;
/// Its end.
pub const KERNEL_END: u64 = 0x7F_2000_0000;
/// 16 KiB.
pub const PAGE: u64 = 16384;

/// Calls an ioctl with a typed argument (the kernel copies in and out).
pub fn call<T: IntoBytes + FromBytes + Immutable>(
    file: &File,
    request: u32,
    arg: &mut T,
) -> Result<i32, Errno> {
    file.ioctl(u64::from(request), arg as *mut T as u64)
}

/// Calls an ioctl with raw argument bytes.
pub fn call_raw(file: &File, request: u32, bytes: &mut [u8]) -> Result<i32, Errno> {
    file.ioctl(u64::from(request), bytes.as_mut_ptr() as u64)
}

pub fn vm_create(file: &File) -> u32 {
    let mut c = VmCreate {
        kernel_start: KERNEL_START,
        kernel_end: KERNEL_END,
        ..VmCreate::default()
    };
    call(file, asahi::DRM_IOCTL_ASAHI_VM_CREATE, &mut c).expect("VM_CREATE");
    c.vm_id
}

pub fn gem_create(file: &File, size: u64, flags: u32, vm_id: u32) -> Result<u32, Errno> {
    let mut c = GemCreate {
        size,
        flags,
        vm_id,
        ..GemCreate::default()
    };
    call(file, asahi::DRM_IOCTL_ASAHI_GEM_CREATE, &mut c)?;
    Ok(c.handle)
}

pub fn bind(file: &File, vm_id: u32, ops: &[GemBindOp]) -> Result<i32, Errno> {
    let mut b = VmBind {
        vm_id,
        num_binds: ops.len() as u32,
        stride: size_of::<GemBindOp>() as u32,
        pad: 0,
        userptr: ops.as_ptr() as u64,
    };
    call(file, asahi::DRM_IOCTL_ASAHI_VM_BIND, &mut b)
}

pub fn map_op(handle: u32, addr: u64, range: u64, offset: u64, flags: u32) -> GemBindOp {
    GemBindOp {
        flags,
        handle,
        offset,
        range,
        addr,
    }
}

pub fn unmap_op(addr: u64, range: u64) -> GemBindOp {
    GemBindOp {
        flags: asahi::BindFlags::UNBIND.bits(),
        handle: 0,
        offset: 0,
        range,
        addr,
    }
}
