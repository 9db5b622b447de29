/* A `cosid next --follow` twin written against the C library (include/cosid.h), for the chaos
 * harness:
 *
 *   cworker --store URL --namespace NS --owner-key K --ttl 2s --tolerance 500ms --rate 1000
 *           [--fork N]
 *
 * With --fork N it forks N children 0.5 s after its first id; each child keeps issuing through
 * the runtime it inherited (which takes a slot of its own in the child: cosid.fork new-slot),
 * on the same standard output. On SIGTERM the parent passes the signal to its children, waits
 * for them, and fails if one of them failed.
 *
 * Prints one decimal id a line until SIGTERM or SIGINT, then closes the runtime (the slot is
 * released with the last id) and exits 0. Statuses the keeper is working on (slot lost, window
 * closed, clock behind, timeout) are reported once per kind on stderr as `cosid: waiting: …` and
 * retried; any other is `cosid: error: …` and the exit status is the status value (1: a
 * configuration error, e.g. a store this library was built without; 2: the store). Every keeper
 * event is printed on stderr as `cosid: event: KIND: MESSAGE`. */
#define _POSIX_C_SOURCE 200809L
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cosid.h"

#define MAX_CHILDREN 16

static volatile sig_atomic_t stop;

static void on_signal(int sig) { (void)sig; stop = 1; }

static void on_event(const struct cosid_event *e, void *user) {
    (void)user;
    fprintf(stderr, "cosid: event: %s: %s\n", cosid_event_kind_name(e->kind), e->message ? e->message : "");
}

static void last_error(char *buf, size_t len) {
    size_t n = 0;
    if (cosid_last_error_message(buf, len, &n) != COSID_OK) snprintf(buf, len, "(no detail)");
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    const char *store = NULL, *ns = NULL, *key = NULL, *ttl = "2s", *tol = "500ms";
    double rate = 1000;
    int forks = 0, nchildren = 0, is_child = 0;
    pid_t children[MAX_CHILDREN];
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--store")) store = argv[i + 1];
        else if (!strcmp(argv[i], "--namespace")) ns = argv[i + 1];
        else if (!strcmp(argv[i], "--owner-key")) key = argv[i + 1];
        else if (!strcmp(argv[i], "--ttl")) ttl = argv[i + 1];
        else if (!strcmp(argv[i], "--tolerance")) tol = argv[i + 1];
        else if (!strcmp(argv[i], "--rate")) rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--fork")) forks = atoi(argv[i + 1]);
        else { fprintf(stderr, "cosid: error: unknown argument %s\n", argv[i]); return 64; }
    }
    if (forks < 0 || forks > MAX_CHILDREN) {
        fprintf(stderr, "cosid: error: --fork %d: use 0 to %d\n", forks, MAX_CHILDREN);
        return 64;
    }
    if (!store || !ns || !key || rate <= 0) {
        fprintf(stderr, "cosid: error: --store, --namespace and --owner-key are required\n");
        return 64;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    /* JSON is YAML: quoting with %s is safe for the harness's own values (no quote in them). */
    char config[4096];
    snprintf(config, sizeof config,
             "{\"cosid\": {\"namespace\": \"%s\", \"machine\": {\"lease\": {\"store\": \"%s\", "
             "\"owner-key\": \"%s\", \"ttl\": \"%s\", \"tolerance\": \"%s\", \"acquire-timeout\": \"%s\"}}}}",
             ns, store, key, ttl, tol, ttl);
    char err[1024];
    struct cosid_runtime *rt = NULL;
    cosid_status st = cosid_runtime_new(config, &rt);
    if (st != COSID_OK) {
        last_error(err, sizeof err);
        fprintf(stderr, "cosid: error: %s: %s\n", cosid_status_name(st), err);
        return (int)st;
    }
    cosid_runtime_set_event_callback(rt, on_event, NULL);

    double interval = 1.0 / rate, start = mono();
    uint64_t issued = 0;
    cosid_status last = COSID_OK;
    int code = 0;
    while (!stop) {
        double due = start + issued * interval, now = mono();
        if (due > now) {
            fflush(stdout);
            double d = due - now < 0.05 ? due - now : 0.05;
            struct timespec ts = {0, (long)(d * 1e9)};
            nanosleep(&ts, NULL);
            continue;
        }
        uint64_t id;
        st = cosid_next(rt, &id);
        if (st == COSID_OK) {
            last = COSID_OK;
            issued++;
            printf("%" PRIu64 "\n", id);
            if (issued % 20 == 0) fflush(stdout);
            if (!is_child && nchildren < forks && mono() - start > 0.5) {
                /* Nothing buffered may be written twice: flush before the fork. */
                fflush(stdout);
                fflush(stderr);
                pid_t pid = fork();
                if (pid < 0) {
                    fprintf(stderr, "cosid: error: fork failed\n");
                    code = 70;
                    break;
                }
                if (pid == 0) {
                    is_child = 1;
                    nchildren = 0;
                    start = mono();
                    issued = 0;
                } else {
                    children[nchildren++] = pid;
                }
            }
            continue;
        }
        fflush(stdout);
        if (st == COSID_ERR_SLOT_LOST || st == COSID_ERR_WINDOW_CLOSED || st == COSID_ERR_CLOCK_BEHIND ||
            st == COSID_ERR_TIMEOUT) {
            if (st != last) {
                last_error(err, sizeof err);
                fprintf(stderr, "cosid: waiting: %s: %s\n", cosid_status_name(st), err);
                last = st;
            }
            struct timespec ts = {0, 10000000L};
            nanosleep(&ts, NULL);
            continue;
        }
        last_error(err, sizeof err);
        fprintf(stderr, "cosid: error: %s: %s\n", cosid_status_name(st), err);
        code = (int)st;
        break;
    }
    fflush(stdout);
    for (int i = 0; i < nchildren; i++) kill(children[i], SIGTERM);
    for (int i = 0; i < nchildren; i++) {
        int status = 0;
        if (waitpid(children[i], &status, 0) != children[i] || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "cosid: error: forked child %d ended with status %d\n", (int)children[i], status);
            if (code == 0) code = 71;
        }
    }
    st = cosid_runtime_close(rt);
    if (st != COSID_OK && code == 0) {
        last_error(err, sizeof err);
        fprintf(stderr, "cosid: error: closing: %s: %s\n", cosid_status_name(st), err);
        code = (int)st;
    }
    cosid_runtime_free(rt);
    return code;
}
