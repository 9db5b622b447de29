/*
 * A complete C program using libcosid: build a runtime, issue ids (one at a time and in a
 * batch), take one apart, print it in base 62, then shut down in order.
 *
 *   cc -std=c11 main.c $(pkg-config --cflags --libs cosid) -o cosid-example
 *   ./cosid-example                      # the embedded default store
 *   ./cosid-example "$(cat cosid.yaml)"  # or a YAML/JSON configuration
 */
#include <cosid.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints the failed call's status and this thread's detail message, then exits. */
static void die(const char *what, cosid_status status) {
  char detail[1024];
  size_t len = 0;
  if (cosid_last_error_message(detail, sizeof detail, &len) != COSID_OK) detail[0] = '\0';
  fprintf(stderr, "%s failed: %s: %s\n", what, cosid_status_name(status), detail);
  exit(1);
}

int main(int argc, char **argv) {
  /* NULL: the embedded SQLite store at $XDG_STATE_HOME/cosid/slots.db. */
  const char *config = argc > 1 ? argv[1] : NULL;
  cosid_runtime *rt = NULL;
  cosid_status st = cosid_runtime_new(config, &rt);
  if (st != COSID_OK) die("cosid_runtime_new", st);

  /* One id at a time (cosid_next may be called from any number of threads at once). */
  for (int i = 0; i < 3; i++) {
    uint64_t id;
    st = cosid_next(rt, &id);
    if (st != COSID_OK) die("cosid_next", st);
    printf("%" PRIu64 "\n", id);
  }

  /* Many at once: cheaper per id. */
  uint64_t batch[4];
  st = cosid_next_batch(rt, batch, 4);
  if (st != COSID_OK) die("cosid_next_batch", st);
  for (int i = 0; i < 4; i++) printf("%" PRIu64 "\n", batch[i]);

  /* Take the last id apart and print its base-62 form. */
  cosid_id_parts parts;
  st = cosid_parse(rt, batch[3], &parts);
  if (st != COSID_OK) die("cosid_parse", st);
  char text[COSID_BASE62_BUFFER_SIZE];
  size_t text_len;
  st = cosid_id_to_base62(batch[3], text, sizeof text, &text_len);
  if (st != COSID_OK) die("cosid_id_to_base62", st);
  printf("%s: timestamp_ms=%" PRId64 " slot=%" PRIu32 " sequence=%" PRIu32 "\n", text,
         parts.timestamp_ms, parts.slot, parts.sequence);

  /* Ordered shutdown: no id after this; the slot goes back to the store with the last
   * timestamp, so its next holder starts above it. Then free the handle. */
  st = cosid_runtime_close(rt);
  if (st != COSID_OK) die("cosid_runtime_close", st);
  cosid_runtime_free(rt);
  return 0;
}
