/*
 * Every function of the C API: success, NULL for each pointer, zero-length and short buffers,
 * a closed runtime, malformed configurations, unreachable stores, events, stats, parsing,
 * base 62, version. Run by scripts/test-c under AddressSanitizer+UBSan and under valgrind.
 *
 * Build with -DCOSID_TEST_REDIS_FEATURE=1 when libcosid was built with the `redis` feature.
 */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef COSID_TEST_REDIS_FEATURE
#define COSID_TEST_REDIS_FEATURE 0
#endif

static char config_buf[1024];

/* A configuration on a SQLite store in the test directory. */
static const char *sqlite_config(const char *name) {
  snprintf(config_buf, sizeof config_buf,
           "cosid:\n"
           "  namespace: c-api\n"
           "  machine:\n"
           "    lease:\n"
           "      store: sqlite://%s/%s.db\n"
           "      bits: 4\n",
           test_dir(), name);
  return config_buf;
}

static cosid_runtime *new_runtime(const char *name) {
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(sqlite_config(name), &rt));
  CHECK(rt != NULL);
  return rt;
}

static void test_version(void) {
  CHECK(strcmp(cosid_version(), COSID_VERSION_STRING) == 0);
  char expect[64];
  snprintf(expect, sizeof expect, "%d.%d.%d", COSID_VERSION_MAJOR, COSID_VERSION_MINOR,
           COSID_VERSION_PATCH);
  CHECK(strcmp(COSID_VERSION_STRING, expect) == 0);
}

static void test_status_names(void) {
  const uint32_t all[] = {COSID_OK,
                          COSID_ERR_CONFIG,
                          COSID_ERR_STORE,
                          COSID_ERR_WINDOW_CLOSED,
                          COSID_ERR_SLOT_LOST,
                          COSID_ERR_CLOCK_BEHIND,
                          COSID_ERR_TIMEOUT,
                          COSID_ERR_CLOSED,
                          COSID_ERR_FORKED,
                          COSID_ERR_INVALID_ARGUMENT,
                          COSID_ERR_EXHAUSTED,
                          COSID_ERR_NAMESPACE_MISMATCH,
                          COSID_ERR_STATE_FILE,
                          COSID_ERR_NULL_ARGUMENT,
                          COSID_ERR_BUFFER_TOO_SMALL,
                          COSID_ERR_PANIC,
                          COSID_ERR_INTERNAL,
                          COSID_ERR_INTERRUPTED};
  size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++) {
    const char *a = cosid_status_name(all[i]);
    CHECK(a != NULL && strncmp(a, "COSID_", 6) == 0);
    CHECK(strcmp(a, "COSID_UNKNOWN_STATUS") != 0);
    for (size_t j = 0; j < i; j++) CHECK(strcmp(a, cosid_status_name(all[j])) != 0);
  }
  CHECK(strcmp(cosid_status_name(COSID_OK), "COSID_OK") == 0);
  CHECK(strcmp(cosid_status_name(COSID_ERR_SLOT_LOST), "COSID_ERR_SLOT_LOST") == 0);
  CHECK(strcmp(cosid_status_name(COSID_ERR_FORKED), "COSID_ERR_FORKED") == 0);
  CHECK(strcmp(cosid_status_name(13), "COSID_UNKNOWN_STATUS") == 0);
  CHECK(strcmp(cosid_status_name(UINT32_MAX), "COSID_UNKNOWN_STATUS") == 0);
  /* Core kinds keep their numbers. */
  CHECK(COSID_ERR_CONFIG == 1 && COSID_ERR_STATE_FILE == 12 && COSID_ERR_NULL_ARGUMENT == 100);
}

static void *fresh_thread_error(void *arg) {
  (void)arg;
  char buf[8];
  size_t n = 99;
  if (cosid_last_error_length() != 0) return (void *)1;
  if (cosid_last_error_message(buf, sizeof buf, &n) != COSID_OK) return (void *)2;
  if (n != 0 || buf[0] != '\0') return (void *)3;
  return NULL;
}

static void test_last_error(void) {
  pthread_t t;
  void *res = (void *)9;
  CHECK(pthread_create(&t, NULL, fresh_thread_error, NULL) == 0);
  CHECK(pthread_join(t, &res) == 0);
  CHECK(res == NULL); /* a thread where nothing failed has "" */

  uint64_t id = 0;
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_next(NULL, &id));
  EXPECT_DETAIL("cosid_next: rt is NULL");
  size_t len = cosid_last_error_length();
  CHECK(len == strlen("cosid_next: rt is NULL; pass a valid pointer"));

  char small[4] = {'x', 'x', 'x', 'x'};
  size_t n = 77;
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL, cosid_last_error_message(small, 0, &n));
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL, cosid_last_error_message(small, sizeof small, &n));
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL, cosid_last_error_message(small, len, &n));
  CHECK(n == 77 && small[0] == 'x'); /* nothing written on failure */
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_last_error_message(NULL, 100, &n));
  char buf[128];
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_last_error_message(buf, sizeof buf, NULL));
  /* Failed reads did not replace the detail. */
  OK(cosid_last_error_message(buf, len + 1, &n));
  CHECK(n == len && strcmp(buf, "cosid_next: rt is NULL; pass a valid pointer") == 0);
}

