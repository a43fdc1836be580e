/* What the C test clients share: the failure check, the part of the asahi
 * UAPI (drm/asahi_drm.h) they use, and small helpers. Each client is one
 * file compiled on its own; this header comes along from its directory. */
#ifndef AGX_TEST_H
#define AGX_TEST_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* Fails the client, saying where and with which errno. */
#define CHECK(cond) do { if (!(cond)) { fprintf(stderr, "check failed at line %d: %s (errno %d)\n", __LINE__, #cond, errno); exit(1); } } while (0)

struct asahi_vm_create { uint64_t kernel_start, kernel_end; uint32_t vm_id, pad; };
struct asahi_gem_create { uint64_t size; uint32_t flags, vm_id, handle, pad; };
struct asahi_gem_mmap_offset { uint32_t handle, flags; uint64_t offset; };
#define ASAHI_VM_CREATE _IOWR('d', 0x42, struct asahi_vm_create)
#define ASAHI_GEM_CREATE _IOWR('d', 0x45, struct asahi_gem_create)
#define ASAHI_GEM_MMAP_OFFSET _IOWR('d', 0x46, struct asahi_gem_mmap_offset)
/* drm_asahi_gem_flags: the object is private to `vm_id`. */
#define GEM_VM_PRIVATE (1u << 1)

/* Maps `size` bytes of GEM object `handle` of DRM file `fd`, shared and
 * writable. */
static inline uint32_t *map_object(int fd, uint32_t handle, size_t size)
{
    struct asahi_gem_mmap_offset mo = { .handle = handle };
    CHECK(ioctl(fd, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);
    uint32_t *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)mo.offset);
    CHECK(map != MAP_FAILED);
    return map;
}

/* The absolute CLOCK_MONOTONIC time `s` seconds from now, in ns (a
 * syncobj wait's deadline). */
static inline int64_t seconds_from_now(int s)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)(now.tv_sec + s) * 1000000000 + now.tv_nsec;
}

/* The device process serving DRM file `fd` (its socket's peer), or -1 in
 * the in-process mode, where the file is no socket and there is none. */
static inline pid_t device_pid(int fd)
{
    struct ucred device;
    socklen_t len = sizeof device;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &device, &len) != 0)
        return -1;
    return device.pid;
}

/* How many threads process `pid` has now (-1 if it cannot be read). */
static inline long threads_of(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *status = fopen(path, "r");
    if (!status)
        return -1;
    char line[256];
    long threads = -1;
    while (fgets(line, sizeof line, status))
        if (sscanf(line, "Threads: %ld", &threads) == 1)
            break;
    fclose(status);
    return threads;
}

#endif
