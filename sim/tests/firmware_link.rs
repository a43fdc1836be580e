//! The kmd and the simulated coprocessor meet: the firmware boots through
//! the page tables the kmd built, and the GPU's TLB follows the kmd's
//! page-table changes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agx_firmware_sim::firmware::SimulatedCoprocessor;
use agx_firmware_sim::memory::GpuVm;
use agx_fwif::messages::LogMsg;
use agx_fwif::ring::SharedMemory;
use agx_hw::addr::FwVa;
use agx_hw::formats::UatMemAttr;
use agx_hw::uat::{self, Access, Permissions, PAGE_BYTES};
use agx_kmd::firmware::{
    FirmwareLink, COMMAND_TIMEOUT_MS, FW_VA_END, FW_VA_START, WORK_BUDGET_UNITS,
};
use agx_kmd::mem::{PagePool, PageTables, Ram};
use zerocopy::FromBytes;

#[test]
fn the_firmware_boots_through_its_page_tables() {
    // The link alone, without the kmd's scheduler (which would drain the
    // log ring).
    let ram = Ram::new(256 << 20).unwrap();
    let pool = Arc::new(PagePool::new(ram.clone()));
    let coprocessor = SimulatedCoprocessor::new(Arc::new(ram.clone()), 1);
    let link = FirmwareLink::boot(
        Arc::clone(&pool),
        &coprocessor,
        None,
        COMMAND_TIMEOUT_MS,
        WORK_BUDGET_UNITS,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.status().map(|s| s.booted) != Some(1) {
        assert!(Instant::now() < deadline, "firmware did not boot");
        link.irq
            .wait_past(link.irq.count(), Duration::from_millis(10));
    }
    let line = link.init_data.log.pop(&link.view).unwrap().unwrap();
    assert_eq!(
        LogMsg::read_from_bytes(&line).unwrap().text(),
        "firmware booted"
    );
    // Its structures are where InitData says, in its range, and the page
    // after each allocation is a guard.
    let init = link.init.get();
    assert!((FW_VA_START..FW_VA_END).contains(&init));
    let mut byte = [0u8; 1];
    assert!(link
        .view
        .read(link.init.offset(PAGE_BYTES), &mut byte)
        .is_err());
    // The firmware cannot see user memory: the user half is not in its
    // tables.
    assert!(link.view.read(FwVa(0x4000), &mut byte).is_err());
    drop(link);
    assert_eq!(pool.pages_in_use(), 0, "tables go back to the pool");
}

#[test]
fn unmapping_shoots_down_the_gpu_tlb() {
    let ram = Ram::new(64 << 20).unwrap();
    let pool = Arc::new(PagePool::new(ram.clone()));
    let mut tables = PageTables::new(Arc::clone(&pool)).unwrap();
    let object = ram.allocate(PAGE_BYTES).unwrap();
    let rw = Permissions {
        gpu_read: true,
        gpu_write: true,
        ..Permissions::default()
    };
    let va = 0x1_0000_0000;
    tables
        .set(va, 1, |_| {
            uat::page_pte(object.pa(), rw, UatMemAttr::Cached).unwrap()
        })
        .unwrap();
    // One GPU VM lives across the unmap, as a running command does.
    let vm = GpuVm::new(&ram, tables.root_pa());
    assert_eq!(
        vm.translate(va + 16, Access::GpuRead).unwrap(),
        object.pa().offset(16)
    );
    assert_eq!(
        vm.translate(va + 16, Access::GpuRead).unwrap(),
        object.pa().offset(16),
        "cached"
    );
    tables.set(va, 1, |_| 0).unwrap();
    let fault = vm.translate(va + 16, Access::GpuRead).unwrap_err();
    assert_eq!(fault.va, va + 16, "the stale entry was not used");
}

/// A copy of a context warmed before an unmap hands nothing stale back:
/// the translations a unit's copy cached are kept by the context it was
/// cloned from only while the page tables are those they were cached for.
#[test]
fn translations_kept_from_a_copy_never_outlive_an_unmap() {
    let ram = Ram::new(64 << 20).unwrap();
    let pool = Arc::new(PagePool::new(ram.clone()));
    let mut tables = PageTables::new(Arc::clone(&pool)).unwrap();
    let objects = [
        ram.allocate(PAGE_BYTES).unwrap(),
        ram.allocate(PAGE_BYTES).unwrap(),
    ];
    let rw = Permissions {
        gpu_read: true,
        gpu_write: true,
        ..Permissions::default()
    };
    let va = 0x1_0000_0000;
    for (page, object) in objects.iter().enumerate() {
        tables
            .set(va + page as u64 * PAGE_BYTES, 1, |_| {
                uat::page_pte(object.pa(), rw, UatMemAttr::Cached).unwrap()
            })
            .unwrap();
    }
    let vm = GpuVm::new(&ram, tables.root_pa());
    // Kept while the tables stand: the copy's translation of the second
    // page, then the context's own, agree.
    let copy = vm.clone();
    assert_eq!(
        copy.translate(va + PAGE_BYTES, Access::GpuRead).unwrap(),
        objects[1].pa()
    );
    vm.keep_translations(&copy);
    assert_eq!(
        vm.translate(va + PAGE_BYTES, Access::GpuRead).unwrap(),
        objects[1].pa()
    );
    // A copy warmed on the first page before it is unmapped; the context
    // meets the new tables first, then is handed the copy's entries.
    let stale = vm.clone();
    assert_eq!(
        stale.translate(va, Access::GpuRead).unwrap(),
        objects[0].pa()
    );
    tables.set(va, 1, |_| 0).unwrap();
    assert_eq!(
        vm.translate(va + PAGE_BYTES, Access::GpuRead).unwrap(),
        objects[1].pa()
    );
    vm.keep_translations(&stale);
    let fault = vm.translate(va + 8, Access::GpuRead).unwrap_err();
    assert_eq!(fault.va, va + 8, "the copy's stale entry was not kept");
}