static void test_bad_configs(void) {
  cosid_runtime *rt = NULL;
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_new(sqlite_config("x"), NULL));
  EXPECT_DETAIL("out is NULL");

  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("cosid: {machine: {lease: {tll: 3s}}}", &rt));
  CHECK(rt == NULL);
  EXPECT_DETAIL("tll");
  EXPECT_DETAIL("cosid_runtime_new: ");

  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("cosid: {machine: {lease: {ttl: soon}}}", &rt));
  EXPECT_DETAIL("cosid.machine.lease.ttl");
  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("cosid: [unclosed", &rt));
  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("", &rt));
  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("namespace: x", &rt));
  EXPECT_DETAIL("cosid");
  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("cosid: {namespace: \"\xff\"}", &rt));
  EXPECT_DETAIL("UTF-8");
  EXPECT(COSID_ERR_CONFIG,
         cosid_runtime_new("cosid: {machine: {lease: {store: 'ftp://x', bits: 2}}}", &rt));
  EXPECT_DETAIL("unknown scheme"); /* the text itself is not echoed: it may hold a password */
  EXPECT(COSID_ERR_CONFIG,
         cosid_runtime_new("cosid: {snowflake: {node-bits: 3}, machine: {lease: {bits: 9}}}",
                           &rt));
  EXPECT_DETAIL("bits");
  /* JSON is YAML too. */
  EXPECT(COSID_ERR_CONFIG, cosid_runtime_new("{\"cosid\": {\"namespace\": 5, \"x\": 1}}", &rt));
  CHECK(rt == NULL);
}

static void test_unreachable_stores(void) {
  cosid_runtime *rt = NULL;
  /* A SQLite file that cannot be created (its parent is not a directory). */
  EXPECT(COSID_ERR_STORE,
         cosid_runtime_new("cosid:\n  machine:\n    lease:\n      store: sqlite:///dev/null/"
                           "cosid/slots.db\n      acquire-timeout: 200ms\n",
                           &rt));
  CHECK(rt == NULL);
  EXPECT_DETAIL("/dev/null/cosid/slots.db");

  const char *redis =
      "cosid:\n  machine:\n    lease:\n      store: redis://127.0.0.1:1\n"
      "      acquire-timeout: 200ms\n";
  cosid_status st = cosid_runtime_new(redis, &rt);
  CHECK(rt == NULL);
#if COSID_TEST_REDIS_FEATURE
  if (st != COSID_ERR_STORE && st != COSID_ERR_TIMEOUT)
    FAIL("redis://127.0.0.1:1 gave %s (%s)", cosid_status_name(st), last_error());
  EXPECT_DETAIL("127.0.0.1:1");
#else
  /* This build has no Redis client: a configuration error that names the feature. */
  if (st != COSID_ERR_CONFIG)
    FAIL("redis://127.0.0.1:1 gave %s (%s)", cosid_status_name(st), last_error());
  EXPECT_DETAIL("'redis' feature");
#endif
}

static void test_embedded_default(void) {
  /* NULL: the embedded SQLite store under $XDG_STATE_HOME (a temp dir in the tests). */
  const char *xdg = getenv("XDG_STATE_HOME");
  CHECK(xdg != NULL && strstr(xdg, "/tmp") == xdg);
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(NULL, &rt));
  uint64_t id = 0;
  OK(cosid_next(rt, &id));
  CHECK(id > 0);
  OK(cosid_runtime_close(rt));
  cosid_runtime_free(rt);
}

static void test_next(void) {
  cosid_runtime *rt = new_runtime("next");
  uint64_t a = 0, b = 0;
  OK(cosid_next(rt, &a));
  OK(cosid_next(rt, &b));
  CHECK(b > a);
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_next(rt, NULL));
  EXPECT_DETAIL("out is NULL");
  uint64_t c = 42;
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_next(NULL, &c));
  CHECK(c == 42);

  /* A misaligned out-pointer is refused, not written. */
  uint64_t words[3] = {0, 0, 0};
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_next(rt, (uint64_t *)((char *)words + 4)));
  EXPECT_DETAIL("not aligned");
  CHECK(words[0] == 0 && words[1] == 0);

  /* Batches: increasing, after the single ids; n == 0 is a no-op even with NULL. */
  enum { N = 10000 };
  static uint64_t batch[N];
  OK(cosid_next_batch(rt, batch, N));
  CHECK(batch[0] > b);
  for (size_t i = 1; i < N; i++) CHECK(batch[i] > batch[i - 1]);
  OK(cosid_next_batch(rt, NULL, 0));
  OK(cosid_next_batch(rt, batch, 0));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_next_batch(rt, NULL, 5));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_next_batch(NULL, batch, 5));
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_next_batch(rt, (uint64_t *)((char *)words + 1), 1));
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_next_batch(rt, batch, SIZE_MAX));
  CHECK(batch[0] > b); /* untouched by the failures */

  cosid_stats s;
  memset(&s, 0, sizeof s);
  OK(cosid_runtime_stats(rt, &s));
  CHECK(s.bound && s.acquisitions == 1 && s.ceiling_ms > s.floor_ms && s.slot < 16);
  CHECK(s.ids_issued >= 2);
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_stats(rt, NULL));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_stats(NULL, &s));

  OK(cosid_runtime_close(rt));
  OK(cosid_runtime_stats(rt, &s));
  CHECK(s.ids_issued == 2 + N && !s.bound);
  cosid_runtime_free(rt);
}

static void test_generators(void) {
  cosid_runtime *rt = new_runtime("generators");
  cosid_generator *g = NULL, *g2 = NULL, *dflt = NULL;
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_get(NULL, "orders", &g));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_get(rt, NULL, &g));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_get(rt, "orders", NULL));
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_generator_get(rt, "bad\nname", &g));
  EXPECT_DETAIL("bad\\nname");
  char long_name[200];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_generator_get(rt, long_name, &g));
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_generator_get(rt, "\xc3(", &g));
  CHECK(g == NULL);

  OK(cosid_generator_get(rt, "orders", &g));
  OK(cosid_generator_get(rt, "orders", &g2));
  OK(cosid_generator_get(rt, "", &dflt));
  CHECK(g && g2 && dflt && g != g2);
  uint64_t x = 0, y = 0, z = 0, d = 0;
  OK(cosid_generator_next(g, &x));
  OK(cosid_generator_next(g2, &y));
  CHECK(y > x); /* both handles name one generator */
  OK(cosid_next(rt, &z));
  OK(cosid_generator_next(dflt, &d));
  CHECK(d > z); /* "" is the default generator */

  cosid_id_parts p1, p2;
  OK(cosid_parse(rt, x, &p1));
  OK(cosid_parse(rt, z, &p2));
  CHECK(p1.slot == p2.slot); /* named generators share the runtime's slot */

  uint64_t batch[100];
  OK(cosid_generator_next_batch(g, batch, 100));
  CHECK(batch[0] > y);
  for (int i = 1; i < 100; i++) CHECK(batch[i] > batch[i - 1]);
  OK(cosid_generator_next_batch(g, NULL, 0));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_next_batch(g, NULL, 1));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_next_batch(NULL, batch, 1));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_next(g, NULL));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_generator_next(NULL, &x));
  /* A runtime is not a generator. */
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_generator_next((const cosid_generator *)rt, &x));
  EXPECT_DETAIL("cosid_generator");

  cosid_generator_free(g2);
  cosid_generator_free(NULL);
  OK(cosid_runtime_close(rt));
  EXPECT(COSID_ERR_CLOSED, cosid_generator_next(g, &x));
  EXPECT(COSID_ERR_CLOSED, cosid_generator_next_batch(g, batch, 3));
  EXPECT(COSID_ERR_CLOSED, cosid_generator_get(rt, "orders", &g2));
  cosid_runtime_free(rt);
  /* A generator handle outlives its runtime. */
  EXPECT(COSID_ERR_CLOSED, cosid_generator_next(g, &x));
  cosid_generator_free(g);
  cosid_generator_free(dflt);
}

