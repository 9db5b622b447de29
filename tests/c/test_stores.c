/* libcosid reaches every network store: Redis, PostgreSQL, etcd and MariaDB servers started for
 * the run (scripts/test-c runs this under scripts/with-test-servers, which sets
 * COSID_TEST_*_URL). A server that is not named is a failure: a store test is never skipped. */
#include "check.h"

#include <unistd.h>

enum { PER_RUNTIME = 20000 };

static cosid_runtime *on_store(const char *url, const char *ns) {
  char config[1024];
  int n = snprintf(config, sizeof config,
                   "cosid:\n  namespace: %s\n  machine:\n    lease:\n      store: '%s'\n"
                   "      bits: 4\n",
                   ns, url);
  CHECK(n > 0 && (size_t)n < sizeof config);
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(config, &rt));
  CHECK(rt != NULL);
  return rt;
}

/* Two runtimes on one namespace: separate slots, every id on its runtime's slot, none twice. */
static void two_runtimes_share_a_namespace(const char *kind, const char *url) {
  char ns[96];
  snprintf(ns, sizeof ns, "c-%s-%ld", kind, (long)getpid());
  cosid_runtime *a = on_store(url, ns);
  cosid_runtime *b = on_store(url, ns);
  cosid_stats sa, sb;
  OK(cosid_runtime_stats(a, &sa));
  OK(cosid_runtime_stats(b, &sb));
  CHECK(sa.bound && sb.bound);
  if (sa.slot == sb.slot) FAIL("%s: both runtimes hold slot %u", kind, (unsigned)sa.slot);

  uint64_t *ids = malloc(2 * PER_RUNTIME * sizeof *ids);
  CHECK(ids != NULL);
  OK(cosid_next_batch(a, ids, PER_RUNTIME));
  OK(cosid_next_batch(b, ids + PER_RUNTIME, PER_RUNTIME));
  for (size_t i = 0; i < 2 * PER_RUNTIME; i++) {
    cosid_id_parts parts;
    OK(cosid_parse(a, ids[i], &parts));
    uint32_t want = i < PER_RUNTIME ? sa.slot : sb.slot;
    if (parts.slot != want) FAIL("%s: id %" PRIu64 " is on slot %u, not %u", kind, ids[i], (unsigned)parts.slot, (unsigned)want);
  }
  expect_unique(ids, 2 * PER_RUNTIME, kind);
  free(ids);
  OK(cosid_runtime_close(a));
  OK(cosid_runtime_close(b));
  cosid_runtime_free(a);
  cosid_runtime_free(b);
  printf("%s: slots %u and %u, %d ids, none twice\n", kind, (unsigned)sa.slot, (unsigned)sb.slot,
         2 * PER_RUNTIME);
}

int main(void) {
  const char *kinds[][2] = {{"redis", "COSID_TEST_REDIS_URL"},
                            {"postgres", "COSID_TEST_POSTGRES_URL"},
                            {"etcd", "COSID_TEST_ETCD_URL"},
                            {"mysql", "COSID_TEST_MYSQL_URL"}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    const char *url = getenv(kinds[i][1]);
    if (url == NULL || *url == '\0')
      FAIL("%s is not set: run through scripts/test-c (it starts the servers) or "
           "scripts/with-test-servers %s, or point it at a server the tests may use",
           kinds[i][1], kinds[i][0]);
    two_runtimes_share_a_namespace(kinds[i][0], url);
  }
  return 0;
}
