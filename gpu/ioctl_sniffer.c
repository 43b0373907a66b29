/* ioctl_sniffer.c: an LD_PRELOAD library that logs what a process says to the NVIDIA driver.
 *
 * Built at run time by gpu/cuda_ioctl_trace.py (gcc -shared -fPIC), preloaded into a process
 * that makes one tiny CUDA launch. For every open of a file whose path starts with
 * $SNIFF_PREFIX (default /dev/nvidia) it remembers the fd; for every ioctl and mmap on such an
 * fd it writes one JSON line to $SNIFF_LOG: the fd's path, the request, and the argument's bytes
 * before and after the call; an ioctl's line also says how long the real call took ("ns",
 * CLOCK_MONOTONIC read on each side of it: where libcuda's start-up goes, issue 42). The argument's size is _IOC_SIZE(request) for nvidia.ko ('F'
 * ioctls) and, for nvidia-uvm.ko's bare numbers, the size $SNIFF_UVM_SIZES gives
 * ("cmd:size,cmd:size", from alphac/nvdrv/abi.py). RM_ALLOC and RM_CONTROL carry a pointer to a
 * second structure: its offset and size field offsets come in $SNIFF_NESTED
 * ("nr:size:ptr_off:len_off[:class_off],...", from abi.STRUCTS), and those bytes are logged too.
 * An RM_ALLOC may say 0 bytes (libcuda does, for every class): the RM ignores that size and
 * copies in the class's own parameter structure (serverAllocApiCopyIn looks the size up by
 * hClass). So where the size is 0 and the entry names hClass's offset, the size is the class's
 * from $SNIFF_ALLOC_SIZES ("class:size,...", from abi.STRUCTS), and the record says
 * "nested_by":"class"; a class not in that table logs no bytes ("nested_by":"unknown-class").
 * No offset of any NVIDIA structure is written in this file.
 *
 * Reading memory: sniff_read copies directly, under a fault guard: a SIGSEGV/SIGBUS handler
 * (installed once, chaining to the handler it replaced for faults outside a guarded copy)
 * siglongjmps out of the copy, so a bad pointer, a PROT_NONE page or a mapping past its file's
 * end is logged as a fault ("fault" in place of the bytes, and "<key>_fault": the signal)
 * instead of crashing the process. A direct copy is what reads the driver's mappings of video
 * memory (BAR1, VM_IO | VM_PFNMAP), which process_vm_readv cannot. The copy is by aligned 32-bit
 * loads where it can be (device mappings want whole, aligned words).
 *
 * Threads: libcuda calls from several threads. Each record is built in its own buffer and
 * written to the log whole, under a mutex (with the fd table's updates), so lines never
 * interleave; the sequence number is taken atomically when the call starts. The mutex is never
 * held across the real call.
 *
 * Exported for the driver script (gpu/cuda_ioctl_trace.py reads the GPFIFO ring, push buffers,
 * QMDs and constant banks after the launch, through ctypes):
 *   int sniff_read(addr, len, out)   0 on success, -1 when the copy faulted (nothing logged);
 *   unsigned long sniff_faults(void) how many guarded copies have faulted so far.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define MAX_FD 4096
#define MAX_DUMP (1 << 16)

static char *fd_path[MAX_FD];
static FILE *sniff_log;
static const char *prefix = "/dev/nvidia";
static unsigned long uvm_cmd[64], uvm_size[64];
static int n_uvm;
static unsigned long nested_nr[8], nested_size[8], nested_ptr[8], nested_len[8], nested_class[8];
static int n_nested;
static unsigned long alloc_class[64], alloc_size[64];
static int n_alloc;
static unsigned long seq, faults;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* -- the fault guard ---------------------------------------------------------------------- */
static __thread sigjmp_buf *guard;          /* set while this thread copies under the guard */
static __thread volatile int guard_signal;
static struct sigaction old_segv, old_bus;

static void on_fault(int sig, siginfo_t *info, void *ctx) {
    if (guard) {
        guard_signal = sig;
        siglongjmp(*guard, 1);
    }
    /* not ours: hand it to whoever had it before (the default action re-faults and kills) */
    struct sigaction *old = sig == SIGBUS ? &old_bus : &old_segv;
    if (old->sa_flags & SA_SIGINFO) {
        old->sa_sigaction(sig, info, ctx);
    } else if (old->sa_handler == SIG_IGN || old->sa_handler == SIG_DFL) {
        sigaction(sig, old, NULL);          /* returning re-executes the access */
    } else {
        old->sa_handler(sig);
    }
}

