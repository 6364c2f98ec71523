/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pipe protocol between test_bpf_prog and bpf_target_helper: the
 * helper's setup report, the one-byte commands the test sends on the helper's
 * stdin, and the replies the helper writes on its stdout.
 */
#ifndef STB_TESTS_BPF_TARGET_HELPER_H
#define STB_TESTS_BPF_TARGET_HELPER_H

#include <linux/types.h>

#define STB_HELPER_MAGIC 0x5245504c4548424dull
#define STB_HELPER_CAPACITY 64u
#define STB_HELPER_SLOT_RUNNING 5u
#define STB_HELPER_SLOT_SUSPENDED 9u
#define STB_HELPER_ID_RUNNING ((7ull << 32) | STB_HELPER_SLOT_RUNNING)
#define STB_HELPER_ID_SUSPENDED ((3ull << 32) | STB_HELPER_SLOT_SUSPENDED)

/* Commands (one byte on the helper's stdin); each is answered by a struct
 * stb_helper_reply once it has taken effect. */
#define STB_HELPER_CMD_USER 'u'    /* spin in user mode: spin_a -> spin_b -> spin_c */
#define STB_HELPER_CMD_KERNEL 'k'  /* spin in read(2): kspin_a -> kspin_b -> kspin_c */
#define STB_HELPER_CMD_HOLE 'h'    /* hole_a (a non-resident page) -> spin_b -> spin_c */
#define STB_HELPER_CMD_READY 'r'   /* set the running task's state to READY */
#define STB_HELPER_CMD_RUNNING 'R' /* set it back to RUNNING */
#define STB_HELPER_CMD_QUIT 'q'    /* stop; the reply carries the signal count */

/* Functions whose [start, end) the helper reports. */
enum stb_helper_fn {
	STB_HELPER_FN_SPIN_A,
	STB_HELPER_FN_SPIN_B,
	STB_HELPER_FN_SPIN_C,
	STB_HELPER_FN_KSPIN_A,
	STB_HELPER_FN_KSPIN_B,
	STB_HELPER_FN_KSPIN_C,
	STB_HELPER_FN_HOLE_A,
	STB_HELPER_NFN,
};

struct stb_helper_info {
	__u64 magic;
	__s32 pid;
	__s32 tid;        /* the worker thread (worker 0) */
	__s32 table_fd;   /* BPF_MAP backing: the map's fd in the helper; else -1 */
	__u32 backing;    /* enum stb_abi_backing */
	__u64 table_addr;
	__u64 table_size;
	__u64 stack_lo;   /* the worker thread's stack */
	__u64 stack_hi;
	__u64 fn[STB_HELPER_NFN][2];
};

struct stb_helper_reply {
	__u64 magic;
	__u32 cmd;
	__u32 reserved;
	__u64 pattern_addr; /* USER: spin_a's pattern buffer (word i = STB_HELPER_PATTERN(i)) */
	__u64 pattern_len;  /* bytes */
	__u64 hole_lo;      /* HOLE: the non-resident page */
	__u64 hole_hi;
	__u64 signals;      /* QUIT: signals the helper received */
	__u64 spins;        /* QUIT: spin loop iterations */
};

#define STB_HELPER_PATTERN(i) (0x5354425041540000ull | (__u64)(i))

#endif /* STB_TESTS_BPF_TARGET_HELPER_H */
