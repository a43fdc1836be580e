/* The device is served at every point of a process's life, as the kernel
 * serves it: a DRM file is used (ioctls, an mmap, a PRIME export, a sync
 * file, closes) from the point the first argument names, and the process
 * must exit 0 having printed "ok":
 *
 *   atexit              an atexit handler, after main returned
 *   thread-destructor   a thread_local destructor (__cxa_thread_atexit, as
 *                       C++ and Rust register theirs) of the main thread,
 *                       registered before the first call, so that it runs
 *                       after every destructor the device's own code
 *                       registered on that thread (Mesa destroys its
 *                       context from such a point at exit)
 *   thread-destructor-in-thread
 *                       the same on a thread that returns
 *   pthread-key         a pthread_key destructor of a thread that returns
 *                       (these run after its thread_local destructors)
 *   library-destructor  a destructor function (fini_array), run at exit
 *   signal-handler      a signal handler interrupting main (which sleeps)
 *   thread-running-at-exit
 *                       a thread still making calls while main returns;
 *                       main returns 0 once the thread has made some
 *   all                 every one of the above in one process
 *
 * Each use opens nothing new: the file was opened by main, and the last
 * use closes it (unless a thread still uses it). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

/* A check that may run where exit() must not be called again (an exit
 * handler, a destructor, a signal handler). */
#define HCHECK(cond) do { if (!(cond)) { char m[160]; int n = snprintf(m, sizeof(m), "check failed at line %d: %s (errno %d)\n", __LINE__, #cond, errno); if (write(2, m, n) < 0) {} _exit(1); } } while (0)

extern void *__dso_handle;
int __cxa_thread_atexit_impl(void (*func)(void *), void *arg, void *dso);

static int device = -1;
/* How many uses are still to come before the process may say "ok": main's
 * own last one, and one for each point asked for. */
static atomic_int uses_left = 1;
static atomic_int thread_uses;
/* A thread still uses the file when the process exits: nothing closes it. */
static int keep_open;

/* Uses the DRM file: VERSION, GEM_CREATE, MMAP_OFFSET, mmap and a write,
 * a PRIME export read back through its own mapping, a syncobj signalled,
 * exported as a sync file, imported and waited on, and the closes. */
static void use_device(void)
{
    drmVersionPtr version = drmGetVersion(device);
    HCHECK(version && strcmp(version->name, "asahi") == 0);
    drmFreeVersion(version);

    struct asahi_gem_create create = { .size = 16384 };
    HCHECK(ioctl(device, ASAHI_GEM_CREATE, &create) == 0);
    struct asahi_gem_mmap_offset mo = { .handle = create.handle };
    HCHECK(ioctl(device, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);
    uint32_t *map = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, device, (off_t)mo.offset);
    HCHECK(map != MAP_FAILED);
    map[7] = 0xD15EA5E;

    int prime = -1;
    HCHECK(drmPrimeHandleToFD(device, create.handle, DRM_CLOEXEC, &prime) == 0 && prime >= 0);
    uint32_t *shared = mmap(NULL, 16384, PROT_READ, MAP_SHARED, prime, 0);
    HCHECK(shared != MAP_FAILED && shared[7] == 0xD15EA5E);
    HCHECK(munmap(shared, 16384) == 0);
    HCHECK(close(prime) == 0);
    HCHECK(munmap(map, 16384) == 0);
    struct drm_gem_close gem_close = { .handle = create.handle };
    HCHECK(ioctl(device, DRM_IOCTL_GEM_CLOSE, &gem_close) == 0);

    uint32_t syncobj = 0;
    HCHECK(drmSyncobjCreate(device, DRM_SYNCOBJ_CREATE_SIGNALED, &syncobj) == 0);
    int sync_file = -1;
    HCHECK(drmSyncobjExportSyncFile(device, syncobj, &sync_file) == 0 && sync_file >= 0);
    uint32_t imported = 0;
    HCHECK(drmSyncobjCreate(device, 0, &imported) == 0);
    HCHECK(drmSyncobjImportSyncFile(device, imported, sync_file) == 0);
    HCHECK(drmSyncobjWait(device, &imported, 1, seconds_from_now(10), 0, NULL) == 0);
    HCHECK(close(sync_file) == 0);
    HCHECK(drmSyncobjDestroy(device, syncobj) == 0);
    HCHECK(drmSyncobjDestroy(device, imported) == 0);

    /* Bad input still gets its errno. */
    struct drm_gem_close unknown = { .handle = 0xFFFF };
    errno = 0;
    HCHECK(ioctl(device, DRM_IOCTL_GEM_CLOSE, &unknown) == -1 && errno == EINVAL);
    errno = 0;
    HCHECK(ioctl(device, ASAHI_GEM_CREATE, (void *)16) == -1 && errno == EFAULT);
}

