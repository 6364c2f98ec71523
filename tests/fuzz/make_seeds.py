#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Regenerates the seed corpora of tests/fuzz (checked in; run by hand):
#   corpus/cfi/*: 4 selector bytes + an .eh_frame section, from seeds/*.c*
#     built here and from synthetic CFI (expressions, loops, signal frames,
#     remember/restore, overflowing offsets), written with DWARF names;
#   corpus/elf/*: small ELF files built from seeds/*.c*, and damaged copies;
#   corpus/dwarf/*: the debug information (objcopy --only-keep-debug: program
#     headers, symbols and DWARF) of seeds/*.c* built by clang and gcc,
#     DWARF 4 and 5, with and without .debug_aranges and --gc-sections.
#   make_seeds.py [CORPUS...]   (default: every corpus)
# Needs gcc, g++, clang, clang++, objcopy, strip.
import os, shutil, struct, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# DWARF constants (dwarf.h)
DW_CFA_advance_loc, DW_CFA_offset, DW_CFA_restore = 0x40, 0x80, 0xc0
DW_CFA_nop, DW_CFA_advance_loc1, DW_CFA_offset_extended_sf = 0x00, 0x02, 0x11
DW_CFA_remember_state, DW_CFA_restore_state = 0x0a, 0x0b
DW_CFA_def_cfa, DW_CFA_def_cfa_register, DW_CFA_def_cfa_offset = 0x0c, 0x0d, 0x0e
DW_CFA_def_cfa_expression, DW_CFA_expression, DW_CFA_val_expression = 0x0f, 0x10, 0x16
DW_CFA_undefined, DW_CFA_register, DW_CFA_GNU_args_size = 0x07, 0x09, 0x2e
DW_OP_breg7, DW_OP_deref, DW_OP_skip, DW_OP_bra, DW_OP_plus_uconst = 0x77, 0x06, 0x2f, 0x28, 0x23
DW_OP_lit0, DW_OP_const1u, DW_OP_and, DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus = 0x30, 0x08, 0x1a, 0x2a, 0x33, 0x24, 0x22
DW_OP_breg16, DW_OP_lit15, DW_OP_lit11, DW_OP_div, DW_OP_pick = 0x80, 0x3f, 0x3b, 0x1b, 0x15
DW_EH_PE_pcrel_sdata4 = 0x1b

def uleb(v):
    out = bytearray()
    while True:
        b = v & 0x7f; v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v: return bytes(out)

def sleb(v):
    out = bytearray()
    while True:
        b = v & 0x7f; v >>= 7
        if (v == 0 and not b & 0x40) or (v == -1 and b & 0x40):
            out.append(b); return bytes(out)
        out.append(b | 0x80)

def entry(body):
    while (len(body) + 4) % 8: body += bytes([DW_CFA_nop])
    return struct.pack('<I', len(body)) + body

def cie(init, aug=b'zR', augdata=bytes([DW_EH_PE_pcrel_sdata4])):
    body = struct.pack('<IB', 0, 1) + aug + b'\0' + uleb(1) + sleb(-8) + bytes([16])
    body += uleb(len(augdata)) + augdata + bytes(init)
    return entry(body)

def section(init, fdes, aug=b'zR'):
    """One CIE, then FDEs (pc offset from the section, range, insns)."""
    sec = bytearray(cie(init, aug))
    for pc, rng, insn in fdes:
        at = len(sec)
        body = struct.pack('<I', at + 4)  # CIE pointer back to offset 0
        body += struct.pack('<i', pc - (at + 8)) + struct.pack('<I', rng) + uleb(0) + bytes(insn)
        sec += entry(body)
    return bytes(sec)

STD = [DW_CFA_def_cfa, 7, 8, DW_CFA_offset | 16, 1]

def synthetic():
    s = {}
    s['frame'] = section(STD, [(0x1000, 0x40, [DW_CFA_advance_loc | 1, DW_CFA_def_cfa_offset, 16,
        DW_CFA_offset | 6, 2, DW_CFA_advance_loc | 3, DW_CFA_def_cfa_register, 6,
        DW_CFA_advance_loc1, 0x20, DW_CFA_remember_state, DW_CFA_def_cfa, 7, 8,
        DW_CFA_restore | 6, DW_CFA_advance_loc | 1, DW_CFA_restore_state])])
    s['loop'] = section(STD, [(0x2000, 0x10, [DW_CFA_def_cfa_expression, 3, DW_OP_skip, 0xfd, 0xff])])
    # PLT-style CFA: rsp + 8 + ((rip & 15) >= 11) << 3
    plt = [DW_OP_breg7, 8, DW_OP_breg16, 0, DW_OP_lit15, DW_OP_and, DW_OP_lit11, DW_OP_ge,
           DW_OP_lit3, DW_OP_shl, DW_OP_plus]
    s['plt'] = section(STD, [(0x3000, 0x20, [DW_CFA_def_cfa_expression, len(plt)] + plt)])
    # signal frame: CFA = [rsp + 160], registers from expressions
    cfa = [DW_OP_breg7] + list(sleb(160)) + [DW_OP_deref]
    sig = [DW_CFA_def_cfa_expression, len(cfa)] + cfa
    for reg, off in ((16, 168), (7, 160), (6, 120), (3, 128)):
        e = [DW_OP_breg7] + list(sleb(off))
        sig += [DW_CFA_expression, reg, len(e)] + e
    s['signal'] = section([DW_CFA_def_cfa, 7, 8], [(0x4000, 0x8, sig)], aug=b'zRS')
    s['overflow'] = section(STD, [(0x5000, 0x8, [DW_CFA_offset_extended_sf, 3] + list(sleb(-(1 << 62))) +
                                   [DW_CFA_advance_loc1, 0xff] * 4)])
    s['valexpr'] = section(STD, [(0x6000, 0x8, [DW_CFA_val_expression, 3, 4, DW_OP_breg7, 8, DW_OP_lit0,
                                               DW_OP_div, DW_CFA_register, 12, 13, DW_CFA_undefined, 16,
                                               DW_CFA_GNU_args_size, 16])])
    s['bra'] = section(STD, [(0x7000, 0x8, [DW_CFA_def_cfa_expression, 6, DW_OP_lit0, DW_OP_bra, 0xfd,
                                            0xff, DW_OP_pick, 0])])
    return s

