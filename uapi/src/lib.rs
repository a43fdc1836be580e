//! Binary-compatible Rust definitions of the Apple AGX ("asahi") DRM UAPI.
//!
//! This crate mirrors Linux's `include/uapi/drm/asahi_drm.h` ([`asahi`]) and
//! the DRM core ioctls the stack uses with it ([`drm`]): one `#[repr(C)]`
//! struct per C struct, with the C field names, the same sizes and offsets
//! (checked at compile time), and request numbers computed from direction,
//! size and number exactly as the C `_IOWR()` macros do ([`ioctl`]). The same
//! bytes work against a real Asahi Linux kernel and against our simulated
//! device.
//!
//! ```
//! use agx_uapi::asahi::{GetParams, ParamsGlobal, DRM_IOCTL_ASAHI_GET_PARAMS};
//! use agx_uapi::ioctl::{ioc_nr, ioc_size_bytes};
//! use zerocopy::IntoBytes;
//!
//! let mut params = ParamsGlobal::default();
//! let args = GetParams {
//!     param_group: 0,
//!     pad: 0,
//!     pointer: params.as_mut_bytes().as_mut_ptr() as u64,
//!     size: core::mem::size_of::<ParamsGlobal>() as u64,
//! };
//! // The request number encodes the argument size, as _IOW() does in C.
//! assert_eq!(DRM_IOCTL_ASAHI_GET_PARAMS, 0x4018_6440);
//! assert_eq!(ioc_size_bytes(DRM_IOCTL_ASAHI_GET_PARAMS), args.as_bytes().len());
//! assert_eq!(ioc_nr(DRM_IOCTL_ASAHI_GET_PARAMS), 0x40);
//! ```
//!
//! # Rules the UAPI follows (as upstream states them)
//!
//! - Every struct is 8-byte aligned where it contains 64-bit fields, with
//!   all padding written out as explicit `pad` fields. Pad fields and fields
//!   documented as MBZ ("must be zero") are checked by the kernel, which
//!   rejects non-zero values with `EINVAL`, so that they can be given a
//!   meaning later.
//! - Structs are extended only by appending fields or by giving a pad field
//!   a meaning, such that zero keeps the old behaviour. Structs that are read
//!   through a pointer carry their size (`get_params.size`, `vm_bind.stride`,
//!   `cmd_header.size`) so that old and new userspace keep working.
//! - No unions; arrays are passed as (user pointer, count, stride).
//!
//! The zerocopy derives guarantee there is no implicit padding: every byte
//! of every struct is a named field.
//!
//! Only 64-bit targets are supported: the DRM core structs contain C
//! pointers and `size_t`, which this crate represents as `u64`.
#![forbid(unsafe_code)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("agx-uapi supports 64-bit targets only (DRM core structs embed pointers)");

pub mod asahi;
pub mod drm;
pub mod errno;
pub mod ioctl;

pub use errno::Errno;

/// A value read from userspace that is not a member of the enum it should
/// belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{value:#x} is not a valid {type_name}")]
pub struct UnknownValue {
    /// The enum that was expected.
    pub type_name: &'static str,
    /// The value that was found.
    pub value: u32,
}

/// Size in bytes of a struct field, usable in const context:
/// `field_size_bytes(|s: &T| &s.field)`.
pub const fn field_size_bytes<T, F>(_field: fn(&T) -> &F) -> usize {
    core::mem::size_of::<F>()
}

/// Defines a C-compatible enum with `TryFrom<u32>` (unknown values become
/// [`UnknownValue`]) and `From<Enum> for u32`.
macro_rules! uapi_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vmeta])* $variant = $value ),*
        }

        impl $name {
            /// Every value of this enum, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];
        }

        impl TryFrom<u32> for $name {
            type Error = $crate::UnknownValue;

            fn try_from(value: u32) -> Result<Self, Self::Error> {
                $( if value == $value { return Ok($name::$variant); } )*
                Err($crate::UnknownValue { type_name: stringify!($name), value })
            }
        }

        impl From<$name> for u32 {
            fn from(value: $name) -> u32 {
                value as u32
            }
        }
    };
}
pub(crate) use uapi_enum;

/// Asserts at compile time the size and alignment of a struct and the offset
/// and size of each listed field.
macro_rules! assert_layout {
    ($t:ty, size = $size:expr, align = $align:expr, { $( $field:ident @ $off:expr, $fsize:expr; )* }) => {
        const _: () = {
            assert!(core::mem::size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
            assert!(core::mem::align_of::<$t>() == $align, concat!("alignment of ", stringify!($t)));
            $(
                assert!(
                    core::mem::offset_of!($t, $field) == $off,
                    concat!("offset of ", stringify!($t), "::", stringify!($field))
                );
                assert!(
                    $crate::field_size_bytes(|s: &$t| &s.$field) == $fsize,
                    concat!("size of ", stringify!($t), "::", stringify!($field))
                );
            )*
        };
    };
}
pub(crate) use assert_layout;
