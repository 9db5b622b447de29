/* A tiny LD_PRELOAD clock offset for servers that libfaketime cannot run (redis-server: its
 * static jemalloc calls clock_gettime while libfaketime initialises, and libfaketime gives up).
 *
 * CHAOS_CLOCK_FILE names a file holding an offset in seconds ("+10", "-3"); the wall clock seen
 * through gettimeofday(), clock_gettime(CLOCK_REALTIME*) and time() is the real one plus that
 * offset. The file is re-read at most every 200 ms. No malloc, no dlsym: raw system calls only,
 * so it is safe to call from inside any allocator. Monotonic clocks are left alone. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile long long offset_ns;
static volatile long long next_read_ns;

static long long raw_ns(clockid_t id) {
    struct timespec ts;
    syscall(SYS_clock_gettime, id, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void refresh(void) {
    long long mono = raw_ns(CLOCK_MONOTONIC);
    if (mono < next_read_ns) return;
    next_read_ns = mono + 200000000LL;
    const char *path = getenv("CHAOS_CLOCK_FILE");
    if (!path) return;
    int fd = (int)syscall(SYS_open, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    char buf[32];
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0) return;
    buf[n] = 0;
    long long sign = 1, v = 0;
    int i = 0;
    if (buf[0] == '+' || buf[0] == '-') { sign = buf[0] == '-' ? -1 : 1; i = 1; }
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) v = v * 10 + (buf[i] - '0');
    offset_ns = sign * v * 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
        refresh();
        long long t = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns;
        ts->tv_sec = t / 1000000000LL;
        ts->tv_nsec = t % 1000000000LL;
    }
    return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
    (void)tz;
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
    if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out) *out = ts.tv_sec;
    return ts.tv_sec;
}