static void test_parse_and_layouts(void) {
  cosid_runtime *rt = new_runtime("parse");
  uint64_t id = 0;
  OK(cosid_next(rt, &id));
  cosid_id_parts p;
  memset(&p, 0, sizeof p);
  OK(cosid_parse(rt, id, &p));
  cosid_layout l;
  OK(cosid_runtime_layout(rt, &l));
  CHECK(l.epoch_ms == 1577203200000LL && l.unit_ms == 1);
  CHECK(l.timestamp_bits == 41 && l.node_bits == 10 && l.sequence_bits == 12);
  CHECK(p.timestamp_ms == l.epoch_ms + (int64_t)p.timestamp * l.unit_ms);
  CHECK(id == (p.timestamp << 22 | (uint64_t)p.slot << 12 | p.sequence));
  cosid_stats s;
  OK(cosid_runtime_stats(rt, &s));
  CHECK(p.slot == s.slot && p.timestamp_ms > s.floor_ms && p.timestamp_ms <= s.ceiling_ms);

  cosid_layout preset;
  OK(cosid_layout_preset("millis", &preset));
  /* Field by field: the struct has padding. */
  CHECK(preset.epoch_ms == l.epoch_ms && preset.unit_ms == l.unit_ms &&
        preset.timestamp_bits == l.timestamp_bits && preset.node_bits == l.node_bits &&
        preset.sequence_bits == l.sequence_bits);
  cosid_id_parts q;
  OK(cosid_layout_parse(&preset, id, &q));
  CHECK(q.timestamp_ms == p.timestamp_ms && q.slot == p.slot && q.sequence == p.sequence);
  OK(cosid_layout_preset("safe-js-seconds", &preset));
  CHECK(preset.unit_ms == 1000 && preset.node_bits == 3 && preset.sequence_bits == 19);
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_layout_preset("minutes", &preset));
  EXPECT_DETAIL("minutes");
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_layout_preset(NULL, &preset));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_layout_preset("millis", NULL));

  cosid_layout bad = l;
  bad.unit_ms = 60000;
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_layout_parse(&bad, id, &q));
  EXPECT_DETAIL("unit_ms");
  bad = l;
  bad.timestamp_bits = 60;
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_layout_parse(&bad, id, &q));
  /* An epoch that pushes the layout's end past 2^63 ms is blamed on the epoch, not on the
     timestamp bits; 64 timestamp bits are refused, not shifted. */
  bad = l;
  bad.epoch_ms = INT64_MAX - 1000;
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_layout_parse(&bad, id, &q));
  EXPECT_DETAIL("the epoch is too late");
  bad = l;
  bad.timestamp_bits = 64;
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_layout_parse(&bad, id, &q));
  EXPECT_DETAIL("at most 63");
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_layout_parse(NULL, id, &q));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_layout_parse(&l, id, NULL));

  cosid_id_parts untouched = {.timestamp_ms = 5, .timestamp = 6, .slot = 7, .sequence = 8};
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_parse(rt, UINT64_MAX, &untouched));
  EXPECT_DETAIL("18446744073709551615");
  CHECK(untouched.timestamp_ms == 5 && untouched.slot == 7);
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_parse(NULL, id, &p));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_parse(rt, id, NULL));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_layout(NULL, &l));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_layout(rt, NULL));

  OK(cosid_runtime_close(rt));
  OK(cosid_parse(rt, id, &q)); /* parsing needs no slot */
  OK(cosid_runtime_layout(rt, &l));
  cosid_runtime_free(rt);
}

static void test_base62(void) {
  const uint64_t ids[] = {0, 1, 61, 62, 3843, 1234567890123456789ULL, UINT64_MAX};
  char prev[COSID_BASE62_BUFFER_SIZE] = "";
  for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
    char buf[COSID_BASE62_BUFFER_SIZE];
    size_t n = 0;
    OK(cosid_id_to_base62(ids[i], buf, sizeof buf, &n));
    CHECK(n == COSID_BASE62_LEN && strlen(buf) == COSID_BASE62_LEN);
    CHECK(strcmp(prev, buf) < 0); /* text order is id order */
    memcpy(prev, buf, sizeof buf);
    uint64_t back = 0;
    OK(cosid_id_from_base62(buf, &back));
    CHECK(back == ids[i]);
  }
  char b[COSID_BASE62_BUFFER_SIZE];
  size_t n = 0;
  OK(cosid_id_to_base62(0, b, sizeof b, &n));
  CHECK(strcmp(b, "00000000000") == 0);
  OK(cosid_id_to_base62(UINT64_MAX, b, sizeof b, &n));
  CHECK(strcmp(b, "LygHa16AHYF") == 0);

  /* Buffers: zero-length, one short, NULL. Nothing written on failure. */
  char small[COSID_BASE62_LEN];
  memset(small, '#', sizeof small);
  n = 5;
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL, cosid_id_to_base62(7, small, 0, &n));
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL, cosid_id_to_base62(7, small, sizeof small, &n));
  EXPECT_DETAIL("12");
  CHECK(n == 5 && small[0] == '#' && small[COSID_BASE62_LEN - 1] == '#');
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_id_to_base62(7, NULL, 12, &n));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_id_to_base62(7, b, sizeof b, NULL));

  uint64_t id = 99;
  const char *bad[] = {"", "1", "0000000000!", "00000000000 ", "LygHa16AHYG", "-0000000001"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_id_from_base62(bad[i], &id));
    EXPECT_DETAIL("base-62");
  }
  CHECK(id == 99);
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_id_from_base62(NULL, &id));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_id_from_base62("00000000001", NULL));
}

