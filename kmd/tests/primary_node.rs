//! DRM master and authentication on the card node, with callers of our
//! choosing (other processes, without `CAP_SYS_ADMIN`): the rules of
//! `drm_auth.c` that a single root process cannot show.

mod common;

use agx_kmd::auth::Caller;
use agx_kmd::file::NodeKind;
use agx_kmd::{Errno, File};
use agx_uapi::drm::{self, Auth, Client};
use common::*;

const OPENER: Caller = Caller {
    tgid: 1000,
    tid: 1000,
    cap_sys_admin: false,
};
const OTHER_PROCESS: Caller = Caller {
    tgid: 2000,
    tid: 2001,
    cap_sys_admin: false,
};
const ROOT: Caller = Caller {
    tgid: 3000,
    tid: 3000,
    cap_sys_admin: true,
};

fn as_caller<T: zerocopy::IntoBytes + zerocopy::FromBytes + zerocopy::Immutable>(
    file: &File,
    caller: Caller,
    request: u32,
    arg: &mut T,
) -> Result<i32, Errno> {
    file.ioctl_as(Some(caller), u64::from(request), arg as *mut T as u64)
}

fn set_master(file: &File, caller: Caller) -> Result<i32, Errno> {
    file.ioctl_as(Some(caller), u64::from(drm::DRM_IOCTL_SET_MASTER), 0)
}

fn drop_master(file: &File, caller: Caller) -> Result<i32, Errno> {
    file.ioctl_as(Some(caller), u64::from(drm::DRM_IOCTL_DROP_MASTER), 0)
}

fn magic(file: &File, caller: Caller) -> u32 {
    let mut auth = Auth::default();
    as_caller(file, caller, drm::DRM_IOCTL_GET_MAGIC, &mut auth).unwrap();
    auth.magic
}

fn authenticated(file: &File, caller: Caller) -> bool {
    let mut client = Client::default();
    as_caller(file, caller, drm::DRM_IOCTL_GET_CLIENT, &mut client).unwrap();
    client.auth != 0
}

#[test]
fn only_the_process_that_was_master_or_cap_sys_admin_moves_the_role() {
    let device = system();
    let first = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    let second = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    // Another process (a forked child, say) holding the master's file:
    // not allowed to drop or set it without CAP_SYS_ADMIN.
    assert_eq!(drop_master(&first, OTHER_PROCESS), Err(Errno::EACCES));
    assert_eq!(drop_master(&first, OPENER), Ok(0));
    assert_eq!(set_master(&first, OTHER_PROCESS), Err(Errno::EACCES));
    // A file that was never master, from its own process: EACCES too
    // (drm_master_check_perm comes before everything).
    assert_eq!(set_master(&second, OPENER), Err(Errno::EACCES));
    // Root may; the file gets a master object of its own.
    assert_eq!(set_master(&second, ROOT), Ok(0));
    assert_eq!(set_master(&first, OPENER), Err(Errno::EBUSY));
    // A non-master's DROP_MASTER: EINVAL once permitted.
    assert_eq!(drop_master(&first, OPENER), Err(Errno::EINVAL));
    // GET_CLIENT reports the calling thread.
    let mut client = Client::default();
    as_caller(
        &second,
        OTHER_PROCESS,
        drm::DRM_IOCTL_GET_CLIENT,
        &mut client,
    )
    .unwrap();
    assert_eq!(client.pid, u64::from(OTHER_PROCESS.tid));
}

