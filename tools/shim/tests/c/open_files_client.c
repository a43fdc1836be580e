/* An open DRM file must cost the device process no thread: a client may
 * hold as many files as its descriptor limit allows (IGT's core_auth
 * many-magics opens the card node until EMFILE), and each one's thread
 * would let one client run the device out of threads. Opens FILES render
 * nodes, uses each, and checks the device process's thread count (its pid
 * from SO_PEERCRED on a DRM file, which is a socket in the device-process
 * mode) grew by less than a tenth of them; then closes them and checks
 * the device still serves a new file. Run under LD_PRELOAD=libagx_shim.so;
 * prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define FILES 600

static int open_render_node(void)
{
    return open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
}

int main(void)
{
    struct rlimit limit;
    CHECK(getrlimit(RLIMIT_NOFILE, &limit) == 0);
    if (limit.rlim_cur < FILES + 64 && limit.rlim_max >= FILES + 64) {
        limit.rlim_cur = FILES + 64;
        CHECK(setrlimit(RLIMIT_NOFILE, &limit) == 0);
    }
    int first = open_render_node();
    CHECK(first >= 0);
    pid_t device = device_pid(first);
    if (device < 0) {
        /* The in-process mode: the device's threads are this process's. */
        puts("ok");
        return 0;
    }
    long before = threads_of(device);
    CHECK(before > 0);
    int fds[FILES];
    for (int i = 0; i < FILES; i++) {
        fds[i] = open_render_node();
        CHECK(fds[i] >= 0);
        drmVersionPtr version = drmGetVersion(fds[i]);
        CHECK(version && strcmp(version->name, "asahi") == 0);
        drmFreeVersion(version);
    }
    long during = threads_of(device);
    if (during - before >= FILES / 10) {
        fprintf(stderr, "the device has %ld threads with %d more files open, %ld before\n",
                during, FILES, before);
        return 1;
    }
    for (int i = 0; i < FILES; i++)
        CHECK(close(fds[i]) == 0);
    close(first);
    /* Closed files are released (a new one opens and works). */
    int again = open_render_node();
    CHECK(again >= 0);
    drmVersionPtr version = drmGetVersion(again);
    CHECK(version && strcmp(version->name, "asahi") == 0);
    drmFreeVersion(version);
    close(again);
    puts("ok");
    return 0;
}
