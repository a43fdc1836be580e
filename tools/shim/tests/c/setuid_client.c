/* An open file keeps working for whoever holds it: a child that inherits
 * the card node's file and then changes its user (as IGT's core_setmaster
 * master-drop-set-shared-fd does) still makes calls on it, and the
 * kernel's checks, not the device directory's permissions, decide what
 * it may do: SET_MASTER is EACCES for it (it neither opened the file nor
 * has CAP_SYS_ADMIN), and allowed again for the parent. So for a child that
 * changes its user and then execs a new image without AGX_SIM_DEVICE_DIR
 * (which then looks for its own user's device, in another directory): the
 * inherited file is still the old device's. Run as root under
 * LD_PRELOAD=libagx_shim.so; prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define NOBODY 65534

/* As the child: the calls a process that changed its user may make on
 * the file it inherited, and the one it may not. */
static void use_as_nobody(int fd)
{
    CHECK(getuid() == NOBODY && geteuid() == NOBODY);
    for (int i = 0; i < 10; i++) {
        uint64_t cap = 0;
        CHECK(drmGetCap(fd, DRM_CAP_SYNCOBJ, &cap) == 0 && cap == 1);
    }
    errno = 0;
    CHECK(drmSetMaster(fd) == -1 && errno == EACCES);
    drmVersionPtr version = drmGetVersion(fd);
    CHECK(version != NULL);
    drmFreeVersion(version);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "exec-child") == 0) {
        use_as_nobody(atoi(argv[2]));
        _exit(0);
    }
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
        use_as_nobody(fd);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        int inherited = dup(fd); /* without O_CLOEXEC */
        CHECK(inherited >= 0);
        CHECK(setgid(NOBODY) == 0 && setuid(NOBODY) == 0);
        CHECK(unsetenv("AGX_SIM_DEVICE_DIR") == 0);
        char number[16];
        snprintf(number, sizeof number, "%d", inherited);
        execl("/proc/self/exe", argv[0], "exec-child", number, (char *)NULL);
        _exit(127);
    }
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(drmSetMaster(fd) == 0);
    close(fd);
    printf("ok\n");
    return 0;
}
