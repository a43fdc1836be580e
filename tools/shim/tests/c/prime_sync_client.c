/* Two processes, each with its own DRM file on the one simulated GPU,
 * share a buffer and a fence as Linux clients do: the exporter sends a
 * PRIME fd and a sync file over a Unix socket (SCM_RIGHTS); the importer
 * maps the buffer through its own file, writes into it, imports the sync
 * file into a syncobj and waits on it, and reads the fence's status with
 * SYNC_IOC_FILE_INFO. The sync file polls as Linux's does: POLLIN once
 * signalled, never POLLOUT. With OTHER_DEVICE_DIR set, a third process
 * on another simulated GPU (the device in that directory) imports the
 * sync file too, as a compositor imports another driver's fence. The
 * memfd behind a mapping of a VM-private object does not import as a
 * PRIME buffer. Both processes declare their work on the buffer and ask
 * for the fences their access waits for, as Mesa's implicit sync does
 * (the dma-buf sync-file ioctls).
 * Device-process mode; with --buffer-fences, only that check, in one
 * process, in either mode. Prints "ok" on success. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/dma-buf.h>
#include <linux/sync_file.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xf86drm.h>
#include "agx_test.h"

#define SIZE 16384

static void send_fds(int socket, int a, int b)
{
    char byte = 'x';
    struct iovec iov = { &byte, 1 };
    union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(2 * sizeof(int));
    int fds[2] = { a, b };
    memcpy(CMSG_DATA(c), fds, sizeof fds);
    CHECK(sendmsg(socket, &msg, 0) == 1);
}

static void recv_fds(int socket, int *a, int *b)
{
    char byte;
    struct iovec iov = { &byte, 1 };
    union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } control;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control.buf, .msg_controllen = sizeof control.buf };
    CHECK(recvmsg(socket, &msg, MSG_CMSG_CLOEXEC) == 1);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    CHECK(c && c->cmsg_type == SCM_RIGHTS && c->cmsg_len == CMSG_LEN(2 * sizeof(int)));
    int fds[2];
    memcpy(fds, CMSG_DATA(c), sizeof fds);
    *a = fds[0];
    *b = fds[1];
}

/* The memfd behind a CPU mapping of a VM-private object (reopened
 * through /proc/self/map_files, which needs CAP_SYS_ADMIN) is not a PRIME
 * buffer: importing it is EINVAL, so a private object cannot be aliased
 * into a shareable handle. */
static void check_mapping_is_not_a_buffer(int fd)
{
    struct asahi_vm_create vm = { .kernel_start = 0x7F00000000ull, .kernel_end = 0x7F20000000ull };
    CHECK(ioctl(fd, ASAHI_VM_CREATE, &vm) == 0);
    struct asahi_gem_create c = { .size = SIZE, .flags = GEM_VM_PRIVATE, .vm_id = vm.vm_id };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &c) == 0);
    const uint32_t *map = map_object(fd, c.handle, SIZE);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx",
             (unsigned long)(uintptr_t)map, (unsigned long)(uintptr_t)map + SIZE);
    int memfd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(memfd >= 0);
    uint32_t handle = 0;
    CHECK(drmPrimeFDToHandle(fd, memfd, &handle) == -1 && errno == EINVAL);
    close(memfd);
    CHECK(munmap((void *)map, SIZE) == 0);
}

/* A sync file polls readable, and only readable, once signalled. */
static void check_signalled_poll(int sync_file)
{
    struct pollfd p = { .fd = sync_file, .events = POLLIN | POLLOUT };
    CHECK(poll(&p, 1, 10000) == 1 && p.revents == POLLIN);
}

/* Imports `sync_file` into a new syncobj of `fd`, waits on it and checks
 * its status (signalled without error): the syncobj. */
static uint32_t import_and_wait(int fd, int sync_file)
{
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, 0, &syncobj) == 0);
    CHECK(drmSyncobjImportSyncFile(fd, syncobj, sync_file) == 0);
    CHECK(drmSyncobjWait(fd, &syncobj, 1, seconds_from_now(10), 0, NULL) == 0);
    struct sync_file_info info = { 0 };
    CHECK(ioctl(sync_file, SYNC_IOC_FILE_INFO, &info) == 0 && info.status == 1);
    return syncobj;
}

