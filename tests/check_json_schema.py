#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks a JSON document of stb against the schemas of docs/json.md
# ("stb-stacks/1", "stb-tasks/1", "stb-profile/1", "stb-leaks/1"): required members and
# their types, allowed values, members that only come in pairs, and no
# unknown members. Used by test_formats and test_profile.
# Usage: check_json_schema.py FILE [--loader] [--grouped]
#   --loader   the document comes from stb-bpf-loader (its extra members are required)
#   --grouped  a "groups" array is required (stb-stacks/1)
# Exit status 0 when valid; 1 with the first problem on stderr.
import json
import re
import sys

STATES = {"unused", "created", "ready-without-stack", "ready", "about-to-run", "running",
          "suspending", "suspended", "destroyed"}
CAPTURES = {"none", "context", "signal", "self", "bpf", "syscall", "core"}
WAIT_KINDS = {"butex", "mutex", "cond", "rwlock-read", "rwlock-write", "sem", "barrier", "once",
              "sleep", "fd", "join", "id", "timer", "yield", "countdown",
              "execution-queue"}
HEX = re.compile(r"^0x[0-9a-f]+$")
BUILD_ID = re.compile(r"^[0-9a-f]+$")


class Bad(Exception):
    pass


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (isinstance(v, (int, float))) and not isinstance(v, bool)


def need(obj, key, check, what, where):
    if key not in obj:
        raise Bad(f"{where}: missing \"{key}\"")
    if not check(obj[key]):
        raise Bad(f"{where}: \"{key}\" is not {what}: {obj[key]!r}")


def opt(obj, key, check, what, where):
    if key in obj and not check(obj[key]):
        raise Bad(f"{where}: \"{key}\" is not {what}: {obj[key]!r}")


def pair(obj, a, b, where):
    if (a in obj) != (b in obj):
        raise Bad(f"{where}: \"{a}\" and \"{b}\" come together")


def only(obj, allowed, where):
    extra = set(obj) - set(allowed)
    if extra:
        raise Bad(f"{where}: unknown members {sorted(extra)}")


def is_str(v):
    return isinstance(v, str)


def is_hex(v):
    return isinstance(v, str) and HEX.match(v) is not None


def is_bid(v):
    return isinstance(v, str) and BUILD_ID.match(v) is not None


def check_source(o, where):
    """What is known of an address: "function" with "offset", "file" with "line"."""
    opt(o, "function", is_str, "a string", where)
    opt(o, "offset", is_int, "an integer", where)
    pair(o, "function", "offset", where)
    opt(o, "file", is_str, "a string", where)
    opt(o, "line", is_int, "an integer", where)
    pair(o, "file", "line", where)


def check_stack_frame(f, where):
    if not isinstance(f, dict):
        raise Bad(f"{where}: not an object")
    need(f, "ip", is_hex, "a hex string", where)
    need(f, "inlined", lambda v: isinstance(v, bool), "a boolean", where)
    if f["inlined"]:
        # A call inlined at ip: the function, no offset of its own.
        need(f, "function", is_str, "a string", where)
        if "offset" in f:
            raise Bad(f"{where}: an inlined frame has no \"offset\"")
        opt(f, "file", is_str, "a string", where)
        opt(f, "line", is_int, "an integer", where)
        pair(f, "file", "line", where)
    else:
        check_source(f, where)
    opt(f, "module", is_str, "a string", where)
    opt(f, "module_offset", is_hex, "a hex string", where)
    pair(f, "module", "module_offset", where)
    opt(f, "build_id", is_bid, "a hex build id", where)
    need(f, "source", lambda v: v in ("fp", "dwarf"), "\"fp\" or \"dwarf\"", where)
    opt(f, "module_mismatch", lambda v: v is True, "true", where)
    if "module_mismatch" in f and "function" in f:
        raise Bad(f"{where}: a frame of a mismatched module has no function")
    only(f, ["ip", "function", "offset", "module", "module_offset", "build_id", "file", "line",
             "inlined", "source", "module_mismatch"], where)


