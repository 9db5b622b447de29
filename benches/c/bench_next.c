/*
 * The C API from a C-compiled caller, with the floor measured in the same run:
 *   - floor: clock_gettime(CLOCK_REALTIME) (every id reads the wall clock once) and one
 *     uncontended compare-and-swap (every id takes at least one);
 *   - cosid_next: wall ns per call, uncontended, with 20 sequence bits (so the layout's rate cap
 *     of 2^20 ids per ms does not show) and with the default 41/10/12 layout sustained (capped
 *     at 4096 ids per ms: 244 ns per id);
 *   - cosid_next_batch(rt, ids, 4096): CPU ns per id (CLOCK_THREAD_CPUTIME_ID) of calls that
 *     start at a fresh millisecond, so none waits for the next tick (the target excludes that
 *     wait, which the core spends yielding the CPU), both layouts; and wall ns per id of calls
 *     back to back, tick waits included.
 *   - the peers, when built with -DCOSID_BENCH_LIBUUID (run.sh does when pkg-config finds
 *     util-linux's libuuid): uuid_generate_time (version 1, time-based) and
 *     uuid_generate_random (version 4), the usual C sources of unique ids.
 * Each figure: the best and the median of ROUNDS short rounds.
 *
 * Built and run by benches/c/run.sh (through pkg-config, -O2), next to the Rust benchmark
 * `cargo bench -p cosid-ffi --bench c_api`.
 */
#define _POSIX_C_SOURCE 200809L
#include <cosid.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef COSID_BENCH_LIBUUID
#include <uuid/uuid.h>
#endif

/* Many short rounds: on a loaded machine many of them run without being preempted, so the best
 * round is the cost of the call itself and the median shows the load. */
enum { ROUNDS = 401, BATCH = 4096 };

static const char *WIDE =
    "cosid:\n  namespace: bench\n  snowflake: {timestamp-bits: 41, node-bits: 2, "
    "sequence-bits: 20}\n  machine:\n    lease: {store: 'memory:c-bench-wide', bits: 2}\n";
static const char *DEFAULT =
    "cosid:\n  namespace: bench\n  machine:\n    lease: {store: 'memory:c-bench-default', bits: 2}\n";

static double now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void row_n(const char *what, const char *kind, double *samples, int n) {
  qsort(samples, (size_t)n, sizeof samples[0], cmp_double);
  printf("| %s | %s | %.2f | %.2f |\n", what, kind, samples[0], samples[n / 2]);
}

static void row(const char *what, const char *kind, double *samples) {
  row_n(what, kind, samples, ROUNDS);
}

static cosid_runtime *runtime(const char *config) {
  cosid_runtime *rt = NULL;
  cosid_status st = cosid_runtime_new(config, &rt);
  if (st != COSID_OK) {
    char detail[1024];
    size_t n;
    if (cosid_last_error_message(detail, sizeof detail, &n) != COSID_OK) detail[0] = 0;
    fprintf(stderr, "cosid_runtime_new: %s: %s\n", cosid_status_name(st), detail);
    exit(1);
  }
  return rt;
}

static volatile uint64_t sink;

static void must(cosid_status st) {
  if (st != COSID_OK) {
    fprintf(stderr, "bench: %s\n", cosid_status_name(st));
    exit(1);
  }
}

/* Wall ns per cosid_next call over `calls` calls. */
static double next_ns(cosid_runtime *rt, long calls) {
  uint64_t id = 0, acc = 0;
  double t = now_ns(CLOCK_MONOTONIC);
  for (long i = 0; i < calls; i++) {
    must(cosid_next(rt, &id));
    acc ^= id;
  }
  t = now_ns(CLOCK_MONOTONIC) - t;
  sink = acc;
  return t / (double)calls;
}

/* Waits (untimed) until the wall clock enters a new millisecond: a batch of 4096 that starts
 * there finds the whole millisecond's sequence numbers free and never waits for a tick. */
#ifdef COSID_BENCH_LIBUUID
/* ns per call of the libuuid generator `generate`, over `calls` calls. */
static double uuid_ns(void (*generate)(uuid_t), long calls) {
  uuid_t u;
  double t = now_ns(CLOCK_MONOTONIC);
  for (long i = 0; i < calls; i++) {
    generate(u);
    sink ^= u[15];
  }
  return (now_ns(CLOCK_MONOTONIC) - t) / (double)calls;
}
#endif

static void wait_for_fresh_ms(void) {
  struct timespec a, b;
  clock_gettime(CLOCK_REALTIME, &a);
  do clock_gettime(CLOCK_REALTIME, &b);
  while (b.tv_sec == a.tv_sec && b.tv_nsec / 1000000 == a.tv_nsec / 1000000);
}

/* CPU ns per id of cosid_next_batch(rt, ids, 4096), each call started at a fresh millisecond so
 * that no call waits for the next tick (the target excludes that wait). */
