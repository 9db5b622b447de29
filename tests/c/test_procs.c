/*
 * fork(): a child never issues on its parent's slot.
 *
 * 1. `fork: fail`: in a child, the inherited runtime, a generator obtained before the fork and
 *    one first asked for after it (cosid_generator_get in the child) all return
 *    COSID_ERR_FORKED, never an id; the child then builds its own runtime and issues from it.
 * 2. The default policy (`new-slot`): 4 forked workers issue ids from the inherited runtime, a
 *    generator obtained before the fork, and one first asked for in the child, while the parent
 *    issues from the same three. Each worker takes a slot of its own (not the parent's: its
 *    stats and its ids say so), every id space is free of duplicates across the 5 processes,
 *    closing the inherited runtime in a worker releases the worker's slot, and at the end no
 *    slot is held but the parent's (then none).
 *
 * Every child is waited for with a deadline: a hung child fails the test instead of hanging it.
 */
#include "check.h"

#include <errno.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CHILDREN = 4, PER_PROCESS = 100000, BATCH = 500, BITS = 4 };
enum { SPACES = 3 }; /* the default generator, "orders" (before the fork), "late" (after) */
#define CHILD_DEADLINE_S 120

static char config_fail[512];
static char config_default[512];

static void make_config(char *out, size_t n, const char *ns, const char *extra) {
  snprintf(out, n,
           "cosid:\n  namespace: %s\n%s  machine:\n    lease:\n      store: sqlite://%s/procs.db\n"
           "      bits: %d\n      ttl: 60s\n",
           ns, extra, test_dir(), BITS);
}

/* Where ids come from: a generator, or a runtime's default generator when `g` is NULL. */
struct source {
  cosid_runtime *rt;
  cosid_generator *g;
};

/* Fills ids[0..n) from `src`: half single ids, half batches. One loop for both kinds of
 * source, so a runtime and a generator are exercised the same way. */
static int issue(struct source src, uint64_t *ids, size_t n) {
  for (size_t i = 0; i < n / 2; i++) {
    cosid_status s = src.g ? cosid_generator_next(src.g, &ids[i]) : cosid_next(src.rt, &ids[i]);
    if (s != COSID_OK) return 1;
  }
  for (size_t i = n / 2; i < n; i += BATCH) {
    size_t k = n - i < BATCH ? n - i : BATCH;
    cosid_status s = src.g ? cosid_generator_next_batch(src.g, &ids[i], k)
                           : cosid_next_batch(src.rt, &ids[i], k);
    if (s != COSID_OK) return 1;
  }
  return 0;
}

static int issue_gen(cosid_generator *g, uint64_t *ids, size_t n) {
  return issue((struct source){.g = g}, ids, n);
}

static int issue_rt(cosid_runtime *rt, uint64_t *ids, size_t n) {
  return issue((struct source){.rt = rt}, ids, n);
}

/* A runtime built from `config` and its "orders" generator, obtained before any fork: what
 * both policies' tests start from. */
static cosid_runtime *runtime_with_orders(const char *config, cosid_generator **orders) {
  cosid_runtime *rt = NULL;
  OK(cosid_runtime_new(config, &rt));
  OK(cosid_generator_get(rt, "orders", orders));
  return rt;
}

static void write_ids(const char *path, const uint64_t *ids, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(ids, sizeof ids[0], n, f) != n || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
    _exit(20);
  }
}

static void read_ids(const char *path, uint64_t *ids, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) FAIL("cannot open %s: %s", path, strerror(errno));
  CHECK(fread(ids, sizeof ids[0], n, f) == n);
  fclose(f);
}

/* Waits for `pid` at most CHILD_DEADLINE_S seconds; a child still running is killed and the
 * test fails. Returns the exit status of a child that exited. */
static int wait_bounded(pid_t pid, const char *what) {
  struct timespec nap = {0, 10 * 1000 * 1000};
  for (long waited_ms = 0;; waited_ms += 10) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (!WIFEXITED(status))
        FAIL("%s (pid %d) died of signal %d", what, (int)pid, WTERMSIG(status));
      return WEXITSTATUS(status);
    }
    CHECK(r == 0);
    if (waited_ms > CHILD_DEADLINE_S * 1000L) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL("%s (pid %d) hung for %d s and was killed", what, (int)pid, CHILD_DEADLINE_S);
    }
    nanosleep(&nap, NULL);
  }
}

/* How many of the namespace's slots are held by a live lease: takes every slot with runtimes
 * that give up at once, and counts the ones that found none free. */
static int held_slots(const char *ns) {
  cosid_runtime *probes[1 << BITS] = {0};
  int held = 0;
  for (int i = 0; i < (1 << BITS); i++) {
    char cfg[640];
    snprintf(cfg, sizeof cfg,
             "cosid:\n  namespace: %s\n  machine:\n    lease:\n      store: sqlite://%s/procs.db\n"
             "      bits: %d\n      ttl: 60s\n      owner-key: probe-%d\n"
             "      acquire-timeout: 0s\n",
             ns, test_dir(), BITS, i);
    cosid_status st = cosid_runtime_new(cfg, &probes[i]);
    if (st == COSID_ERR_EXHAUSTED) {
      held++;
    } else if (st != COSID_OK) {
      FAIL("probe %d: %s (%s)", i, cosid_status_name(st), last_error());
    }
  }
  for (int i = 0; i < (1 << BITS); i++) {
    if (probes[i]) {
      OK(cosid_runtime_close(probes[i]));
      cosid_runtime_free(probes[i]);
    }
  }
  return held;
}