/* Ours first, for each signal, chaining to the handler it replaces; again whenever someone
 * (Python's faulthandler, say) has put another one in since. */
static void install_guard(void) {
    int sigs[2] = {SIGSEGV, SIGBUS};
    struct sigaction *olds[2] = {&old_segv, &old_bus};
    for (int i = 0; i < 2; i++) {
        struct sigaction cur, sa;
        if (sigaction(sigs[i], NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault)
            continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, olds[i]);
    }
}

static void sniff_init_once(void) {
    install_guard();
    const char *p = getenv("SNIFF_PREFIX");
    if (p) prefix = p;
    const char *path = getenv("SNIFF_LOG");
    /* appended to, never truncated: a child that inherits LD_PRELOAD (ptxas, run by the traced
     * process) must not empty the log its parent is writing; the driver script removes it first */
    sniff_log = fopen(path ? path : "sniff.jsonl", "a");
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
        nested_len[n_nested] = strtoul(s, (char **)&s, 0);
        nested_class[n_nested] = (unsigned long)-1;           /* no hClass: the size is the caller's */
        if (*s == ':') { s++; nested_class[n_nested] = strtoul(s, (char **)&s, 0); }
        n_nested++;
        if (*s == ',') s++;
    }
    const char *a = getenv("SNIFF_ALLOC_SIZES");
    while (a && *a && n_alloc < 64) {
        alloc_class[n_alloc] = strtoul(a, (char **)&a, 0);
        if (*a == ':') a++;
        alloc_size[n_alloc++] = strtoul(a, (char **)&a, 0);
        if (*a == ',') a++;
    }
}

/* The parameter size the RM copies in for class `cls` (0 when not in $SNIFF_ALLOC_SIZES). */
static size_t class_size(unsigned long cls) {
    for (int i = 0; i < n_alloc; i++)
        if (alloc_class[i] == cls) return alloc_size[i];
    return 0;
}

static void sniff_init(void) { pthread_once(&once, sniff_init_once); }

/* Copy len bytes at addr into out under the guard; the signal that stopped it, or 0. */
static int guarded_copy(uintptr_t addr, size_t len, unsigned char *out) {
    sniff_init();
    pthread_mutex_lock(&lock);
    install_guard();
    pthread_mutex_unlock(&lock);
    sigjmp_buf here;
    if (sigsetjmp(here, 1)) {
        guard = NULL;
        __atomic_fetch_add(&faults, 1, __ATOMIC_RELAXED);
        return guard_signal ? guard_signal : SIGSEGV;
    }
    guard = &here;
    size_t i = 0;
    if (addr % 4 == 0)
        for (; i + 4 <= len; i += 4) {
            uint32_t w = *(volatile const uint32_t *)(addr + i);
            memcpy(out + i, &w, 4);
        }
    for (; i < len; i++) out[i] = *(volatile const unsigned char *)(addr + i);
    guard = NULL;
    return 0;
}

int sniff_read(uintptr_t addr, size_t len, void *out) {
    return guarded_copy(addr, len, out) == 0 ? 0 : -1;
}

unsigned long sniff_faults(void) { return __atomic_load_n(&faults, __ATOMIC_RELAXED); }

/* -- records ------------------------------------------------------------------------------ */
struct rec { char *buf; size_t len; FILE *f; };

static int rec_open(struct rec *r) {
    r->buf = NULL; r->len = 0;
    r->f = open_memstream(&r->buf, &r->len);
    return r->f != NULL;
}

static void rec_write(struct rec *r) {                /* the whole line, under the lock */
    fclose(r->f);
    pthread_mutex_lock(&lock);
    if (sniff_log) { fwrite(r->buf, 1, r->len, sniff_log); fflush(sniff_log); }
    pthread_mutex_unlock(&lock);
    free(r->buf);
}

static void hex(FILE *f, const char *key, uintptr_t addr, size_t len) {
    if (len > MAX_DUMP) len = MAX_DUMP;
    fprintf(f, ",\"%s\":\"", key);
    unsigned char *buf = malloc(len ? len : 1);
    int sig = !addr || !buf ? -1 : guarded_copy(addr, len, buf);
    if (sig == 0)
        for (size_t i = 0; i < len; i++) fprintf(f, "%02x", buf[i]);
    else
        fputs(sig < 0 ? "unreadable" : "fault", f);
    fputc('"', f);
    if (sig > 0)
        fprintf(f, ",\"%s_fault\":\"%s\",\"%s_addr\":%lu", key, sig == SIGBUS ? "SIGBUS" : "SIGSEGV",
                key, (unsigned long)addr);
    free(buf);
}

