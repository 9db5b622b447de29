"""The scenarios. Each runs against a fresh store of its own and returns after applying its
faults; the runner then stops every process with SIGTERM and checks every id."""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass, field
from typing import Callable

from procs import decode, now_ms
from servers import connected

ALL = ["sqlite", "redis", "postgres", "etcd", "mysql"]
NET = ["redis", "postgres", "etcd", "mysql"]
CLOCKED = ["redis", "postgres", "mysql"]  # stores with a clock of their own (SQLite: the host's; etcd: the client's)

TTL_S, TOL_S = 2.0, 0.5
EXPIRY_S = TTL_S + TOL_S

NOTES = [
    "ttl 2s, tolerance 500ms, 1000 ids/s per process; ids decoded with the default layout "
    "(41/10/12 bits, epoch 1577203200000) and checked: no duplicate id, no (slot, millisecond) "
    "issued by two processes, ids increasing per process and slot, every id on a slot its process "
    "was seen holding in `cosid slots --json` snapshots (every 0.3s), every process stopped with "
    "exit 0 on SIGTERM (or was killed on purpose) and issued or said why not on stderr.",
    "`cosid next --follow` does not print the keeper's events (slot acquired, duplicate owner key, "
    "store reset, clock skew): the events column shows what the processes printed (`waiting: …`, "
    "`error: …`) and what the harness saw in `cosid slots` snapshots.",
]


@dataclass
class Scenario:
    name: str
    fn: Callable
    stores: list[str]
    why: str = ""
    procs_note: str = ""
    store_opts: dict = field(default_factory=dict)
    check_holders: bool = True
    no_holder_check: tuple = ()
    errors_ok: bool = False
    #: a setup without the guarantee: duplicates and (slot, ms) overlaps are reported as the
    #: scenario's finding (labelled so in the report), not failures; every other check stays
    expect_unsafe: bool = False


REGISTRY: list[Scenario] = []


def scenario(name: str, stores: list[str], **kw):
    def deco(fn):
        REGISTRY.append(Scenario(name, fn, stores, **kw))
        return fn
    return deco


def plan(stores: list[str], only: set[str]):
    out = []
    for sc in REGISTRY:
        if only and sc.name not in only:
            continue
        for st in sc.stores:
            if st == "static" or st in stores:
                out.append((sc, st))
    return out


def issued_after(p, t_ms: int) -> int:
    return sum(1 for i in p.ids() if decode(i)[0] > t_ms)


def ids_between(p, lo_ms: int, hi_ms: int) -> int:
    return sum(1 for i in p.ids() if lo_ms < decode(i)[0] <= hi_ms)


def slots_of(p) -> set[int]:
    """The slots `p`'s ids were issued on."""
    return {decode(i)[1] for i in p.ids()}


def fold_first(err: str) -> str:
    for line in err.splitlines():
        if "waiting" in line:
            return line.replace("cosid: waiting: ", "")[:100]
    return "?"


def issued_after_wall(p, wall_ms: int) -> int:
    # Ids carry store-window time, close to the harness's wall clock for unskewed processes.
    return issued_after(p, wall_ms)


# ------------------------------------------------------------------------------------------------
# Clock skew


@scenario("clock-skew", ALL, procs_note="2 on time, 1 at +5s, 2 at -5s", no_holder_check=("sqlite", "etcd"),
          why="+5s: past every ceiling a store with its own clock grants (Redis, PostgreSQL: it never issues); on SQLite and "
              "etcd the client's clock is the store clock, so its own leases look expired to others at once and leases "
              "flap; -5s on a slot just released: waits to pass the handed-over floor")