/* Id text in CosId's forms (cosid_format_id, cosid_parse_id): the id of CosId's friendly
 * converter test, written and read back in each setting. */
static void test_text_forms(void) {
  const uint64_t id = 295913926632165376ULL;
  const struct {
    const char *format, *text;
  } cases[] = {
      {"dec", "295913926632165376"},
      {"base62", "0LrHucXALbs"},
      {"radix62,pad-start=false", "LrHucXALbs"},
      {"radix36", "028XOQD7HM874"},
      {"radix36,pad-start=false,char-size=12", "28XOQD7HM874"},
      {"friendly", "20220320053617924-5-0"},
      {"friendly,zone=Asia/Shanghai", "20220320133617924-5-0"},
      {"friendly,zone=+08:00,pad-start=true", "20220320133617924-0005-0000"},
      {"radix62,prefix=ORD%2C,suffix=.x", "ORD,0LrHucXALbs.x"},
      {"dec,pad-start=true,char-size=19", "0295913926632165376"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char buf[COSID_ID_TEXT_BUFFER_SIZE];
    size_t n = 0;
    OK(cosid_format_id(NULL, id, cases[i].format, buf, sizeof buf, &n));
    if (strcmp(buf, cases[i].text) != 0 || n != strlen(cases[i].text))
      FAIL("%s: wrote \"%s\" (%zu), expected \"%s\"", cases[i].format, buf, n, cases[i].text);
    uint64_t back = 0;
    OK(cosid_parse_id(NULL, cases[i].text, cases[i].format, &back));
    CHECK(back == id);
  }
  /* A layout given: the second preset writes 14 digits of time. */
  cosid_layout seconds;
  OK(cosid_layout_preset("seconds", &seconds));
  char b[COSID_ID_TEXT_BUFFER_SIZE];
  size_t n = 0;
  OK(cosid_format_id(&seconds, id, "friendly", b, sizeof b, &n));
  CHECK(strchr(b, '-') - b == 14);
  uint64_t back = 0;
  OK(cosid_parse_id(&seconds, b, "friendly", &back));
  CHECK(back == id);
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_parse_id(NULL, b, "friendly", &back));
  EXPECT_DETAIL("not exactly 17 digits");

  /* A date prefix is the date of the call: today's, in UTC (yyyy-MM-dd, then "_"); the day
   * is read before and after the call, so a call across midnight matches one of them. */
  {
    char d[COSID_ID_TEXT_BUFFER_SIZE], day[2][16];
    struct tm utc;
    time_t now = time(NULL);
    strftime(day[0], sizeof day[0], "%Y-%m-%d", gmtime_r(&now, &utc));
    OK(cosid_format_id(NULL, 42, "dec,prefix=P,date-prefix=yyyy-MM-dd,date-delimiter=_", d, sizeof d, &n));
    now = time(NULL);
    strftime(day[1], sizeof day[1], "%Y-%m-%d", gmtime_r(&now, &utc));
    int today = strncmp(d + 1, day[0], 10) == 0 || strncmp(d + 1, day[1], 10) == 0;
    if (n != 14 || d[0] != 'P' || !today || strcmp(d + 11, "_42") != 0)
      FAIL("date prefix: wrote \"%s\", expected P%s_42", d, day[1]);
    OK(cosid_parse_id(NULL, d, "dec,prefix=P,date-prefix=yyyy-MM-dd,date-delimiter=_", &back));
    CHECK(back == 42);
    EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_parse_id(NULL, "P2024-13-01_42", "dec,prefix=P,date-prefix=yyyy-MM-dd,date-delimiter=_", &back));
    EXPECT_DETAIL("no date of the pattern");
    EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_format_id(NULL, 42, "dec,date-zone=UTC", d, sizeof d, &n));
    EXPECT_DETAIL("without date-prefix");
  }

  /* Buffers: one byte short, NULL. Nothing written on failure. */
  char small[11];
  memset(small, '#', sizeof small);
  n = 5;
  EXPECT(COSID_ERR_BUFFER_TOO_SMALL,
         cosid_format_id(NULL, id, "radix62,pad-start=false", small, 10, &n));
  EXPECT_DETAIL("needs 11");
  CHECK(n == 5 && small[0] == '#' && small[10] == '#');
  OK(cosid_format_id(NULL, 1, "radix62,pad-start=false", small, 2, &n));
  CHECK(n == 1 && strcmp(small, "1") == 0);
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_format_id(NULL, id, "dec", NULL, 40, &n));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_format_id(NULL, id, NULL, b, sizeof b, &n));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_format_id(NULL, id, "dec", b, sizeof b, NULL));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_parse_id(NULL, NULL, "dec", &back));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_parse_id(NULL, "1", "dec", NULL));

  /* Bad formats and text: the detail names the value and what is accepted. */
  const struct {
    const char *format, *text, *needle;
  } bad[] = {
      {"radix16", "1", "expected dec, hex, base62 (or radix62), radix36 or friendly"},
      {"friendly,zone=Mars/Base", "1", "is not a time zone"},
      {"radix62,char-size=12", "1", "use a number from 1 to 11"},
      {"radix36", "028xoqd7hm874", "lower-case"},
      {"friendly", "20220320133617924-0005-0000", "no leading zeros"},
      {"friendly,zone=America/New_York", "20210314023000000-1-0", "does not exist"},
  };
  back = 99;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_parse_id(NULL, bad[i].text, bad[i].format, &back));
    EXPECT_DETAIL(bad[i].needle);
  }
  CHECK(back == 99);
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_format_id(NULL, id, "radix62,char-size=5", b, sizeof b, &n));
  EXPECT_DETAIL("does not fit 5 radix-62 characters");
  cosid_layout broken = seconds;
  broken.unit_ms = 60000;
  EXPECT(COSID_ERR_INVALID_ARGUMENT, cosid_format_id(&broken, id, "dec", b, sizeof b, &n));
  EXPECT_DETAIL("unit_ms");
}

