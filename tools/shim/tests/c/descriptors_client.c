/* The simulated device must not cost a client its descriptors, nor be
 * disturbed by a client that closes descriptors it did not open (as
 * daemons and test harnesses do after fork). Run under
 * LD_PRELOAD=libagx_shim.so; prints "ok" on success. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define SIZE 65536u
#define PRIVATE_OBJECTS 100000

static int open_descriptors(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n - 1; /* the directory's own */
}

/* A call that keeps its channel busy: a 300 ms wait on a syncobj nobody
 * signals. */
struct waiter {
    int fd;
    uint32_t syncobj;
    atomic_int started;
    int result;
};

static void *wait_a_while(void *arg)
{
    struct waiter *w = arg;
    atomic_store(&w->started, 1);
    w->result = drmSyncobjWait(w->fd, &w->syncobj, 1, seconds_from_now(0) + 300000000,
                               DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, NULL);
    return NULL;
}

static int holds_pattern(const uint32_t *map, uint32_t seed)
{
    for (uint32_t i = 0; i < SIZE / 4; i++)
        if (map[i] != seed + i)
            return 0;
    return 1;
}

/* A fresh image (exec'd with DRM file `fd` open) that fills its
 * descriptor table before its first call: with no channel of its own
 * yet, the call still works, and the program's limit is as it was. */
