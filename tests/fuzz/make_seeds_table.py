#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes the seed corpora of fuzz_tview (task tables: a valid header and
# entries with good and bad states, kinds, stacks, options of the collector;
# then stack bytes; the first header.nworkers entries are also read as
# worker entries, whose current lies where a task's id does) and
# fuzz_writers (strings with control bytes, quotes, UTF-8 valid and not,
# separated by 0xfe) into corpus/tview and corpus/writers.
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x314b534154425453
BASE = 0x7f0000000000


MAXW = 1024
SW = 0x80000000  # STB_ABI_CURRENT_SWITCHING


def header(cap=64, version=3, esize=256, hentries=32, maxw=MAXW, size=None, hwm=8, nworkers=1,
           flags=0x3e, pid=5):
    if size is None:
        size = (32 + MAXW + cap) * 256
    h = struct.pack("<QIIIIIIIIQQIIQ", MAGIC, version, esize, hentries, maxw, cap, nworkers,
                    pid, 2, 0x7f1000000000, size, 0, flags, hwm)
    return h + b"\0" * (256 - len(h))


def task(id_, state, sp=BASE + 2048, lo=BASE, hi=BASE + 4096, name=b"t", kind=1, seq=1,
         worker=0, flags=0, obj=0, execq=0):
    t = struct.pack("<QQQQQQQQ", id_, seq << 32 | state, 0, sp, 0x401000, sp + 64, lo, hi)
    t += struct.pack("<IIQQQQQQ", worker, 1234, 0, kind, obj, 0, 0, 0)
    t += struct.pack("<II", flags, 0)
    t += name[:64].ljust(64, b"\0")
    t += struct.pack("<QQII", 0, 0, 0, 0)  # creator
    t += struct.pack("<Q", execq)  # the execution queue it consumes (offset 216)
    return t.ljust(256, b"\0")


def stack(n=4096):
    return bytes((i * 37) & 0xff for i in range(n))


def write(d, name, data):
    os.makedirs(os.path.join(here, "corpus", d), exist_ok=True)
    with open(os.path.join(here, "corpus", d, name), "wb") as f:
        f.write(data)


real = struct.pack("<Q", (32 + MAXW + 64) * 256)
states = [7, 3, 5, 1, 2, 4, 6, 8, 0, 37, 255]
write("tview", "good", header() + real + b"".join(task(1 << 32 | i, 7) for i in range(4)) + stack())
write("tview", "states", header(hwm=len(states)) + real +
      b"".join(task(1 << 32 | i, s, kind=s * 3) for i, s in enumerate(states)) + stack())
write("tview", "bounds", header() + real + task(1 << 32, 7, sp=0) + task(2 << 32, 7, sp=BASE + 9999)
      + task(3 << 32, 3, lo=BASE + 4096, hi=BASE) + task(4 << 32, 7, hi=2**64 - 1) + stack(64))
write("tview", "badheader", header(version=7, cap=2**24, size=1) + struct.pack("<Q", 4096) +
      task(1 << 32, 7))
write("tview", "names", header() + real + task(1 << 32, 7, name=b"\x1b[31m\xff" * 20) + stack())
write("tview", "running", header(nworkers=0) + real + task(1 << 32, 5, worker=999) +
      task(2 << 32, 5, flags=1) + stack())
# Execution queues: a consumer whose queue head (pushed, taken) is in the
# stack bytes, one whose counters say taken > pushed, a wild and a misaligned
# address, and a joiner in an EXECQ wait (kind 16) on the first queue.
write("tview", "execq", header(hwm=5) + real + task(1 << 32, 7, execq=BASE + 128) +
      task(2 << 32, 5, execq=BASE + 1024) + task(3 << 32, 7, execq=2**64 - 64) +
      task(4 << 32, 7, execq=BASE + 8) + task(5 << 32, 7, kind=16, obj=BASE + 128) +
      stack()[:128] + struct.pack("<Q", 9) + bytes(56) + struct.pack("<Q", 4) +
      stack()[200:1024] + struct.pack("<Q", 1) + bytes(56) + struct.pack("<Q", 7) + stack(64))
# Named by workers: entry 0 (a worker whose current is 1<<32|5 with the
# switching bit) makes task 1<<32|5 about to run; entry 1 names itself
# (running); entry 2, suspended, names itself too (not running: its word).
write("tview", "named", header(nworkers=3, hwm=4) + real + task(1 << 32 | 5 | SW, 3) +
      task(2 << 32 | 1, 3) + task(3 << 32 | 2, 7) + task(1 << 32 | 5, 2) + stack())
# The collector's options are the header flags' upper half (fuzz_tview.c).
mixed = b"".join(task(1 << 32 | i, s) for i, s in enumerate([7, 3, 1, 2, 7, 3]))
for name, bits in [("collect-intern", 8192 | 16384 | 1 << 11), ("collect-ids", 1 | 8192 | 2 << 11),
                   ("collect-each", 32768 | 2 << 11 | 2 << 9 | 3 << 1),
                   ("collect-stuck", 128 | 256 | 64 | 16384)]:
    write("tview", name, header(hwm=6, flags=0x3e | bits << 16) + real + mixed + stack())

strings = [b"plain", b"\x1b[2J\x1b]0;title\x07", b"line\nbreak\r\n\t", b"q\"u\\o",
           b"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", b"\xff\xc0\x80\xed\xa0\x80\xe2\x82",
           b"\xc2\x85\xc2\x9b", b"%s%n"]
write("writers", "mixed", b"\xfe".join(strings))
write("writers", "empty", b"")
write("writers", "long", (b"\x1b" * 300) + b"\xfe" + b"\xf0\x9f\x98" * 200)
for i, s in enumerate(strings):
    write("writers", "s%d" % i, b"\xfe".join([s] * 8))
