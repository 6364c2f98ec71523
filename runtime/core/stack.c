/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread stacks: mmap'd regions with a PROT_NONE guard page below the usable
 * part (an overflow faults with SIGSEGV instead of corrupting memory), pooled
 * per size class and reused.
 */
#include <stdlib.h>
#include <sys/mman.h>

#include "internal.h"

#if defined(STB_ASAN)
#include <sanitizer/asan_interface.h>
#endif

#define STB_STACK_GUARD 4096u
#define STB_STACK_POOL_MAX 1024u /* free stacks kept per class */

struct stb_stack_pool {
	struct stb_lock lock;
	struct stb_stack *free;
	unsigned nfree;
} STB_ALIGNED_CL;

static struct stb_stack_pool stb_stack_pools[BTHREAD_STACKTYPE_LARGE + 1];

uint32_t stb_stack_readers;

static size_t stb_stack_size(unsigned type)
{
	switch (type) {
	case BTHREAD_STACKTYPE_SMALL:
		return 32u << 10;
	case BTHREAD_STACKTYPE_LARGE:
		return 8u << 20;
	default:
		return 1u << 20;
	}
}

struct stb_stack *stb_stack_get(unsigned type)
{
	if (type < BTHREAD_STACKTYPE_SMALL || type > BTHREAD_STACKTYPE_LARGE)
		type = BTHREAD_STACKTYPE_NORMAL;
	struct stb_stack_pool *pool = &stb_stack_pools[type];
	stb_lock(&pool->lock);
	struct stb_stack *s = pool->free;
	if (s) {
		pool->free = s->next;
		pool->nfree--;
	}
	stb_unlock(&pool->lock);
	if (s)
		return s;

	s = malloc(sizeof(*s));
	if (!s)
		return NULL;
	size_t size = stb_stack_size(type);
	size_t map_size = size + STB_STACK_GUARD;
	void *map = mmap(NULL, map_size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
	if (map == MAP_FAILED)
		goto cleanup;
	if (mprotect(map, STB_STACK_GUARD, PROT_NONE) != 0) {
		munmap(map, map_size);
		goto cleanup;
	}
	s->map = map;
	s->map_size = map_size;
	s->lo = (char *)map + STB_STACK_GUARD;
	s->size = size;
	s->type = type;
	s->next = NULL;
	return s;
cleanup:
	free(s);
	errno = ENOMEM;
	return NULL;
}

void stb_stack_put(struct stb_stack *s)
{
	if (!s)
		return;
#if defined(STB_ASAN)
	/* Frames of the finished bthread may have left poisoned redzones. */
	__asan_unpoison_memory_region(s->lo, s->size);
#endif
	struct stb_stack_pool *pool = &stb_stack_pools[s->type];
	bool keep = false;
#if STB_TRACER
	/* A tracer may be copying from a stack it read before the task ended:
	 * never unmap while one is active (pairs with the tracer's increment). */
	keep = __atomic_fetch_add(&stb_stack_readers, 0, __ATOMIC_SEQ_CST) != 0;
#endif
	stb_lock(&pool->lock);
	if (keep || pool->nfree < STB_STACK_POOL_MAX) {
		s->next = pool->free;
		pool->free = s;
		pool->nfree++;
		s = NULL;
	}
	stb_unlock(&pool->lock);
	if (s) {
		munmap(s->map, s->map_size);
		free(s);
	}
}