/* --- 1. fork: fail ------------------------------------------------------------------------- */

static int fail_child(cosid_runtime *parent, cosid_generator *parent_gen) {
  uint64_t id = 12345;
  uint64_t batch[8] = {0};
  if (cosid_next(parent, &id) != COSID_ERR_FORKED || id != 12345) return 10;
  if (strstr(last_error(), "fork") == NULL) return 11;
  if (cosid_next_batch(parent, batch, 8) != COSID_ERR_FORKED || batch[0] != 0) return 12;
  if (cosid_generator_next(parent_gen, &id) != COSID_ERR_FORKED || id != 12345) return 13;
  /* A generator first asked for in the child: refused at once, or by its first call. */
  cosid_generator *late = NULL;
  cosid_status st = cosid_generator_get(parent, "late", &late);
  if (st == COSID_OK) {
    if (cosid_generator_next(late, &id) != COSID_ERR_FORKED || id != 12345) return 14;
    cosid_generator_free(late);
  } else if (st != COSID_ERR_FORKED) {
    return 15;
  }
  /* Closing the inherited runtime leaves the parent's slot alone (the parent checks it). */
  st = cosid_runtime_close(parent);
  if (st != COSID_ERR_FORKED && st != COSID_OK) return 16;
  if (cosid_next(parent, &id) == COSID_OK) return 17;
  cosid_generator_free(parent_gen);
  cosid_runtime_free(parent);

  cosid_runtime *mine = NULL;
  if (cosid_runtime_new(config_fail, &mine) != COSID_OK) {
    fprintf(stderr, "fail child: cosid_runtime_new: %s\n", last_error());
    return 18;
  }
  uint64_t *ids = malloc(sizeof(uint64_t) * 1000);
  if (!ids || issue_rt(mine, ids, 1000) != 0) return 19;
  if (cosid_runtime_close(mine) != COSID_OK) return 21;
  cosid_runtime_free(mine);
  char path[600];
  snprintf(path, sizeof path, "%s/fail-child.ids", test_dir());
  write_ids(path, ids, 1000);
  free(ids);
  return 0;
}

static void test_fail_policy(void) {
  cosid_generator *gen = NULL;
  cosid_runtime *rt = runtime_with_orders(config_fail, &gen);
  uint64_t ids[2000];
  CHECK(issue_rt(rt, ids, 500) == 0);

  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(fail_child(rt, gen)); /* _exit: the parent's atexit work is not ours */
  CHECK(issue_rt(rt, ids + 500, 500) == 0);
  int code = wait_bounded(pid, "the fork: fail child");
  if (code != 0) FAIL("the fork: fail child failed with status %d", code);

  char path[600];
  snprintf(path, sizeof path, "%s/fail-child.ids", test_dir());
  read_ids(path, ids + 1000, 1000);
  cosid_stats st;
  OK(cosid_runtime_stats(rt, &st));
  CHECK(st.bound && st.acquisitions == 1 && st.slots_lost == 0);
  cosid_id_parts p;
  OK(cosid_parse(rt, ids[1000], &p));
  CHECK(p.slot != st.slot);
  uint64_t after = 0;
  OK(cosid_generator_next(gen, &after));
  cosid_generator_free(gen);
  OK(cosid_runtime_close(rt));
  cosid_runtime_free(rt);
  expect_unique(ids, 2000, "fork: fail, parent and child");
}

/* --- 2. the default policy: forked workers ------------------------------------------------- */

static char child_path[CHILDREN][SPACES][600];

/* Issues n ids into each of the three id spaces from the objects given. */
static int issue_all(cosid_runtime *rt, cosid_generator *orders, cosid_generator *late,
                     uint64_t *out[SPACES], size_t n) {
  if (issue_rt(rt, out[0], n) != 0) return 1;
  if (issue_gen(orders, out[1], n) != 0) return 2;
  if (issue_gen(late, out[2], n) != 0) return 3;
  return 0;
}

