/* A client's call channels are capped in the device process (each is a
 * device thread), and a call past the cap still works, on a channel
 * another call gives back. Run under LD_PRELOAD=libagx_shim.so with
 * AGX_CLIENT_CHANNEL_LIMIT=16 in a device directory of its own: 64
 * threads each wait 300 ms on a syncobj nobody signals, all at once; every
 * wait must time out (ETIME, not ENODEV) and the device process must not
 * have grown by a thread per waiter. Prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define WAITERS 64
#define LIMIT 16

static int fd;
static uint32_t syncobj;

static void *wait_a_while(void *arg)
{
    int *result = arg;
    *result = drmSyncobjWait(fd, &syncobj, 1, seconds_from_now(0) + 300000000,
                             DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, NULL);
    return NULL;
}

int main(void)
{
    fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    pid_t device = device_pid(fd);
    if (device < 0) {
        /* The in-process mode: there is no device process. */
        puts("ok");
        return 0;
    }
    CHECK(drmSyncobjCreate(fd, 0, &syncobj) == 0);
    long before = threads_of(device);
    CHECK(before > 0);
    pthread_t threads[WAITERS];
    int results[WAITERS];
    for (int i = 0; i < WAITERS; i++)
        CHECK(pthread_create(&threads[i], NULL, wait_a_while, &results[i]) == 0);
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 150000000};
    nanosleep(&pause, NULL);
    long during = threads_of(device);
    for (int i = 0; i < WAITERS; i++)
        CHECK(pthread_join(threads[i], NULL) == 0);
    for (int i = 0; i < WAITERS; i++) {
        if (results[i] != -ETIME) {
            fprintf(stderr, "wait %d: %d, expected -ETIME\n", i, results[i]);
            return 1;
        }
    }
    /* The limit's channels, plus the hangup watcher and the odd thread
     * between calls. */
    if (during - before > LIMIT + 4) {
        fprintf(stderr, "the device had %ld threads during %d waits, %ld before\n", during,
                WAITERS, before);
        return 1;
    }
    /* The device still serves this client. */
    drmVersionPtr version = drmGetVersion(fd);
    CHECK(version && strcmp(version->name, "asahi") == 0);
    drmFreeVersion(version);
    puts("ok");
    return 0;
}
