# SPDX-License-Identifier: Apache-2.0
# bench_loader's baseline, what users do without stb-bpf-loader (like bRPC's
# gdb_bthread_stack.py), on a live process or on a core file:
#   gdb -p PID -batch -nx -x gdb_stb_dump.py
#   gdb -batch -nx -x gdb_stb_dump.py PROGRAM CORE
# Walks the exported stb_task_table; for every ready/suspended task that no
# worker's current names (abi.h, "Running": those run) runs "bt" from its
# saved context. Live, it points rip/rsp/rbp at that context and
# restores them afterwards (the process stays stopped from attach to detach).
# A core's registers cannot be written, so there a frame unwinder makes the
# task's context the caller of the current thread's innermost frame; frames
# from #1 on are the task's.
import struct
import time

import gdb
import gdb.unwinder

ENTRY_SIZE = 256           # STB_ABI_ENTRY_SIZE (ABI version 3)
WORKER_BASE = 32              # STB_ABI_WORKER_BASE
MAX_WORKERS = 1024            # STB_ABI_MAX_WORKERS
TASK_BASE = WORKER_BASE + MAX_WORKERS  # STB_ABI_TASK_BASE
MAGIC = 0x314B534154425453    # "STBTASK1"
READY, SUSPENDED = 3, 7


class FrameId:
    def __init__(self, sp, pc):
        self.sp = sp
        self.pc = pc


class TaskUnwinder(gdb.unwinder.Unwinder):
    """Unwinds the innermost frame to the task's saved context (cores)."""

    def __init__(self):
        super().__init__("stb-task")
        self.ctx = None  # (sp, ip, bp)

    def __call__(self, pending):
        if self.ctx is None or pending.level() != 0:
            return None
        sp, ip, bp = self.ctx
        # Frame #0's id below the task's stack: gdb refuses a caller "inner"
        # to (below) its callee, and the task's stack may lie anywhere.
        rsp = pending.read_register("rsp")
        info = pending.create_unwind_info(
            FrameId(gdb.Value(sp - 256).cast(rsp.type), pending.read_register("rip")))
        info.add_saved_register("rip", gdb.Value(ip))
        info.add_saved_register("rsp", gdb.Value(sp))
        info.add_saved_register("rbp", gdb.Value(bp))
        return info


t0 = time.monotonic()
inf = gdb.selected_inferior()
table = int(gdb.parse_and_eval("(unsigned long)stb_task_table"))
if table == 0:
    raise gdb.GdbError("stb_task_table is NULL: the runtime has not started")
header = bytes(inf.read_memory(table, ENTRY_SIZE))
magic, version = struct.unpack_from("<QI", header, 0)
if magic != MAGIC:
    raise gdb.GdbError("stb_task_table has no stb magic")
capacity, nworkers = struct.unpack_from("<II", header, 24)
slot_hwm = struct.unpack_from("<Q", header, 64)[0]
running = set()  # what the workers' currents name: running or switching to
for w in range(min(nworkers, MAX_WORKERS)):
    cur = struct.unpack_from("<Q", bytes(inf.read_memory(
        table + (WORKER_BASE + w) * ENTRY_SIZE, 8)), 0)[0]
    running.add(cur & ~0x80000000)  # without STB_ABI_CURRENT_SWITCHING

saved = {r: int(gdb.parse_and_eval("$" + r)) for r in ("rip", "rsp", "rbp")}
unwinder = None
if inf.connection is not None and inf.connection.type == "core":  # no registers to write
    unwinder = TaskUnwinder()
    gdb.unwinder.register_unwinder(None, unwinder, replace=True)


def task_bt(sp, ip, bp):
    if unwinder is None:
        gdb.execute("set $rsp = %d" % sp)
        gdb.execute("set $rbp = %d" % bp)
        gdb.execute("set $rip = %d" % ip)
        return gdb.execute("bt", to_string=True)
    unwinder.ctx = (sp, ip, bp)
    gdb.invalidate_cached_frames()
    bt = gdb.execute("bt", to_string=True)
    if bt.startswith("Python Exception"):
        raise gdb.GdbError("the task unwinder failed: " + bt.split("\n", 1)[0])
    return bt.split("\n", 1)[1] if "\n" in bt else ""  # frame #0 is the thread's


tasks = frames = 0
try:
    for slot in range(min(slot_hwm, capacity)):
        entry = bytes(inf.read_memory(table + (TASK_BASE + slot) * ENTRY_SIZE, ENTRY_SIZE))
        tid, word = struct.unpack_from("<QQ", entry, 0)
        if word & 0xFF not in (READY, SUSPENDED) or tid in running:
            continue
        sp, ip, bp = struct.unpack_from("<QQQ", entry, 24)
        name = entry[128:192].split(b"\0", 1)[0].decode(errors="replace")
        bt = task_bt(sp, ip, bp)
        print('bthread %d "%s"' % (tid, name))
        print(bt)
        tasks += 1
        frames += bt.count("\n#") + (1 if bt.startswith("#") else 0)
finally:
    if unwinder is None:
        gdb.execute("set $rsp = %d" % saved["rsp"])
        gdb.execute("set $rbp = %d" % saved["rbp"])
        gdb.execute("set $rip = %d" % saved["rip"])
    else:
        unwinder.ctx = None
        gdb.invalidate_cached_frames()
print("gdb_stb_dump: %d tasks, %d frames in %.3f s (after %s)"
      % (tasks, frames, time.monotonic() - t0, "loading the core" if unwinder else "attach"))