def check_wait(w, where, grouped_any=False):
    if not isinstance(w, dict):
        raise Bad(f"{where}: not an object")
    need(w, "kind", lambda v: v in WAIT_KINDS, "a wait kind", where)
    pos = lambda v: is_int(v) and v > 0
    opt(w, "object", is_hex, "a hex string", where)
    opt(w, "owner", pos, "a positive integer", where)
    opt(w, "owner_tid", pos, "a positive integer", where)
    opt(w, "target", pos, "a positive integer", where)
    opt(w, "mutex", is_hex, "a hex string", where)
    opt(w, "fd", is_int, "an integer", where)
    opt(w, "events", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    pair(w, "fd", "events", where)
    opt(w, "deadline_in_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
    opt(w, "queued", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    if "queued" in w and w["kind"] != "execution-queue":
        raise Bad(f"{where}: \"queued\" in a wait that is not on an execution queue")
    if "owner" in w and "owner_tid" in w:
        raise Bad(f"{where}: \"owner\" and \"owner_tid\" exclude each other")
    only(w, ["kind", "object", "owner", "owner_tid", "target", "mutex", "fd", "events",
             "deadline_in_s", "queued"], where)


def check_execq(q, where):
    """What a consumer works on: {"queue": "0x...", "queued": N}."""
    if not isinstance(q, dict):
        raise Bad(f"{where}: not an object")
    need(q, "queue", is_hex, "a hex string", where)
    opt(q, "queued", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    only(q, ["queue", "queued"], where)


def check_syscall(s, state, where):
    """A running task blocked in a system call on its thread (the call)."""
    if not isinstance(s, dict):
        raise Bad(f"{where}: not an object")
    need(s, "nr", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    opt(s, "name", lambda v: is_str(v) and re.match(r"^[a-z0-9_]+$", v), "a call's name", where)
    opt(s, "fd", is_int, "an integer", where)
    if state != "running":
        raise Bad(f"{where}: a system call of a task that is not running ({state})")
    only(s, ["nr", "name", "fd"], where)


def check_created_by(c, where):
    if not isinstance(c, dict):
        raise Bad(f"{where}: not an object")
    pos = lambda v: is_int(v) and v > 0
    opt(c, "bthread", pos, "a positive integer", where)
    opt(c, "tid", pos, "a positive integer", where)
    opt(c, "ip", is_hex, "a hex string", where)
    opt(c, "function", is_str, "a string", where)
    opt(c, "offset", is_int, "an integer", where)
    pair(c, "function", "offset", where)
    opt(c, "file", is_str, "a string", where)
    opt(c, "line", is_int, "an integer", where)
    pair(c, "file", "line", where)
    if ("function" in c or "file" in c) and "ip" not in c:
        raise Bad(f"{where}: \"function\" or \"file\" without \"ip\"")
    if not c:
        raise Bad(f"{where}: empty")
    only(c, ["bthread", "tid", "ip", "function", "offset", "file", "line"], where)


def check_holds(h, where):
    if not isinstance(h, list) or not h:
        raise Bad(f"{where}: not a non-empty array")
    for i, x in enumerate(h):
        w = f"{where}[{i}]"
        if not isinstance(x, dict):
            raise Bad(f"{w}: not an object")
        need(x, "kind", lambda v: v in ("mutex", "rwlock-write", "id"),
             "\"mutex\", \"rwlock-write\" or \"id\"", w)
        need(x, "object", is_hex, "a hex string", w)
        need(x, "waiting", lambda v: is_int(v) and v > 0, "a positive integer", w)
        only(x, ["kind", "object", "waiting"], w)


def check_task(t, where, stacks, grouped=False):
    if not isinstance(t, dict):
        raise Bad(f"{where}: not an object")
    need(t, "id", lambda v: is_int(v) and v > 0, "a positive integer", where)
    need(t, "kind", lambda v: v in ("bthread", "pthread"), "\"bthread\" or \"pthread\"", where)
    need(t, "name", is_str, "a string", where)
    need(t, "state", lambda v: v in STATES, "a task state", where)
    need(t, "capture", lambda v: v in CAPTURES, "a capture mode", where)
    opt(t, "tid", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(t, "blocked_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
    opt(t, "running_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
    if "blocked_s" in t and "running_s" in t:
        raise Bad(f"{where}: \"blocked_s\" and \"running_s\" exclude each other")
    if "running_s" in t and t["state"] != "running":
        raise Bad(f"{where}: \"running_s\" of a task that is not running")
    opt(t, "error", is_str, "a string", where)
    opt(t, "worker", lambda v: is_int(v) and v >= 0, "a worker index", where)
    if "worker" in t and (t["state"] != "running" or t["kind"] != "bthread"):
        raise Bad(f"{where}: \"worker\" of a task that is not a running bthread")
    if "syscall" in t:
        check_syscall(t["syscall"], t["state"], f"{where}.syscall")
    if "wait" in t:
        check_wait(t["wait"], f"{where}.wait")
    if "created_by" in t:
        check_created_by(t["created_by"], f"{where}.created_by")
    opt(t, "selected", lambda v: v is False, "false", where)
    if "holds" in t:
        check_holds(t["holds"], f"{where}.holds")
    if "execution_queue" in t:
        check_execq(t["execution_queue"], f"{where}.execution_queue")
    if "signal" in t:
        check_signal(t["signal"], f"{where}.signal", False)
        if t["state"] != "running" and t["kind"] != "pthread":
            raise Bad(f"{where}: a fatal signal taken by a task that was not running")
    allowed = ["id", "kind", "name", "state", "capture", "tid", "worker", "syscall", "blocked_s",
               "running_s", "wait", "execution_queue", "created_by", "error", "selected", "holds",
               "signal"]
    if stacks and grouped:
        # The stack is the group's, written once: a grouped task has none.
        need(t, "group", lambda v: is_int(v) and v >= 0, "a group index", where)
        allowed += ["group"]
    elif stacks:
        check_stack(t, where)
        allowed += STACK
    only(t, allowed, where)


STACK = ["truncated", "truncated_why", "frames", "runtime_frames_hidden", "frames_not_shown"]
TRUNCATED_WHY = {"copy", "moved", "unreadable", "deadline", "walk-limit", "depth"}


def check_signal(sig, where, document):
    """A core's fatal signal: of the task or thread that took it, or of the
    document (with the thread, and the task that ran there)."""
    if not isinstance(sig, dict):
        raise Bad(f"{where}: not an object")
    need(sig, "number", lambda v: is_int(v) and 1 <= v <= 64, "a signal number", where)
    opt(sig, "name", lambda v: is_str(v) and v.startswith("SIG"), "a signal name", where)
    need(sig, "code", is_int, "an integer", where)
    opt(sig, "code_name", is_str, "a string", where)
    opt(sig, "fault_addr", is_hex, "a hex string", where)
    opt(sig, "sender_pid", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    opt(sig, "sender_uid", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    pair(sig, "sender_pid", "sender_uid", where)
    if "fault_addr" in sig and "sender_pid" in sig:
        raise Bad(f"{where}: a fault address and a sender exclude each other")
    allowed = ["number", "name", "code", "code_name", "fault_addr", "sender_pid", "sender_uid"]
    if document:
        need(sig, "tid", lambda v: is_int(v) and v > 0, "a positive integer", where)
        opt(sig, "task", lambda v: is_int(v) and v > 0, "a positive integer", where)
        allowed += ["tid", "task"]
    only(sig, allowed, where)


def check_stack(t, where):
    """The stack members of a task, or of a group."""
    need(t, "truncated", lambda v: isinstance(v, bool), "a boolean", where)
    need(t, "frames", lambda v: isinstance(v, list), "an array", where)
    frames = t["frames"]
    for i, f in enumerate(frames):
        check_stack_frame(f, f"{where}.frames[{i}]")
        # Every logical frame: the calls inlined at an address come right
        # before the frame of the function they were inlined into.
        if f["inlined"] and (i + 1 == len(frames) or frames[i + 1]["ip"] != f["ip"]):
            raise Bad(f"{where}.frames[{i}]: an inlined frame not followed by a frame of "
                      f"its address")
    opt(t, "runtime_frames_hidden", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(t, "frames_not_shown", lambda v: is_int(v) and v > 0, "a positive integer", where)
    if "frames_not_shown" in t and t["truncated"] is not True:
        raise Bad(f"{where}: frames_not_shown without truncated")
    opt(t, "truncated_why", lambda v: v in TRUNCATED_WHY, "a reason of truncation", where)
    if ("truncated_why" in t) != (t["truncated"] is True):
        raise Bad(f"{where}: truncated_why without truncated, or truncated without why")


def check_thread(t, where):
    """A thread of the process that is no task (the "threads" array: every
    thread of a live process, or the one that took a core's fatal signal),
    with its stack, or naming the task it runs."""
    if not isinstance(t, dict):
        raise Bad(f"{where}: not an object")
    need(t, "tid", lambda v: is_int(v) and v > 0, "a positive integer", where)
    need(t, "name", is_str, "a string", where)
    need(t, "state", lambda v: v == "running", "\"running\"", where)
    need(t, "capture", lambda v: v in CAPTURES, "a capture mode", where)
    opt(t, "worker", lambda v: is_int(v) and v >= 0, "a worker index", where)
    opt(t, "bthread", lambda v: is_int(v) and v > 0, "a bthread id", where)
    opt(t, "pthread", lambda v: is_int(v) and v > 0, "a task id", where)
    check_stack(t, where)
    if "bthread" in t and "worker" not in t:
        raise Bad(f"{where}: \"bthread\" of a thread that is not a worker")
    if ("bthread" in t or "pthread" in t) and t["frames"]:
        raise Bad(f"{where}: a thread whose stack is its task's has frames")
    if "syscall" in t:
        check_syscall(t["syscall"], t["state"], f"{where}.syscall")
    if "signal" in t:
        check_signal(t["signal"], f"{where}.signal", False)
    if "holds" in t:
        check_holds(t["holds"], f"{where}.holds")
    opt(t, "error", is_str, "a string", where)
    opt(t, "starting", lambda v: v is True, "true", where)
    if "starting" in t and (t["capture"] != "core" or "error" in t or "syscall" in t or
                            len(t["frames"]) != 1):
        raise Bad(f"{where}: a starting thread is one frame from a core's registers")
    only(t, ["tid", "name", "state", "capture", "worker", "bthread", "pthread", "syscall",
             "signal", "holds", "error", "starting"] + STACK, where)


META = ["pid", "comm", "abi_version", "table_capacity", "untraceable", "capture", "signal",
        "freq_hz",
        "complete", "partial", "not_traced", "failed", "finished", "notes", "stats", "time_ns",
        "tasks_by_state", "registered_pthreads", "slots_used"]


def check_meta(doc, loader, profile):
    """The run's metadata (struct stb_report_meta): optional everywhere,
    required as a set from stb-bpf-loader."""
    where = "document"
    count = lambda v: is_int(v) and v >= 0
    opt(doc, "pid", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(doc, "comm", is_str, "a string", where)
    opt(doc, "abi_version", is_int, "an integer", where)
    opt(doc, "table_capacity", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(doc, "untraceable", count, "a non-negative integer", where)
    opt(doc, "capture", lambda v: v in ("bpf+context", "context-only", "context", "core"),
        "\"bpf+context\", \"context-only\" or \"context\"", where)
    opt(doc, "freq_hz", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(doc, "complete", lambda v: isinstance(v, bool), "a boolean", where)
    opt(doc, "partial", is_str, "a string", where)
    for k in ("not_traced", "failed", "finished"):
        opt(doc, k, count, "a non-negative integer", where)
    opt(doc, "notes", lambda v: isinstance(v, list) and all(is_str(x) for x in v),
        "an array of strings", where)
    opt(doc, "stats", lambda v: isinstance(v, dict) and all(count(x) for x in v.values()),
        "an object of non-negative integers", where)
    if "partial" in doc and doc.get("complete") is not False:
        raise Bad(f"{where}: \"partial\" without \"complete\": false")
    opt(doc, "time_ns", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(doc, "tasks_by_state", lambda v: isinstance(v, dict) and
        all(k in STATES and is_int(x) and x > 0 for k, x in v.items()),
        "an object of task states with positive counts", where)
    for k in ("registered_pthreads", "slots_used"):
        opt(doc, k, count, "a non-negative integer", where)
    census = ("tasks_by_state", "registered_pthreads", "slots_used")
    if any(k in doc for k in census) and not all(k in doc for k in census):
        raise Bad(f"{where}: {', '.join(census)} come together")
    if "registered_pthreads" in doc and \
            doc["registered_pthreads"] > sum(doc["tasks_by_state"].values()):
        raise Bad(f"{where}: more registered pthreads than tasks")
    if not loader:
        return
    for k in ("pid", "comm", "complete", "not_traced", "failed", "finished"):
        need(doc, k, lambda v: True, "present", where)
    if not doc["complete"]:
        need(doc, "partial", is_str, "a string", where)
    if not profile:
        for k in ("abi_version", "table_capacity", "untraceable", "time_ns",
                  "tasks_by_state", "registered_pthreads", "slots_used"):
            need(doc, k, lambda v: True, "present", where)
        if doc.get("schema") != "stb-leaks/1":
            need(doc, "capture", lambda v: True, "present", where)


def check_deadlocks(doc, ids):
    need(doc, "deadlocks", lambda v: isinstance(v, list), "an array", "document")
    need(doc, "deadlocks_elsewhere", lambda v: is_int(v) and v >= 0, "a non-negative integer",
         "document")
    selected = {t["id"] for t in doc["tasks"] if t.get("selected", True)}
    for i, cyc in enumerate(doc["deadlocks"]):
        where = f"deadlocks[{i}]"
        if not isinstance(cyc, list) or len(cyc) < 2:
            raise Bad(f"{where}: not an array of at least two members")
        members = []
        for k, m in enumerate(cyc):
            w = f"{where}[{k}]"
            if not isinstance(m, dict):
                raise Bad(f"{w}: not an object")
            need(m, "bthread", lambda v: is_int(v) and v > 0, "a positive integer", w)
            need(m, "kind", lambda v: v in WAIT_KINDS, "a wait kind", w)
            need(m, "object", is_hex, "a hex string", w)
            need(m, "held_by", lambda v: is_int(v) and v > 0, "a positive integer", w)
            only(m, ["bthread", "kind", "object", "held_by"], w)
            members.append(m)
        for k, m in enumerate(members):
            if m["held_by"] != members[(k + 1) % len(members)]["bthread"]:
                raise Bad(f"{where}[{k}]: held_by is not the next member: the cycle does not close")
        if not any(m["bthread"] in selected for m in members):
            raise Bad(f"{where}: no member is a selected task (such a cycle is counted in "
                      "deadlocks_elsewhere)")


def check_stacks(doc, loader, grouped):
    need(doc, "tasks", lambda v: isinstance(v, list), "an array", "document")
    grouped = grouped or "groups" in doc
    for i, t in enumerate(doc["tasks"]):
        check_task(t, f"tasks[{i}]", True, grouped)
        if grouped and t["group"] >= len(doc.get("groups", [])):
            raise Bad(f"tasks[{i}]: group {t['group']} does not exist")
    allowed = ["schema", "tasks", "groups", "threads", "deadlocks", "deadlocks_elsewhere"] + META
    if "threads" in doc:
        need(doc, "threads", lambda v: isinstance(v, list) and len(v) > 0, "a non-empty array",
             "document")
        tids = set()
        for i, t in enumerate(doc["threads"]):
            check_thread(t, f"threads[{i}]")
            if t["tid"] in tids:
                raise Bad(f"threads[{i}]: tid {t['tid']} twice")
            tids.add(t["tid"])
    if "signal" in doc:
        check_signal(doc["signal"], "signal", True)
        took = [t for t in doc["tasks"] if "signal" in t] + \
            [t for t in doc.get("threads", []) if "signal" in t]
        if len(took) > 1:
            raise Bad("document: more than one task or thread took the fatal signal")
        if took and took[0]["tid"] != doc["signal"]["tid"]:
            raise Bad("document: the task or thread flagged with the signal is not on its tid")
        if took and ("id" in took[0]) != ("task" in doc["signal"]):
            raise Bad("document: signal.task is not the task flagged with it")
        if any("signal" in t for t in doc["tasks"][1:]):
            raise Bad("document: the task that took the fatal signal is not first")
    elif any("signal" in t for t in doc["tasks"] + doc.get("threads", [])):
        raise Bad("document: a task or thread flagged with a signal without the document's")
    if "deadlocks" in doc or loader:
        check_deadlocks(doc, [t["id"] for t in doc["tasks"]])
    check_meta(doc, loader, False)
    if grouped:
        need(doc, "groups", lambda v: isinstance(v, list), "an array", "document")
    by_id = {t["id"]: t for t in doc["tasks"]}
    for i, g in enumerate(doc.get("groups", [])):
        where = f"groups[{i}]"
        need(g, "count", lambda v: is_int(v) and v > 0, "a positive integer", where)
        need(g, "state", lambda v: v in STATES, "a task state", where)
        need(g, "ids", lambda v: isinstance(v, list) and all(is_int(x) for x in v),
             "an array of integers", where)
        if len(g["ids"]) != g["count"]:
            raise Bad(f"{where}: {len(g['ids'])} ids for count {g['count']}")
        check_stack(g, where)
        if "syscall" in g:
            check_syscall(g["syscall"], g["state"], f"{where}.syscall")
        if "wait" in g:
            check_wait(g["wait"], f"{where}.wait")
        if "execution_queue" in g:
            check_execq(g["execution_queue"], f"{where}.execution_queue")
        opt(g, "shortest_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
        opt(g, "longest_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
        pair(g, "shortest_s", "longest_s", where)
        if "shortest_s" in g and g["shortest_s"] > g["longest_s"]:
            raise Bad(f"{where}: shortest_s > longest_s")
        opt(g, "names", lambda v: isinstance(v, list) and 1 <= len(v) <= 2 and
            all(is_str(x) for x in v), "an array of one or two strings", where)
        opt(g, "selected", lambda v: v is False, "false", where)
        for tid in g["ids"]:
            t = by_id.get(tid)
            if t is None or t["group"] != i:
                raise Bad(f"{where}: id {tid} is not a task of this group")
            if t.get("selected", True) != g.get("selected", True):
                raise Bad(f"{where}: task {tid} and its group differ in \"selected\"")
        only(g, ["count", "state", "syscall", "wait", "execution_queue", "shortest_s", "longest_s", "names",
                 "ids", "selected"] + STACK, where)
    # Every task in exactly one group: each group's ids point back at it
    # (above), and together they are every task once.
    listed = [tid for g in doc.get("groups", []) for tid in g["ids"]]
    if grouped and (len(listed) != len(doc["tasks"]) or len(set(listed)) != len(listed)):
        raise Bad(f"groups: {len(listed)} ids ({len(set(listed))} distinct) for "
                  f"{len(doc['tasks'])} tasks")
    only(doc, allowed, "document")


def check_leaks(doc, loader):
    where = "document"
    need(doc, "bthreads", lambda v: is_int(v) and v >= 0, "a non-negative integer", where)
    opt(doc, "growth_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
    need(doc, "sites", lambda v: isinstance(v, list), "an array", where)
    total = 0
    last = None
    for i, s in enumerate(doc["sites"]):
        w = f"sites[{i}]"
        if not isinstance(s, dict):
            raise Bad(f"{w}: not an object")
        opt(s, "ip", is_hex, "a hex string", w)
        check_source(s, w)
        if ("function" in s or "file" in s) and "ip" not in s:
            raise Bad(f"{w}: a symbol without \"ip\"")
        need(s, "count", lambda v: is_int(v) and v > 0, "a positive integer", w)
        need(s, "states", lambda v: isinstance(v, dict) and v and
             all(k in STATES and is_int(x) and x > 0 for k, x in v.items()),
             "an object of task states with positive counts", w)
        if sum(s["states"].values()) != s["count"]:
            raise Bad(f"{w}: its states do not add up to its count")
        opt(s, "aged", lambda v: is_int(v) and v > 0, "a positive integer", w)
        opt(s, "oldest_s", lambda v: is_num(v) and v >= 0, "a non-negative number", w)
        opt(s, "median_s", lambda v: is_num(v) and v >= 0, "a non-negative number", w)
        if any(k in s for k in ("aged", "oldest_s", "median_s")) and \
                not all(k in s for k in ("aged", "oldest_s", "median_s")):
            raise Bad(f"{w}: aged, oldest_s and median_s come together")
        if "aged" in s and (s["aged"] > s["count"] or s["median_s"] > s["oldest_s"]):
            raise Bad(f"{w}: more aged than counted, or a median older than the oldest")
        opt(s, "growth", is_int, "an integer", w)
        if ("growth" in s) != ("growth_s" in doc):
            raise Bad(f"{w}: \"growth\" comes with the document's \"growth_s\"")
        if last is not None and s["count"] > last:
            raise Bad(f"{w}: sites are not in decreasing count")
        last = s["count"]
        total += s["count"]
        only(s, ["ip", "function", "offset", "file", "line", "count", "states", "aged",
                 "oldest_s", "median_s", "growth"], w)
    if total != doc["bthreads"]:
        raise Bad(f"sites: {total} bthreads for \"bthreads\": {doc['bthreads']}")
    check_meta(doc, loader, False)
    only(doc, ["schema", "bthreads", "growth_s", "sites"] + META, "document")


def check_tasks(doc):
    need(doc, "tasks", lambda v: isinstance(v, list), "an array", "document")
    for i, t in enumerate(doc["tasks"]):
        check_task(t, f"tasks[{i}]", False)
    check_meta(doc, False, False)
    only(doc, ["schema", "tasks"] + META, "document")


def check_profile_frame(f, where):
    if not isinstance(f, dict):
        raise Bad(f"{where}: not an object")
    if f.get("synthetic") is True:
        need(f, "function", lambda v: isinstance(v, str) and v.startswith("["),
             "a bracketed name", where)
        only(f, ["function", "synthetic"], where)
        return
    need(f, "ip", is_hex, "a hex string", where)
    opt(f, "function", is_str, "a string", where)
    opt(f, "file", is_str, "a string", where)
    opt(f, "line", is_int, "an integer", where)
    pair(f, "file", "line", where)
    opt(f, "module", is_str, "a string", where)
    opt(f, "module_offset", is_hex, "a hex string", where)
    pair(f, "module", "module_offset", where)
    opt(f, "build_id", is_bid, "a hex build id", where)
    need(f, "inlined", lambda v: isinstance(v, bool), "a boolean", where)
    only(f, ["ip", "function", "file", "line", "module", "module_offset", "build_id", "inlined"],
         where)


def check_profile(doc, loader):
    need(doc, "sample_types", lambda v: isinstance(v, list) and len(v) > 0, "a non-empty array",
         "document")
    for i, st in enumerate(doc["sample_types"]):
        need(st, "type", is_str, "a string", f"sample_types[{i}]")
        need(st, "unit", is_str, "a string", f"sample_types[{i}]")
        only(st, ["type", "unit"], f"sample_types[{i}]")
    types = [st["type"] for st in doc["sample_types"]]
    need(doc, "default_sample_type", lambda v: v in types + [""], "one of the sample types",
         "document")
    for k in ("period", "time_ns", "duration_ns"):
        need(doc, k, lambda v: is_int(v) and v >= 0, "a non-negative integer", "document")
    need(doc, "comments", lambda v: isinstance(v, list) and all(is_str(c) for c in v),
         "an array of strings", "document")
    need(doc, "samples", lambda v: isinstance(v, list), "an array", "document")
    label_value = lambda v: is_str(v) or is_int(v)
    for i, s in enumerate(doc["samples"]):
        where = f"samples[{i}]"
        need(s, "values", lambda v: isinstance(v, list) and len(v) == len(types) and
             all(is_int(x) for x in v), f"an array of {len(types)} integers", where)
        need(s, "labels", lambda v: isinstance(v, dict), "an object", where)
        for key, v in s["labels"].items():
            if not (label_value(v) or (isinstance(v, list) and all(label_value(x) for x in v))):
                raise Bad(f"{where}.labels.{key}: not a string, an integer or an array of them")
        need(s, "frames", lambda v: isinstance(v, list), "an array", where)
        for k, f in enumerate(s["frames"]):
            check_profile_frame(f, f"{where}.frames[{k}]")
        only(s, ["values", "labels", "frames"], where)
    allowed = ["schema", "sample_types", "default_sample_type", "period", "time_ns",
               "duration_ns", "comments", "samples"] + META
    check_meta(doc, loader, True)
    if loader:
        need(doc, "freq_hz", lambda v: is_int(v) and v > 0, "a positive integer", "document")
        stats = ["oncpu_samples", "oncpu_tagged", "oncpu_scheduler", "oncpu_kernel",
                 "lost_samples", "read_errors", "ticks", "missed_ticks", "offcpu_snapshots",
                 "unwinds", "reused", "over_budget", "copy_failed", "unlabelled",
                 "dropped_stacks"]
        need(doc, "stats", lambda v: isinstance(v, dict), "an object", "document")
        for k in stats:
            need(doc["stats"], k, lambda v: is_int(v) and v >= 0, "a non-negative integer",
                 "stats")
        only(doc["stats"], stats, "stats")
    only(doc, allowed, "document")


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__ or "usage: check_json_schema.py FILE [--loader] [--grouped]",
              file=sys.stderr)
        return 64
    path = args[0]
    loader = "--loader" in args[1:]
    grouped = "--grouped" in args[1:]
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict):
            raise Bad("the document is not an object")
        need(doc, "schema", is_str, "a string", "document")
        schema = doc["schema"]
        if schema == "stb-stacks/1":
            check_stacks(doc, loader, grouped)
        elif schema == "stb-tasks/1":
            check_tasks(doc)
        elif schema == "stb-profile/1":
            check_profile(doc, loader)
        elif schema == "stb-leaks/1":
            check_leaks(doc, loader)
        else:
            raise Bad(f"unknown schema {schema!r}")
    except (OSError, ValueError, Bad) as e:
        print(f"check_json_schema: {path}: {e}", file=sys.stderr)
        return 1
    print(f"check_json_schema: {path}: valid {schema}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