static int first_call_at_the_limit(int fd)
{
    struct rlimit limit;
    CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0);
    rlim_t soft = limit.rlim_cur;
    int filled = 0;
    for (;;) {
        int f = open("/dev/null", O_RDONLY);
        if (f < 0) {
            CHECK(errno == EMFILE);
            break;
        }
        CHECK(++filled <= (int)soft);
    }
    uint64_t cap = 0;
    for (int i = 0; i < 3; i++)
        CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur == soft);
    CHECK(open("/dev/null", O_RDONLY) < 0 && errno == EMFILE);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "first-call-at-the-limit") == 0)
        return first_call_at_the_limit(atoi(argv[2]));

    /* The common default limit, whatever the test runner's is. */
    struct rlimit limit;
    CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0);
    limit.rlim_cur = 1024;
    CHECK(setrlimit(RLIMIT_NOFILE, &limit) == 0);

    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    struct asahi_vm_create vm = { .kernel_start = 0x7F00000000ull, .kernel_end = 0x7F20000000ull };
    CHECK(drmIoctl(fd, ASAHI_VM_CREATE, &vm) == 0);
    int before = open_descriptors();

    /* Live objects cost no descriptors, the client's or (small private
     * ones, cut from its file's slabs) the device's: 100,000 of them,
     * five times the device's hard descriptor limit on the CI machine and
     * past its 65,530 mappings. */
    for (int i = 0; i < PRIVATE_OBJECTS; i++) {
        struct asahi_gem_create create = { .size = 16384, .flags = GEM_VM_PRIVATE, .vm_id = vm.vm_id };
        CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &create) == 0);
    }
    CHECK(open_descriptors() == before);
    int probe = open("/dev/null", O_RDONLY);
    CHECK(probe >= 0 && probe < 64);
    close(probe);

    /* An exportable object keeps one descriptor, above the client's range. */
    struct asahi_gem_create shared = { .size = SIZE };
    CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &shared) == 0);
    struct asahi_gem_create private = { .size = SIZE, .flags = GEM_VM_PRIVATE, .vm_id = vm.vm_id };
    CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &private) == 0);
    uint32_t *a = map_object(fd, shared.handle, SIZE), *b = map_object(fd, private.handle, SIZE);
    CHECK(a != MAP_FAILED && b != MAP_FAILED);
    for (uint32_t i = 0; i < SIZE / 4; i++) {
        a[i] = 0xA0000000u + i;
        b[i] = 0xB0000000u + i;
    }
    munmap(a, SIZE);
    munmap(b, SIZE);

    /* A close-all loop over the client's range, then new files take the
     * freed numbers. */
    for (int i = 3; i < 1024; i++)
        if (i != fd)
            close(i);
    for (int i = 0; i < 32; i++)
        CHECK(open("/dev/null", O_RDONLY) >= 0);
    a = map_object(fd, shared.handle, SIZE);
    b = map_object(fd, private.handle, SIZE);
    CHECK(a != MAP_FAILED && b != MAP_FAILED);
    CHECK(holds_pattern(a, 0xA0000000u) && holds_pattern(b, 0xB0000000u));
    int prime = -1;
    CHECK(drmPrimeHandleToFD(fd, shared.handle, DRM_CLOEXEC, &prime) == 0 && prime >= 0);
    uint32_t *through_prime = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, prime, 0);
    CHECK(through_prime != MAP_FAILED && holds_pattern(through_prime, 0xA0000000u));
    munmap(through_prime, SIZE);
    close(prime);
    munmap(a, SIZE);
    munmap(b, SIZE);

    /* close_range over everything: the device's own descriptors go. Its
     * memory does not: mapping still works, and exporting fails with
     * EBADF instead of handing out whatever file took the number. */
    CHECK(close_range(fd + 1, ~0u, 0) == 0);
    if (fd > 3)
        CHECK(close_range(3, fd - 1, 0) == 0);
    for (int i = 0; i < 64; i++)
        CHECK(open("/dev/null", O_RDONLY) >= 0);
    a = map_object(fd, shared.handle, SIZE);
    b = map_object(fd, private.handle, SIZE);
    CHECK(a != MAP_FAILED && b != MAP_FAILED);
    CHECK(holds_pattern(a, 0xA0000000u) && holds_pattern(b, 0xB0000000u));
    const char *mode = getenv("AGX_SHIM_MODE");
    if (mode && strcmp(mode, "in-process") == 0) {
        errno = 0;
        CHECK(drmPrimeHandleToFD(fd, shared.handle, DRM_CLOEXEC, &prime) != 0 && errno == EBADF);
    } else {
        /* The device process keeps its descriptors in its own process,
         * out of the client's reach: the export is still the object. */
        CHECK(drmPrimeHandleToFD(fd, shared.handle, DRM_CLOEXEC, &prime) == 0 && prime >= 0);
        through_prime = mmap(NULL, SIZE, PROT_READ, MAP_SHARED, prime, 0);
        CHECK(through_prime != MAP_FAILED && holds_pattern(through_prime, 0xA0000000u));
        munmap(through_prime, SIZE);
        close(prime);
    }

    /* At the descriptor limit every call on an open file still works, as
     * on Linux (IGT's core_auth many-magics opens until EMFILE, then
     * calls): a call takes no descriptor of the caller's. */
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, 0, &syncobj) == 0);
    static int filler[1024];
    int filled = 0;
    limit.rlim_cur = 1024;
    CHECK(setrlimit(RLIMIT_NOFILE, &limit) == 0);
    for (;;) {
        int f = open("/dev/null", O_RDONLY);
        if (f < 0) {
            CHECK(errno == EMFILE);
            break;
        }
        CHECK(filled < 1024);
        filler[filled++] = f;
    }
    uint64_t cap = 0;
    for (int i = 0; i < 100; i++)
        CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    /* A call made while another thread's call holds the process's only
     * channel: it cannot make another at the limit, and waits for that
     * one instead of failing. */
    static struct waiter waiter;
    waiter.fd = fd;
    waiter.syncobj = syncobj;
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, wait_a_while, &waiter) == 0);
    while (!atomic_load(&waiter.started))
        ;
    usleep(20000);
    CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(waiter.result == -ETIME);
    /* New objects too, where the device's descriptors are not the
     * client's (in-process, an object's memory takes a descriptor of the
     * process for a moment: shim.md). */
    const char *shim_mode = getenv("AGX_SHIM_MODE");
    if (!shim_mode || strcmp(shim_mode, "in-process") != 0) {
        struct asahi_gem_create at_limit = { .size = 16384, .flags = GEM_VM_PRIVATE, .vm_id = vm.vm_id };
        CHECK(drmIoctl(fd, ASAHI_GEM_CREATE, &at_limit) == 0 && at_limit.handle != 0);
    }
    for (int i = 0; i < filled; i++)
        close(filler[i]);
    /* The first call of a process at its limit, before it has a channel
     * of its own: an image exec'd with the file. */
    if (!shim_mode || strcmp(shim_mode, "in-process") != 0) {
        pid_t child = fork();
        CHECK(child >= 0);
        if (child == 0) {
            char number[16];
            snprintf(number, sizeof number, "%d", fd);
            if (fcntl(fd, F_SETFD, 0) == 0)
                execl("/proc/self/exe", argv[0], "first-call-at-the-limit", number, (char *)NULL);
            _exit(127);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }

    /* MAP_PRIVATE of a GEM object is refused, as Linux 6.10+ does. */
    struct asahi_gem_mmap_offset mo = { .handle = shared.handle };
    CHECK(drmIoctl(fd, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);
    CHECK(mmap(NULL, SIZE, PROT_READ, MAP_PRIVATE, fd, mo.offset) == MAP_FAILED && errno == EINVAL);

    printf("ok\n");
    return 0;
}
