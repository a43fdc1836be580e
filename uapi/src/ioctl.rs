//! Linux ioctl request numbers.
//!
//! A request number packs four fields into 32 bits: the data direction
//! (bits 30-31), the size of the argument struct (bits 16-29), a "type"
//! byte identifying the subsystem (bits 8-15, `'d'` for DRM) and a number
//! within it (bits 0-7). The size is part of the number, so a struct that
//! grows gets a new request number; DRM core dispatches on the type and
//! number only and copies `min(user size, kernel size)` bytes, zero-filling
//! the rest, which is how DRM structs are extended by appending.
//!
//! The encoding here is the asm-generic one used by x86, x86-64, Arm,
//! AArch64 and RISC-V. Architectures with their own encoding (PowerPC, MIPS,
//! SPARC, Alpha) are rejected at compile time rather than given wrong
//! numbers.

#[cfg(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc",
    target_arch = "sparc64",
))]
compile_error!("agx-uapi only implements the asm-generic ioctl encoding");

/// Number of bits of the command number field.
pub const IOC_NRBITS: u32 = 8;
/// Number of bits of the type field.
pub const IOC_TYPEBITS: u32 = 8;
/// Number of bits of the argument size field.
pub const IOC_SIZEBITS: u32 = 14;
/// Number of bits of the direction field.
pub const IOC_DIRBITS: u32 = 2;

/// Bit position of the command number field.
pub const IOC_NRSHIFT: u32 = 0;
/// Bit position of the type field.
pub const IOC_TYPESHIFT: u32 = IOC_NRSHIFT + IOC_NRBITS;
/// Bit position of the size field.
pub const IOC_SIZESHIFT: u32 = IOC_TYPESHIFT + IOC_TYPEBITS;
/// Bit position of the direction field.
pub const IOC_DIRSHIFT: u32 = IOC_SIZESHIFT + IOC_SIZEBITS;

/// Direction: no data is transferred.
pub const IOC_NONE: u32 = 0;
/// Direction: userspace writes the argument, the kernel reads it (`_IOW`).
pub const IOC_WRITE: u32 = 1;
/// Direction: the kernel writes the argument back to userspace (`_IOR`).
pub const IOC_READ: u32 = 2;

/// The ioctl type byte of DRM (`DRM_IOCTL_BASE`).
pub const DRM_IOCTL_BASE: u8 = b'd';
/// First command number reserved for driver-private ioctls
/// (`DRM_COMMAND_BASE`).
pub const DRM_COMMAND_BASE: u32 = 0x40;
/// One past the last driver-private command number (`DRM_COMMAND_END`).
pub const DRM_COMMAND_END: u32 = 0xA0;

/// Builds a request number (`_IOC`).
///
/// Fails to compile (in const context) or panics if a field does not fit.
pub const fn ioc(dir: u32, ty: u8, nr: u32, size_bytes: usize) -> u32 {
    assert!(dir < (1 << IOC_DIRBITS), "ioctl direction out of range");
    assert!(nr < (1 << IOC_NRBITS), "ioctl number out of range");
    assert!(size_bytes < (1 << IOC_SIZEBITS), "ioctl argument too large");
    // CAST: size_bytes < 2^14 was checked above; ty is a u8.
    (dir << IOC_DIRSHIFT)
        | ((ty as u32) << IOC_TYPESHIFT)
        | (nr << IOC_NRSHIFT)
        | ((size_bytes as u32) << IOC_SIZESHIFT)
}

/// `_IO(ty, nr)`: a request without an argument.
pub const fn io(ty: u8, nr: u32) -> u32 {
    ioc(IOC_NONE, ty, nr, 0)
}

/// `_IOR(ty, nr, T)`: the kernel writes a `T` to userspace.
pub const fn ior<T>(ty: u8, nr: u32) -> u32 {
    ioc(IOC_READ, ty, nr, core::mem::size_of::<T>())
}

/// `_IOW(ty, nr, T)`: userspace passes a `T` to the kernel.
pub const fn iow<T>(ty: u8, nr: u32) -> u32 {
    ioc(IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// `_IOWR(ty, nr, T)`: a `T` goes in and is written back.
pub const fn iowr<T>(ty: u8, nr: u32) -> u32 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, core::mem::size_of::<T>())
}

/// The direction field of a request number (`_IOC_DIR`).
pub const fn ioc_dir(request: u32) -> u32 {
    (request >> IOC_DIRSHIFT) & ((1 << IOC_DIRBITS) - 1)
}

/// The type field of a request number (`_IOC_TYPE`).
pub const fn ioc_type(request: u32) -> u8 {
    // CAST: the mask keeps 8 bits.
    ((request >> IOC_TYPESHIFT) & ((1 << IOC_TYPEBITS) - 1)) as u8
}

/// The command number of a request number (`_IOC_NR`).
pub const fn ioc_nr(request: u32) -> u32 {
    (request >> IOC_NRSHIFT) & ((1 << IOC_NRBITS) - 1)
}

/// The argument size, in bytes, of a request number (`_IOC_SIZE`).
pub const fn ioc_size_bytes(request: u32) -> usize {
    // CAST: the mask keeps 14 bits.
    ((request >> IOC_SIZESHIFT) & ((1 << IOC_SIZEBITS) - 1)) as usize
}

/// `DRM_IO(nr)`.
pub const fn drm_io(nr: u32) -> u32 {
    io(DRM_IOCTL_BASE, nr)
}

/// `DRM_IOR(nr, T)`.
pub const fn drm_ior<T>(nr: u32) -> u32 {
    ior::<T>(DRM_IOCTL_BASE, nr)
}

/// `DRM_IOW(nr, T)`.
pub const fn drm_iow<T>(nr: u32) -> u32 {
    iow::<T>(DRM_IOCTL_BASE, nr)
}

/// `DRM_IOWR(nr, T)`.
pub const fn drm_iowr<T>(nr: u32) -> u32 {
    iowr::<T>(DRM_IOCTL_BASE, nr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let req = ioc(IOC_READ | IOC_WRITE, b'd', 0x4a, 0x28);
        assert_eq!(req, 0xC028_644A);
        assert_eq!(ioc_dir(req), IOC_READ | IOC_WRITE);
        assert_eq!(ioc_type(req), b'd');
        assert_eq!(ioc_nr(req), 0x4a);
        assert_eq!(ioc_size_bytes(req), 0x28);
    }

    #[test]
    fn known_linux_values() {
        // DRM_IOCTL_VERSION and DRM_IOCTL_GEM_CLOSE on x86-64 and arm64.
        assert_eq!(drm_iowr::<[u64; 8]>(0x00), 0xC040_6400);
        assert_eq!(drm_iow::<[u32; 2]>(0x09), 0x4008_6409);
        assert_eq!(drm_io(0x1e), 0x0000_641e);
        assert_eq!(drm_ior::<u32>(0x01), 0x8004_6401);
    }

    #[test]
    #[should_panic(expected = "ioctl number out of range")]
    fn rejects_out_of_range_number() {
        let _ = ioc(IOC_NONE, b'd', 0x100, 0);
    }
}