#[test]
fn a_file_opened_without_cap_sys_admin_waits_for_the_master_to_authenticate_it() {
    let device = system();
    let master = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    let client = File::open_node_as(&device.0, NodeKind::Primary, OTHER_PROCESS);
    let root = File::open_node_as(&device.0, NodeKind::Primary, ROOT);
    assert!(authenticated(&master, OPENER));
    assert!(!authenticated(&client, OTHER_PROCESS));
    // A CAP_SYS_ADMIN opener is authenticated at once.
    assert!(authenticated(&root, ROOT));
    // DRM_AUTH ioctls refuse the unauthenticated file: GEM_CREATE (an
    // asahi one) and GEM_FLINK.
    assert_eq!(
        gem_create(&client, PAGE, 0, 0).map_err(|e| e.0),
        Err(libc::EACCES)
    );
    let token = magic(&client, OTHER_PROCESS);
    let mut auth = Auth { magic: token };
    // Only the master authenticates.
    assert_eq!(
        as_caller(&root, ROOT, drm::DRM_IOCTL_AUTH_MAGIC, &mut auth),
        Err(Errno::EACCES)
    );
    assert_eq!(
        as_caller(&master, OPENER, drm::DRM_IOCTL_AUTH_MAGIC, &mut auth),
        Ok(0)
    );
    assert!(authenticated(&client, OTHER_PROCESS));
    assert!(gem_create(&client, PAGE, 0, 0).is_ok());
}

#[test]
fn magics_are_the_lowest_free_and_freed_with_their_file() {
    let device = system();
    let master = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    let a = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    let b = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    assert_eq!(magic(&master, OPENER), 1);
    assert_eq!(magic(&a, OPENER), 2);
    assert_eq!(magic(&b, OPENER), 3);
    // Stable per file.
    assert_eq!(magic(&a, OPENER), 2);
    drop(a);
    // Its token is gone: AUTH_MAGIC of it fails, and the number is reused.
    let mut auth = Auth { magic: 2 };
    assert_eq!(
        as_caller(&master, OPENER, drm::DRM_IOCTL_AUTH_MAGIC, &mut auth),
        Err(Errno::EINVAL)
    );
    let c = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    assert_eq!(magic(&c, OPENER), 2);
    // The master closing leaves no master: the next file opened takes it.
    drop(master);
    let next = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    assert_eq!(drop_master(&next, OPENER), Ok(0));
}

#[test]
fn get_unique_reports_the_bus_id_in_the_callers_buffer_once_set() {
    let device = system();
    let master = File::open_node_as(&device.0, NodeKind::Primary, OPENER);
    let mut unique = drm::Unique::default();
    as_caller(&master, OPENER, drm::DRM_IOCTL_GET_UNIQUE, &mut unique).unwrap();
    assert_eq!(unique.unique_len, 0);
    let mut version = drm::SetVersion {
        drm_di_major: 1,
        drm_di_minor: 1,
        drm_dd_major: -1,
        drm_dd_minor: -1,
    };
    as_caller(&master, OPENER, drm::DRM_IOCTL_SET_VERSION, &mut version).unwrap();
    assert_eq!((version.drm_di_major, version.drm_di_minor), (1, 4));
    // A buffer too short: only the length comes back.
    let mut buffer = [0u8; 20];
    let mut unique = drm::Unique {
        unique_len: 4,
        unique: buffer.as_mut_ptr() as u64,
    };
    as_caller(&master, OPENER, drm::DRM_IOCTL_GET_UNIQUE, &mut unique).unwrap();
    assert_eq!(unique.unique_len, 13);
    assert_eq!(buffer, [0; 20]);
    unique.unique_len = 20;
    as_caller(&master, OPENER, drm::DRM_IOCTL_GET_UNIQUE, &mut unique).unwrap();
    assert_eq!(&buffer[..13], b"206400000.gpu");
    // A driver version that does not exist.
    let mut version = drm::SetVersion {
        drm_di_major: -1,
        drm_di_minor: -1,
        drm_dd_major: 2,
        drm_dd_minor: 0,
    };
    assert_eq!(
        as_caller(&master, OPENER, drm::DRM_IOCTL_SET_VERSION, &mut version),
        Err(Errno::EINVAL)
    );
    // The render node has none of it.
    let render = File::open_node_as(&device.0, NodeKind::Render, OPENER);
    assert_eq!(
        as_caller(&render, OPENER, drm::DRM_IOCTL_GET_UNIQUE, &mut unique),
        Err(Errno::EACCES)
    );
}