/* The fences an access of `buffer` (a PRIME fd) waits for, as a sync
 * file, checked signalled (nothing in flight here: the sync files this
 * client can make are signalled ones). */
static void check_no_fences(int buffer, uint32_t flags)
{
    struct dma_buf_export_sync_file e = { .flags = flags, .fd = -1 };
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, &e) == 0 && e.fd >= 0);
    struct sync_file_info info = { 0 };
    CHECK(ioctl(e.fd, SYNC_IOC_FILE_INFO, &info) == 0 && info.status == 1);
    check_signalled_poll(e.fd);
    CHECK(fcntl(e.fd, F_GETFD) == FD_CLOEXEC);
    close(e.fd);
}

/* Implicit sync on `buffer`, a PRIME fd of an object of DRM file `fd`:
 * a signalled sync file declared as a write and as a read, the fences
 * asked for by readers and writers, CPU access bracketed, and Linux's
 * errno values for bad arguments (the host kernel would say ENOTTY to
 * every one of these on a memfd). */
static void check_buffer_fences(int fd, int buffer)
{
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, DRM_SYNCOBJ_CREATE_SIGNALED, &syncobj) == 0);
    int done = -1;
    CHECK(drmSyncobjExportSyncFile(fd, syncobj, &done) == 0);
    check_no_fences(buffer, DMA_BUF_SYNC_READ);
    struct dma_buf_import_sync_file i = { .flags = DMA_BUF_SYNC_WRITE, .fd = done };
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_IMPORT_SYNC_FILE, &i) == 0);
    i.flags = DMA_BUF_SYNC_READ;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_IMPORT_SYNC_FILE, &i) == 0);
    check_no_fences(buffer, DMA_BUF_SYNC_READ);
    check_no_fences(buffer, DMA_BUF_SYNC_RW);
    struct dma_buf_sync sync = { .flags = DMA_BUF_SYNC_START | DMA_BUF_SYNC_RW };
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_SYNC, &sync) == 0);
    sync.flags = DMA_BUF_SYNC_END | DMA_BUF_SYNC_RW;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_SYNC, &sync) == 0);

    struct dma_buf_export_sync_file e = { .flags = 0, .fd = -1 };
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, &e) == -1 && errno == EINVAL);
    e.flags = DMA_BUF_SYNC_RW | 4;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, &e) == -1 && errno == EINVAL);
    i.flags = DMA_BUF_SYNC_WRITE;
    i.fd = STDIN_FILENO;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_IMPORT_SYNC_FILE, &i) == -1 && errno == EINVAL);
    i.fd = buffer;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_IMPORT_SYNC_FILE, &i) == -1 && errno == EINVAL);
    sync.flags = DMA_BUF_SYNC_END;
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_SYNC, &sync) == -1 && errno == EINVAL);
    CHECK(ioctl(buffer, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, (void *)8) == -1 && errno == EFAULT);
    /* Not a request of a dma-buf, or not a buffer: the host kernel's
     * ENOTTY. */
    CHECK(ioctl(buffer, _IOW('b', 7, uint64_t), &sync) == -1 && errno == ENOTTY);
    CHECK(ioctl(done, DMA_BUF_IOCTL_EXPORT_SYNC_FILE, &e) == -1 && errno == ENOTTY);
    close(done);
    drmSyncobjDestroy(fd, syncobj);
}

/* --buffer-fences: check_buffer_fences on a buffer of a new object. */
static int buffer_fences_only(void)
{
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    struct asahi_gem_create c = { .size = SIZE };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &c) == 0);
    int prime = -1;
    CHECK(drmPrimeHandleToFD(fd, c.handle, DRM_CLOEXEC, &prime) == 0);
    check_buffer_fences(fd, prime);
    printf("ok\n");
    return 0;
}

/* The importer on another device: imports the sync file `fd`, which
 * the other device exported, waits on it and exports its own. */
