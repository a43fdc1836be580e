/* In the in-process mode the device lives in the process that opened it:
 * a child forked after that gets ENODEV from every use of the device (and
 * a kernel-log line saying to use the device process), never a hang, and
 * the parent's device keeps working. Prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

int main(void)
{
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    struct asahi_gem_create create = { .size = 16384 };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &create) == 0);
    struct asahi_gem_mmap_offset mo = { .handle = create.handle };
    CHECK(ioctl(fd, ASAHI_GEM_MMAP_OFFSET, &mo) == 0);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        struct asahi_gem_create more = { .size = 16384 };
        errno = 0;
        CHECK(ioctl(fd, ASAHI_GEM_CREATE, &more) == -1 && errno == ENODEV);
        errno = 0;
        CHECK(mmap(NULL, 16384, PROT_READ, MAP_SHARED, fd, mo.offset) == MAP_FAILED && errno == ENODEV);
        errno = 0;
        CHECK(open("/dev/dri/renderD128", O_RDWR) == -1 && errno == ENODEV);
        /* Closing the inherited descriptor is fine. */
        CHECK(close(fd) == 0);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);

    /* The parent's device is untouched. */
    uint32_t *map = mmap(NULL, 16384, PROT_READ | PROT_WRITE, MAP_SHARED, fd, mo.offset);
    CHECK(map != MAP_FAILED);
    map[0] = 42;
    CHECK(map[0] == 42);
    struct asahi_gem_create again = { .size = 16384 };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &again) == 0 && again.handle == 2);
    printf("ok\n");
    return 0;
}