static double batch_cpu_ns(cosid_runtime *rt, long batches) {
  static uint64_t ids[BATCH];
  double total = 0;
  for (long i = 0; i < batches; i++) {
    wait_for_fresh_ms();
    double c = now_ns(CLOCK_THREAD_CPUTIME_ID);
    must(cosid_next_batch(rt, ids, BATCH));
    total += now_ns(CLOCK_THREAD_CPUTIME_ID) - c;
    sink ^= ids[BATCH - 1];
  }
  return total / ((double)batches * BATCH);
}

/* Wall ns per id of `batches` back-to-back calls (with the default layout: the tick waits). */
static double batch_wall_ns(cosid_runtime *rt, long batches) {
  static uint64_t ids[BATCH];
  double w = now_ns(CLOCK_MONOTONIC);
  for (long i = 0; i < batches; i++) {
    must(cosid_next_batch(rt, ids, BATCH));
    sink ^= ids[BATCH - 1];
  }
  return (now_ns(CLOCK_MONOTONIC) - w) / ((double)batches * BATCH);
}

/* The cost of the two CPU-clock reads around a timed call (subtracted from nothing; shown). */
static double cpu_clock_overhead_ns(void) {
  double total = 0;
  for (int i = 0; i < 1000; i++) {
    double c = now_ns(CLOCK_THREAD_CPUTIME_ID);
    total += now_ns(CLOCK_THREAD_CPUTIME_ID) - c;
  }
  return total / 1000;
}

int main(void) {
  double s[ROUNDS];
  printf("C-compiled caller (libcosid %s, cc -O2, shared library through the PLT)\n\n",
         cosid_version());
  printf("| what | kind | best ns | median ns |\n| --- | --- | ---: | ---: |\n");

  /* The floor. */
  for (int r = 0; r < ROUNDS; r++) {
    long n = 20000;
    struct timespec ts;
    double t = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
      clock_gettime(CLOCK_REALTIME, &ts);
      sink ^= (uint64_t)ts.tv_nsec;
    }
    s[r] = (now_ns(CLOCK_MONOTONIC) - t) / (double)n;
  }
  row("floor: `clock_gettime(CLOCK_REALTIME)`", "vDSO clock read, per call", s);
  for (int r = 0; r < ROUNDS; r++) {
    long n = 50000;
    uint64_t word = 0;
    double t = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
      uint64_t cur = __atomic_load_n(&word, __ATOMIC_ACQUIRE);
      __atomic_compare_exchange_n(&word, &cur, cur + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    s[r] = (now_ns(CLOCK_MONOTONIC) - t) / (double)n;
    sink = word;
  }
  row("floor: uncontended compare-and-swap", "`lock cmpxchg`, per op", s);

  /* cosid_next. */
  cosid_runtime *wide = runtime(WIDE);
  next_ns(wide, 200000); /* warm up */
  for (int r = 0; r < ROUNDS; r++) s[r] = next_ns(wide, 20000);
  row("**`cosid_next`** (20 sequence bits)", "per call", s);
  cosid_runtime *dflt = runtime(DEFAULT);
  /* 41 rounds of 100,000 calls: long enough to run into the cap many times. */
  for (int r = 0; r < 41; r++) s[r] = next_ns(dflt, 100000);
  row_n("`cosid_next` sustained, default layout", "per call, 4096 ids/ms cap", s, 41);

#ifdef COSID_BENCH_LIBUUID
  for (int r = 0; r < ROUNDS; r++) s[r] = uuid_ns(uuid_generate_time, 2000);
  row("peer: libuuid `uuid_generate_time`", "UUIDv1, per call", s);
  for (int r = 0; r < ROUNDS; r++) s[r] = uuid_ns(uuid_generate_random, 2000);
  row("peer: libuuid `uuid_generate_random`", "UUIDv4, per call", s);
#endif

  /* cosid_next_batch(4096). */
  batch_cpu_ns(wide, 20); /* warm up */
  for (int r = 0; r < ROUNDS; r++) s[r] = batch_cpu_ns(wide, 4);
  row("**`cosid_next_batch(4096)`** (20 sequence bits)", "CPU per id", s);
  for (int r = 0; r < ROUNDS; r++) s[r] = batch_cpu_ns(dflt, 4);
  row("**`cosid_next_batch(4096)`** (default layout)", "CPU per id, no tick wait", s);
  for (int r = 0; r < ROUNDS; r++) s[r] = batch_wall_ns(wide, 20);
  row("`cosid_next_batch(4096)` back to back (20 sequence bits)", "wall per id", s);
  for (int r = 0; r < ROUNDS; r++) s[r] = batch_wall_ns(dflt, 5);
  row("`cosid_next_batch(4096)` back to back (default layout)", "wall per id, with tick waits", s);
  printf("\n(the CPU rows include two CLOCK_THREAD_CPUTIME_ID reads per call of 4096 ids: %.0f ns, "
         "%.3f ns per id)\n",
         cpu_clock_overhead_ns(), cpu_clock_overhead_ns() / BATCH);

  cosid_runtime_free(wide);
  cosid_runtime_free(dflt);
  return 0;
}