static int worker(int n, cosid_runtime *rt, cosid_generator *orders, int go) {
  char byte;
  if (read(go, &byte, 1) != 1) return 30; /* start with the others */
  /* A generator first asked for here, after the fork. */
  cosid_generator *late = NULL;
  if (cosid_generator_get(rt, "late", &late) != COSID_OK) {
    fprintf(stderr, "worker %d: cosid_generator_get after fork: %s\n", n, last_error());
    return 31;
  }
  uint64_t *ids[SPACES];
  for (int s = 0; s < SPACES; s++) {
    ids[s] = malloc(sizeof(uint64_t) * PER_PROCESS);
    if (!ids[s]) return 32;
  }
  int bad = issue_all(rt, orders, late, ids, PER_PROCESS);
  if (bad) {
    fprintf(stderr, "worker %d: issuing in space %d failed: %s\n", n, bad - 1, last_error());
    return 33;
  }
  /* The runtime now describes the worker's own slot, which every id carries. */
  cosid_stats st;
  if (cosid_runtime_stats(rt, &st) != COSID_OK || !st.bound) return 34;
  for (int s = 0; s < SPACES; s++) {
    cosid_id_parts p;
    if (cosid_parse(rt, ids[s][0], &p) != COSID_OK || p.slot != st.slot) return 35;
    if (cosid_parse(rt, ids[s][PER_PROCESS - 1], &p) != COSID_OK || p.slot != st.slot) return 36;
  }
  /* Closing the inherited runtime in the worker releases the worker's slot. */
  if (cosid_runtime_close(rt) != COSID_OK) {
    fprintf(stderr, "worker %d: cosid_runtime_close: %s\n", n, last_error());
    return 37;
  }
  cosid_generator_free(late);
  cosid_generator_free(orders);
  cosid_runtime_free(rt);
  for (int s = 0; s < SPACES; s++) {
    write_ids(child_path[n][s], ids[s], PER_PROCESS);
    free(ids[s]);
  }
  return 0;
}

static void test_forked_workers(void) {
  cosid_generator *orders = NULL;
  cosid_runtime *rt = runtime_with_orders(config_default, &orders);
  cosid_stats st;
  OK(cosid_runtime_stats(rt, &st));
  uint32_t parent_slot = st.slot;

  size_t total = (size_t)(CHILDREN + 1) * PER_PROCESS;
  uint64_t *all[SPACES];
  for (int s = 0; s < SPACES; s++) {
    all[s] = malloc(sizeof(uint64_t) * total);
    CHECK(all[s] != NULL);
  }
  for (int i = 0; i < CHILDREN; i++)
    for (int s = 0; s < SPACES; s++)
      snprintf(child_path[i][s], sizeof child_path[i][s], "%s/worker-%d-%d.ids", test_dir(), i, s);

  int go[2];
  CHECK(pipe(go) == 0);
  pid_t pids[CHILDREN];
  for (int i = 0; i < CHILDREN; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      close(go[1]);
      _exit(worker(i, rt, orders, go[0]));
    }
  }
  close(go[0]);
  char bytes[CHILDREN] = {0};
  CHECK(write(go[1], bytes, CHILDREN) == CHILDREN);
  close(go[1]);

  /* The parent issues from the same three meanwhile ("late" is first asked for here too). */
  cosid_generator *late = NULL;
  OK(cosid_generator_get(rt, "late", &late));
  uint64_t *mine[SPACES] = {all[0], all[1], all[2]};
  CHECK(issue_all(rt, orders, late, mine, PER_PROCESS) == 0);

  for (int i = 0; i < CHILDREN; i++) {
    char what[64];
    snprintf(what, sizeof what, "worker %d", i);
    int code = wait_bounded(pids[i], what);
    if (code != 0) FAIL("worker %d failed with status %d", i, code);
  }
  for (int i = 0; i < CHILDREN; i++) {
    for (int s = 0; s < SPACES; s++) {
      uint64_t *dst = all[s] + (size_t)(i + 1) * PER_PROCESS;
      read_ids(child_path[i][s], dst, PER_PROCESS);
      cosid_id_parts p;
      OK(cosid_parse(rt, dst[0], &p));
      if (p.slot == parent_slot) FAIL("worker %d issued on the parent's slot %u", i, parent_slot);
    }
  }

  /* The parent kept its slot; the workers released theirs. */
  OK(cosid_runtime_stats(rt, &st));
  CHECK(st.bound && st.acquisitions == 1 && st.slots_lost == 0 && st.slot == parent_slot);
  int held = held_slots("procs");
  if (held != 1) FAIL("%d slots held after the workers ended, expected 1 (the parent's)", held);
  cosid_generator_free(late);
  cosid_generator_free(orders);
  OK(cosid_runtime_close(rt));
  cosid_runtime_free(rt);
  held = held_slots("procs");
  if (held != 0) FAIL("%d slots held after the parent closed", held);

  const char *names[SPACES] = {"default generator", "\"orders\" (before the fork)",
                               "\"late\" (after the fork)"};
  for (int s = 0; s < SPACES; s++) {
    expect_unique(all[s], total, names[s]);
    free(all[s]);
  }
}

int main(void) {
  make_config(config_fail, sizeof config_fail, "procs-fail", "  fork: fail\n");
  make_config(config_default, sizeof config_default, "procs", "");
  test_fail_policy();
  test_forked_workers();
  printf("test_procs: fork: fail gives COSID_ERR_FORKED (generators before and after the fork); "
         "%d forked workers x %d ids x %d id spaces on one SQLite store, each on its own slot, "
         "no duplicate, every slot released\n",
         CHILDREN, PER_PROCESS, SPACES);
  return 0;
}