def run(*cmd):
    subprocess.run(cmd, check=True)

def dwarf_seeds(tmp):
    out_dir = os.path.join(HERE, 'corpus', 'dwarf')
    shutil.rmtree(out_dir, ignore_errors=True); os.makedirs(out_dir)
    src = lambda n: os.path.join(HERE, 'seeds', n)
    builds = {
        'clang5_cxx': ['clang++', '-g', '-O2', src('tiny_inl.cpp')],
        'clang5_o0': ['clang++', '-g', '-O0', src('tiny_inl.cpp')],
        'clang4_cxx': ['clang++', '-gdwarf-4', '-O2', src('tiny_inl.cpp')],
        'clang5_gc': ['clang++', '-g', '-O1', '-ffunction-sections', '-Wl,--gc-sections',
                      src('tiny_inl.cpp')],
        'clang5_aranges': ['clang', '-g', '-gdwarf-aranges', '-O2', src('tiny.c')],
        'gcc5_cxx': ['g++', '-gdwarf-5', '-O2', src('tiny_inl.cpp')],
        'gcc4_c': ['gcc', '-gdwarf-4', '-O2', '-no-pie', src('tiny.c')],
    }
    for name, cmd in builds.items():
        exe = os.path.join(tmp, name)
        run(*cmd, '-o', exe)
        run('objcopy', '--only-keep-debug', exe, os.path.join(out_dir, name))

def main():
    want = sys.argv[1:] or ['cfi', 'elf', 'dwarf']
    tmp = tempfile.mkdtemp()
    if 'dwarf' in want:
        dwarf_seeds(tmp)
    if 'cfi' not in want and 'elf' not in want:
        shutil.rmtree(tmp)
        return
    cfi, elf = os.path.join(HERE, 'corpus', 'cfi'), os.path.join(HERE, 'corpus', 'elf')
    for d in (cfi, elf):
        shutil.rmtree(d, ignore_errors=True); os.makedirs(d)
    builds = {
        'tiny_pie': ['gcc', '-O2', '-fPIE', '-pie'], 'tiny_o0': ['gcc', '-O0', '-fno-omit-frame-pointer'],
        'tiny_so': ['gcc', '-O2', '-fPIC', '-shared'], 'tiny_exec': ['gcc', '-O1', '-no-pie'],
    }
    for name, cc in builds.items():
        out = os.path.join(tmp, name)
        run(*cc, os.path.join(HERE, 'seeds', 'tiny.c'), '-o', out)
        run('strip', '-s', out)
        shutil.copy(out, os.path.join(elf, name))
    out = os.path.join(tmp, 'tiny_cxx')
    run('g++', '-O2', os.path.join(HERE, 'seeds', 'tiny_cxx.cpp'), '-o', out)
    run('strip', '-s', out)
    shutil.copy(out, os.path.join(elf, 'tiny_cxx'))
    # Damaged copies: truncated inside the tables, no section headers.
    data = open(os.path.join(elf, 'tiny_pie'), 'rb').read()
    open(os.path.join(elf, 'trunc_half'), 'wb').write(data[:len(data) // 2])
    open(os.path.join(elf, 'trunc_hdr'), 'wb').write(data[:200])
    for name in ('tiny_pie', 'tiny_o0', 'tiny_so', 'tiny_cxx'):
        sec = os.path.join(tmp, name + '.eh_frame')
        run('objcopy', '-O', 'binary', '--only-section=.eh_frame', os.path.join(elf, name), sec)
        open(os.path.join(cfi, name), 'wb').write(struct.pack('<I', 0x01020304) + open(sec, 'rb').read())
    for name, sec in synthetic().items():
        open(os.path.join(cfi, name), 'wb').write(struct.pack('<I', 0x00000701) + sec)
    shutil.rmtree(tmp)

if __name__ == '__main__':
    main()
