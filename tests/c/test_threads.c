/*
 * 8 threads share one runtime and take 1,000,000 ids each with cosid_next (and a share of
 * cosid_next_batch); all 8,000,000 ids are sorted and scanned for a duplicate.
 */
#include "check.h"

#include <pthread.h>

enum { THREADS = 8, PER_THREAD = 1000000, BATCH = 1000 };

static cosid_runtime *rt;
static uint64_t *ids;

static void *worker(void *arg) {
  size_t t = (size_t)arg;
  uint64_t *mine = ids + t * PER_THREAD;
  /* Odd threads end with batches, so single ids and batches interleave. */
  size_t singles = (t % 2) ? PER_THREAD - 100 * BATCH : PER_THREAD;
  uint64_t last = 0;
  for (size_t i = 0; i < singles; i++) {
    cosid_status st = cosid_next(rt, &mine[i]);
    if (st != COSID_OK) FAIL("thread %zu: cosid_next: %s (%s)", t, cosid_status_name(st), last_error());
    if (mine[i] <= last) FAIL("thread %zu: ids went back", t);
    last = mine[i];
  }
  for (size_t i = singles; i < PER_THREAD; i += BATCH) {
    cosid_status st = cosid_next_batch(rt, &mine[i], BATCH);
    if (st != COSID_OK) FAIL("thread %zu: cosid_next_batch: %s (%s)", t, cosid_status_name(st), last_error());
  }
  return NULL;
}

int main(void) {
  char config[512];
  snprintf(config, sizeof config,
           "cosid:\n  namespace: threads\n  machine:\n    lease:\n      store: sqlite://%s/threads.db\n",
           test_dir());
  OK(cosid_runtime_new(config, &rt));
  ids = malloc(sizeof(uint64_t) * THREADS * PER_THREAD);
  CHECK(ids != NULL);
  pthread_t th[THREADS];
  for (size_t t = 0; t < THREADS; t++) CHECK(pthread_create(&th[t], NULL, worker, (void *)t) == 0);
  for (size_t t = 0; t < THREADS; t++) CHECK(pthread_join(th[t], NULL) == 0);
  cosid_stats s;
  OK(cosid_runtime_close(rt));
  OK(cosid_runtime_stats(rt, &s));
  CHECK(s.ids_issued == (uint64_t)THREADS * PER_THREAD);
  cosid_runtime_free(rt);
  expect_unique(ids, (size_t)THREADS * PER_THREAD, "8 threads");
  free(ids);
  printf("test_threads: %d threads x %d ids, no duplicate\n", THREADS, PER_THREAD);
  return 0;
}
