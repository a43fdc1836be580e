/* An open file keeps working for whoever holds it: a child that inherits
 * the card node's file and then changes its user (as IGT's core_setmaster
 * master-drop-set-shared-fd does) still makes calls on it, and the
 * kernel's checks, not the device directory's permissions, decide what
 * it may do: SET_MASTER is EACCES for it (it neither opened the file nor
 * has CAP_SYS_ADMIN), and allowed again for the parent. Run as root under
 * LD_PRELOAD=libagx_shim.so; prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define NOBODY 65534

int main(void)
{
    CHECK(geteuid() == 0);
    int fd = open("/dev/dri/card0", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    uint64_t cap = 0;
    CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    /* The first opener is master; it steps down so that the child's
     * SET_MASTER is decided by permission alone. */
    CHECK(drmDropMaster(fd) == 0);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0);
        CHECK(getuid() == NOBODY && geteuid() == NOBODY);
        for (int i = 0; i < 10; i++) {
            cap = 0;
            CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
        }
        errno = 0;
        CHECK(drmSetMaster(fd) == -1 && errno == EACCES);
        drmVersionPtr version = drmGetVersion(fd);
        CHECK(version != NULL);
        drmFreeVersion(version);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(drmSetMaster(fd) == 0);
    close(fd);
    printf("ok\n");
    return 0;
}