static int other_device_importer(int sync_file)
{
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    uint32_t syncobj = import_and_wait(fd, sync_file);
    int own = -1;
    CHECK(drmSyncobjExportSyncFile(fd, syncobj, &own) == 0);
    check_signalled_poll(own);
    /* Not a sync file of either device: EINVAL, as Linux. */
    CHECK(drmSyncobjImportSyncFile(fd, syncobj, STDIN_FILENO) == -1 && errno == EINVAL);
    return 0;
}

/* Runs this program on the device in `dir` to import `sync_file`. */
static void import_on_other_device(const char *dir, int sync_file)
{
    extern char **environ;
    char variable[4096];
    CHECK(snprintf(variable, sizeof variable, "AGX_SIM_DEVICE_DIR=%s", dir) < (int)sizeof variable);
    size_t count = 0;
    while (environ[count])
        count++;
    char **env = calloc(count + 2, sizeof *env);
    CHECK(env);
    size_t n = 0;
    for (size_t i = 0; i < count; i++)
        if (strncmp(environ[i], "AGX_SIM_DEVICE_DIR=", 19) != 0)
            env[n++] = environ[i];
    env[n++] = variable;
    char number[16];
    snprintf(number, sizeof number, "%d", sync_file);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        /* The sync file stays open across exec. */
        int flags = fcntl(sync_file, F_GETFD);
        if (flags < 0 || fcntl(sync_file, F_SETFD, flags & ~FD_CLOEXEC) < 0)
            _exit(2);
        char *argv[] = { "prime_sync_client", "--import", number, NULL };
        execve("/proc/self/exe", argv, env);
        _exit(3);
    }
    free(env);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The importer: a process with a file of its own. */
static void importer(int socket)
{
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    int prime, sync_file;
    recv_fds(socket, &prime, &sync_file);
    uint32_t handle = 0;
    CHECK(drmPrimeFDToHandle(fd, prime, &handle) == 0);
    uint32_t *map = map_object(fd, handle, SIZE);
    for (uint32_t i = 0; i < SIZE / 4; i++)
        CHECK(map[i] == 0xB0000000u + i);
    map[0] = 0xD00D;
    check_mapping_is_not_a_buffer(fd);
    check_buffer_fences(fd, prime);
    import_and_wait(fd, sync_file);
    CHECK(write(socket, "d", 1) == 1);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--import") == 0)
        return other_device_importer(atoi(argv[2]));
    if (argc == 2 && strcmp(argv[1], "--buffer-fences") == 0)
        return buffer_fences_only();
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        close(sv[0]);
        importer(sv[1]);
    }
    close(sv[1]);
    int fd = open("/dev/dri/renderD128", O_RDWR | O_CLOEXEC);
    CHECK(fd >= 0);
    struct asahi_gem_create c = { .size = SIZE };
    CHECK(ioctl(fd, ASAHI_GEM_CREATE, &c) == 0);
    uint32_t *map = map_object(fd, c.handle, SIZE);
    for (uint32_t i = 0; i < SIZE / 4; i++)
        map[i] = 0xB0000000u + i;
    int prime = -1;
    CHECK(drmPrimeHandleToFD(fd, c.handle, DRM_CLOEXEC, &prime) == 0);
    uint32_t syncobj = 0;
    CHECK(drmSyncobjCreate(fd, DRM_SYNCOBJ_CREATE_SIGNALED, &syncobj) == 0);
    int sync_file = -1;
    CHECK(drmSyncobjExportSyncFile(fd, syncobj, &sync_file) == 0);
    check_signalled_poll(sync_file);
    send_fds(sv[0], prime, sync_file);
    const char *other = getenv("OTHER_DEVICE_DIR");
    if (other)
        import_on_other_device(other, sync_file);
    char ack = 0;
    CHECK(read(sv[0], &ack, 1) == 1 && ack == 'd');
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* The importer's write, through its own file, is in our object. */
    CHECK(map[0] == 0xD00D);
    check_buffer_fences(fd, prime);
    printf("ok\n");
    return 0;
}
