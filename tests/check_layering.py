#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The layering of runtime/ (HACKING.md, "Layering"), from the quoted and
# angled includes of every source: core/ sees only itself, common/ and
# include/ (never stacks/ or tracer/); stacks/ never sees core/ or tracer/,
# and each room of stacks/ only the rooms below it, named by their room
# ("report/model.h"). Every include must resolve where the build looks. And
# every source file name is unique in the tree (CMakeLists.txt aside).
# Usage: check_layering.py SOURCE_DIR    (exit 0: clean, 1: violations)
#        check_layering.py --selftest    (plants violations in a scratch tree
#                                         and fails unless each is found)
import os
import re
import shutil
import sys
import tempfile

# Each room and the rooms it may include (the DAG of runtime/stacks/CMakeLists.txt).
ROOMS = {
    "unwind": set(),
    "encode": set(),
    "symbols": {"unwind", "encode"},
    "table": {"symbols", "unwind", "encode"},
    "report": {"table", "symbols", "unwind", "encode"},
    "collect": {"report", "table", "symbols", "unwind", "encode"},
}
SOURCES = (".c", ".h", ".S", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)


def includes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return INCLUDE.findall(f.read())


def resolve(src, name, quoted, dirs):
    """Where the include name of file src resolves among dirs (a list of
    (label, directory)); (label, path) or None."""
    if quoted:
        own = os.path.join(os.path.dirname(src), name)
        if os.path.isfile(own):
            return ("own", own)
    for label, d in dirs:
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return (label, p)
    return None


def check(root):
    rt = os.path.join(root, "runtime")
    stacks = os.path.join(rt, "stacks")
    base = [("include", os.path.join(root, "include")), ("common", os.path.join(rt, "common"))]
    errors = []
    for part in ("core", "stacks", "tracer"):
        top = os.path.join(rt, part)
        for dirpath, _, files in os.walk(top):
            for fn in sorted(files):
                if not fn.endswith(SOURCES):
                    continue
                src = os.path.join(dirpath, fn)
                rel = os.path.relpath(src, root)
                room = None
                if part == "stacks":
                    room = os.path.relpath(dirpath, stacks).split(os.sep)[0]
                    if room not in ROOMS:
                        errors.append(f"{rel}: stacks/{room}/ is not a room of the stack library")
                        continue
                for kind, name in includes(src):
                    quoted = kind == '"'
                    # What each part is allowed to see, in the build's order.
                    if part == "core":
                        dirs = [("core", os.path.join(rt, "core"))] + base
                    elif part == "tracer":
                        dirs = [("core", os.path.join(rt, "core")),
                                ("tracer", os.path.join(rt, "tracer")), ("stacks", stacks)] + base
                    else:
                        dirs = [("stacks", stacks)] + base
                    # Anything that names a part it must not see is a violation
                    # whether or not it resolves.
                    first = name.split("/")[0]
                    if part == "core" and (first in ROOMS or first in ("stacks", "tracer") or
                                           "stacks/" in name or "tracer/" in name):
                        errors.append(f"{rel}: core/ includes {name} (stacks/ or tracer/)")
                        continue
                    if part == "stacks" and (os.path.basename(name) == "internal.h" or
                                             "core/" in name or "tracer/" in name):
                        errors.append(f"{rel}: stacks/ includes {name} (the runtime's internals)")
                        continue
                    got = resolve(src, name, quoted, dirs)
                    if got is None:
                        if not quoted:
                            continue  # a system header
                        errors.append(f"{rel}: {name} does not resolve where {part}/ may look")
                        continue
                    label, path = got
                    if part == "core" and os.path.commonpath([path, stacks]) == stacks:
                        errors.append(f"{rel}: core/ includes {name} of stacks/")
                    if part == "stacks":
                        tracer = os.path.join(rt, "tracer")
                        core = os.path.join(rt, "core")
                        if any(os.path.commonpath([path, d]) == d for d in (core, tracer)):
                            errors.append(f"{rel}: stacks/ includes {name} of the runtime")
                            continue
                        if os.path.commonpath([path, stacks]) != stacks:
                            continue
                        to = os.path.relpath(path, stacks).split(os.sep)[0]
                        if label == "own" and quoted and "/" not in name:
                            errors.append(f"{rel}: {name} without its room (write \"{to}/{name}\")")
                        elif to != room and to not in ROOMS[room]:
                            errors.append(f"{rel}: room {room}/ includes {name} of room {to}/ "
                                          f"(it sees {', '.join(sorted(ROOMS[room])) or 'no other room'})")
    return errors


def unique_names(root):
    """Source and script files of the tree that share a name."""
    seen, errors = {}, []
    skip = {".git", "corpus", "vmlinux"}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("build"))
        for fn in sorted(files):
            if fn == "CMakeLists.txt" or not fn.endswith(SOURCES + (".py", ".sh")):
                continue
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            if fn in seen:
                errors.append(f"{rel}: the same name as {seen[fn]}")
            else:
                seen[fn] = rel
    return errors


def selftest():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    plants = [
        ("runtime/core/sched.c", '#include "report/model.h"\n', "core/ includes report/model.h"),
        ("runtime/core/task.c", '#include "trace.h"\n', "trace.h does not resolve"),
        ("runtime/stacks/table/tview.c", '#include "internal.h"\n', "the runtime's internals"),
        ("runtime/stacks/table/wait.c", '#include "report/model.h"\n', "room table/ includes"),
        ("runtime/stacks/unwind/cfi.c", '#include "dwexpr.h"\n', "without its room"),
    ]
    dup = "runtime/tracer/tview.c"
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("runtime", "include"):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        if check(tmp):
            print("FAIL: the unplanted copy of the tree has violations:")
            print("\n".join(check(tmp)))
            return 1
        for path, line, want in plants:
            p = os.path.join(tmp, path)
            with open(p) as f:
                text = f.read()
            with open(p, "w") as f:
                f.write(line + text)
            errs = check(tmp)
            with open(p, "w") as f:
                f.write(text)
            if not any(want in e for e in errs):
                print(f"FAIL: planted {line.strip()} in {path}: not found ({errs})")
                return 1
            print(f"planted {line.strip()} in {path}: found")
        with open(os.path.join(tmp, dup), "w") as f:
            f.write("/* a second tview.c */\n")
        if not any("tview.c" in e for e in unique_names(tmp)):
            print(f"FAIL: planted {dup}: its name is not found twice")
            return 1
        print(f"planted {dup}: found twice")
    print("layering self-test: every planted violation found")
    return 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--selftest":
        return selftest()
    if len(sys.argv) != 2:
        print(__doc__ or "usage: check_layering.py SOURCE_DIR | --selftest")
        return 64
    errors = check(sys.argv[1]) + unique_names(sys.argv[1])
    for e in errors:
        print("FAIL:", e)
    if not errors:
        print("layering: core/, tracer/ and the rooms of stacks/ include what they may; "
              "file names are unique")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
