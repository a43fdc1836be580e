/* An unmodified libdrm client of the asahi UAPI: run under
 * LD_PRELOAD=libagx_shim.so it talks to the simulated GPU. It creates,
 * maps, writes and reads back a buffer through a PRIME fd, uses
 * syncobjs, and checks errno cases. Prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

/* The asahi structs this client uses (include/uapi/drm/asahi_drm.h). */
struct asahi_get_params { uint32_t param_group, pad; uint64_t pointer, size; };
#define ASAHI_GET_PARAMS _IOW('d', 0x40, struct asahi_get_params)

int main(void)
{
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(drmGetNodeTypeFromFd(fd) == DRM_NODE_RENDER);

    drmVersionPtr version = drmGetVersion(fd);
    CHECK(version && strcmp(version->name, "asahi") == 0);
    drmFreeVersion(version);

    uint64_t cap = 0;
    CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ_TIMELINE, &cap) == 0 && cap == 1);
    CHECK(drmGetCap(fd, DRM_CAP_PRIME, &cap) == 0 && cap == 3);

    unsigned char params[592];
    memset(params, 0, sizeof(params));
    struct asahi_get_params gp = { 0, 0, (uintptr_t)params, sizeof(params) };
    CHECK(drmIoctl(fd, ASAHI_GET_PARAMS, &gp) == 0);
    uint32_t generation;
    uint64_t vm_start;
    memcpy(&generation, params + 8, 4);
    memcpy(&vm_start, params + 552, 8);
    CHECK(generation == 13 && vm_start == 0x4000);

    /* A buffer, mapped through the DRM file. */
    struct asahi_gem_create create = { .size = 65536 };
    CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &create) == 0 && create.handle == 1);
    struct asahi_gem_mmap_offset mo = { .handle = create.handle };
    CHECK(drmIoctl(fd, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);
    uint32_t *map = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_SHARED, fd, mo.offset);
    CHECK(map != MAP_FAILED);
    for (int i = 0; i < 16384; i++)
        map[i] = 0xC0DE0000u + i;

    /* Read it back through a PRIME fd. */
    int prime = -1;
    CHECK(drmPrimeHandleToFD(fd, create.handle, DRM_CLOEXEC | DRM_RDWR, &prime) == 0 && prime >= 0);
    uint32_t *shared = mmap(NULL, 65536, PROT_READ, MAP_SHARED, prime, 0);
    CHECK(shared != MAP_FAILED);
    CHECK(shared[0] == 0xC0DE0000u && shared[16383] == 0xC0DE0000u + 16383);
    uint32_t again = 0;
    CHECK(drmPrimeFDToHandle(fd, prime, &again) == 0 && again == create.handle);

    /* Syncobjs. */
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, 0, &syncobj) == 0 && syncobj == 1);
    CHECK(drmSyncobjWait(fd, &syncobj, 1, 0, 0, NULL) == -EINVAL);
    CHECK(drmSyncobjSignal(fd, &syncobj, 1) == 0);
    CHECK(drmSyncobjWait(fd, &syncobj, 1, 0, DRM_SYNCOBJ_WAIT_FLAGS_WAIT_ALL, NULL) == 0);
    uint64_t point = 5;
    CHECK(drmSyncobjTimelineSignal(fd, &syncobj, &point, 1) == 0);
    uint64_t queried = 0;
    CHECK(drmSyncobjQuery(fd, &syncobj, &queried, 1) == 0 && queried == 5);
    CHECK(drmSyncobjDestroy(fd, syncobj) == 0);

    /* errno cases. */
    struct asahi_gem_create zero = { .size = 0 };
    CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &zero) == -1 && errno == EINVAL);
    struct drm_gem_close close_unknown = { .handle = 99 };
    CHECK(drmIoctl(fd, DRM_IOCTL_GEM_CLOSE, &close_unknown) == -1 && errno == EINVAL);
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, (void *)16) == -1 && errno == EFAULT);
    CHECK(drmSyncobjDestroy(fd, 42) == -1 && errno == EINVAL);

    /* The file survives dup and fcntl; it closes with its last fd. */
    int copy = dup(fd);
    int copy2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
    CHECK(copy >= 0 && copy2 >= 100);
    close(fd);
    struct drm_gem_close gc = { .handle = create.handle };
    CHECK(drmIoctl(copy, DRM_IOCTL_GEM_CLOSE, &gc) == 0);
    CHECK(drmIoctl(copy2, DRM_IOCTL_GEM_CLOSE, &gc) == -1 && errno == EINVAL);
    close(copy);
    close(copy2);

    munmap(shared, 65536);
    munmap(map, 65536);
    close(prime);
    printf("ok\n");
    return 0;
}
