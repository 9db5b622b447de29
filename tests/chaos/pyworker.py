"""A `cosid next --follow` twin written against the Python wheel, for the chaos harness.

    python pyworker.py --store URL --namespace NS --owner-key K --ttl 2s --tolerance 500ms --rate 1000

Prints one decimal id a line until SIGTERM or SIGINT, then closes the runtime (the slot is
released with the last id) and exits 0. Errors the keeper is working on (slot lost, window
closed, clock behind, timeout) are reported once per kind on stderr as `cosid: waiting: …` and
retried; anything else is `cosid: error: …` and exit 1. Unlike the command, it also prints every
keeper event on stderr as `cosid: event: KIND: MESSAGE`, so the harness sees duplicate owner
keys, store resets and slot changes.
"""

import argparse
import signal
import sys
import time

import cosid

stop = False


def on_signal(*_):
    global stop
    stop = True


def main() -> int:
    ap = argparse.ArgumentParser()
    for flag in ("--store", "--namespace", "--owner-key", "--ttl", "--tolerance"):
        ap.add_argument(flag, required=True)
    ap.add_argument("--rate", type=float, default=1000)
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    config = {"cosid": {"namespace": a.namespace, "machine": {"lease": {
        "store": a.store, "owner-key": a.owner_key, "ttl": a.ttl, "tolerance": a.tolerance,
        "acquire-timeout": a.ttl}}}}

    def on_event(e):
        print(f"cosid: event: {e.kind}: {e.message}", file=sys.stderr, flush=True)

    try:
        rt = cosid.Runtime(config, on_event=on_event)
    except cosid.CosIdError as e:
        print(f"cosid: error: {e}", file=sys.stderr, flush=True)
        return 1
    transient = (cosid.SlotLostError, cosid.WindowClosedError, cosid.ClockBehindError, cosid.WaitTimeoutError)
    out = sys.stdout
    interval = 1.0 / a.rate
    start = time.monotonic()
    issued = 0
    last_error = None
    last_flush = time.monotonic()
    code = 0
    while not stop:
        due = start + issued * interval
        now = time.monotonic()
        if due > now:
            out.flush()
            time.sleep(min(due - now, 0.05))
            continue
        try:
            id_ = rt.next()
        except transient as e:
            out.flush()
            if type(e) is not last_error:
                print(f"cosid: waiting: {e}", file=sys.stderr, flush=True)
                last_error = type(e)
            time.sleep(0.01)
            continue
        except cosid.CosIdError as e:
            print(f"cosid: error: {e}", file=sys.stderr, flush=True)
            code = 1
            break
        last_error = None
        issued += 1
        out.write(f"{id_}\n")
        if time.monotonic() - last_flush > 0.02:
            out.flush()
            last_flush = time.monotonic()
    out.flush()
    rt.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
