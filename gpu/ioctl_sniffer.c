/* ioctl_sniffer.c: an LD_PRELOAD library that logs what a process says to the NVIDIA driver.
 *
 * Built at run time by gpu/cuda_ioctl_trace.py (gcc -shared -fPIC), preloaded into a process
 * that makes one tiny CUDA launch. For every open of a file whose path starts with
 * $SNIFF_PREFIX (default /dev/nvidia) it remembers the fd; for every ioctl and mmap on such an
 * fd it writes one JSON line to $SNIFF_LOG: the fd's path, the request, and the argument's bytes
 * before and after the call. The argument's size is _IOC_SIZE(request) for nvidia.ko ('F'
 * ioctls) and, for nvidia-uvm.ko's bare numbers, the size $SNIFF_UVM_SIZES gives
 * ("cmd:size,cmd:size", from alphac/nvdrv/abi.py). RM_ALLOC and RM_CONTROL carry a pointer to a
 * second structure: its offset and size field offsets come in $SNIFF_NESTED
 * ("nr:size:ptr_off:len_off,...", from abi.STRUCTS), and those bytes are logged too. Memory is
 * read with process_vm_readv on ourselves, so a bad pointer is logged as unreadable instead of
 * crashing the process. No offset of any NVIDIA structure is written in this file.
 *
 * sniff_read(addr, len, out) is exported for the driver script, which reads the GPFIFO ring,
 * push buffers and QMDs after the launch (see cuda_ioctl_trace.py).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define MAX_FD 4096
#define MAX_DUMP (1 << 16)

static char *fd_path[MAX_FD];
static FILE *sniff_log;
static const char *prefix = "/dev/nvidia";
static unsigned long uvm_cmd[64], uvm_size[64];
static int n_uvm;
static unsigned long nested_nr[8], nested_size[8], nested_ptr[8], nested_len[8];
static int n_nested;
static unsigned long seq;

static void sniff_init(void) {
    static int done;
    if (done) return;
    done = 1;
    const char *p = getenv("SNIFF_PREFIX");
    if (p) prefix = p;
    const char *path = getenv("SNIFF_LOG");
    sniff_log = fopen(path ? path : "sniff.jsonl", "w");
    const char *u = getenv("SNIFF_UVM_SIZES");
    while (u && *u && n_uvm < 64) {
        uvm_cmd[n_uvm] = strtoul(u, (char **)&u, 0);
        if (*u == ':') u++;
        uvm_size[n_uvm++] = strtoul(u, (char **)&u, 0);
        if (*u == ',') u++;
    }
    const char *s = getenv("SNIFF_NESTED");
    while (s && *s && n_nested < 8) {
        nested_nr[n_nested] = strtoul(s, (char **)&s, 0); if (*s == ':') s++;
        nested_size[n_nested] = strtoul(s, (char **)&s, 0); if (*s == ':') s++;
        nested_ptr[n_nested] = strtoul(s, (char **)&s, 0); if (*s == ':') s++;
        nested_len[n_nested++] = strtoul(s, (char **)&s, 0); if (*s == ',') s++;
    }
}

/* Copy len bytes at addr into out; 0 on success, -1 if unreadable. */
int sniff_read(uintptr_t addr, size_t len, void *out) {
    struct iovec local = {out, len}, remote = {(void *)addr, len};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static void hex(const char *key, uintptr_t addr, size_t len) {
    static unsigned char buf[MAX_DUMP];
    if (len > MAX_DUMP) len = MAX_DUMP;
    fprintf(sniff_log, ",\"%s\":\"", key);
    if (addr && sniff_read(addr, len, buf) == 0)
        for (size_t i = 0; i < len; i++) fprintf(sniff_log, "%02x", buf[i]);
    else
        fprintf(sniff_log, "unreadable");
    fputc('"', sniff_log);
}

static void remember(int fd, const char *path) {
    sniff_init();
    if (fd < 0 || fd >= MAX_FD || !path || strncmp(path, prefix, strlen(prefix)) != 0) return;
    free(fd_path[fd]);
    fd_path[fd] = strdup(path);
    fprintf(sniff_log, "{\"seq\":%lu,\"call\":\"open\",\"path\":\"%s\",\"fd\":%d}\n", seq++, path, fd);
    fflush(sniff_log);
}

#define REAL(type, name, args) static type(*real_##name) args; \
    if (!real_##name) real_##name = (type(*) args)dlsym(RTLD_NEXT, #name)

int open(const char *path, int flags, ...) {
    REAL(int, open, (const char *, int, ...));
    va_list ap; va_start(ap, flags); mode_t mode = va_arg(ap, mode_t); va_end(ap);
    int fd = real_open(path, flags, mode);
    remember(fd, path);
    return fd;
}

int open64(const char *path, int flags, ...) {
    REAL(int, open64, (const char *, int, ...));
    va_list ap; va_start(ap, flags); mode_t mode = va_arg(ap, mode_t); va_end(ap);
    int fd = real_open64(path, flags, mode);
    remember(fd, path);
    return fd;
}

int openat(int dirfd, const char *path, int flags, ...) {
    REAL(int, openat, (int, const char *, int, ...));
    va_list ap; va_start(ap, flags); mode_t mode = va_arg(ap, mode_t); va_end(ap);
    int fd = real_openat(dirfd, path, flags, mode);
    remember(fd, path);
    return fd;
}

int close(int fd) {
    REAL(int, close, (int));
    if (fd >= 0 && fd < MAX_FD && fd_path[fd]) {
        fprintf(sniff_log, "{\"seq\":%lu,\"call\":\"close\",\"path\":\"%s\",\"fd\":%d}\n", seq++, fd_path[fd], fd);
        fflush(sniff_log);
        free(fd_path[fd]);
        fd_path[fd] = NULL;
    }
    return real_close(fd);
}

static size_t arg_size(const char *path, unsigned long req) {
    if (strstr(path, "uvm")) {
        for (int i = 0; i < n_uvm; i++)
            if (uvm_cmd[i] == req) return uvm_size[i];
        return 0;
    }
    return (req >> 16) & 0x3fff;                 /* _IOC_SIZE */
}

int ioctl(int fd, unsigned long req, ...) {
    REAL(int, ioctl, (int, unsigned long, ...));
    va_list ap; va_start(ap, req); void *arg = va_arg(ap, void *); va_end(ap);
    if (fd < 0 || fd >= MAX_FD || !fd_path[fd]) return real_ioctl(fd, req, arg);
    sniff_init();
    size_t size = arg_size(fd_path[fd], req);
    uintptr_t nested = 0;
    size_t nested_bytes = 0;
    int is_nv = !strstr(fd_path[fd], "uvm");
    for (int i = 0; is_nv && i < n_nested; i++) {
        if ((req & 0xff) == nested_nr[i] && size == nested_size[i]) {
            uint64_t p = 0; uint32_t n = 0;
            if (sniff_read((uintptr_t)arg + nested_ptr[i], 8, &p) == 0 &&
                sniff_read((uintptr_t)arg + nested_len[i], 4, &n) == 0) {
                nested = p;
                nested_bytes = n;
            }
        }
    }
    unsigned long me = seq++;
    fprintf(sniff_log, "{\"seq\":%lu,\"call\":\"ioctl\",\"path\":\"%s\",\"fd\":%d,\"req\":%lu,\"size\":%zu",
            me, fd_path[fd], fd, req, size);
    hex("in", (uintptr_t)arg, size);
    if (nested) { fprintf(sniff_log, ",\"nested_addr\":%lu", (unsigned long)nested); hex("nested_in", nested, nested_bytes); }
    int r = real_ioctl(fd, req, arg);
    int e = errno;
    fprintf(sniff_log, ",\"ret\":%d,\"errno\":%d", r, r < 0 ? e : 0);
    hex("out", (uintptr_t)arg, size);
    if (nested) hex("nested_out", nested, nested_bytes);
    fputs("}\n", sniff_log);
    fflush(sniff_log);
    errno = e;
    return r;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    REAL(void *, mmap, (void *, size_t, int, int, int, off_t));
    void *r = real_mmap(addr, len, prot, flags, fd, off);
    if (fd >= 0 && fd < MAX_FD && fd_path[fd]) {
        fprintf(sniff_log, "{\"seq\":%lu,\"call\":\"mmap\",\"path\":\"%s\",\"fd\":%d,\"addr\":%lu,\"len\":%zu,"
                "\"prot\":%d,\"flags\":%d,\"off\":%ld,\"result\":%lu}\n", seq++, fd_path[fd], fd,
                (unsigned long)addr, len, prot, flags, (long)off, (unsigned long)r);
        fflush(sniff_log);
    }
    return r;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}
