/* The card node as the kernel's primary node behaves for a render-only
 * driver: DRM master (the first opener, SET_MASTER, DROP_MASTER),
 * GET_MAGIC/AUTH_MAGIC, GET_CLIENT, GET_STATS, GET_UNIQUE and SET_VERSION,
 * flink names, and the mode-setting ioctls refused as a driver without
 * mode setting refuses them; the checks of IGT's core_auth,
 * core_getclient, core_getstats and core_setmaster among them. Run as
 * root: the non-root cases drop CAP_SYS_ADMIN from one thread's effective
 * set. Prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>
#include <xf86drmMode.h>
#include "agx_test.h"

/* The call fails with exactly `e`. */
#define FAILS(call, e) do { errno = 0; int r_ = (call); CHECK(r_ == -1 && errno == (e)); } while (0)

static int is_master(int fd)
{
    /* IGT's test: a master gets EINVAL for magic 0, others EACCES. */
    return drmAuthMagic(fd, 0) != -EACCES;
}

static int raw_ioctl(int fd, unsigned long request, void *arg)
{
    return ioctl(fd, request, arg);
}

static uint32_t magic_of(int fd)
{
    drm_magic_t magic = 0;
    CHECK(drmGetMagic(fd, &magic) == 0 && magic > 0);
    return magic;
}

static int authenticated(int fd)
{
    struct drm_client client = { .idx = 0 };
    CHECK(raw_ioctl(fd, DRM_IOCTL_GET_CLIENT, &client) == 0);
    return client.auth;
}

/* Sets this thread's effective CAP_SYS_ADMIN (the permitted set keeps it). */
static void set_sys_admin(int on)
{
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2];
    CHECK(syscall(SYS_capget, &header, data) == 0);
    if (on)
        data[0].effective |= 1u << CAP_SYS_ADMIN;
    else
        data[0].effective &= ~(1u << CAP_SYS_ADMIN);
    CHECK(syscall(SYS_capset, &header, data) == 0);
}

struct unprivileged { int master, other; };

/* As a process without CAP_SYS_ADMIN (this thread only). */
static void *unprivileged_checks(void *arg)
{
    struct unprivileged *fds = arg;
    set_sys_admin(0);

    /* A new primary file is not authenticated: DRM_AUTH ioctls refuse. */
    int fd = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0 && !is_master(fd) && !authenticated(fd));
    /* The asahi ioctls but GET_PARAMS are DRM_AUTH, and so is flink. */
    struct asahi_gem_create create = { .size = 16384 };
    FAILS(raw_ioctl(fd, ASAHI_GEM_CREATE, &create), EACCES);
    struct drm_gem_flink flink = { .handle = 1 };
    FAILS(raw_ioctl(fd, DRM_IOCTL_GEM_FLINK, &flink), EACCES);
    FAILS(raw_ioctl(fd, DRM_IOCTL_FINISH, &(struct drm_lock){ 0 }), EACCES);
    /* The master authenticates it by its magic; then it may. */
    CHECK(drmAuthMagic(fds->master, magic_of(fd)) == 0);
    CHECK(authenticated(fd));
    CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &create) == 0);
    flink.handle = create.handle;
    CHECK(raw_ioctl(fd, DRM_IOCTL_GEM_FLINK, &flink) == 0 && flink.name > 0);
    CHECK(raw_ioctl(fd, DRM_IOCTL_FINISH, &(struct drm_lock){ 0 }) == 0);

    /* The process that became master with a file may drop and set it
     * again without CAP_SYS_ADMIN; another file may not take it. */
    CHECK(drmDropMaster(fds->master) == 0 && !is_master(fds->master));
    FAILS(drmSetMaster(fds->other), EACCES);
    CHECK(drmSetMaster(fds->master) == 0 && is_master(fds->master));
    /* Root-only ioctls. */
    struct drm_unique unique = { 0 };
    FAILS(raw_ioctl(fds->master, DRM_IOCTL_SET_UNIQUE, &unique), EACCES);
    close(fd);
    return NULL;
}

static int has_sys_admin(void)
{
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct data[2];
    return syscall(SYS_capget, &header, data) == 0 && (data[0].effective & (1u << CAP_SYS_ADMIN));
}

