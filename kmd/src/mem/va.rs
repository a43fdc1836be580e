//! Virtual address ranges the kernel hands out: the firmware's range and
//! each VM's kernel range are carved up by the one GPU address-range
//! allocator, [`agx_va::VaAllocator`].

pub use agx_va::VaAllocator;
