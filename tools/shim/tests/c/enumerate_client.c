/* Finds the simulated GPU the way unmodified clients find a DRM device:
 * libdrm's enumeration and name lookups, drmOpenWithType by driver name,
 * the /dev/dri listing, the device's sysfs, and the /proc/self/fd and
 * fdinfo entries of an open DRM file. Prints "ok" on success. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

static int read_text(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = 0;
    fclose(f);
    return (int)n;
}

/* The value of "key:\t..." in fdinfo text, or NULL. */
static const char *fdinfo_value(const char *text, const char *key, char *out, size_t size)
{
    size_t len = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, len) == 0 && line[len] == ':') {
            const char *value = line + len + 1;
            while (*value == '\t' || *value == ' ')
                value++;
            size_t n = strcspn(value, "\n");
            if (n >= size)
                n = size - 1;
            memcpy(out, value, n);
            out[n] = 0;
            return out;
        }
    }
    return NULL;
}

int main(void)
{
    /* The listing: both nodes (and by-path), as udev makes them. */
    DIR *dir = opendir("/dev/dri");
    CHECK(dir != NULL);
    int card = 0, render = 0, by_path = 0;
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        card += strcmp(entry->d_name, "card0") == 0;
        render += strcmp(entry->d_name, "renderD128") == 0;
        by_path += strcmp(entry->d_name, "by-path") == 0;
    }
    closedir(dir);
    CHECK(card == 1 && render == 1 && by_path == 1);

    struct stat card_st, render_st;
    CHECK(stat("/dev/dri/card0", &card_st) == 0 && S_ISCHR(card_st.st_mode));
    CHECK(major(card_st.st_rdev) == 226 && minor(card_st.st_rdev) == 0);
    CHECK(stat("/dev/dri/renderD128", &render_st) == 0 && S_ISCHR(render_st.st_mode));
    CHECK(major(render_st.st_rdev) == 226 && minor(render_st.st_rdev) == 128);
    CHECK(card_st.st_ino != render_st.st_ino && card_st.st_dev == render_st.st_dev);
    struct stat link_st;
    CHECK(stat("/dev/dri/by-path/platform-206400000.gpu-render", &link_st) == 0);
    CHECK(S_ISCHR(link_st.st_mode) && link_st.st_rdev == render_st.st_rdev);
    CHECK(lstat("/dev/dri/by-path/platform-206400000.gpu-render", &link_st) == 0 && S_ISLNK(link_st.st_mode));
    CHECK(access("/dev/dri/renderD128", R_OK | W_OK) == 0);

    /* sysfs: the platform bus, the driver, the device-tree names. */
    char link[PATH_MAX], text[4096];
    ssize_t n = readlink("/sys/dev/char/226:128/device/subsystem", link, sizeof(link) - 1);
    CHECK(n > 0);
    link[n] = 0;
    CHECK(strcmp(strrchr(link, '/'), "/platform") == 0);
    char *real = realpath("/sys/dev/char/226:128/device", NULL);
    CHECK(real && strcmp(real, "/sys/devices/platform/soc/206400000.gpu") == 0);
    free(real);
    char fixed[PATH_MAX];
    CHECK(realpath("/sys/class/drm/card0", fixed) == fixed);
    CHECK(strcmp(fixed, "/sys/devices/platform/soc/206400000.gpu/drm/card0") == 0);
    CHECK(realpath("/sys/dev/char/226:128/device/nonexistent", fixed) == NULL && errno == ENOENT);
    CHECK(read_text("/sys/dev/char/226:128/device/uevent", text, sizeof(text)) > 0);
    CHECK(strstr(text, "DRIVER=asahi\n") && strstr(text, "OF_COMPATIBLE_0=apple,agx-t8103\n"));
    CHECK(read_text("/sys/dev/char/226:0/uevent", text, sizeof(text)) > 0);
    CHECK(strstr(text, "DEVNAME=dri/card0\n"));
    int dev_fd = open("/sys/dev/char/226:128/dev", O_RDONLY);
    CHECK(dev_fd >= 0);
    n = read(dev_fd, text, sizeof(text) - 1);
    close(dev_fd);
    CHECK(n == 8 && memcmp(text, "226:128\n", 8) == 0);

    /* A walk by directory descriptor (as fts, nftw and libudev do). */
    int dri = open("/dev/dri", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    CHECK(dri >= 0);
    struct stat at_st;
    CHECK(fstatat(dri, "renderD128", &at_st, 0) == 0 && S_ISCHR(at_st.st_mode));
    CHECK(at_st.st_rdev == render_st.st_rdev);
    CHECK(fstatat(dri, "by-path", &at_st, 0) == 0 && S_ISDIR(at_st.st_mode));
    int at_fd = openat(dri, "card0", O_RDWR | O_CLOEXEC);
    CHECK(at_fd >= 0 && drmGetNodeTypeFromFd(at_fd) == DRM_NODE_PRIMARY);
    close(at_fd);
    n = readlinkat(dri, "by-path/platform-206400000.gpu-card", link, sizeof(link) - 1);
    CHECK(n == 8 && memcmp(link, "../card0", 8) == 0);
    close(dri);
    /* Nodes are character devices, not to be opened exclusively. */
    errno = 0;
    CHECK(open("/dev/dri/renderD128", O_RDWR | O_EXCL) == -1 && errno == EBUSY);
    FILE *stream = fopen("/dev/dri/renderD128", "r+");
    CHECK(stream != NULL && drmGetNodeTypeFromFd(fileno(stream)) == DRM_NODE_RENDER);
    fclose(stream);

    /* libdrm's enumeration: one platform device with both nodes. */
    drmDevicePtr devices[8];
    int count = drmGetDevices2(0, devices, 8);
    CHECK(count == 1);
    drmDevicePtr device = devices[0];
    CHECK(device->bustype == DRM_BUS_PLATFORM);
    CHECK(device->available_nodes == ((1 << DRM_NODE_PRIMARY) | (1 << DRM_NODE_RENDER)));
    CHECK(strcmp(device->nodes[DRM_NODE_PRIMARY], "/dev/dri/card0") == 0);
    CHECK(strcmp(device->nodes[DRM_NODE_RENDER], "/dev/dri/renderD128") == 0);
    CHECK(strcmp(device->businfo.platform->fullname, "/soc/gpu@206400000") == 0);
    CHECK(strcmp(device->deviceinfo.platform->compatible[0], "apple,agx-t8103") == 0);
    CHECK(strcmp(device->deviceinfo.platform->compatible[1], "apple,agx-g13g") == 0);
    CHECK(device->deviceinfo.platform->compatible[2] == NULL);
    drmFreeDevices(devices, count);

    /* By descriptor. */
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    drmDevicePtr by_fd = NULL;
    CHECK(drmGetDevice2(fd, 0, &by_fd) == 0 && by_fd->bustype == DRM_BUS_PLATFORM);
    CHECK(strcmp(by_fd->nodes[DRM_NODE_RENDER], "/dev/dri/renderD128") == 0);
    drmFreeDevice(&by_fd);
    char *name = drmGetDeviceNameFromFd2(fd);
    CHECK(name && strcmp(name, "/dev/dri/renderD128") == 0);
    free(name);
    name = drmGetPrimaryDeviceNameFromFd(fd);
    CHECK(name && strcmp(name, "/dev/dri/card0") == 0);
    free(name);
    name = drmGetRenderDeviceNameFromFd(fd);
    CHECK(name && strcmp(name, "/dev/dri/renderD128") == 0);
    free(name);
    CHECK(drmGetNodeTypeFromFd(fd) == DRM_NODE_RENDER);

    /* /proc/self/fd reads back as the node; reopening it opens a new
     * file on the same node. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, link, sizeof(link) - 1);
    CHECK(n > 0);
    link[n] = 0;
    CHECK(strcmp(link, "/dev/dri/renderD128") == 0);
    CHECK(realpath(path, fixed) && strcmp(fixed, "/dev/dri/renderD128") == 0);
    errno = 0;
    CHECK(readlink(path, link, 0) == -1 && errno == EINVAL);
    snprintf(path, sizeof(path), "/dev/fd/%d", fd);
    n = readlink(path, link, sizeof(link) - 1);
    CHECK(n == 19 && memcmp(link, "/dev/dri/renderD128", 19) == 0);
    struct stat fd_st;
    CHECK(stat(path, &fd_st) == 0 && fd_st.st_rdev == render_st.st_rdev);
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), fd);
    n = readlink(path, link, sizeof(link) - 1);
    CHECK(n == 19 && memcmp(link, "/dev/dri/renderD128", 19) == 0);
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    int again = open(path, O_RDWR | O_CLOEXEC);
    CHECK(again >= 0 && again != fd);
    CHECK(drmGetNodeTypeFromFd(again) == DRM_NODE_RENDER);

    /* fdinfo: the DRM core's keys, one client id per file. */
    char info[4096], value[128];
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    CHECK(read_text(path, info, sizeof(info)) > 0);
    CHECK(fdinfo_value(info, "drm-driver", value, sizeof(value)) && strcmp(value, "asahi") == 0);
    CHECK(fdinfo_value(info, "flags", value, sizeof(value)));
    CHECK((strtol(value, NULL, 8) & O_ACCMODE) == O_RDWR);
    CHECK(fdinfo_value(info, "drm-engine-compute", value, sizeof(value)) && strcmp(value, "0 ns") == 0);
    CHECK(fdinfo_value(info, "drm-total-memory", value, sizeof(value)) && strcmp(value, "0") == 0);
    errno = 0;
    CHECK(open(path, O_WRONLY) == -1 && errno == EACCES);
    CHECK(fdinfo_value(info, "drm-client-id", value, sizeof(value)));
    long first_id = strtol(value, NULL, 10);
    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", again);
    int info_fd = open(path, O_RDONLY);
    CHECK(info_fd >= 0);
    n = read(info_fd, info, sizeof(info) - 1);
    CHECK(n > 0);
    info[n] = 0;
    close(info_fd);
    CHECK(fdinfo_value(info, "drm-client-id", value, sizeof(value)));
    CHECK(strtol(value, NULL, 10) != first_id);
    close(again);
    close(fd);

    /* By driver name, on each node. */
    fd = drmOpenWithType("asahi", NULL, DRM_NODE_RENDER);
    CHECK(fd >= 0 && drmGetNodeTypeFromFd(fd) == DRM_NODE_RENDER);
    close(fd);
    fd = drmOpenWithType("asahi", NULL, DRM_NODE_PRIMARY);
    CHECK(fd >= 0 && drmGetNodeTypeFromFd(fd) == DRM_NODE_PRIMARY);
    name = drmGetDeviceNameFromFd2(fd);
    CHECK(name && strcmp(name, "/dev/dri/card0") == 0);
    free(name);
    close(fd);
    CHECK(drmOpenWithType("i915", NULL, DRM_NODE_RENDER) < 0);

    printf("ok\n");
    return 0;
}
