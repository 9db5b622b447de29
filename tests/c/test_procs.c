/*
 * fork(): a child of a process holding a runtime gets COSID_ERR_FORKED from that runtime (and
 * its generators), never an id from the parent's slot. Then 4 children, each building its own
 * runtime on the parent's SQLite store, and the parent itself issue ids at once: no duplicate
 * across the 5 processes, each on its own slot.
 */
#include "check.h"

#include <errno.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { CHILDREN = 4, PER_PROCESS = 200000, BATCH = 500 };

static char config[512];

/* Fills ids[0..PER_PROCESS) from rt: half single ids, half batches. */
static int issue(cosid_runtime *rt, uint64_t *ids) {
  for (size_t i = 0; i < PER_PROCESS / 2; i++) {
    if (cosid_next(rt, &ids[i]) != COSID_OK) return 1;
  }
  for (size_t i = PER_PROCESS / 2; i < PER_PROCESS; i += BATCH) {
    if (cosid_next_batch(rt, &ids[i], BATCH) != COSID_OK) return 1;
  }
  return 0;
}

static void write_ids(const char *path, const uint64_t *ids) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(ids, sizeof ids[0], PER_PROCESS, f) != PER_PROCESS || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    _exit(20);
  }
}

/* Runs in the child; returns its exit status (0: all good). */
static int child(int n, cosid_runtime *parent, cosid_generator *parent_gen) {
  uint64_t id = 12345;
  uint64_t batch[8] = {0};
  if (cosid_next(parent, &id) != COSID_ERR_FORKED || id != 12345) return 10;
  if (strstr(last_error(), "fork") == NULL) return 11;
  if (cosid_next_batch(parent, batch, 8) != COSID_ERR_FORKED || batch[0] != 0) return 12;
  if (cosid_generator_next(parent_gen, &id) != COSID_ERR_FORKED || id != 12345) return 13;
  /* Closing or freeing the parent's runtime in the child leaves the parent's slot alone (the
   * parent checks that it still holds it). Even children close first, odd ones just free. */
  if (n % 2 == 0) {
    if (cosid_runtime_close(parent) != COSID_ERR_FORKED) return 14;
    if (cosid_next(parent, &id) != COSID_ERR_FORKED || id != 12345) return 15;
  }
  cosid_generator_free(parent_gen);
  cosid_runtime_free(parent);

  cosid_runtime *mine = NULL;
  cosid_status st = cosid_runtime_new(config, &mine);
  if (st != COSID_OK) {
    fprintf(stderr, "child %d: cosid_runtime_new: %s (%s)\n", n, cosid_status_name(st), last_error());
    return 16;
  }
  uint64_t *ids = malloc(sizeof(uint64_t) * PER_PROCESS);
  if (!ids || issue(mine, ids) != 0) {
    fprintf(stderr, "child %d: issuing failed: %s\n", n, last_error());
    return 17;
  }
  if (cosid_runtime_close(mine) != COSID_OK) return 18;
  cosid_runtime_free(mine);
  char path[600];
  snprintf(path, sizeof path, "%s/child-%d.ids", test_dir(), n);
  write_ids(path, ids);
  free(ids);
  return 0;
}

int main(void) {
  snprintf(config, sizeof config,
           "cosid:\n  namespace: procs\n  machine:\n    lease:\n      store: sqlite://%s/procs.db\n"
           "      bits: 4\n",
           test_dir());
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(config, &rt));
  cosid_generator *gen = NULL;
  OK(cosid_generator_get(rt, "orders", &gen));
  uint64_t before = 0;
  OK(cosid_next(rt, &before));

  pid_t pids[CHILDREN];
  for (int i = 0; i < CHILDREN; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) _exit(child(i, rt, gen)); /* _exit: the parent's atexit work is not ours */
  }

  /* The parent keeps issuing on its own slot meanwhile. */
  size_t total = (size_t)(CHILDREN + 1) * PER_PROCESS;
  uint64_t *all = malloc(sizeof(uint64_t) * total);
  CHECK(all != NULL);
  CHECK(issue(rt, all) == 0);
  CHECK(all[0] > before);

  for (int i = 0; i < CHILDREN; i++) {
    int status = 0;
    CHECK(waitpid(pids[i], &status, 0) == pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      FAIL("child %d failed: %s %d", i, WIFEXITED(status) ? "exit status" : "signal",
           WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
  }

  uint32_t slots[CHILDREN + 1];
  cosid_id_parts p;
  OK(cosid_parse(rt, all[0], &p));
  slots[0] = p.slot;
  for (int i = 0; i < CHILDREN; i++) {
    char path[600];
    snprintf(path, sizeof path, "%s/child-%d.ids", test_dir(), i);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    uint64_t *dst = all + (size_t)(i + 1) * PER_PROCESS;
    CHECK(fread(dst, sizeof dst[0], PER_PROCESS, f) == PER_PROCESS);
    fclose(f);
    OK(cosid_parse(rt, dst[0], &p));
    slots[i + 1] = p.slot;
  }
  for (int i = 0; i <= CHILDREN; i++)
    for (int j = 0; j < i; j++)
      if (slots[i] == slots[j]) FAIL("processes %d and %d share slot %u", i, j, slots[i]);

  /* The parent's runtime and generator still work: the children never touched its slot. */
  cosid_stats st;
  OK(cosid_runtime_stats(rt, &st));
  CHECK(st.bound && st.acquisitions == 1 && st.slots_lost == 0 && st.slot == slots[0]);
  uint64_t after = 0;
  OK(cosid_generator_next(gen, &after));
  OK(cosid_next(rt, &after));
  CHECK(after > all[PER_PROCESS - 1]);
  cosid_generator_free(gen);
  OK(cosid_runtime_close(rt));
  cosid_runtime_free(rt);

  expect_unique(all, total, "5 processes");
  free(all);
  printf("test_procs: fork gives COSID_ERR_FORKED; %d processes x %d ids on one SQLite store, "
         "distinct slots, no duplicate\n",
         CHILDREN + 1, PER_PROCESS);
  return 0;
}