/*
 * The event vocabulary as docs/c-api.md documents it: the members of cosid_event by name, and
 * the members each kind sets. A renamed member fails to compile here; the Rust test
 * the_c_event_carries_exactly_the_core_vocabulary (cosid-ffi) checks the header against the
 * core's table, and check_vocabulary below checks every event received against this one.
 */
struct member {
  const char *name;
  size_t offset, size;
  int text;
};
#define MEMBER(m, text) {#m, offsetof(cosid_event, m), sizeof(((cosid_event *)0)->m), text}
static const struct member MEMBERS[] = {
    MEMBER(slot, 0),          MEMBER(fence, 0),   MEMBER(floor_ms, 0), MEMBER(ceiling_ms, 0),
    MEMBER(next_floor_ms, 0), MEMBER(skew_ms, 0), MEMBER(attempt, 0),  MEMBER(reason, 1),
    MEMBER(error, 1),         MEMBER(key, 1),     MEMBER(waited_ms, 0), MEMBER(timeout_ms, 0),
};
static const struct {
  cosid_event_kind kind;
  const char *name;
  const char *members; /* space-separated, with a space at each end */
} KINDS[] = {
    {COSID_EVENT_SLOT_ACQUIRED, "slot_acquired", " slot fence floor_ms ceiling_ms "},
    {COSID_EVENT_SLOT_LOST, "slot_lost", " slot reason "},
    {COSID_EVENT_DUPLICATE_OWNER_KEY, "duplicate_owner_key", " slot key "},
    {COSID_EVENT_CLOCK_SKEW, "clock_skew", " skew_ms "},
    {COSID_EVENT_RENEWAL_FAILED, "renewal_failed", " slot attempt error "},
    {COSID_EVENT_STORE_RESET, "store_reset", " slot "},
    {COSID_EVENT_ACQUIRE_FAILED, "acquire_failed", " error "},
    {COSID_EVENT_SLOT_RELEASED, "slot_released", " slot next_floor_ms "},
    {COSID_EVENT_WINDOW_AHEAD, "window_ahead", " slot floor_ms reason "},
    {COSID_EVENT_STORE_UNAVAILABLE, "store_unavailable", " attempt error waited_ms timeout_ms "},
};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

/* Whether `e` sets no member outside its kind's (0, or "" for a string; never NULL). A member of
 * its kind may be 0 too (slot 0), so that direction is checked on values known to be set. */
static int check_vocabulary(const cosid_event *e) {
  const char *want = NULL;
  for (size_t k = 0; k < NKINDS; k++)
    if (KINDS[k].kind == e->kind) want = KINDS[k].members;
  if (want == NULL || e->message == NULL || e->message[0] == '\0') return 0;
  for (size_t i = 0; i < sizeof MEMBERS / sizeof MEMBERS[0]; i++) {
    const struct member *m = &MEMBERS[i];
    const char *at = (const char *)e + m->offset;
    int set = 0;
    if (m->text) {
      const char *text;
      memcpy(&text, at, sizeof text);
      if (text == NULL) return 0;
      set = text[0] != '\0';
    } else {
      for (size_t b = 0; b < m->size; b++) set |= at[b] != 0;
    }
    char word[32];
    snprintf(word, sizeof word, " %s ", m->name);
    if (set && strstr(want, word) == NULL) return 0;
  }
  return 1;
}

static void test_event_vocabulary(void) {
  /* The kinds and their names are the core's (cosid_event_kind_name comes from its table), and
   * the header has a value for every kind of the core: the next value is no kind. */
  for (size_t k = 0; k < NKINDS; k++) {
    CHECK((size_t)KINDS[k].kind == k + 1);
    CHECK(strcmp(cosid_event_kind_name(KINDS[k].kind), KINDS[k].name) == 0);
  }
  CHECK(strcmp(cosid_event_kind_name((uint32_t)NKINDS + 1), "unknown") == 0);
  /* Every member but kind and message belongs to some kind. */
  for (size_t i = 0; i < sizeof MEMBERS / sizeof MEMBERS[0]; i++) {
    char word[32];
    int used = 0;
    snprintf(word, sizeof word, " %s ", MEMBERS[i].name);
    for (size_t k = 0; k < NKINDS; k++) used |= strstr(KINDS[k].members, word) != NULL;
    CHECK(used);
  }
}

struct seen {
  pthread_mutex_t lock;
  int released;
  uint32_t released_slot;
  int64_t released_floor;
  int calls;
  int off_vocabulary;
  char message[256];
};

static void on_event(const cosid_event *e, void *user_data) {
  struct seen *s = user_data;
  pthread_mutex_lock(&s->lock);
  s->calls++;
  if (e->kind == COSID_EVENT_SLOT_RELEASED) {
    s->released++;
    s->released_slot = e->slot;
    s->released_floor = e->next_floor_ms;
    snprintf(s->message, sizeof s->message, "%s", e->message);
  }
  if (!check_vocabulary(e)) s->off_vocabulary++;
  pthread_mutex_unlock(&s->lock);
}

static void never_called(const cosid_event *e, void *user_data) {
  (void)e;
  *(int *)user_data += 1;
}

