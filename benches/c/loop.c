/*
 * C-compiled loops over the C API, loaded into the Rust benchmark (cosid-ffi/benches/c_api.rs)
 * with dlopen so that a real C caller, going through the PLT into libcosid.so, is measured in
 * the same process and the same run as the Rust `Runtime::next()`.
 *
 * Built by benches/c/run.sh: cc -O2 -shared -fPIC loop.c $(pkg-config --cflags --libs cosid).
 */
#include <cosid.h>

#include <stddef.h>
#include <stdint.h>

/* A runtime of the libcosid.so this object is linked with (NULL on error). */
cosid_runtime *cosid_bench_runtime_new(const char *config) {
  cosid_runtime *rt = NULL;
  return cosid_runtime_new(config, &rt) == COSID_OK ? rt : NULL;
}

void cosid_bench_runtime_free(cosid_runtime *rt) { cosid_runtime_free(rt); }

/* `iters` calls of cosid_next; the XOR of the ids in *acc. Returns the first failure. */
cosid_status cosid_bench_next_loop(const cosid_runtime *rt, uint64_t iters, uint64_t *acc) {
  uint64_t x = 0, id = 0;
  for (uint64_t i = 0; i < iters; i++) {
    cosid_status st = cosid_next(rt, &id);
    if (st != COSID_OK) return st;
    x ^= id;
  }
  *acc = x;
  return COSID_OK;
}

/* One call of cosid_next_batch. */
cosid_status cosid_bench_batch(const cosid_runtime *rt, uint64_t *ids, size_t n) {
  return cosid_next_batch(rt, ids, n);
}
