/* The render node's file operations and blocking calls behave as Linux's:
 * with no DRM events, read() blocks (EAGAIN when non-blocking), poll()
 * reports nothing, write() is EINVAL; a signal interrupts a blocking
 * read or syncobj wait with EINTR unless its handler has SA_RESTART;
 * SYNCOBJ_EVENTFD signals an eventfd; mmap of a file opened read-only
 * refuses writable shared mappings with EACCES. Raw ioctl() is used where libdrm's
 * drmIoctl would retry EINTR. Run under LD_PRELOAD=libagx_shim.so;
 * prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "agx_test.h"

struct syncobj_create { uint32_t handle, flags; };
struct syncobj_array { uint64_t handles; uint32_t count_handles, pad; };
struct syncobj_wait {
    uint64_t handles;
    int64_t timeout_nsec;
    uint32_t count_handles, flags, first_signaled, pad;
    uint64_t deadline_nsec;
};
struct syncobj_eventfd { uint32_t handle, flags; uint64_t point; int32_t fd; uint32_t pad; };
#define SYNCOBJ_CREATE _IOWR('d', 0xBF, struct syncobj_create)
#define SYNCOBJ_WAIT _IOWR('d', 0xC3, struct syncobj_wait)
#define SYNCOBJ_SIGNAL _IOWR('d', 0xC5, struct syncobj_array)
#define SYNCOBJ_EVENTFD _IOWR('d', 0xCF, struct syncobj_eventfd)
#define WAIT_FOR_SUBMIT (1u << 1)

static atomic_int interrupts;
static atomic_int stop_interrupting;
static pthread_t main_thread;

static void on_signal(int sig)
{
    (void)sig;
    atomic_fetch_add(&interrupts, 1);
}

static void set_handler(int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
}

/* Sends SIGUSR1 to the main thread every 10 ms, so that one arrives
 * while it sleeps in the call under test. */
static void *interrupter(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop_interrupting)) {
        usleep(10000);
        pthread_kill(main_thread, SIGUSR1);
    }
    return NULL;
}

static pthread_t start_interrupting(void)
{
    pthread_t t;
    atomic_store(&stop_interrupting, 0);
    atomic_store(&interrupts, 0);
    pthread_create(&t, NULL, interrupter, NULL);
    return t;
}

static void stop_interrupting_now(pthread_t t)
{
    atomic_store(&stop_interrupting, 1);
    pthread_join(t, NULL);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int wait_one(int fd, uint32_t handle, int64_t deadline_ns)
{
    struct syncobj_wait w = {
        .handles = (uint64_t)(uintptr_t)&handle,
        .timeout_nsec = deadline_ns,
        .count_handles = 1,
        .flags = WAIT_FOR_SUBMIT,
    };
    return ioctl(fd, SYNCOBJ_WAIT, &w);
}

int main(void)
{
    main_thread = pthread_self();
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);

    /* The file's own operations. */
    CHECK((fcntl(fd, F_GETFL) & O_ACCMODE) == O_RDWR);
    CHECK(write(fd, "x", 1) == -1 && errno == EINVAL);
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLPRI };
    CHECK(poll(&p, 1, 0) == 0 && p.revents == 0);
    char buf[64];
    CHECK(fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
    CHECK(read(fd, buf, sizeof buf) == -1 && errno == EAGAIN);
    CHECK(fcntl(fd, F_SETFL, 0) == 0);

    /* A blocking read (there are never events) ends with a signal. */
    set_handler(0);
    pthread_t t = start_interrupting();
    CHECK(read(fd, buf, sizeof buf) == -1 && errno == EINTR);
    stop_interrupting_now(t);

    /* A blocking syncobj wait: EINTR without SA_RESTART... */
    struct syncobj_create c = { 0 };
    CHECK(ioctl(fd, SYNCOBJ_CREATE, &c) == 0);
    t = start_interrupting();
    int64_t started = now_ns();
    CHECK(wait_one(fd, c.handle, started + 10000000000LL) == -1 && errno == EINTR);
    CHECK(now_ns() - started < 5000000000LL);
    stop_interrupting_now(t);

    /* ...and restarted with it, to the same absolute deadline. */
    set_handler(SA_RESTART);
    t = start_interrupting();
    started = now_ns();
    CHECK(wait_one(fd, c.handle, started + 300000000LL) == -1 && errno == ETIME);
    CHECK(now_ns() - started >= 300000000LL);
    stop_interrupting_now(t);
    CHECK(atomic_load(&interrupts) > 3);

    /* SYNCOBJ_EVENTFD: one increment when the syncobj signals. */
    int efd = eventfd(0, EFD_CLOEXEC);
    CHECK(efd >= 0);
    struct syncobj_eventfd e = { .handle = c.handle, .flags = 1, .fd = efd };
    CHECK(ioctl(fd, SYNCOBJ_EVENTFD, &e) == -1 && errno == EINVAL);
    e.flags = 0;
    CHECK(ioctl(fd, SYNCOBJ_EVENTFD, &e) == 0);
    struct syncobj_array a = { .handles = (uint64_t)(uintptr_t)&c.handle, .count_handles = 1 };
    CHECK(ioctl(fd, SYNCOBJ_SIGNAL, &a) == 0);
    struct pollfd ep = { .fd = efd, .events = POLLIN };
    CHECK(poll(&ep, 1, 5000) == 1);
    uint64_t count = 0;
    CHECK(read(efd, &count, sizeof count) == 8 && count == 1);

    close(efd);
    /* A DRM file is no socket. */
    CHECK(shutdown(fd, SHUT_RDWR) == -1 && errno == ENOTSOCK);
    close(fd);

    /* mmap follows the file's access mode, as do_mmap checks it: a file
     * opened read-only maps objects for reading only. */
    int ro = open("/dev/dri/renderD128", O_RDONLY | O_CLOEXEC);
    CHECK(ro >= 0);
    struct asahi_gem_create gc = { .size = 16384 };
    CHECK(ioctl(ro, ASAHI_GEM_CREATE, &gc) == 0);
    struct asahi_gem_mmap_offset mo = { .handle = gc.handle };
    CHECK(ioctl(ro, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);
    CHECK(mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, ro, (off_t)mo.offset) == MAP_FAILED
          && errno == EACCES);
    void *readable = mmap(NULL, 16384, PROT_READ, MAP_SHARED, ro, (off_t)mo.offset);
    CHECK(readable != MAP_FAILED);
    const char *mode = getenv("AGX_SHIM_MODE");
    /* In the device-process mode the host kernel itself keeps it so: the
     * mapping cannot be made writable. */
    if (!mode || strcmp(mode, "in-process") != 0)
        CHECK(mprotect(readable, 16384, PROT_READ | PROT_WRITE) == -1 && errno == EACCES);
    CHECK(munmap(readable, 16384) == 0);
    close(ro);
    printf("ok\n");
    return 0;
}