/* Frees its own runtime from the final release event, which close delivers on its thread. */
static void free_on_release(const cosid_event *e, void *user_data) {
  if (e->kind == COSID_EVENT_SLOT_RELEASED) cosid_runtime_free((cosid_runtime *)user_data);
}

static void test_events(void) {
  CHECK(strcmp(cosid_event_kind_name(COSID_EVENT_SLOT_ACQUIRED), "slot_acquired") == 0);
  CHECK(strcmp(cosid_event_kind_name(COSID_EVENT_SLOT_LOST), "slot_lost") == 0);
  CHECK(strcmp(cosid_event_kind_name(COSID_EVENT_SLOT_RELEASED), "slot_released") == 0);
  CHECK(strcmp(cosid_event_kind_name(COSID_EVENT_OTHER), "other") == 0);
  CHECK(strcmp(cosid_event_kind_name(1000), "unknown") == 0);

  cosid_runtime *rt = new_runtime("events");
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_set_event_callback(NULL, on_event, NULL));
  int count = 0;
  OK(cosid_runtime_set_event_callback(rt, never_called, &count));
  struct seen s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.lock, NULL);
  OK(cosid_runtime_set_event_callback(rt, on_event, &s)); /* replaces never_called */
  uint64_t id;
  OK(cosid_next(rt, &id));
  cosid_stats st;
  OK(cosid_runtime_stats(rt, &st));
  OK(cosid_runtime_close(rt));
  pthread_mutex_lock(&s.lock);
  CHECK(s.calls >= 1 && s.released == 1 && s.off_vocabulary == 0);
  CHECK(s.released_slot == st.slot && s.released_floor > st.floor_ms);
  CHECK(strstr(s.message, "released") != NULL);
  pthread_mutex_unlock(&s.lock);
  CHECK(count == 0);
  cosid_runtime_free(rt);

  /* Freeing the runtime from its own callback, during close, is safe: the close finishes on its
   * own (AddressSanitizer and valgrind would see a use after free). */
  rt = new_runtime("events3");
  OK(cosid_runtime_set_event_callback(rt, free_on_release, rt));
  OK(cosid_runtime_close(rt)); /* rt is gone after this */

  /* A removed callback is not called, even by the release in free. */
  rt = new_runtime("events2");
  OK(cosid_runtime_set_event_callback(rt, never_called, &count));
  OK(cosid_runtime_set_event_callback(rt, NULL, NULL));
  cosid_runtime_free(rt);
  CHECK(count == 0);
  pthread_mutex_destroy(&s.lock);
}

/* ---- Calling back into the runtime from its own callback (the contract of
 * cosid_event_callback): any function, close and free included. ---- */

/* What a callback saw and did; every member is written by the callback, on whichever thread it
 * runs, and read by the test once `done` is set. The callback is re-entrant (a close or free it
 * makes delivers the final release to it, nested), so it takes no lock. */
struct reentry {
  cosid_runtime *rt;
  pthread_t test_thread;
  int mode; /* what to do on the keeper's event: one of the REENTRY_ values */
  char folder[512], away[512];
  atomic_int handled, done, depth, nested_released, released, on_test_thread, after_replace;
  atomic_int failed_line; /* the line of the first failed check inside the callback */
  int64_t next_floor;
};

enum { REENTRY_USE, REENTRY_CLOSE, REENTRY_FREE, REENTRY_ON_RELEASE };

/* A check inside a callback: remembered for the test thread, which fails with it. */
#define CB_CHECK(c, cond)                                                                 \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      int zero_ = 0;                                                                      \
      atomic_compare_exchange_strong(&(c)->failed_line, &zero_, __LINE__);               \
      fprintf(stderr, "%s:%d: in the callback: %s (last error: %s)\n", __FILE__,         \
              __LINE__, #cond, last_error());                                             \
    }                                                                                     \
  } while (0)

static void after_replace(const cosid_event *e, void *user_data) {
  struct reentry *c = user_data;
  if (e->kind == COSID_EVENT_SLOT_RELEASED) atomic_fetch_add(&c->after_replace, 1);
}

/* Puts the state file's folder back, so the keeper's next write (and the release) succeeds. */
static void restore_folder(struct reentry *c) {
  CB_CHECK(c, unlink(c->folder) == 0);
  CB_CHECK(c, rename(c->away, c->folder) == 0);
}