int main(void)
{
    /* The cases need CAP_SYS_ADMIN to drop and take it back. */
    if (geteuid() != 0 || !has_sys_admin()) {
        printf("skip\n");
        return 0;
    }

    /* The first opener is master. */
    int master = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    CHECK(master >= 0);
    CHECK(drmGetNodeTypeFromFd(master) == DRM_NODE_PRIMARY);
    CHECK(is_master(master));
    int other = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    CHECK(other >= 0 && !is_master(other));
    /* core_auth basic-auth: the second file cannot take master while it
     * is held; magics are stable; only the master authenticates, once. */
    FAILS(drmSetMaster(other), EBUSY);
    uint32_t master_magic = magic_of(master), other_magic = magic_of(other);
    CHECK(master_magic != other_magic);
    CHECK(magic_of(other) == other_magic);
    CHECK(drmAuthMagic(other, other_magic) == -EACCES);
    CHECK(drmAuthMagic(master, other_magic) == 0);
    CHECK(drmAuthMagic(master, other_magic) == -EINVAL);
    CHECK(drmAuthMagic(master, 0x7fffffff) == -EINVAL);
    CHECK(magic_of(other) == other_magic);

    /* core_getclient: only index 0, the caller. */
    struct drm_client client = { .idx = 0 };
    CHECK(raw_ioctl(master, DRM_IOCTL_GET_CLIENT, &client) == 0);
    CHECK(client.auth == 1 && client.pid == (unsigned long)syscall(SYS_gettid));
    CHECK(client.uid == 65534 && client.magic == 0 && client.iocs == 0);
    client.idx = 1;
    FAILS(raw_ioctl(master, DRM_IOCTL_GET_CLIENT, &client), EINVAL);
    client.idx = 0x7fffffff;
    FAILS(raw_ioctl(master, DRM_IOCTL_GET_CLIENT, &client), EINVAL);

    /* core_getstats. */
    struct drm_stats stats;
    memset(&stats, 0xff, sizeof(stats));
    CHECK(raw_ioctl(master, DRM_IOCTL_GET_STATS, &stats) == 0 && stats.count == 0);

    /* The bus id: empty until the master asks for interface 1.1+. */
    char *busid = drmGetBusid(master);
    CHECK(busid && busid[0] == 0);
    drmFreeBusid(busid);
    drmSetVersion version = { 1, 4, -1, -1 };
    CHECK(drmSetInterfaceVersion(master, &version) == 0);
    busid = drmGetBusid(master);
    CHECK(busid && strcmp(busid, "206400000.gpu") == 0);
    drmFreeBusid(busid);
    busid = drmGetBusid(other);
    CHECK(busid && strcmp(busid, "206400000.gpu") == 0);
    drmFreeBusid(busid);
    struct drm_set_version set = { 2, 0, -1, -1 };
    FAILS(raw_ioctl(master, DRM_IOCTL_SET_VERSION, &set), EINVAL);
    CHECK(set.drm_di_major == 1 && set.drm_di_minor == 4 && set.drm_dd_major == 1);
    set = (struct drm_set_version){ 1, 1, -1, -1 };
    FAILS(raw_ioctl(other, DRM_IOCTL_SET_VERSION, &set), EACCES);

    /* Flink names: device-wide, a new handle per GEM_OPEN, gone with the
     * last handle. */
    struct asahi_gem_create create = { .size = 65536 };
    CHECK(drmIoctl(master, ASAHI_GEM_CREATE, &create) == 0);
    struct drm_gem_flink flink = { .handle = create.handle };
    CHECK(raw_ioctl(master, DRM_IOCTL_GEM_FLINK, &flink) == 0 && flink.name == 1);
    uint32_t name = flink.name;
    CHECK(raw_ioctl(master, DRM_IOCTL_GEM_FLINK, &flink) == 0 && flink.name == name);
    struct drm_gem_open opened = { .name = name };
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_OPEN, &opened) == 0 && opened.size == 65536);
    uint32_t first = opened.handle;
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_OPEN, &opened) == 0 && opened.handle != first);
    uint32_t second = opened.handle;
    opened.name = 999;
    FAILS(raw_ioctl(other, DRM_IOCTL_GEM_OPEN, &opened), ENOENT);
    flink.handle = 999;
    FAILS(raw_ioctl(master, DRM_IOCTL_GEM_FLINK, &flink), ENOENT);
    struct drm_gem_close gem_close = { .handle = create.handle };
    CHECK(raw_ioctl(master, DRM_IOCTL_GEM_CLOSE, &gem_close) == 0);
    gem_close.handle = first;
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_CLOSE, &gem_close) == 0);
    opened.name = name;
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_OPEN, &opened) == 0);
    gem_close.handle = opened.handle;
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_CLOSE, &gem_close) == 0);
    gem_close.handle = second;
    CHECK(raw_ioctl(other, DRM_IOCTL_GEM_CLOSE, &gem_close) == 0);
    FAILS(raw_ioctl(other, DRM_IOCTL_GEM_OPEN, &opened), ENOENT);

    /* No mode setting: EOPNOTSUPP, after the master check where there
     * is one; GETFB2 says EINVAL; no dumb buffers. */
    errno = 0;
    CHECK(drmModeGetResources(master) == NULL && errno == EOPNOTSUPP);
    FAILS(drmSetClientCap(master, DRM_CLIENT_CAP_ATOMIC, 1), EOPNOTSUPP);
    struct drm_mode_crtc crtc = { 0 };
    FAILS(raw_ioctl(other, DRM_IOCTL_MODE_SETCRTC, &crtc), EACCES);
    FAILS(raw_ioctl(master, DRM_IOCTL_MODE_SETCRTC, &crtc), EOPNOTSUPP);
    struct drm_mode_fb_cmd2 fb2 = { 0 };
    FAILS(raw_ioctl(master, DRM_IOCTL_MODE_GETFB2, &fb2), EINVAL);
    struct drm_mode_create_dumb dumb = { .width = 64, .height = 64, .bpp = 32 };
    FAILS(raw_ioctl(master, DRM_IOCTL_MODE_CREATE_DUMB, &dumb), ENOSYS);
    drmVBlank vbl = { .request = { .type = DRM_VBLANK_RELATIVE } };
    FAILS(drmWaitVBlank(master, &vbl), EOPNOTSUPP);
    uint64_t cap = 0;
    FAILS(drmGetCap(master, DRM_CAP_DUMB_BUFFER, &cap), EOPNOTSUPP);
    CHECK(drmGetCap(master, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);

    /* The render node has none of it. */
    int render = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(render >= 0);
    drm_magic_t magic;
    errno = 0;
    CHECK(drmGetMagic(render, &magic) != 0 && errno == EACCES);
    FAILS(drmSetMaster(render), EACCES);
    struct drm_gem_flink render_flink = { .handle = 1 };
    FAILS(raw_ioctl(render, DRM_IOCTL_GEM_FLINK, &render_flink), EACCES);
    struct drm_gem_open render_open = { .name = 1 };
    FAILS(raw_ioctl(render, DRM_IOCTL_GEM_OPEN, &render_open), EACCES);
    errno = 0;
    CHECK(drmModeGetResources(render) == NULL && errno == EACCES);
    close(render);

    /* Without CAP_SYS_ADMIN (core_setmaster's user cases). */
    struct unprivileged fds = { master, other };
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, unprivileged_checks, &fds) == 0);
    CHECK(pthread_join(thread, NULL) == 0);

    /* core_auth getclient-master-drop: the master closing leaves the
     * others authenticated, and nobody master until a file takes it. */
    CHECK(drmDropMaster(master) == 0 && !is_master(master));
    FAILS(drmDropMaster(master), EINVAL);
    CHECK(drmSetMaster(other) == 0 && is_master(other));
    CHECK(drmDropMaster(other) == 0);
    CHECK(drmSetMaster(master) == 0);
    close(master);
    CHECK(authenticated(other) && !is_master(other));
    int next = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    CHECK(next >= 0 && is_master(next));
    close(next);
    CHECK(drmSetMaster(other) == 0 && is_master(other));
    close(other);

    /* chmod and chown of the node, as IGT's core_setmaster does before it
     * changes users: the kernel's rules (root may; anyone else, EPERM),
     * and stat reports them. */
    struct stat st;
    if (geteuid() == 0) {
        CHECK(chmod("/dev/dri/card0", 0600) == 0);
        CHECK(stat("/dev/dri/card0", &st) == 0 && S_ISCHR(st.st_mode) && (st.st_mode & 07777) == 0600);
        CHECK(chown("/dev/dri/card0", 65534, 65534) == 0);
        CHECK(stat("/dev/dri/card0", &st) == 0 && st.st_uid == 65534 && st.st_gid == 65534);
        /* Another process of the device sees the change (in-process,
         * every process has a device, and nodes, of its own). */
        const char *shim_mode = getenv("AGX_SHIM_MODE");
        int in_process = shim_mode && strcmp(shim_mode, "in-process") == 0;
        FILE *seen = popen("stat -c '%a %u %g' /dev/dri/card0", "r");
        char line[64] = "";
        CHECK(seen && fgets(line, sizeof line, seen) && pclose(seen) == 0);
        if (strcmp(line, in_process ? "666 0 0\n" : "600 65534 65534\n") != 0) {
            fprintf(stderr, "another process saw %s", line);
            exit(1);
        }
        /* open and access check the bits: root passes, another user
         * (neither owner nor in the group) may not read or write. */
        int as_root = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
        CHECK(as_root >= 0);
        close(as_root);
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            if (setgroups(0, NULL) != 0 || setgid(12345) != 0 || setuid(12345) != 0)
                _exit(2);
            errno = 0;
            if (open("/dev/dri/card0", O_RDONLY) != -1 || errno != EACCES)
                _exit(3);
            errno = 0;
            if (access("/dev/dri/card0", R_OK) != -1 || errno != EACCES)
                _exit(4);
            if (access("/dev/dri/card0", F_OK) != 0)
                _exit(5);
            _exit(0);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(fchmodat(AT_FDCWD, "/dev/dri/card0", 0666, 0) == 0);
        CHECK(fchownat(AT_FDCWD, "/dev/dri/card0", 0, 0, 0) == 0);
        CHECK(stat("/dev/dri/card0", &st) == 0 && (st.st_mode & 07777) == 0666 && st.st_uid == 0);
    } else {
        errno = 0;
        CHECK(chmod("/dev/dri/card0", 0600) == -1 && errno == EPERM);
        errno = 0;
        CHECK(chown("/dev/dri/card0", 0, 0) == -1 && errno == EPERM);
    }
    CHECK(stat("/dev/dri/renderD128", &st) == 0 && (st.st_mode & 07777) == 0666);

    printf("ok\n");
    return 0;
}
