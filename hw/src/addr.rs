//! The three kinds of address that cross between the kmd, the firmware
//! and the GPU.
//!
//! An AGX system has three address spaces that all hold 64-bit numbers:
//! physical addresses (the SoC's RAM, what page-table entries point at),
//! GPU virtual addresses in a user context's lower half (what command
//! buffers, descriptors and shaders name), and the firmware's kernel-range
//! addresses in the upper half of context 0 (`ttb1`: rings, work queues,
//! command objects). Mixing them up is a classic driver bug, so wherever
//! one crosses a crate boundary it travels as its own type.

use std::fmt;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

macro_rules! address {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(
            Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, FromBytes, IntoBytes,
            Immutable, KnownLayout,
        )]
        #[repr(transparent)]
        pub struct $name(pub u64);

        impl $name {
            /// The null address.
            pub const NULL: $name = $name(0);

            /// The raw value.
            pub const fn get(self) -> u64 {
                self.0
            }

            /// Whether it is zero (by convention: absent).
            pub const fn is_null(self) -> bool {
                self.0 == 0
            }

            /// `self + bytes`, or `None` on overflow.
            pub fn checked_add(self, bytes: u64) -> Option<$name> {
                self.0.checked_add(bytes).map($name)
            }

            /// `self + bytes`, wrapping (for offsets already known to fit).
            #[must_use]
            pub const fn offset(self, bytes: u64) -> $name {
                $name(self.0.wrapping_add(bytes))
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "({:#x})"), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:#x}", self.0)
            }
        }

        impl fmt::LowerHex for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::LowerHex::fmt(&self.0, f)
            }
        }
    };
}

address!(
    /// A physical address in the SoC's RAM.
    PhysAddr,
    "PhysAddr"
);
address!(
    /// A GPU virtual address in a user context (the lower half, `ttb0`).
    GpuVa,
    "GpuVa"
);
address!(
    /// A firmware address: the kernel range of context 0's upper half
    /// (`ttb1`), where the kmd puts what the firmware reads.
    FwVa,
    "FwVa"
);