static void call_back(const cosid_event *e, void *user_data) {
  struct reentry *c = user_data;
  if (pthread_equal(pthread_self(), c->test_thread)) atomic_fetch_add(&c->on_test_thread, 1);
  if (e->kind == COSID_EVENT_SLOT_RELEASED) {
    atomic_fetch_add(&c->released, 1);
    if (atomic_load(&c->depth) > 0) atomic_fetch_add(&c->nested_released, 1);
    c->next_floor = e->next_floor_ms;
  }
  int mine = c->mode == REENTRY_ON_RELEASE ? e->kind == COSID_EVENT_SLOT_RELEASED
                                           : e->kind == COSID_EVENT_RENEWAL_FAILED;
  if (!mine || atomic_exchange(&c->handled, 1)) return;
  atomic_fetch_add(&c->depth, 1);
  cosid_runtime *rt = c->rt;
  uint64_t id = 0, batch[16];
  cosid_stats st;
  cosid_generator *g = NULL;
  switch (c->mode) {
  case REENTRY_USE: /* on the keeper's thread, with the lease's window still open */
    restore_folder(c);
    CB_CHECK(c, cosid_next(rt, &id) == COSID_OK && id > 0);
    CB_CHECK(c, cosid_next_batch(rt, batch, 16) == COSID_OK && batch[0] > id);
    CB_CHECK(c, cosid_runtime_stats(rt, &st) == COSID_OK && st.bound && st.ids_issued >= 17);
    CB_CHECK(c, st.renewal_failures >= 1);
    CB_CHECK(c, cosid_generator_get(rt, "from-callback", &g) == COSID_OK);
    CB_CHECK(c, g != NULL && cosid_generator_next(g, &id) == COSID_OK);
    cosid_generator_free(g);
    /* Replaces itself: the next event goes to the new callback. */
    CB_CHECK(c, cosid_runtime_set_event_callback(rt, after_replace, c) == COSID_OK);
    break;
  case REENTRY_CLOSE: /* the keeper's thread closes its own runtime */
    restore_folder(c);
    CB_CHECK(c, cosid_runtime_close(rt) == COSID_OK);
    CB_CHECK(c, atomic_load(&c->nested_released) == 1); /* delivered inside that close */
    CB_CHECK(c, cosid_next(rt, &id) == COSID_ERR_CLOSED);
    CB_CHECK(c, cosid_runtime_stats(rt, &st) == COSID_OK && !st.bound);
    break;
  case REENTRY_FREE: /* the keeper's thread frees its own runtime, without a close first */
    restore_folder(c);
    cosid_runtime_free(rt);
    c->rt = NULL;
    CB_CHECK(c, atomic_load(&c->nested_released) == 1); /* delivered inside that free */
    break;
  case REENTRY_ON_RELEASE: /* the closing thread's final event: everything still answers */
    CB_CHECK(c, cosid_runtime_stats(rt, &st) == COSID_OK && !st.bound && st.ids_issued == 1);
    CB_CHECK(c, cosid_next(rt, &id) == COSID_ERR_CLOSED);
    CB_CHECK(c, cosid_runtime_close(rt) == COSID_ERR_CLOSED);
    CB_CHECK(c, cosid_generator_get(rt, "late", &g) == COSID_ERR_CLOSED);
    CB_CHECK(c, cosid_runtime_set_event_callback(rt, after_replace, c) == COSID_OK);
    break;
  }
  atomic_fetch_sub(&c->depth, 1);
  atomic_store(&c->done, 1);
}

/* A static slot whose state file lives in `folder`: its keeper rewrites the file every second. */
static cosid_runtime *static_runtime(const char *folder) {
  snprintf(config_buf, sizeof config_buf,
           "cosid:\n"
           "  machine:\n"
           "    static:\n"
           "      slot: 5\n"
           "      state-file: %s/state\n"
           "      ahead: 2s\n"
           "      not-before: 2020-01-01T00:00:00Z\n",
           folder);
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(config_buf, &rt));
  return rt;
}

/* Starts a static runtime with `call_back` set, then makes the keeper's next write of the state
 * file fail (the folder becomes a file), so the keeper raises RENEWAL_FAILED on its own thread;
 * waits until the callback has done its part. */
static void run_on_keeper_thread(struct reentry *c, int mode, const char *name) {
  memset(c, 0, sizeof *c);
  c->mode = mode;
  c->test_thread = pthread_self();
  snprintf(c->folder, sizeof c->folder, "%s/%s", test_dir(), name);
  snprintf(c->away, sizeof c->away, "%s/%s.away", test_dir(), name);
  c->rt = static_runtime(c->folder);
  uint64_t id;
  OK(cosid_next(c->rt, &id));
  OK(cosid_runtime_set_event_callback(c->rt, call_back, c));
  CHECK(rename(c->folder, c->away) == 0);
  FILE *f = fopen(c->folder, "w");
  CHECK(f != NULL && fputs("not a folder\n", f) >= 0 && fclose(f) == 0);
  for (int i = 0; i < 3000 && !atomic_load(&c->done); i++) {
    nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
  }
  CHECK(atomic_load(&c->done));
  if (atomic_load(&c->failed_line)) FAIL("a check in the callback failed (line %d)", atomic_load(&c->failed_line));
  CHECK(atomic_load(&c->on_test_thread) == 0); /* RENEWAL_FAILED came on the keeper's thread */
}

static void test_callbacks_call_back(void) {
  struct reentry c;
  uint64_t id;
  cosid_stats st;

  /* Any function, on the keeper's thread: ids, stats, generators, replacing the callback. */
  run_on_keeper_thread(&c, REENTRY_USE, "reentry-use");
  OK(cosid_next(c.rt, &id)); /* the runtime goes on */
  OK(cosid_runtime_close(c.rt));
  CHECK(atomic_load(&c.after_replace) == 1 && atomic_load(&c.released) == 0);
  cosid_runtime_free(c.rt);

  /* Close from the keeper's thread: the release reaches the callback nested, inside the close. */
  run_on_keeper_thread(&c, REENTRY_CLOSE, "reentry-close");
  CHECK(atomic_load(&c.released) == 1 && atomic_load(&c.nested_released) == 1);
  EXPECT(COSID_ERR_CLOSED, cosid_runtime_close(c.rt));
  OK(cosid_runtime_stats(c.rt, &st));
  CHECK(!st.bound && st.ids_issued == 1);
  cosid_runtime_free(c.rt);
  CHECK(atomic_load(&c.released) == 1); /* nothing more after the free */

  /* Free from the keeper's thread: the ordered shutdown runs inside that free, and the slot and
   * its state file are free again at once (a new runtime can lock the file). */
  run_on_keeper_thread(&c, REENTRY_FREE, "reentry-free");
  CHECK(c.rt == NULL && atomic_load(&c.released) == 1 && atomic_load(&c.nested_released) == 1);
  cosid_runtime *again = static_runtime(c.folder);
  OK(cosid_runtime_stats(again, &st));
  CHECK(st.bound && st.slot == 5 && st.floor_ms >= c.next_floor);
  cosid_runtime_free(again);
  CHECK(atomic_load(&c.released) == 1); /* the freed runtime's callback heard nothing more */

  /* On the closing thread, inside the final release: everything still answers. */
  memset(&c, 0, sizeof c);
  c.mode = REENTRY_ON_RELEASE;
  c.test_thread = pthread_self();
  c.rt = new_runtime("reentry-release");
  OK(cosid_next(c.rt, &id));
  OK(cosid_runtime_set_event_callback(c.rt, call_back, &c));
  OK(cosid_runtime_close(c.rt));
  CHECK(atomic_load(&c.done) && atomic_load(&c.on_test_thread) == 1);
  if (atomic_load(&c.failed_line)) FAIL("a check in the callback failed (line %d)", atomic_load(&c.failed_line));
  cosid_runtime_free(c.rt);
  CHECK(atomic_load(&c.after_replace) == 0); /* freed after close: no second release */
}