def clock_skew(ctx):
    p0 = ctx.spawn("p0")
    ctx.sleep(0.3)
    p1 = ctx.spawn("p1")
    ctx.sleep(0.3)
    ahead = ctx.spawn("ahead", skew="+5s")
    behind = ctx.spawn("behind", skew="-5s")
    ctx.sleep(3.0)
    # p1 releases its slot cleanly (next floor = its last id); a process 5s behind takes it next
    # (it prefers that slot: starters otherwise spread over the free slots).
    p1_slots = ctx.held_by(p1.key)
    p1.terminate()
    p1.wait(15)
    released_at = now_ms()
    ctx.note("p1 stopped (slot released)")
    late = ctx.spawn("behind2", skew="-5s", preferred_slot=min(p1_slots, default=None))
    ctx.sleep(4.0)

    def after():
        kind = ctx.store_kind
        client_clock = kind in ("etcd", "sqlite")
        # The skew really applies: a process 5s behind issues ids ~5s in the past.
        for p in (behind, late):
            ts = [decode(i)[0] for i in p.ids()]
            if ts:
                lag = (p.wall_start + (p.wall_end or now_ms())) / 2 - sorted(ts)[len(ts) // 2]
                ctx.event(f"{p.label}: ids {lag / 1000:.1f}s behind real time")
        if not client_clock:
            # Ahead of the store by 5s > tolerance: its clock is past every ceiling: no id.
            ctx.check(not ahead.ids(), f"ahead (+5s) issued {len(ahead.ids())} ids past its ceiling")
            ctx.check("waiting" in ahead.stderr(), "ahead (+5s) did not say why it does not issue")
            ts = [decode(i)[0] for i in behind.ids()]
            ctx.check(bool(ts) and max(ts) < now_ms() - 3500,
                      "behind (-5s) issued no id with a timestamp 5s in the past: is libfaketime applied?")
        else:
            # etcd has no clock and SQLite's is the host's: the client's clock is the store clock,
            # so a skewed process issues in its own time; windows stay disjoint by construction.
            ts = [decode(i)[0] for i in ahead.ids()]
            ctx.check(bool(ts) and max(ts) > ahead.wall_start + 4000,
                      f"ahead (+5s) on {kind} issued no id 5s in the future: is libfaketime applied?")
        # p1's successor 5s behind starts above p1's last id only.
        last_p1 = max((decode(i)[0] for i in p1.ids()), default=0)
        slot_p1 = slots_of(p1)
        for i in late.ids():
            ts, slot, _ = decode(i)
            if slot in slot_p1:
                ctx.check(ts > last_p1, f"behind2 issued at {ts} on p1's slot {slot} at or below p1's last {last_p1}")
        _ = released_at
    ctx.after_checks.append(after)


@scenario("store-clock-jump", CLOCKED, store_opts={"clock": True}, procs_note="4 (p0 paused across the jump), +1 after it",
          why="p0 paused 2.5s across a +10s jump of the store's clock (its lease expired in store time, a newcomer took its slot); then the store clock went back 6s")
def store_clock_jump(ctx):
    ps = ctx.spawn_many(4)
    ctx.sleep(1.5)
    p0 = ps[0]
    held = ctx.held_by(p0.key)
    # p0 cannot renew across the jump (paused): in the store's time its lease is long expired.
    p0.pause()
    ctx.set_store_clock(10)
    ctx.sleep(1.5)  # the server re-reads its offset within 1s
    late = ctx.spawn("late", preferred_slot=min(held, default=None))
    ctx.sleep(1.0)
    p0.resume()
    ctx.sleep(2.0)
    ctx.set_store_clock(4)  # back 6s: renewals stop extending ceilings for a while
    ctx.sleep(3.0)

    def after():
        ctx.check(bool(late.ids()), "the process started after the jump issued nothing")
        late_slots = slots_of(late)
        ctx.check(bool(held & late_slots), f"the newcomer did not take p0's slot {sorted(held)} (it issued on {sorted(late_slots)})")
        ctx.event(f"after the +10s jump the newcomer took p0's slot {sorted(held & late_slots)}; p0 after SIGCONT: "
                  + (fold_first(p0.stderr()) if "waiting" in p0.stderr() else "no wait"))
    ctx.after_checks.append(after)
    _ = ps


# ------------------------------------------------------------------------------------------------
# Pauses, kills, owner keys


@scenario("sigstop-past-ttl", ALL, procs_note="4, +1 taking the paused one's slot",
          why="p0 paused 3.5s (> ttl + tolerance); after SIGCONT its clock is past its ceiling")
def sigstop(ctx):
    ps = ctx.spawn_many(4)
    ctx.sleep(1.0)
    p0 = ps[0]
    held = ctx.held_by(p0.key)
    ctx.check(len(held) == 1, f"p0 holds {sorted(held)} before the pause (snapshot)")
    p0.pause()
    paused_at = now_ms()
    ctx.sleep(EXPIRY_S + 1.0)
    # The newcomer prefers p0's slot, expired by now: it takes it over with floor = p0's ceiling.
    thief = ctx.spawn("thief", preferred_slot=min(held, default=None))
    ctx.sleep(1.2)
    p0.resume()
    woke_at = now_ms()
    ctx.sleep(3.0)

    def after():
        thief_slots = slots_of(thief)
        taken = held & thief_slots
        ctx.check(bool(taken), f"the newcomer did not take p0's expired slot {sorted(held)} (it issued on {sorted(thief_slots)})")
        if taken:
            slot = min(taken)
            first_thief = min(decode(i)[0] for i in thief.ids() if decode(i)[1] == slot)
            late = [i for i in p0.ids() if decode(i)[1] == slot and decode(i)[0] > paused_at + 300]
            ctx.check(not late, f"p0 issued {len(late)} ids on its old slot {slot} after the pause, which the newcomer took")
            ctx.event(f"newcomer took slot {slot} (first id {first_thief - paused_at} ms after the pause began)")
        # Once awake, p0 either said why it does not issue (window closed / slot lost) or its
        # keeper renewed first, found the lease lost and rebound before the next id: both are
        # refusals; what matters (checked above) is that nothing went out on the taken slot.
        new_slots = {decode(i)[1] for i in p0.ids() if decode(i)[0] > woke_at}
        ctx.check("waiting" in p0.stderr() or not (new_slots & taken),
                  f"p0 neither reported waiting nor moved off its taken slot after SIGCONT")
        how = ("waited: " + fold_first(p0.stderr())) if "waiting" in p0.stderr() else "rebound before its next id"
        ctx.event(f"p0 after waking {how}; issued on {sorted(new_slots) or 'nothing'}")
    ctx.after_checks.append(after)


@scenario("sigkill-restart-same-key", ALL, procs_note="4, p1 killed twice and restarted with its key",
          why="p1 SIGKILLed: its slot stays held until expiry; the restart uses another slot, the next one its sticky slot")
def sigkill_restart(ctx):
    ps = ctx.spawn_many(4)
    ctx.sleep(1.0)
    p1 = ps[1]
    old = ctx.held_by(p1.key)
    p1.kill()
    r1 = ctx.spawn("p1-restart", key=p1.key)
    ctx.sleep(1.0)
    both = ctx.held_by(p1.key)
    ctx.sleep(EXPIRY_S)
    r1.kill()
    ctx.sleep(EXPIRY_S + 0.5)
    r2 = ctx.spawn("p1-restart2", key=p1.key)
    ctx.sleep(2.0)

    def after():
        r1_slots = slots_of(r1)
        ctx.check(not (r1_slots & old), f"the restart took the killed process's live slot {sorted(old)}")
        ctx.event(f"killed on slot {sorted(old)}; restart (old lease live) on {sorted(r1_slots)}; "
                  f"key held {sorted(both)} at once")
        ctx.check(bool(r2.ids()), "the second restart issued nothing")
    ctx.after_checks.append(after)


@scenario("duplicate-owner-key", ALL, procs_note="A and B with one owner key, +2 others",
          why="-")
def duplicate_owner_key(ctx):
    """Security: a process cannot take a live lease by claiming another's owner key."""
    key = f"{ctx.namespace}-shared-key"
    a = ctx.spawn("A", key=key)
    ctx.sleep(0.8)
    a_slots = ctx.held_by(key)
    b = ctx.spawn("B", key=key, lang="py")  # the wheel prints the keeper's events
    ctx.spawn("p2", lang="c")
    ctx.spawn("p3", lang="node")
    ctx.sleep(1.5)
    snap = ctx.slots() or []
    mine = [r for r in snap if r.get("holder") == key and r.get("state") == "held"]
    ctx.sleep(1.5)

    def after():
        a_ids = slots_of(a)
        b_ids = slots_of(b)
        ctx.check(bool(a_ids) and bool(b_ids), "A or B issued nothing")
        ctx.check(not (a_ids & b_ids), f"A and B issued on the same slot {sorted(a_ids & b_ids)}")
        ctx.check(a_slots <= a_ids, f"A lost its slot {sorted(a_slots)} to B")
        incs = {r.get("incarnation") for r in mine}
        ctx.check(len(mine) == 2 and len(incs) == 2,
                  f"expected the key on 2 slots with 2 incarnations, snapshot shows {len(mine)} slots")
        ctx.event(f"key held on slots {sorted(r['slot'] for r in mine)} by {len(incs)} incarnations (A {sorted(a_ids)}, B {sorted(b_ids)})")
        if b.label.endswith("-py"):
            ctx.check("event: duplicate_owner_key" in b.stderr(), "B did not raise a duplicate_owner_key event")
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# The store killed, restarted, wiped


@scenario("store-killed-restarted", NET, procs_note="4",
          why="store down 1.5s (renewals fail, issuing continues to the ceiling) then 4s (past every ceiling)")
def store_killed(ctx):
    ps = ctx.spawn_many(4)
    ctx.sleep(1.0)
    ctx.server.kill()
    ctx.note("store killed")
    ctx.sleep(1.5)
    ctx.server.start()
    ctx.note("store restarted with its data")
    ctx.sleep(2.0)
    ctx.server.kill()
    ctx.note("store killed")
    ctx.sleep(4.0)
    ctx.server.start()
    back = now_ms()
    ctx.note("store restarted with its data")
    ctx.sleep(4.0)
    ctx.after_checks.append(lambda: [ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume after the store came back")
                                     for p in ps])


@scenario("store-restarted-empty", NET, procs_note="4",
          why="the store lost every record; each runtime re-acquires with a floor above every ceiling it was granted")
def store_empty(ctx):
    ps = ctx.spawn_many(2)
    ps.append(ctx.spawn("p2", lang="c"))   # the C library and the wheel print the keeper's events
    ps.append(ctx.spawn("p3", lang="py"))
    ctx.sleep(1.5)
    before = ctx.slots() or []
    ctx.server.restart_empty()
    back = now_ms()
    ctx.note("store restarted empty")
    ctx.sleep(4.5)
    after_snap = ctx.slots() or []

    def after():
        top = max((r["ceiling"] for r in before if r.get("holder")), default=0)
        ctx.check(bool(after_snap), "the namespace was not recreated after the store came back empty")
        low = [r for r in after_snap if r.get("holder") and r["floor"] < min(
            (b["ceiling"] for b in before if b.get("holder") == r["holder"]), default=0)]
        ctx.check(not low, f"after the wipe a runtime got a window below a ceiling it had: {low[:2]}")
        for p in ps:
            ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume after the store came back empty")
        ctx.event(f"re-acquired {len([r for r in after_snap if r.get('holder')])} slots, highest old ceiling {top}")
        for p in ps[2:]:
            if p.label.endswith(("-py", "-c")):
                ev = [e for e in ("store_reset", "slot_lost") if f"event: {e}" in p.stderr()]
                ctx.check(bool(ev), f"{p.label} raised neither store_reset nor slot_lost after the wipe")
                ctx.event(f"{p.label} events: {', '.join(ev)}")
    ctx.after_checks.append(after)


@scenario("store-empty-then-migrate", NET, procs_note="3 behind the proxy, +2 new after the wipe",
          why="the store lost every record while the old holders were cut off; `cosid migrate --not-before now+ttl+tolerance` "
              "(docs/stores.md's recovery) before new processes came in")
def store_empty_migrate(ctx):
    """Restarted empty is a loss of guarantee for runtimes that did not hold a window before
    (docs/stores.md); the documented recovery keeps them disjoint from the old holders."""
    ctx.with_proxy()
    old = [ctx.spawn(f"p{i}", via_proxy=True, lang=["cli", "c", "cli"][i]) for i in range(3)]
    ctx.sleep(1.5)
    ctx.proxy.cut()
    ctx.note("old holders cut off")
    ctx.server.restart_empty()
    ctx.note("store restarted empty")
    not_before = now_ms() + int(EXPIRY_S * 1000) + 500
    t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(not_before // 1000)) + f".{not_before % 1000:03d}Z"
    r = ctx.cosid_cmd(["migrate", "--store", ctx.url(), "--namespace", ctx.namespace, "--not-before", t],
                      label="migrate")
    ctx.check(r.returncode == 0, f"cosid migrate failed: {ctx.redact(r.stderr.strip())[-200:]}")
    new = [ctx.spawn(f"n{i}") for i in range(2)]
    ctx.sleep(1.0)
    ctx.proxy.set_pass()
    back = now_ms()
    ctx.note("old holders reconnected")
    ctx.sleep(4.0)

    def after():
        for p in new:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing after the migration")
            low = [i for i in p.ids() if decode(i)[0] <= not_before]
            ctx.check(not low, f"{p.label} issued {len(low)} ids at or below the migrated not-before")
        for p in old:
            ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume after reconnecting")
        ctx.event(f"migrate: `{ctx.redact(r.stdout.strip())[:160]}`")
    ctx.after_checks.append(after)


def restarted_empty_with_newcomers(ctx, newcomer_url: str):
    """Three holders (the CLI, the C library, the wheel) cut off from the store by the proxy, the
    store restarted empty, two newcomers started at once on `newcomer_url` that prefer the slots
    of the first two (a StatefulSet's ordinals); the holders keep issuing to their ceilings
    meanwhile, then reconnect."""
    ctx.with_proxy()
    old = [ctx.spawn(f"p{i}", via_proxy=True, lang=["cli", "c", "py"][i]) for i in range(3)]
    for _ in range(100):
        if all(p.has_issued() for p in old):
            break
        ctx.sleep(0.1)
    ctx.check(all(p.has_issued() for p in old), "an old holder issued nothing before the cut")
    ctx.sleep(0.5)
    before = ctx.slots() or []
    held = [min((r["slot"] for r in before if r.get("holder") == p.key), default=None) for p in old[:2]]
    ctx.check(None not in held, f"an old holder's slot was not seen: {held}")
    ctx.proxy.cut()
    ctx.note("old holders cut off")
    ctx.server.restart_empty()
    restarted = now_ms()
    ctx.note("store restarted empty")
    new = [ctx.spawn(f"n{i}", url=newcomer_url, preferred_slot=held[i]) for i in range(2)]
    ctx.sleep(EXPIRY_S + 1.5)
    ctx.proxy.set_pass()
    back = now_ms()
    ctx.note("old holders reconnected")
    ctx.sleep(3.0)
    return old, new, before, restarted, back


@scenario("store-restarted-empty-newcomers", ["redis", "postgres", "mysql"],
          procs_note="3 behind the proxy, +2 new right after the wipe on their slots",
          why="the store lost every record while the old holders were cut off and still issuing; new processes "
              "started at once, with no `cosid migrate`: the restart guard starts their windows at the server's "
              "start + ttl + tolerance")
def store_empty_newcomers(ctx):
    """The restart guard (docs/stores.md, "Restarted empty"), where users meet it: nobody runs
    `cosid migrate`, and the newcomers' ids still stay above every ceiling the lost records held."""
    old, new, before, restarted, back = restarted_empty_with_newcomers(ctx, ctx.url(restart_guard=True))

    def after():
        top = max((r["ceiling"] for r in before if r.get("holder")), default=0)
        ctx.check(top > 0, "no old holder's ceiling was seen before the wipe")
        for p in new:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing after the wipe")
            low = [i for i in p.ids() if decode(i)[0] <= top]
            ctx.check(not low, f"{p.label} issued {len(low)} ids at or below the old holders' ceiling {top}")
            first = min((decode(i)[0] for i in p.ids()), default=0)
            ctx.event(f"{p.label}: first id {first - restarted} ms after the wipe (old ceilings up to "
                      f"{top - restarted} ms after it)")
        for p in old:
            ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume after reconnecting")
    ctx.after_checks.append(after)


@scenario("store-restarted-empty-unguarded", ["redis"], expect_unsafe=True,
          procs_note="3 behind the proxy, +2 new right after the wipe on their slots, ?restart-guard=off",
          why="as store-restarted-empty-newcomers with the newcomers' URL saying restart-guard=off: what the "
              "guard prevents, shown")
def store_empty_unguarded(ctx):
    """What `restart-guard=off` risks when the server does lose its data: the harness reports
    the (slot, ms) overlaps and duplicate ids it finds."""
    old, new, before, restarted, back = restarted_empty_with_newcomers(ctx, ctx.url())

    def after():
        top = max((r["ceiling"] for r in before if r.get("holder")), default=0)
        for p in new:
            low = sum(1 for i in p.ids() if decode(i)[0] <= top)
            ctx.event(f"{p.label}: {low} ids at or below the old holders' ceiling {top}")
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# Data lost under live holders, newcomers started at once: the restart guard covers
# every way a store can lose its data, not only a restart.


@dataclass
class Loss:
    """What `lost_under_holders` set up: the old holders, the newcomers B and C, the snapshot of
    the holders' records taken once they were cut off (every ceiling they can still issue up
    to), and when (ms) the loss happened and the holders reconnected."""
    old: list
    new: list
    before: list
    lost: int
    back: int


#: the holders' rate: the issue's measurement ran one at ~2,000 ids/s
LOSS_RATE = 2000


def lost_under_holders(ctx, lose, *, before_cut=None, before_newcomers=None, between_newcomers=None,
                       reconnect_after: float = EXPIRY_S + 1.5, after: float = 3.0, cut: bool = True,
                       direct: bool = False, on_held=None, ttl: str = f"{TTL_S:g}s") -> Loss:
    """Three holders (the C library and the wheel, which print the keeper's events, and the CLI)
    issue ~2,000 ids/s each through the proxy (with `cut`; else straight to the store: a Redis
    Cluster, an SQLite file); `before_cut()` runs while they do; the proxy cuts them off (they
    keep issuing up to their ceilings, renewals failing), a snapshot reads every ceiling they
    hold, and `lose()` takes the store's data. Then (after
    `before_newcomers()`) two newcomers start at once on the guarded URL: B preferring the first
    holder's slot (as a StatefulSet's ordinal pins it), C with no preference (after
    `between_newcomers(B, slot)`, which runs once B started, if given). The holders
    reconnect `reconnect_after` seconds after the newcomers started, and all run `after`
    seconds more. With `direct`, a fourth holder (the CLI) is connected straight to the store
    and lives through the loss on its open connection (it is last in `old`). Every process
    runs with `ttl`."""
    if cut:
        ctx.with_proxy()
    # The holders' URL has the guard on too, as a runtime's does by default: one that renews
    # into the emptied store must not create the namespace there without it.
    url = ctx.url(via_proxy=cut, restart_guard=True)
    old = [ctx.spawn(f"p{i}", url=url, lang=lang, rate=LOSS_RATE, ttl=ttl) for i, lang in enumerate(["c", "py", "cli"])]
    if direct:
        old.append(ctx.spawn("direct", url=ctx.url(restart_guard=True), rate=LOSS_RATE, ttl=ttl))
    for _ in range(150):  # the guard: a new namespace's first windows start ttl + tolerance on
        if all(p.has_issued() for p in old):
            break
        ctx.sleep(0.1)
    ctx.check(all(p.has_issued() for p in old), "an old holder issued nothing before the loss")
    ctx.sleep(0.5)
    if before_cut is not None:
        before_cut()
    if cut:
        ctx.proxy.cut()
        ctx.note("old holders cut off")
    # Read after the cut: no renewal gets through any more, so these are the ceilings the
    # holders issue up to while the store has lost them.
    before = ctx.slots() or []
    held = min((r["slot"] for r in before if r.get("holder") == old[0].key), default=None)
    ctx.check(held is not None, f"the first holder's slot was not seen in the snapshot before the loss")
    if on_held is not None:
        on_held(held)
    lose()
    lost = now_ms()
    if before_newcomers is not None:
        before_newcomers()
    guarded = ctx.url(restart_guard=True)
    new = [ctx.spawn("B", url=guarded, preferred_slot=held, ttl=ttl)]
    if between_newcomers is not None:
        between_newcomers(new[0], held)
    new.append(ctx.spawn("C", url=guarded, ttl=ttl))
    ctx.sleep(reconnect_after)
    back = now_ms()
    if cut:
        ctx.proxy.set_pass()
        ctx.note("old holders reconnected")
    ctx.sleep(after)
    return Loss(old, new, before, lost, back)


def check_newcomers_above(ctx, loss: Loss, resume: bool = True) -> None:
    """No newcomer id at or below the top ceiling the old holders held when the store lost
    them (the harness counts duplicates on its own besides), every newcomer issued, and (with
    `resume`) every holder issued again after it reconnected."""
    top = max((r["ceiling"] for r in loss.before if r.get("holder")), default=0)
    ctx.check(top > 0, "no old holder's ceiling was seen before the loss")
    for p in loss.new:
        ctx.check(bool(p.ids()), f"{p.label} issued nothing after the loss")
        low = [i for i in p.ids() if decode(i)[0] <= top]
        ctx.check(not low, f"{p.label} issued {len(low)} ids at or below the old holders' ceiling {top}")
        first = min((decode(i)[0] for i in p.ids()), default=0)
        if first:
            ctx.event(f"{p.label}: first id {first - loss.lost} ms after the loss (old ceilings up to "
                      f"{top - loss.lost} ms after it)")
    if resume:
        for p in loss.old:
            ctx.check(issued_after(p, loss.back) > 0, f"{p.label} did not resume after "
                      + ("the loss (its connection stayed open)" if p.label == "direct" else "reconnecting"))


def sql_loss(ctx, statements: dict[str, str]):
    """`lose` for SQL stores: the statement for the store kind, run as the superuser."""
    stmt = statements[ctx.store_kind]

    def lose():
        ctx.server.sql(stmt)
        ctx.note(f"ran `{stmt}`")
    return lose


def check_schema_back(ctx, tables: list[str]):
    """After a DROP TABLE: cosid's tables are there again (a runtime recreated them)."""
    if ctx.store_kind == "postgres":
        got = ctx.server.sql("SELECT tablename FROM pg_tables WHERE tablename LIKE 'cosid%'").split()
    else:
        got = ctx.server.sql("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'cosid'").split()
    missing = [t for t in tables if t not in got]
    ctx.check(not missing, f"cosid's tables {missing} were not created again after the DROP TABLE (found {got})")
    return got


@scenario("store-empty-then-migrate-past", ["redis", "postgres", "mysql"],
          procs_note="3 behind the proxy, +2 new (B on the first holder's slot, C anywhere) after the migration",
          why="the store restarted empty while the old holders were cut off and still issuing; `cosid migrate "
              "--not-before` a minute in the past before the newcomers started: the migration's record must not "
              "switch the restart guard off (the first runtime completes it with the guard's floor)")
def store_empty_migrate_past(ctx):
    """Issue 31: `cosid migrate --not-before <a past time>` right after an empty restart gave
    203 duplicates; the migration's record now gets the guard's floor from the first runtime."""
    migrated = {}

    def migrate():
        past = now_ms() - 60_000
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(past // 1000)) + f".{past % 1000:03d}Z"
        r = ctx.cosid_cmd(["migrate", "--store", ctx.url(restart_guard=True), "--namespace", ctx.namespace,
                           "--not-before", t], label="migrate")
        ctx.check(r.returncode == 0, f"cosid migrate --not-before {t} failed: {ctx.redact(r.stderr.strip())[-200:]}")
        migrated["out"] = ctx.redact(r.stdout.strip() or r.stderr.strip())[:160]
        ctx.note(f"cosid migrate --not-before {t}")

    def lose():
        ctx.server.restart_empty()
        ctx.note("store restarted empty")
    loss = lost_under_holders(ctx, lose, before_newcomers=migrate)

    def after():
        check_newcomers_above(ctx, loss)
        ctx.event(f"migrate: `{migrated.get('out', '?')}`")
    ctx.after_checks.append(after)


@scenario("store-flushed-newcomers", ["redis"],
          procs_note="3 behind the proxy, +2 new (B on the first holder's slot, C anywhere) right after the FLUSHALL",
          why="FLUSHALL on the running server (no restart) while the old holders were cut off and still issuing: the "
              "namespace looks new, and the guard starts a namespace created on a network store at its creation + "
              "ttl + tolerance")
def store_flushed(ctx):
    def lose():
        ctx.server.flushall()
        ctx.note("FLUSHALL")
    loss = lost_under_holders(ctx, lose)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


@scenario("redis-cluster-flushed-newcomers", ["redis"], store_opts={"cluster": True},
          procs_note="3 holders, +2 new (B on the first holder's slot, C anywhere) right after the FLUSHALL; "
                     "one redis+cluster:// URL naming the 3 primaries",
          why="FLUSHALL on the Redis Cluster node owning the namespace's hash slot; the holders stay connected (a "
              "cluster client finds every node itself, so no proxy cuts them off): their next renewal finds the "
              "records gone, and until then they issue up to their ceilings")
def redis_cluster_flushed(ctx):
    group = ctx.server
    owner = group.owner(group.keyslot(f"cosid:{{{ctx.namespace}}}:slots"))

    def lose():
        if group.cmd(owner, "FLUSHALL") != "OK":
            raise RuntimeError(f"FLUSHALL on port {owner} did not answer OK")
        ctx.note(f"FLUSHALL on port {owner}, the namespace's node")
    loss = lost_under_holders(ctx, lose, cut=False, reconnect_after=EXPIRY_S + 1.5)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


DROP = {
    "postgres": "DROP TABLE cosid_slot, cosid_namespace, cosid_schema; DROP SEQUENCE cosid_version_seq",
    "mysql": "DROP TABLE cosid_slot, cosid_namespace, cosid_schema",
}
TRUNCATE = {"postgres": "TRUNCATE cosid_slot, cosid_namespace"}


@scenario("store-tables-dropped-newcomers", ["postgres", "mysql"],
          procs_note="3 behind the proxy and 1 direct, +2 new (B on the first holder's slot, C anywhere) right after "
                     "the DROP TABLE",
          why="cosid's tables dropped on the running server while the old holders were cut off and still issuing; "
              "the newcomers create the schema again on connecting, and the namespace, new to them, starts at its "
              "creation + ttl + tolerance; a holder connected directly lives through the drop on its open connection")
def store_tables_dropped(ctx):
    loss = lost_under_holders(ctx, sql_loss(ctx, DROP), direct=True)
    # Read while the server runs (it stops before the after-checks).
    tables = check_schema_back(ctx, ["cosid_schema", "cosid_namespace", "cosid_slot"])
    ctx.event("tables after: " + ", ".join(tables))
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


@scenario("store-tables-truncated-newcomers", ["postgres"],
          procs_note="3 behind the proxy and 1 direct, +2 new (B on the first holder's slot, C anywhere) right after "
                     "the TRUNCATE",
          why="`TRUNCATE cosid_slot, cosid_namespace` on the running server while the old holders were cut off and "
              "still issuing: the namespace looks new, and starts at its creation + ttl + tolerance; a holder "
              "connected directly lives through it on its open connection")
def store_tables_truncated(ctx):
    loss = lost_under_holders(ctx, sql_loss(ctx, TRUNCATE), direct=True)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


ETCD_WIPED_TTL_S = 5.0


@scenario("etcd-wiped-newcomers", ["etcd"],
          procs_note="3 behind the proxy, +2 new (B on the first holder's slot, C anywhere) right after the wipe; "
                     "the holders reconnect while the newcomers run",
          why="ttl 5s here; etcd killed, its data directory deleted, started again (revisions from 1) while the old "
              "holders were cut off; B's record of the first holder's slot is made to get the very revision that holder "
              "remembers (dummy puts raise the new store's revision to one below it), and the holders reconnect "
              "then: their renewal must find their leases lost, not write over B's record; the newcomers start at "
              "the namespace's creation + ttl + tolerance")
def etcd_wiped(ctx):
    """Issue 31: a wiped etcd reissues revisions from 1, so a newcomer's record can carry the
    `mod_revision` an old holder remembers, and that holder's renewal (a compare-and-set on it,
    with no read) would overwrite it and keep issuing in a window the newcomer also issues in.
    Whether B's record got that revision depends on timing (reported in the events)."""
    server = ctx.server
    remembered = {}
    armed = {}

    def lose():
        key = f"cosid/slot/{ctx.namespace}/{armed['slot']}"
        remembered["v"], _ = server.mod_revision(key)
        server.restart_empty()
        ctx.note(f"etcd killed, data directory deleted, started again (the first holder remembers revision "
                 f"{remembered['v']})")

    def on_held(slot):
        armed["slot"] = slot

    def arm(b, slot):
        """Raises the store's revision (dummy puts) until B's record of `slot` has the revision the
        first holder remembers: B's next write lands at the revision after the store's."""
        v = remembered.get("v")
        key = f"cosid/slot/{ctx.namespace}/{slot}"
        deadline = time.monotonic() + 4.0
        while v and time.monotonic() < deadline:
            mod, rev = server.mod_revision(key)
            if mod == v:
                armed["at"] = now_ms()
                ctx.note(f"B's record of slot {slot} is at revision {v}, the one the first holder remembers")
                return
            if rev >= v:
                break  # overshot: B's next write lands above it
            if rev < v - 1:
                server.put("chaos/pad", str(rev))
            else:
                ctx.sleep(0.01)
        ctx.note(f"B's record of slot {slot} could not be put at revision {v} (it is at "
                 f"{server.mod_revision(key)[0]})")
    # A ttl of 5s: the holders must reconnect while their windows still run (a holder past its
    # ceiling renews by a read, which finds the lease lost on any store), and the kill, wipe,
    # start and B's first write take a second or two.
    loss = lost_under_holders(ctx, lose, on_held=on_held, between_newcomers=arm, reconnect_after=0.0,
                              after=ETCD_WIPED_TTL_S + TOL_S + 2.5, ttl=f"{ETCD_WIPED_TTL_S:g}s")

    def after():
        check_newcomers_above(ctx, loss)
        ceiling = next((r["ceiling"] for r in loss.before if r.get("holder") == loss.old[0].key), 0)
        ctx.event(f"the holders reconnected {ceiling - loss.back} ms before the first holder's ceiling"
                  if ceiling > loss.back else
                  f"the holders reconnected {loss.back - ceiling} ms after the first holder's ceiling (its renewal "
                  "reads: the overwrite was not exercised)")
        b_slots = slots_of(loss.new[0])
        ctx.check(b_slots <= {armed["slot"]}, f"B moved off slot {armed['slot']} to {sorted(b_slots)}: the old holder "
                                              "wrote over its record")
        ctx.event(f"B's record got the revision the first holder remembered ({remembered.get('v')}): "
                  + ("yes, the holders reconnected then" if "at" in armed else "no (timing), the holders reconnected anyway"))
        for p in loss.old:
            if p.label.endswith(("-py", "-c")):
                ev = [e for e in ("slot_lost", "store_reset") if f"event: {e}" in p.stderr()]
                ctx.check("slot_lost" in ev, f"{p.label} did not report slot_lost after the wipe (events: {ev})")
                ctx.event(f"{p.label} events: {', '.join(ev) or 'none'}")
    ctx.after_checks.append(after)


@scenario("redis-restored-from-old-snapshot", ["redis"], store_opts={"rdb": True},
          procs_note="3 behind the proxy, +2 new (B on the first holder's slot, C anywhere) right after the restore",
          why="Redis on RDB persistence: SAVE while the holders issued, 3s more of renewals, the holders cut off, "
              "then SIGKILL and a start loading that older snapshot (the namespace survives, its slot records "
              "moved back); every acquisition floors at the server's start + ttl + tolerance")
def redis_old_snapshot(ctx):
    rdb = ctx.dir / "old.rdb"

    def save():
        ctx.server.snapshot_rdb(rdb)
        ctx.note("SAVE (the snapshot copied aside)")
        ctx.sleep(3.0)

    def lose():
        ctx.server.restart_from_rdb(rdb)
        ctx.note("SIGKILL, started again from the older snapshot")
    loss = lost_under_holders(ctx, lose, before_cut=save)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


@scenario("namespace-raised-then-deleted", ALL, check_holders=False,
          procs_note="2 on a namespace of 2 slots, +2 after its limit is raised to 4; all stopped, the namespace "
                     "deleted, +2 on the namespace made again (one 3 s behind)",
          why="`cosid namespace raise-slots` under running holders, then `cosid namespace delete --yes` and a "
              "namespace of the same name created again: its windows start above every id of the deleted one")
def namespace_raised_then_deleted(ctx):
    """An operator's changes to a namespace's life (docs/stores.md): a raised limit is taken by
    new runtimes while the holders keep theirs; a deleted namespace leaves a tombstone whose
    not-before is above every id it issued, so its successor never repeats one."""
    def until_issuing(procs):
        for _ in range(150):
            if all(p.has_issued() for p in procs):
                return
            ctx.sleep(0.1)

    def admin(args, label):
        r = ctx.cosid_cmd(["namespace", *args, "--store", ctx.url(), "--namespace", ctx.namespace],
                          label=label)
        ctx.check(r.returncode == 0, f"cosid namespace {args[0]} failed: {ctx.redact(r.stderr.strip())[-200:]}")
        return r

    first = [ctx.spawn("p0", bits=1), ctx.spawn("p1", bits=1)]
    until_issuing(first)
    raised = admin(["raise-slots", "--slots", "4"], "raise-slots")
    # One asks for the layout's raised share with 2 bits, one keeps its 1 bit: both are taken.
    more = [ctx.spawn("p2", bits=2), ctx.spawn("p3", bits=1)]
    until_issuing(more)
    ctx.sleep(1.0)
    old = first + more
    for p in old:
        p.terminate()
    for p in old:
        p.wait(20)
    ctx.note("every holder stopped (slots released)")
    deleted = admin(["delete", "--yes"], "delete")
    ctx.note("namespace deleted")
    # n1's clock is 3 s behind: only the tombstone's not-before keeps it from issuing in the
    # deleted namespace's past (on SQLite and etcd, whose windows follow the client's clock).
    new = [ctx.spawn("n0", bits=1), ctx.spawn("n1", bits=1, skew="-3s")]
    until_issuing(new)
    ctx.sleep(1.0)

    def after():
        for p in old:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing")
            ctx.check(p.returncode == 0, f"{p.label} did not stop cleanly on SIGTERM (exit {p.returncode})")
        used = set().union(*(slots_of(p) for p in old))
        ctx.check(len(used) == 4 and used <= set(range(4)),
                  f"the four holders used slots {sorted(used)}, not four of the raised limit's 0..3")
        last = max(decode(i)[0] for p in old for i in p.ids())
        for p in new:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing on the namespace made again")
            low = [i for i in p.ids() if decode(i)[0] <= last]
            ctx.check(not low, f"{p.label} issued {len(low)} ids at or below the deleted namespace's last id "
                               f"({last} ms)")
        ctx.event(f"raise-slots: `{ctx.redact(raised.stdout.strip())[:160]}`; delete: "
                  f"`{ctx.redact(deleted.stdout.strip())[:160]}`")
    ctx.after_checks.append(after)


@scenario("ttl-mismatch-refused", ALL, errors_ok=True,
          procs_note="2 holders with ttl 2s, +3 with ttl 1s or 5s (the CLI and the C library)",
          why="a runtime of another ttl than the one the namespace records is refused: the restart guard bounds a "
              "lost store's ceilings by the recorded ttl")
def ttl_mismatch(ctx):
    """Issue 31: holders with ttl 60s beside newcomers with ttl 10s gave 7,106 duplicates once the
    store lost its data (the newcomers' guard counted their own ttl). The namespace now records
    the ttl; another is refused with both named."""
    holders = [ctx.spawn("p0"), ctx.spawn("p1", lang="c")]
    for _ in range(100):
        if all(p.has_issued() for p in holders):
            break
        ctx.sleep(0.1)
    odd = [ctx.spawn("short", ttl="1s"), ctx.spawn("long", ttl="5s"), ctx.spawn("short", ttl="1s", lang="c")]
    for p in odd:
        p.wait(20)
    ctx.sleep(1.0)

    def after():
        for p in holders:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing")
        for p in odd:
            asked = "1s" if p.label.startswith("short") else "5s"
            err = p.stderr()
            ctx.check(p.returncode not in (0, None), f"{p.label} (ttl {asked}) was not refused (exit {p.returncode})")
            ctx.check(not p.ids(), f"{p.label} (ttl {asked}) issued {len(p.ids())} ids")
            ctx.check(re.search(rf"records ttl 2s\b.*asks for {asked}\b", err) is not None,
                      f"{p.label}: the error does not name the recorded ttl 2s and the asked {asked}: "
                      f"{ctx.redact(err.strip())[-200:]}")
        line = next((ln for ln in odd[0].stderr().splitlines() if "error" in ln), "?")
        ctx.event(f"refused: `{ctx.redact(line)[:200]}`")
    ctx.after_checks.append(after)


def sqlite_files(ctx) -> list:
    path = ctx.server.path
    return [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]


@scenario("sqlite-file-deleted-newcomers", ["sqlite"],
          procs_note="3 holders on the file, +2 new (B on the first holder's slot, C anywhere) right after the deletion",
          why="the database file and its -wal and -shm deleted under the running holders (they keep the deleted "
              "file open and issue up to their ceilings until their next renewal finds it gone); newcomers create a "
              "new file at once: the sidecar PATH-live tells them the file lost its live holders' records")
def sqlite_deleted(ctx):
    def lose():
        for f in sqlite_files(ctx):
            f.unlink(missing_ok=True)
        ctx.note("slots.db, -wal and -shm deleted")
    loss = lost_under_holders(ctx, lose, cut=False)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


@scenario("sqlite-file-replaced-by-backup-newcomers", ["sqlite"],
          procs_note="3 holders on the file, +2 new (B on the first holder's slot, C anywhere) right after the restore",
          why="a consistent backup of the file (SQLite's backup API) taken while the holders issued, 3s more of "
              "renewals, then the backup renamed over the file (-wal and -shm removed) under the running holders; "
              "newcomers start at once: the sidecar PATH-live tells them the file went back")
def sqlite_replaced(ctx):
    import sqlite3
    backup = ctx.dir / "backup.db"

    def take_backup():
        src = sqlite3.connect(str(ctx.server.path))
        dst = sqlite3.connect(str(backup))
        try:
            src.backup(dst)
        finally:
            dst.close()
            src.close()
        ctx.note("backup taken")
        ctx.sleep(3.0)

    def lose():
        files = sqlite_files(ctx)
        tmp = files[0].with_name(files[0].name + ".restoring")
        shutil.copy(backup, tmp)
        for f in files[1:]:
            f.unlink(missing_ok=True)
        os.replace(tmp, files[0])
        ctx.note("the backup renamed over slots.db, -wal and -shm removed")
    loss = lost_under_holders(ctx, lose, cut=False, before_cut=take_backup)
    ctx.after_checks.append(lambda: check_newcomers_above(ctx, loss))


# ------------------------------------------------------------------------------------------------
# The network


@scenario("network-cut", NET, procs_note="3 behind the proxy, +1 direct",
          why="proxy reset every connection and refused new ones 3.5s, then black-holed 3s; a direct process took an expired slot meanwhile")
def network_cut(ctx):
    ctx.with_proxy()
    ps = [ctx.spawn(f"p{i}", via_proxy=True, lang=["cli", "c", "py"][i]) for i in range(3)]
    ctx.sleep(1.5)
    held0 = ctx.held_by(ps[0].key)
    ctx.proxy.cut()
    ctx.note("network cut")
    ctx.sleep(EXPIRY_S + 0.3)
    # Not behind the proxy: takes p0's expired slot (it prefers it; starters otherwise spread over
    # the free slots), while p0 is cut off and cannot know.
    direct = ctx.spawn("direct", preferred_slot=min(held0, default=None))
    ctx.sleep(0.7)
    ctx.proxy.set_pass()
    back = now_ms()
    ctx.note("network back")
    ctx.sleep(3.0)
    ctx.proxy.blackhole()
    ctx.note("network black-holed")
    ctx.sleep(3.0)
    ctx.proxy.set_pass()
    ctx.note("network back")
    ctx.sleep(3.5)

    def after():
        for p in ps:
            ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume after the network came back")
        d = slots_of(direct)
        ctx.event(f"p0 held {sorted(held0)} before the cut; the direct process issued on {sorted(d)}")
        ctx.check(bool(direct.ids()), "the direct process issued nothing")
        ctx.check(not held0 or bool(d & held0),
                  f"the direct process did not take p0's expired slot {sorted(held0)} (it issued on {sorted(d)})")
    ctx.after_checks.append(after)


@scenario("network-slow", NET, procs_note="3 behind the proxy",
          why="every chunk delayed 150ms for 3s, then 1s for 4s (a renewal round trip ~ ttl)")
def network_slow(ctx):
    ctx.with_proxy()
    ps = [ctx.spawn(f"p{i}", via_proxy=True) for i in range(3)]
    ctx.sleep(1.5)
    ctx.proxy.set_pass(delay=0.15)
    ctx.note("delay 150ms")
    ctx.sleep(3.0)
    ctx.proxy.set_pass(delay=1.0)
    ctx.note("delay 1s")
    ctx.sleep(4.0)
    ctx.proxy.set_pass()
    back = now_ms()
    ctx.note("no delay")
    ctx.sleep(3.5)
    ctx.after_checks.append(lambda: [ctx.check(issued_after(p, back) > 0, f"{p.label} did not resume when the delay ended")
                                     for p in ps])


# ------------------------------------------------------------------------------------------------
# A highly-available store


@scenario("etcd-cluster-failover", ["etcd"], store_opts={"cluster": True},
          procs_note="3 CLI, one each from the C library, the Python wheel and the Node addon when built; "
                     "each URL naming the 3 members from a different one",
          why="3-member etcd: the leader SIGKILLed 4s then restarted with its data; the follower most processes "
              "used SIGSTOPped 3.5s; the member most processes used cut off from the other two 3.5s (its clients "
              "still reach it)")
def etcd_cluster_failover(ctx):
    """A cluster that keeps a quorum through each fault: every process must issue again after
    each one (before the next begins), with no duplicate, whichever member it was talking to."""
    cluster = ctx.server
    ps = spawn_every_language(ctx)
    ctx.sleep(1.5)
    faults: list[tuple[str, int, int]] = []  # what, start ms, end ms

    def leader():
        m = cluster.wait_leader()
        if m is None:
            raise RuntimeError("the etcd members do not agree on a leader")
        return m

    def on(members):
        """The member most processes are connected to, and "N processes on it"."""
        pids = [p.p.pid for p in ps]
        m, n = max(((m, len(connected(m.port, pids))) for m in members), key=lambda mn: mn[1])
        return m, f"{n} process{'' if n == 1 else 'es'} on it"

    def fault(what, do, undo, seconds):
        """Applies a fault for `seconds`, ends it, and waits until the three members agree on a
        leader again (a member back from a cut may call an election) and 3s more."""
        t = now_ms()
        do()
        ctx.note(what)
        ctx.sleep(seconds)
        undo()
        faults.append((what, t, now_ms()))
        ctx.note(f"{what}: over")
        ctx.note(f"the members agree on leader {leader().name}")
        ctx.sleep(3.0)

    lead = leader()
    n = on([lead])[1]
    fault(f"leader {lead.name} ({n}) SIGKILLed, restarted with its data",
          lead.kill, lead.start, EXPIRY_S + 1.5)

    lead = leader()
    follower, n = on([m for m in cluster.members if m is not lead])
    fault(f"follower {follower.name} ({n}) SIGSTOPped", follower.pause, follower.resume,
          EXPIRY_S + 1.0)

    lead = leader()
    cut, n = on(cluster.members)
    views = {}

    def heal():
        views.update((m.name, m.status()) for m in cluster.members)
        cluster.heal()
    fault(f"{'leader' if cut is lead else 'follower'} {cut.name} ({n}) cut off from the others",
          lambda: cluster.partition(cut), heal, EXPIRY_S + 1.0)

    def after():
        # The cut really applied: the member cut off knew no leader, the others one of theirs.
        iso = views[cut.name]
        ctx.check(iso is not None and iso["leader"] == 0,
                  f"{cut.name}, cut off, still followed a leader ({iso}): the proxies did not isolate it")
        rest = {v["leader"] for name, v in views.items() if name != cut.name and v}
        ctx.check(len(rest) == 1 and 0 not in rest and iso is not None and iso["member"] not in rest,
                  f"the members left did not agree on a leader of their own while {cut.name} was cut off: {views}")
        nexts = [f[1] for f in faults[1:]] + [None]
        for (what, t0, t1), nxt in zip(faults, nexts):
            for p in ps:
                n = issued_after(p, t1) if nxt is None else ids_between(p, t1, nxt)
                ctx.check(n > 0, f"{p.label} issued nothing after the fault '{what}'"
                          + ("" if nxt is None else " before the next one"))
            # Availability while two members served, once the windows renewed before it ran out.
            stalled = [p for p in ps if not ids_between(p, t0 + int(EXPIRY_S * 1000), t1)]
            resumed = [min((decode(i)[0] for i in p.ids() if decode(i)[0] > t1), default=t1) - t1 for p in stalled]
            ctx.event(f"{what}, {(t1 - t0) / 1000:.1f}s: " + (
                f"{', '.join(p.label for p in stalled)} issued nothing in its last "
                f"{(t1 - t0) / 1000 - EXPIRY_S:.1f}s and resumed "
                f"{', '.join(f'{r / 1000:.1f}s' for r in resumed)} after it ended" if stalled
                else "every process kept issuing"))
        ctx.check(all(issued_after(p, faults[-1][2]) > 0 for p in ps),
                  "not every process issued after the last fault")
    ctx.after_checks.append(after)


@scenario("postgres-standby-promoted", ["postgres"], store_opts={"standby": True},
          procs_note="3 CLI, one each from the C library, the Python wheel and the Node addon when built; "
                     "one URL naming both servers with target_session_attrs=read-write",
          why="a primary with a synchronous streaming standby; the primary cut off from every client (it "
              "keeps running), the standby promoted 0.5s later; the processes must find it, with no "
              "duplicate")
def postgres_standby_promoted(ctx):
    """Every write a process saw acknowledged is on the standby (synchronous replication), so the
    promoted standby grants no window that overlaps one granted before: every process issues
    again on it, and no id or (slot, millisecond) is shared."""
    pair = ctx.server
    ps = spawn_every_language(ctx)
    ctx.sleep(2.0)
    pair.proxies["primary"].cut()
    cut = now_ms()
    ctx.note("the primary is cut off from every client (it keeps running)")
    ctx.sleep(0.5)
    pair.promote()
    promoted = now_ms()
    ctx.note("the standby is promoted")
    views = {"old primary in recovery": pair.in_recovery(pair.primary),
             "new primary in recovery": pair.in_recovery(pair.standby)}
    ctx.sleep(EXPIRY_S + 3.0)

    def after():
        ctx.check(views == {"old primary in recovery": False, "new primary in recovery": False},
                  f"after the promotion both servers should take writes (the old one cut off): {views}")
        check_renewed_on_new_primary(ctx, ps, promoted, "the promoted standby")
        ctx.event("longest pause in issuing from the cut on: " + longest_pauses(ps, cut))
    ctx.after_checks.append(after)


def spawn_every_language(ctx, **kw) -> list:
    """3 CLI processes and one each from the C library, the Python wheel and the Node addon
    (the CLI where one is not built)."""
    ps = [ctx.spawn(f"p{i}", **kw) for i in range(3)]
    return ps + [ctx.spawn(f"p{i}", lang=lang, **kw) for i, lang in ((3, "c"), (4, "py"), (5, "node"))]


def check_renewed_on_new_primary(ctx, ps, promoted: int, what: str) -> None:
    """Ids a lease expiry after the promotion come from windows renewed on the new primary."""
    for p in ps:
        ctx.check(issued_after(p, promoted + int(EXPIRY_S * 1000)) > 0,
                  f"{p.label} issued nothing once its window had to be renewed on {what}")


def longest_pauses(ps, since: int) -> str:
    """Per process, the longest stretch without an id from `since` (ms) on: "p0 1.2s, …"."""
    def pause(p) -> float:
        times = sorted({t for t in (decode(i)[0] for i in p.ids()) if t >= since} | {since})
        return max((b - a for a, b in zip(times, times[1:])), default=0) / 1000
    return ", ".join(f"{p.label} {pause(p):.1f}s" for p in ps)


SENTINEL_PROCS = ("3 CLI, one each from the C library, the Python wheel and the Node addon when built, +3 CLI "
                  "started at the kill; one redis+sentinel:// URL naming the 3 sentinels")


@scenario("redis-sentinel-failover", ["redis"], store_opts={"sentinel": True},
          procs_note=SENTINEL_PROCS + ", ?replicas=1",
          why="a primary, 2 replicas and 3 sentinels (down-after 0.75s); the primary SIGKILLed, the sentinels "
              "promote a replica; every compare-and-set waited for 1 replica (WAIT), so the new primary has "
              "every write a process saw acknowledged")
def redis_sentinel_failover(ctx):
    """Every process must issue again a lease expiry after the promotion (so it renewed on the
    new primary), and no id or (slot, millisecond) may be shared, newcomers included."""
    sentinel_failover(ctx, replicas=1)


@scenario("redis-sentinel-failover-no-wait", ["redis"], store_opts={"sentinel": True, "lagging": True},
          expect_unsafe=True, procs_note=SENTINEL_PROCS + ", ?replicas=0 (no WAIT)",
          why="as redis-sentinel-failover without WAIT, and the replica Sentinel promotes (best replica-priority) "
              "received nothing of the primary's stream for the 2s before the kill (its link black-holed): the "
              "writes of those 2s, renewals the processes saw acknowledged, are lost in the failover")
def redis_sentinel_failover_no_wait(ctx):
    """What the docs say `replicas=0` risks, shown: the harness reports the duplicates and
    overlaps it finds instead of failing on them."""
    sentinel_failover(ctx, replicas=0)


def sentinel_failover(ctx, replicas: int) -> None:
    group = ctx.server
    group.wait_replicas = replicas
    ps = spawn_every_language(ctx)
    ctx.sleep(3.0)
    lagging = None
    if group.proxy is not None:
        lagging = group.lag()
        ctx.note(f"replica on port {lagging.port} receives nothing more from the primary (its link black-holed)")
        ctx.sleep(2.0)
    old = group.primary()
    if old is None:
        raise RuntimeError("no sentinel names a primary")
    old.kill()
    killed = now_ms()
    ctx.note(f"primary on port {old.port} SIGKILLed")
    # Newcomers look for free slots while the sentinels fail over: they take what the new primary
    # shows free or expired.
    late = [ctx.spawn(f"late{i}", acquire_timeout="20s") for i in range(3)]
    new = group.wait_promoted(old, timeout=20)
    promoted = now_ms()
    ctx.note(f"the sentinels promoted the replica on port {new.port}")
    # With WAIT, the new primary takes writes only once a replica follows it again (the
    # sentinels re-point the others after the promotion): until then renewals fail, and a
    # process stopped then could not release its slot. Wait for one, bounded.
    attached = None
    deadline = time.monotonic() + 30
    while replicas and time.monotonic() < deadline:
        if int(group.info(new).get("connected_slaves", "0")) >= replicas:
            attached = now_ms()
            ctx.note(f"a replica follows the new primary, {(attached - promoted) / 1000:.1f}s after the promotion")
            break
        ctx.sleep(0.2)
    ctx.sleep(EXPIRY_S + 3.0)
    # The processes release their slots when the scenario stops them, and with WAIT a release
    # counts only once a replica has it. On a loaded machine the sentinels (down-after 0.75s) may
    # judge a just-promoted primary down too and fail over again, leaving a primary nobody
    # follows until Sentinel turns the demoted one back into a replica: stop only once the group
    # has settled, bounded, or the releases fail (honestly: "reached 0 of the 1 replicas").
    settled = group.wait_settled(replicas, timeout=30) if replicas else new
    if settled is not None and settled is not new:
        ctx.note(f"the sentinels failed over again: the primary is now the node on port {settled.port}")

    def after():
        if replicas:
            ctx.check(settled is not None, "the Sentinel group did not settle within 30s (one primary named by "
                                           "every sentinel, followed by a replica) before the processes stopped")
        ctx.check(lagging is None or new is lagging,
                  f"the sentinels promoted the replica on port {new.port}, not the lagging one: the scenario "
                  "did not set up a lost write")
        check_renewed_on_new_primary(ctx, ps + late, promoted, "the promoted replica")
        ctx.event(f"the sentinels promoted the replica on port {new.port}"
                  + (" (the lagging one)" if new is lagging else "")
                  + f" {(promoted - killed) / 1000:.1f}s after the kill")
        ctx.event("longest pause in issuing from the kill on: " + longest_pauses(ps, killed))
        if replicas:
            ctx.check(attached is not None, "no replica followed the new primary within 30s of the promotion")
            if attached is not None:
                ctx.event(f"a replica followed the new primary {(attached - promoted) / 1000:.1f}s after the promotion")
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# Static slots


def static_config(ctx, slot: int = 7) -> tuple:
    state = ctx.dir / "state" / "cosid.state"
    cfg = ctx.dir / "static.yaml"
    cfg.write_text(
        "cosid:\n"
        f"  namespace: {ctx.namespace}\n"
        "  machine:\n"
        "    static:\n"
        f"      slot: {slot}\n"
        f"      state-file: {state}\n"
        "      ahead: 2s\n")
    return cfg, state


@scenario("static-clock-set-back", ["static"], check_holders=False,
          procs_note="one slot, run 3 times: clean stop, restart at -3s, SIGKILL, restart at -6s",
          why="restarted with the clock set back: waits until its clock passes the floor in the state file")
def static_clock_back(ctx):
    cfg, state = static_config(ctx)
    a = ctx.spawn_static("run1", cfg)
    ctx.sleep(2.0)
    a.terminate()
    a.wait(15)
    s1 = state.read_text()
    b = ctx.spawn_static("run2-minus3s", cfg, skew="-3s")
    ctx.sleep(5.0)
    b.kill()  # crash: the file holds a ceiling ahead of the last id
    s2 = state.read_text()
    c = ctx.spawn_static("run3-minus6s", cfg, skew="-6s")
    # Longer than max-wait (3 s): a `next()` waiting for the clock to pass the floor returns
    # ClockBehind only then, and that is when the command says it waits.
    ctx.sleep(4.5)

    def after():
        last_a = max(decode(i)[0] for i in a.ids()) if a.ids() else 0
        ctx.check(bool(a.ids()), "the first run issued nothing")
        ctx.check(all(decode(i)[0] > last_a for i in b.ids()), "run2 issued at or below run1's last id")
        ctx.check(bool(b.ids()), "run2 (-3s) never passed the floor in 5s")
        ctx.check(not c.ids() or min(decode(i)[0] for i in c.ids()) > max((decode(i)[0] for i in b.ids()), default=0),
                  "run3 issued at or below run2's ids")
        ctx.check("waiting" in c.stderr() or c.ids(), "run3 neither issued nor said it waits")
        ctx.event(f"state after clean stop: `{s1.strip()[:40]}…`; after SIGKILL: `{s2.strip()[:40]}…`")
        if b.ids():
            first = min(decode(i)[0] for i in b.ids())
            ctx.event(f"run2 (-3s) first id {first - last_a} ms after run1's last")
        ctx.event(f"run3 (-6s) issued {len(c.ids())} ids in 4.5s")
    ctx.after_checks.append(after)


@scenario("static-corrupt-state", ["static"], check_holders=False, errors_ok=True,
          procs_note="5 starts, each on a bad state file", why="refused to start (exit non-zero, clear error)")
def static_corrupt(ctx):
    from procs import Proc  # noqa: F401
    cfg, state = static_config(ctx)
    state.parent.mkdir(parents=True, exist_ok=True)
    good = None
    # A good file first, to corrupt it in several ways.
    r = ctx.cosid_cmd(["next", "-n", "1", "--config", str(cfg)], label="good")
    ctx.check(r.returncode == 0, f"a good static start failed: {r.stderr.strip()}")
    good = state.read_bytes()
    cases = {
        "truncated": good[: len(good) // 2],
        "empty": b"",
        "bad-checksum": good.replace(b"cosid-state 1 1", b"cosid-state 1 2", 1),
        "garbage": bytes(range(256)),
        "no-newline": good.rstrip(b"\n"),
    }
    for name, data in cases.items():
        state.write_bytes(data)
        p = ctx.spawn_static(f"corrupt-{name}", cfg)
        p.wait(15)
        if p.forced:
            ctx.fail(f"{name}: still running 15s after start on a corrupt state file")

    def after():
        for p in ctx.procs:
            ctx.check(p.returncode not in (0, None), f"{p.label}: exit {p.returncode} on a corrupt state file")
            ctx.check(not p.ids(), f"{p.label}: issued {len(p.ids())} ids from a corrupt state file")
            err = p.stderr()
            ctx.check("state file" in err and str(state) in err, f"{p.label}: error does not name the state file: {err.strip()[:120]}")
        ctx.event("every start refused: " + (ctx.procs[0].stderr().strip().splitlines() or ['?'])[-1][:160])
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# The multi-process tests of issues 3 and 4


def eight_processes(ctx):
    ps = ctx.spawn_many(5, gap=0.1)
    ps.append(ctx.spawn("p5", lang="node"))
    ps.append(ctx.spawn("p6", lang="c"))
    ps.append(ctx.spawn("p7", lang="py"))
    ctx.sleep(1.5)
    paused, killed = ps[2], ps[4]
    paused.pause()
    ctx.sleep(1.0)
    killed.kill()
    restarted = ctx.spawn("p4-restart", key=killed.key)
    ctx.sleep(EXPIRY_S)
    paused.resume()
    woke = now_ms()
    ctx.sleep(3.0)

    def after():
        ctx.check(bool(restarted.ids()), "the restarted process issued nothing")
        # Nobody took p2's expired slot here, so after waking it may simply renew it (the protocol
        # lets the holder renew while no one else acquired it); it waits only if its generator
        # runs before the renewal. sigstop-past-ttl is the scenario where the slot is taken.
        ctx.event("p2 after waking: " + ("waited (" + fold_first(paused.stderr()) + ")" if "waiting" in paused.stderr() else "renewed before its next id"))
        ctx.event(f"p2 after waking issued on slots {sorted({decode(i)[1] for i in paused.ids() if decode(i)[0] > woke})}")
        for p in ps:
            if p is not killed:
                ctx.check(bool(p.ids()), f"{p.label} issued nothing")
    ctx.after_checks.append(after)


scenario("issue3-8-processes", ["sqlite"], procs_note="8 (one each from the C library, the Python wheel, the Node addon, when built) + 1 restart",
         why="p2 paused 3.5s past its ttl then resumed; p4 SIGKILLed and restarted")(eight_processes)
scenario("issue4-8-processes", ["redis", "postgres"], procs_note="8 (one each from the C library, the Python wheel, the Node addon, when built) + 1 restart",
         why="p2 paused 3.5s past its ttl then resumed; p4 SIGKILLed and restarted")(eight_processes)


# ------------------------------------------------------------------------------------------------
# fork()


@scenario("fork-after-start", ALL, procs_note="2 C library processes, each forking 3 children + 1 CLI",
          why="each C process forks 3 children 0.5s after its first id; the children keep issuing through the "
              "runtime they inherited (cosid.fork: new-slot) beside their parent until SIGTERM")
def fork_after_start(ctx):
    parents = [ctx.spawn(f"p{i}", lang="c", extra=["--fork", "3"]) for i in range(2)]
    other = ctx.spawn("cli")
    ctx.sleep(2.0)
    ctx.sleep(EXPIRY_S)

    def after():
        for p in parents:
            ctx.check(p.label.endswith("-c"), f"{p.label}: the C library worker was not built, so nothing forked")
            slots = slots_of(p)
            ctx.event(f"{p.label} and its children issued on slots {sorted(slots)}")
            # The parent keeps its slot; each child takes one of its own.
            ctx.check(len(slots) >= 4, f"{p.label}: ids on {len(slots)} slots, expected the parent's and 3 children's")
        ctx.check(bool(other.ids()), "the CLI process issued nothing")
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# Security


@scenario("credentials-in-errors", ["redis", "postgres", "mysql"], check_holders=False, errors_ok=True,
          procs_note="one-shot commands", why="-")
def credentials(ctx):
    """Wrong password, unreachable store, bad URL: every error names the store without the
    password (the runner greps every output for the passwords at the end)."""
    srv = ctx.server
    wrong = "wrongpw-" + ctx.namespace
    ctx.run.passwords.append(wrong)
    cases = {
        "wrong password": srv.url(password=wrong),
        "unreachable port": srv.url(port=1),
        "right password": srv.url(),
    }
    for what, url in cases.items():
        base = ["--store", url, "--namespace", ctx.namespace]
        r = ctx.cosid_cmd(["next", "-n", "3", "--ttl", "1s", "--tolerance", "500ms", "--owner-key", "cred"] + base,
                          timeout=30, label="cred")
        s = ctx.cosid_cmd(["slots", "--json"] + base, timeout=30, label="cred")
        if what == "right password":
            ctx.check(r.returncode == 0 and len(r.stdout.split()) == 3, f"right password: next failed: {ctx.redact(r.stderr.strip())[:160]}")
        else:
            ctx.check(r.returncode != 0, f"{what}: `cosid next` succeeded")
            ctx.event(f"{what}: `{ctx.redact(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else '?')[:150]}`")
        _ = s
    ctx.run.passwords.remove(wrong)
    ctx.extra_redactions.append(wrong)
    # The wrong password must not be printed either.
    for f in ctx.dir.glob("cred-*.log"):
        if wrong in f.read_text():
            ctx.fail(f"{f.name} shows the (wrong) password")


@scenario("tls", ["redis", "postgres", "mysql"], store_opts={"tls": True}, procs_note="3 over TLS",
          why="-")
def tls(ctx):
    """A TLS connection to a server whose certificate the harness made and signed with its own
    CA. Redis: `rediss://`, the CA given via SSL_CERT_FILE. PostgreSQL: the server accepts TLS
    only (`hostssl` in pg_hba, `hostnossl … reject`); the processes use
    `sslmode=verify-full&sslrootcert=CA`. MariaDB: the server takes TLS connections only
    (`require_secure_transport`); the processes use `ssl-mode=verify_identity&ssl-ca=CA`."""
    # The processes' ttl and tolerance: the first command that connects records them in the
    # namespace, and a runtime of another ttl is refused there.
    base = ["--namespace", ctx.namespace, "--ttl", f"{TTL_S:g}s", "--tolerance", f"{TOL_S * 1000:g}ms"]

    def last_line(r):
        lines = r.stderr.strip().splitlines()
        return ctx.redact(lines[-1] if lines else "?")[:180]
    if ctx.store_kind == "redis":
        # Without the CA the server's certificate must be refused (no silent downgrade).
        r = ctx.cosid_cmd(["next", "-n", "1", "--store", ctx.url()] + base, timeout=30, label="tls-no-ca",
                          env={"SSL_CERT_FILE": "/dev/null"})
        ctx.check(r.returncode != 0, "rediss:// accepted a certificate from an unknown CA")
        ctx.event(f"rediss:// without the CA: `{last_line(r)}`")
    else:
        # The TLS-only server: plain text refused, its certificate refused without the CA, and
        # accepted with encryption but no certificate check. (setting, its URL) for each.
        srv = ctx.server
        if ctx.store_kind == "mysql":
            plain, verify, require = "ssl-mode=disabled", "ssl-mode=verify_identity", "ssl-mode=required"
            urls = [srv.url(ssl_mode="disabled"), srv.url(ssl_mode="verify_identity").split("&ssl-ca")[0],
                    srv.url(ssl_mode="required")]
        else:
            plain, verify, require = "sslmode=disable", "sslmode=verify-full", "sslmode=require"
            urls = [srv.url(sslmode="disable"), srv.url(sslmode="verify-full").split("&sslrootcert")[0],
                    srv.url(sslmode="require")]
        r = ctx.cosid_cmd(["next", "-n", "1", "--store", urls[0]] + base, timeout=30, label="tls-plain")
        ctx.check(r.returncode != 0, f"{plain} was accepted by a TLS-only server")
        ctx.event(f"{plain}: `{last_line(r)}`")
        r = ctx.cosid_cmd(["next", "-n", "1", "--store", urls[1]] + base, timeout=30, label="tls-no-ca",
                          env={"SSL_CERT_FILE": "/dev/null"})
        ctx.check(r.returncode != 0, f"{verify} accepted a certificate from an unknown CA")
        ctx.event(f"{verify} without the CA: `{last_line(r)}`")
        r = ctx.cosid_cmd(["next", "-n", "1", "--store", urls[2]] + base, timeout=30, label="tls-require")
        ctx.check(r.returncode == 0, f"{require} failed: {last_line(r)}")
    ps = [ctx.spawn(f"p{i}") for i in range(3)]
    ctx.sleep(3.0)

    def after():
        for p in ps:
            ctx.check(bool(p.ids()), f"{p.label} issued nothing over TLS: {ctx.redact(p.stderr().strip()[-200:])}")
    ctx.after_checks.append(after)


# ------------------------------------------------------------------------------------------------
# Redis Cluster


@scenario("redis-cluster-migration", ["redis"], store_opts={"cluster": True},
          procs_note="3 CLI, one each from the C library, the Python wheel and the Node addon when built; "
                     "one redis+cluster:// URL naming the 3 primaries",
          why="a Redis Cluster of 3 primaries; the namespace's hash slot migrated twice while the processes issue "
              "and renew: ASK while its keys are on the importing node, MOVED once the slot has moved")
def redis_cluster_migration(ctx):
    """Every process must issue a lease expiry after each migration ended (so it renewed on the
    slot's new owner), the old owners must have answered ASK and MOVED, and no id or (slot,
    millisecond) may be shared."""
    group = ctx.server
    slot = group.keyslot(f"cosid:{{{ctx.namespace}}}:slots")
    ps = spawn_every_language(ctx)
    ctx.sleep(3.0)
    moves = []
    for _ in range(2):
        src, dst = group.begin_migration(slot)
        ctx.sleep(1.0)
        keys = group.move_keys(slot, src, dst)
        ctx.note(f"hash slot {slot}: {keys} keys moved from port {src} to {dst}; the slot still migrating")
        ctx.sleep(EXPIRY_S)
        group.finish_migration(slot, src, dst)
        moves.append((src, dst, keys, now_ms(), group.redirections(src, "ASK")))
        ctx.note(f"hash slot {slot} now owned by port {dst}")
        ctx.sleep(EXPIRY_S + 1.0)
    # Read while the nodes run (they are stopped before the checks).
    moved_counts = [group.redirections(src, "MOVED") for src, *_ in moves]

    def after():
        check_renewed_on_new_primary(ctx, ps, moves[-1][3], "the slot's last owner")
        for (src, dst, keys, _, asks), moved in zip(moves, moved_counts):
            ctx.check(keys >= 3, f"only {keys} keys moved from port {src}: the namespace was not on that slot")
            ctx.check(asks > 0, f"port {src} answered no ASK while its slot's keys were on port {dst}")
            ctx.check(moved > 0, f"port {src} answered no MOVED once port {dst} owned the slot")
            ctx.event(f"slot {slot} from port {src} to {dst}: {keys} keys, {asks} ASK and {moved} MOVED answered by "
                      f"port {src}")
    ctx.after_checks.append(after)
