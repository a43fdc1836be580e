/* In the device-process mode a forked child shares its parent's DRM file
 * as on Linux: the same handles and objects, a syncobj one process
 * signals wakes the other's wait, an object the child made outlives it in
 * the file; and a file inherited across exec keeps working, so two
 * processes render the README's scene through it at once (each an exec'd
 * scene client, given the descriptor). Usage: shared_file_client
 * SCENE_CLIENT. Run under LD_PRELOAD=libagx_shim.so; prints "ok". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define SIZE 16384

static uint32_t create(int fd)
{
    struct asahi_gem_create c = { .size = SIZE };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &c) == 0);
    return c.handle;
}

static void fill(uint32_t *map, uint32_t base)
{
    for (uint32_t i = 0; i < SIZE / 4; i++)
        map[i] = base + i;
}

static int holds(const uint32_t *map, uint32_t base)
{
    for (uint32_t i = 0; i < SIZE / 4; i++)
        if (map[i] != base + i)
            return 0;
    return 1;
}

static void wait_ok(pid_t child)
{
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Runs the scene client on the inherited descriptor, its "ok" silenced. */
static pid_t spawn_scene(const char *scene, int fd)
{
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        char number[16];
        snprintf(number, sizeof number, "%d", fd);
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 1) < 0)
            _exit(126);
        execl(scene, scene, "--fd", number, (char *)NULL);
        _exit(127);
    }
    return child;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2);
    /* Not close-on-exec: the scene clients inherit it. */
    int fd = open("/dev/dri/renderD128", O_RDWR);
    CHECK(fd >= 0);
    uint32_t first = create(fd);
    fill(map_object(fd, first, SIZE), 0xA0000000u);
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, 0, &syncobj) == 0);

    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* The parent's handle names the same object here. */
        CHECK(holds(map_object(fd, first, SIZE), 0xA0000000u));
        /* Handles are the file's: the next one follows the parent's. */
        uint32_t mine = create(fd);
        CHECK(mine == first + 1);
        fill(map_object(fd, mine, SIZE), 0xC0000000u);
        CHECK(drmSyncobjSignal(fd, &syncobj, 1) == 0);
        _exit(0);
    }
    /* The child's signal ends this wait on the shared syncobj (which has
     * no fence until then: WAIT_FOR_SUBMIT). */
    CHECK(drmSyncobjWait(fd, &syncobj, 1, seconds_from_now(10),
                         DRM_SYNCOBJ_WAIT_FLAGS_WAIT_FOR_SUBMIT, NULL) == 0);
    wait_ok(child);
    /* The child's object lives on in the file after the child is gone. */
    CHECK(holds(map_object(fd, first + 1, SIZE), 0xC0000000u));
    CHECK(create(fd) == first + 2);

    /* Two processes submit through the one file at once. */
    pid_t a = spawn_scene(argv[1], fd);
    pid_t b = spawn_scene(argv[1], fd);
    wait_ok(a);
    wait_ok(b);
    /* And it still works here. */
    CHECK(create(fd) > first + 2);
    CHECK(close(fd) == 0);
    printf("ok\n");
    return 0;
}