/* Counts a use done; the last one closes the file and says "ok". */
static void used(void)
{
    if (atomic_fetch_sub(&uses_left, 1) == 1) {
        if (!keep_open)
            HCHECK(close(device) == 0);
        static const char ok[] = "ok\n";
        HCHECK(write(1, ok, 3) == 3);
    }
}

static void use_and_count(void)
{
    use_device();
    used();
}

static void at_exit(void) { use_and_count(); }
static void thread_destructor(void *arg) { (void)arg; use_and_count(); }
static void key_destructor(void *value) { (void)value; use_and_count(); }

static int want_library_destructor;
__attribute__((destructor)) static void library_destructor(void)
{
    if (want_library_destructor)
        use_and_count();
}

static void on_signal(int signal)
{
    (void)signal;
    int saved = errno;
    use_and_count();
    errno = saved;
}

static void *thread_with_destructor(void *arg)
{
    (void)arg;
    HCHECK(__cxa_thread_atexit_impl(thread_destructor, NULL, &__dso_handle) == 0);
    use_device();
    return NULL;
}

static void *thread_with_key(void *key)
{
    HCHECK(pthread_setspecific(*(pthread_key_t *)key, (void *)1) == 0);
    use_device();
    return NULL;
}

__attribute__((noreturn)) static void *thread_until_exit(void *arg)
{
    (void)arg;
    for (;;) {
        use_device();
        atomic_fetch_add(&thread_uses, 1);
    }
}

static int wants(const char *what, const char *name)
{
    return strcmp(what, name) == 0 || strcmp(what, "all") == 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    const char *what = argv[1];
    int known = 0;

    /* Registered before the device's code runs on this thread, so that it
     * runs after that code's own thread_local destructors. */
    if (wants(what, "thread-destructor")) {
        CHECK(__cxa_thread_atexit_impl(thread_destructor, NULL, &__dso_handle) == 0);
        atomic_fetch_add(&uses_left, 1);
        known = 1;
    }

    device = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(device >= 0);
    use_device();

    if (wants(what, "atexit")) {
        CHECK(atexit(at_exit) == 0);
        atomic_fetch_add(&uses_left, 1);
        known = 1;
    }
    if (wants(what, "library-destructor")) {
        want_library_destructor = 1;
        atomic_fetch_add(&uses_left, 1);
        known = 1;
    }
    if (wants(what, "thread-destructor-in-thread")) {
        atomic_fetch_add(&uses_left, 1);
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, thread_with_destructor, NULL) == 0);
        CHECK(pthread_join(thread, NULL) == 0);
        known = 1;
    }
    if (wants(what, "pthread-key")) {
        static pthread_key_t key;
        CHECK(pthread_key_create(&key, key_destructor) == 0);
        atomic_fetch_add(&uses_left, 1);
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, thread_with_key, &key) == 0);
        CHECK(pthread_join(thread, NULL) == 0);
        known = 1;
    }
    if (wants(what, "signal-handler")) {
        struct sigaction action;
        memset(&action, 0, sizeof(action));
        action.sa_handler = on_signal;
        CHECK(sigaction(SIGALRM, &action, NULL) == 0);
        atomic_fetch_add(&uses_left, 1);
        int before = atomic_load(&uses_left);
        alarm(1);
        /* The handler runs while main is in a system call of its own. */
        while (atomic_load(&uses_left) == before)
            pause();
        known = 1;
    }
    if (wants(what, "thread-running-at-exit")) {
        keep_open = 1;
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, thread_until_exit, NULL) == 0);
        CHECK(pthread_detach(thread) == 0);
        while (atomic_load(&thread_uses) < 3)
            usleep(1000);
        known = 1;
    }
    CHECK(known);
    /* main's own use (with nothing registered for after main, the file is
     * closed now). */
    used();
    fflush(stdout);
    return 0;
}