static unsigned long next_seq(void) { return __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED); }

/* the path of a watched fd, copied (NULL when the fd is not watched) */
static char *watched(int fd) {
    if (fd < 0 || fd >= MAX_FD) return NULL;
    pthread_mutex_lock(&lock);
    char *p = fd_path[fd] ? strdup(fd_path[fd]) : NULL;
    pthread_mutex_unlock(&lock);
    return p;
}

static void remember(int fd, const char *path) {
    sniff_init();
    if (fd < 0 || fd >= MAX_FD || !path || strncmp(path, prefix, strlen(prefix)) != 0) return;
    char *copy = strdup(path);
    pthread_mutex_lock(&lock);
    free(fd_path[fd]);
    fd_path[fd] = copy;
    pthread_mutex_unlock(&lock);
    struct rec r;
    if (!rec_open(&r)) return;
    fprintf(r.f, "{\"seq\":%lu,\"call\":\"open\",\"path\":\"%s\",\"fd\":%d}\n", next_seq(), path, fd);
    rec_write(&r);
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
    char *path = NULL;
    if (fd >= 0 && fd < MAX_FD) {
        pthread_mutex_lock(&lock);
        path = fd_path[fd];
        fd_path[fd] = NULL;
        pthread_mutex_unlock(&lock);
    }
    if (path) {
        struct rec r;
        if (rec_open(&r)) {
            fprintf(r.f, "{\"seq\":%lu,\"call\":\"close\",\"path\":\"%s\",\"fd\":%d}\n", next_seq(), path, fd);
            rec_write(&r);
        }
        free(path);
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
    char *path = watched(fd);
    struct rec r;
    if (!path || !rec_open(&r)) { free(path); return real_ioctl(fd, req, arg); }
    size_t size = arg_size(path, req);
    uintptr_t nested = 0;
    size_t nested_bytes = 0;
    const char *nested_by = "caller";
    int is_nv = !strstr(path, "uvm");
    for (int i = 0; is_nv && i < n_nested; i++) {
        if ((req & 0xff) == nested_nr[i] && size == nested_size[i]) {
            uint64_t p = 0; uint32_t n = 0, cls = 0;
            if (sniff_read((uintptr_t)arg + nested_ptr[i], 8, &p) == 0 &&
                sniff_read((uintptr_t)arg + nested_len[i], 4, &n) == 0) {
                nested = p;
                nested_bytes = n;
                if (n == 0 && nested_class[i] != (unsigned long)-1 &&
                    sniff_read((uintptr_t)arg + nested_class[i], 4, &cls) == 0) {
                    nested_bytes = class_size(cls);
                    nested_by = nested_bytes ? "class" : "unknown-class";
                }
            }
        }
    }
    fprintf(r.f, "{\"seq\":%lu,\"call\":\"ioctl\",\"path\":\"%s\",\"fd\":%d,\"req\":%lu,\"size\":%zu",
            next_seq(), path, fd, req, size);
    hex(r.f, "in", (uintptr_t)arg, size);
    if (nested) {
        fprintf(r.f, ",\"nested_addr\":%lu,\"nested_by\":\"%s\"", (unsigned long)nested, nested_by);
        hex(r.f, "nested_in", nested, nested_bytes);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int ret = real_ioctl(fd, req, arg);
    int e = errno;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(r.f, ",\"ret\":%d,\"errno\":%d,\"ns\":%lld", ret, ret < 0 ? e : 0,
            (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
    hex(r.f, "out", (uintptr_t)arg, size);
    if (nested) hex(r.f, "nested_out", nested, nested_bytes);
    fputs("}\n", r.f);
    rec_write(&r);
    free(path);
    errno = e;
    return ret;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    REAL(void *, mmap, (void *, size_t, int, int, int, off_t));
    void *ret = real_mmap(addr, len, prot, flags, fd, off);
    int e = errno;
    char *path = watched(fd);
    struct rec r;
    if (path && rec_open(&r)) {
        fprintf(r.f, "{\"seq\":%lu,\"call\":\"mmap\",\"path\":\"%s\",\"fd\":%d,\"addr\":%lu,\"len\":%zu,"
                "\"prot\":%d,\"flags\":%d,\"off\":%ld,\"result\":%lu}\n", next_seq(), path, fd,
                (unsigned long)addr, len, prot, flags, (long)off, (unsigned long)ret);
        rec_write(&r);
    }
    free(path);
    errno = e;
    return ret;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap(addr, len, prot, flags, fd, off);
}