static void test_closed_runtime(void) {
  cosid_runtime *rt = new_runtime("closed");
  cosid_generator *g = NULL;
  OK(cosid_generator_get(rt, "g", &g));
  OK(cosid_runtime_close(rt));
  EXPECT(COSID_ERR_CLOSED, cosid_runtime_close(rt)); /* a second close: a status, not UB */
  EXPECT_DETAIL("already closed");
  uint64_t id = 5;
  EXPECT(COSID_ERR_CLOSED, cosid_next(rt, &id));
  CHECK(id == 5);
  uint64_t batch[4] = {1, 2, 3, 4};
  EXPECT(COSID_ERR_CLOSED, cosid_next_batch(rt, batch, 4));
  CHECK(batch[0] == 1 && batch[3] == 4);
  EXPECT(COSID_ERR_CLOSED, cosid_generator_next(g, &id));
  cosid_generator *g2 = NULL;
  EXPECT(COSID_ERR_CLOSED, cosid_generator_get(rt, "", &g2));
  CHECK(g2 == NULL);
  OK(cosid_runtime_set_event_callback(rt, NULL, NULL));
  EXPECT(COSID_ERR_NULL_ARGUMENT, cosid_runtime_close(NULL));
  cosid_runtime_free(rt); /* free after close */
  cosid_generator_free(g);
  cosid_runtime_free(NULL);

  /* Free without close does the ordered shutdown: the slot is free again at once. One slot
   * (bits 0) and a short acquire timeout: the second runtime starts only if free released it. */
  char one_slot[512];
  snprintf(one_slot, sizeof one_slot,
           "cosid: {namespace: one-slot, machine: {lease: {store: 'sqlite://%s/closed.db', bits: 0, "
           "acquire-timeout: 200ms}}}",
           test_dir());
  OK(cosid_runtime_new(one_slot, &rt));
  cosid_stats s;
  OK(cosid_runtime_stats(rt, &s));
  CHECK(s.bound && s.slot == 0);
  cosid_runtime_free(rt);
  rt = NULL;
  OK(cosid_runtime_new(one_slot, &rt)); /* COSID_ERR_EXHAUSTED if the slot were still held */
  OK(cosid_runtime_stats(rt, &s));
  CHECK(s.bound && s.slot == 0);
  cosid_runtime_free(rt);
}

/* The program's own SIGINT handler: it only asks cosid to end its waits. */
static void on_sigint(int sig) {
  (void)sig;
  cosid_interrupt();
}

static void *sigint_soon(void *arg) {
  (void)arg;
  /* Let the call start waiting; a signal before that ends it all the same. */
  nanosleep(&(struct timespec){.tv_nsec = 200 * 1000 * 1000}, NULL);
  kill(getpid(), SIGINT);
  return NULL;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void test_interrupt(void) {
  struct sigaction action, before;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_sigint;
  sigemptyset(&action.sa_mask);
  CHECK(sigaction(SIGINT, &action, &before) == 0);

  /* One slot, held by `holder`: a second runtime waits for it up to its 30 s acquire-timeout,
   * retrying; SIGINT from another thread ends the wait with COSID_ERR_INTERRUPTED and no
   * runtime. (The test script bounds the program's time: a wait that ignored the signal would
   * fail it.) */
  char one_slot[512];
  snprintf(one_slot, sizeof one_slot,
           "cosid: {namespace: interrupt, machine: {lease: {store: 'sqlite://%s/interrupt.db', "
           "bits: 0, acquire-timeout: 30s}}}",
           test_dir());
  cosid_runtime *holder = NULL;
  OK(cosid_runtime_new(one_slot, &holder));
  pthread_t sender;
  CHECK(pthread_create(&sender, NULL, sigint_soon, NULL) == 0);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cosid_runtime *rt = NULL;
  EXPECT(COSID_ERR_INTERRUPTED, cosid_runtime_new(one_slot, &rt));
  double waited = seconds_since(&t0);
  CHECK(rt == NULL);
  EXPECT_DETAIL("interrupted");
  CHECK(pthread_join(sender, NULL) == 0);
  printf("test_api: an acquisition waiting for a held slot ended %.3f s after it began (SIGINT "
         "sent at 0.2 s)\n",
         waited);

  /* The interrupt stands: a call that need not wait is unaffected, an id call that must wait
   * (100,000 ids: the next time units) is ended at its first wait, its array untouched. */
  uint64_t id = 0;
  OK(cosid_next(holder, &id));
  enum { N = 100000 };
  static uint64_t batch[N];
  batch[0] = 7;
  EXPECT(COSID_ERR_INTERRUPTED, cosid_next_batch(holder, batch, N));
  CHECK(batch[0] == 7);
  EXPECT(COSID_ERR_INTERRUPTED, cosid_runtime_new(one_slot, &rt));
  CHECK(rt == NULL);

  /* Cleared, the waits wait again. */
  cosid_interrupt_clear();
  OK(cosid_next_batch(holder, batch, N));
  CHECK(batch[0] > id);
  OK(cosid_runtime_close(holder));
  cosid_runtime_free(holder);
  OK(cosid_runtime_new(one_slot, &rt)); /* the slot is free again */
  cosid_runtime_free(rt);
  CHECK(sigaction(SIGINT, &before, NULL) == 0);
}

int main(void) {
  test_version();
  test_status_names();
  test_last_error();
  test_bad_configs();
  test_unreachable_stores();
  test_interrupt();
  test_embedded_default();
  test_next();
  test_generators();
  test_parse_and_layouts();
  test_base62();
  test_text_forms();
  test_event_vocabulary();
  test_events();
  test_callbacks_call_back();
  test_closed_runtime();
  printf("test_api: ok\n");
  return 0;
}
