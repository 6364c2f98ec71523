/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A traced process as stb-bpf-loader sees it: its shared task table (found
 * among its file descriptors, duplicated with pidfd_getfd and mapped here)
 * and its memory, read with process_vm_readv. No ptrace stop, no signal.
 */
#ifndef STB_LOADER_TARGET_H
#define STB_LOADER_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf_prog.h"
#include "stb/abi.h"

struct stb_target {
	pid_t pid;
	int pidfd;
	int table_fd;                 /* our duplicate of the target's map/memfd */
	int target_fd;                /* the fd number in the target */
	void *table;                  /* mapped read-write (leases are written) */
	size_t size;                  /* bytes mapped: the header and `slots` entries */
	uint32_t slots;               /* task slots mapped (<= hdr->task_capacity) */
	struct stb_abi_header *hdr;
	char comm[32];
};

/* Slots mapped beyond the table's slot_hwm by a snapshot (STB_TARGET_MAP_USED). */
#define STB_TARGET_SLOT_SLACK 1024u

enum {
	STB_TARGET_MAP_USED = 0, /* the slots in use at open (+ slack): a snapshot */
	STB_TARGET_MAP_ALL = 1,  /* every slot: a profile that sees new tasks */
};

/*
 * Finds and maps the stb task table of process pid, as much of it as `map`
 * says (a BPF map's mapping costs a page-table entry per page at once: the
 * whole default table is 8 MiB). On failure returns NULL,
 * sets errno and writes a message naming the cause and the fix into
 * err[errlen]: ESRCH no such process; EACCES/EPERM no ptrace access to it
 * (root or CAP_SYS_PTRACE); ENOENT not a stb runtime; EPROTO ABI mismatch.
 * May block on /proc reads.
 */
struct stb_target *stb_target_open(pid_t pid, unsigned map, char *err, size_t errlen);

/* Unmaps and closes everything; accepts NULL. */
void stb_target_close(struct stb_target *t);

/* Task entry of slot s, or NULL beyond the mapped slots. */
struct stb_abi_task *stb_target_task(const struct stb_target *t, uint32_t slot);

/* Worker entry w, or NULL. */
struct stb_abi_worker *stb_target_worker(const struct stb_target *t, uint32_t w);

/*
 * Reads len bytes at addr of the target (stb_hold_read_fn). Returns 0,
 * -ESRCH when the process is gone, -EFAULT for unmapped memory, -errno.
 */
int stb_target_read(void *target, uint64_t addr, void *dst, size_t len);

/* Non-zero until the process has exited (a zombie counts as exited). */
int stb_target_alive(const struct stb_target *t);

/* Capture options for target t's table (backing, fd, address) in `mode`
 * (enum stb_record_mode); everything else zero (defaults). */
void stb_target_bpf_prog_opts(const struct stb_target *t, unsigned mode,
			     struct stb_bpf_prog_opts *co);

#endif /* STB_LOADER_TARGET_H */
