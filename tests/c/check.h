/* Small assertion helpers for the C tests of libcosid (tests/c). */
#ifndef COSID_TEST_CHECK_H
#define COSID_TEST_CHECK_H

#include <cosid.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* This thread's last error detail (static buffer: one thread at a time per call site). */
static inline const char *last_error(void) {
  static _Thread_local char buf[4096];
  size_t n = 0;
  if (cosid_last_error_message(buf, sizeof buf, &n) != COSID_OK) {
    snprintf(buf, sizeof buf, "(last error longer than %zu bytes)", sizeof buf);
  }
  return buf;
}

#define FAIL(...)                                                                  \
  do {                                                                             \
    fprintf(stderr, "%s:%d: FAILED: ", __FILE__, __LINE__);                        \
    fprintf(stderr, __VA_ARGS__);                                                  \
    fprintf(stderr, "\n");                                                         \
    exit(1);                                                                       \
  } while (0)

#define CHECK(cond)                                                                \
  do {                                                                             \
    if (!(cond)) FAIL("%s", #cond);                                                \
  } while (0)

/* A call must return the given status; on mismatch print both names and the detail. */
#define EXPECT(want, call)                                                         \
  do {                                                                             \
    cosid_status got_ = (call);                                                    \
    if (got_ != (want))                                                            \
      FAIL("%s returned %s, expected %s (last error: %s)", #call,                  \
           cosid_status_name(got_), cosid_status_name(want), last_error());        \
  } while (0)

#define OK(call) EXPECT(COSID_OK, call)

/* The last error detail must contain `needle`. */
#define EXPECT_DETAIL(needle)                                                      \
  do {                                                                             \
    const char *d_ = last_error();                                                 \
    if (strstr(d_, (needle)) == NULL)                                              \
      FAIL("last error \"%s\" does not mention \"%s\"", d_, (needle));             \
  } while (0)

static inline int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Sorts `ids` and fails on the first duplicate. */
static inline void expect_unique(uint64_t *ids, size_t n, const char *what) {
  qsort(ids, n, sizeof ids[0], cmp_u64);
  for (size_t i = 1; i < n; i++) {
    if (ids[i] == ids[i - 1]) FAIL("%s: id %" PRIu64 " issued twice", what, ids[i]);
  }
}

/* The test store: COSID_TEST_DIR (a temp dir made by scripts/test-c) or /tmp. */
static inline const char *test_dir(void) {
  const char *d = getenv("COSID_TEST_DIR");
  return d && *d ? d : "/tmp";
}

#endif
