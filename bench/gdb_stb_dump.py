# SPDX-License-Identifier: Apache-2.0
# bench_loader's baseline, what users do without stb-bpf-loader (like bRPC's
# gdb_bthread_stack.py): gdb -p PID -batch -nx -x gdb_stb_dump.py. Walks the
# exported stb_task_table; for every ready/suspended task points rip/rsp/rbp at
# its saved context and runs "bt", then restores them. The process stays
# stopped from attach to detach.
import struct
import time

import gdb

ENTRY_SIZE = 256           # STB_ABI_ENTRY_SIZE (ABI version 2)
TASK_BASE = 32 + 256          # STB_ABI_TASK_BASE
MAGIC = 0x314B534154425453    # "STBTASK1"
READY, SUSPENDED = 3, 7

t0 = time.monotonic()
inf = gdb.selected_inferior()
table = int(gdb.parse_and_eval("(unsigned long)stb_task_table"))
if table == 0:
    raise gdb.GdbError("stb_task_table is NULL: the runtime has not started")
header = bytes(inf.read_memory(table, ENTRY_SIZE))
magic, version = struct.unpack_from("<QI", header, 0)
if magic != MAGIC:
    raise gdb.GdbError("stb_task_table has no stb magic")
capacity = struct.unpack_from("<I", header, 24)[0]
slot_hwm = struct.unpack_from("<Q", header, 64)[0]

saved = {r: int(gdb.parse_and_eval("$" + r)) for r in ("rip", "rsp", "rbp")}
tasks = frames = 0
try:
    for slot in range(min(slot_hwm, capacity)):
        entry = bytes(inf.read_memory(table + (TASK_BASE + slot) * ENTRY_SIZE, ENTRY_SIZE))
        tid, word = struct.unpack_from("<QQ", entry, 0)
        if word & 0xFF not in (READY, SUSPENDED):
            continue
        sp, ip, bp = struct.unpack_from("<QQQ", entry, 24)
        name = entry[128:192].split(b"\0", 1)[0].decode(errors="replace")
        gdb.execute("set $rsp = %d" % sp)
        gdb.execute("set $rbp = %d" % bp)
        gdb.execute("set $rip = %d" % ip)
        bt = gdb.execute("bt", to_string=True)
        print('bthread %d "%s"' % (tid, name))
        print(bt)
        tasks += 1
        frames += bt.count("\n#") + (1 if bt.startswith("#") else 0)
finally:
    gdb.execute("set $rsp = %d" % saved["rsp"])
    gdb.execute("set $rbp = %d" % saved["rbp"])
    gdb.execute("set $rip = %d" % saved["rip"])
print("gdb_stb_dump: %d tasks, %d frames in %.3f s (after attach)"
      % (tasks, frames, time.monotonic() - t0))
