#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Checks a JSON document of stb against the schemas of docs/json.md
# ("stb-stacks/1", "stb-tasks/1", "stb-profile/1"): required members and
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
CAPTURES = {"none", "context", "signal", "self", "bpf", "syscall"}
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


def check_stack_frame(f, where):
    if not isinstance(f, dict):
        raise Bad(f"{where}: not an object")
    need(f, "ip", is_hex, "a hex string", where)
    opt(f, "function", is_str, "a string", where)
    opt(f, "offset", is_int, "an integer", where)
    pair(f, "function", "offset", where)
    opt(f, "module", is_str, "a string", where)
    opt(f, "module_offset", is_hex, "a hex string", where)
    pair(f, "module", "module_offset", where)
    opt(f, "build_id", is_bid, "a hex build id", where)
    opt(f, "file", is_str, "a string", where)
    opt(f, "line", is_int, "an integer", where)
    pair(f, "file", "line", where)
    need(f, "inlined", lambda v: isinstance(v, bool), "a boolean", where)
    need(f, "source", lambda v: v in ("fp", "dwarf"), "\"fp\" or \"dwarf\"", where)
    only(f, ["ip", "function", "offset", "module", "module_offset", "build_id", "file", "line",
             "inlined", "source"], where)


def check_task(t, where, stacks):
    if not isinstance(t, dict):
        raise Bad(f"{where}: not an object")
    need(t, "id", lambda v: is_int(v) and v > 0, "a positive integer", where)
    need(t, "kind", lambda v: v in ("bthread", "pthread"), "\"bthread\" or \"pthread\"", where)
    need(t, "name", is_str, "a string", where)
    need(t, "state", lambda v: v in STATES, "a task state", where)
    need(t, "capture", lambda v: v in CAPTURES, "a capture mode", where)
    opt(t, "tid", lambda v: is_int(v) and v > 0, "a positive integer", where)
    opt(t, "blocked_s", lambda v: is_num(v) and v >= 0, "a non-negative number", where)
    opt(t, "error", is_str, "a string", where)
    allowed = ["id", "kind", "name", "state", "capture", "tid", "blocked_s", "error"]
    if stacks:
        need(t, "truncated", lambda v: isinstance(v, bool), "a boolean", where)
        need(t, "frames", lambda v: isinstance(v, list), "an array", where)
        for i, f in enumerate(t["frames"]):
            check_stack_frame(f, f"{where}.frames[{i}]")
        opt(t, "runtime_frames_hidden", lambda v: is_int(v) and v > 0, "a positive integer", where)
        opt(t, "frames_not_shown", lambda v: is_int(v) and v > 0, "a positive integer", where)
        if "frames_not_shown" in t and t["truncated"] is not True:
            raise Bad(f"{where}: frames_not_shown without truncated")
        allowed += ["truncated", "frames", "runtime_frames_hidden", "frames_not_shown"]
    only(t, allowed, where)


META = ["pid", "comm", "abi_version", "table_capacity", "untraceable", "capture", "freq_hz",
        "complete", "partial", "not_traced", "failed", "finished", "notes", "stats"]


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
    opt(doc, "capture", lambda v: v in ("bpf+context", "context-only", "context"),
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
    if not loader:
        return
    for k in ("pid", "comm", "complete", "not_traced", "failed", "finished"):
        need(doc, k, lambda v: True, "present", where)
    if not doc["complete"]:
        need(doc, "partial", is_str, "a string", where)
    if not profile:
        for k in ("abi_version", "capture", "table_capacity", "untraceable"):
            need(doc, k, lambda v: True, "present", where)


def check_stacks(doc, loader, grouped):
    need(doc, "tasks", lambda v: isinstance(v, list), "an array", "document")
    for i, t in enumerate(doc["tasks"]):
        check_task(t, f"tasks[{i}]", True)
    allowed = ["schema", "tasks", "groups"] + META
    check_meta(doc, loader, False)
    if grouped:
        need(doc, "groups", lambda v: isinstance(v, list), "an array", "document")
    for i, g in enumerate(doc.get("groups", [])):
        where = f"groups[{i}]"
        need(g, "count", lambda v: is_int(v) and v > 0, "a positive integer", where)
        need(g, "state", lambda v: v in STATES, "a task state", where)
        need(g, "ids", lambda v: isinstance(v, list) and all(is_int(x) for x in v),
             "an array of integers", where)
        if len(g["ids"]) != g["count"]:
            raise Bad(f"{where}: {len(g['ids'])} ids for count {g['count']}")
        need(g, "frames", lambda v: isinstance(v, list), "an array", where)
        for k, f in enumerate(g["frames"]):
            check_stack_frame(f, f"{where}.frames[{k}]")
        only(g, ["count", "state", "ids", "frames"], where)
    only(doc, allowed, "document")


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
        stats = ["oncpu_samples", "oncpu_tagged", "oncpu_scheduler", "lost_samples", "ticks",
                 "missed_ticks", "offcpu_snapshots", "unwinds", "reused", "over_budget",
                 "unlabelled", "dropped_stacks"]
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
        else:
            raise Bad(f"unknown schema {schema!r}")
    except (OSError, ValueError, Bad) as e:
        print(f"check_json_schema: {path}: {e}", file=sys.stderr)
        return 1
    print(f"check_json_schema: {path}: valid {schema}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
