/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_list_*: a set of bthread ids to stop and join together, kept in a
 * growable array. When it is full, ids of bthreads that finished are dropped
 * before it grows, so it stays as large as the live bthreads in it.
 */
#include <stdlib.h>

#include "internal.h"

struct tid_list {
	bthread_t *ids;
	size_t n, cap;
};

int bthread_list_init(bthread_list_t *list, unsigned size, unsigned conflict_size)
{
	(void)size;
	(void)conflict_size;
	if (!list)
		return EINVAL;
	struct tid_list *l = calloc(1, sizeof(*l));
	if (!l)
		return ENOMEM;
	list->impl = l;
	list->head = 0;
	list->size = 0;
	list->conflict_head = 0;
	list->conflict_size = 0;
	return 0;
}

void bthread_list_destroy(bthread_list_t *list)
{
	if (!list || !list->impl)
		return;
	struct tid_list *l = list->impl;
	free(l->ids);
	free(l);
	list->impl = NULL;
}

/* Drops the ids of finished bthreads. */
static void list_compact(struct tid_list *l)
{
	size_t k = 0;
	for (size_t i = 0; i < l->n; i++)
		if (stb_task_live(l->ids[i]))
			l->ids[k++] = l->ids[i];
	l->n = k;
}

int bthread_list_add(bthread_list_t *list, bthread_t tid)
{
	if (!list || !list->impl)
		return EINVAL;
	if (tid == INVALID_BTHREAD)
		return 0; /* as bRPC: nothing to stop or join (a failed start's id) */
	struct tid_list *l = list->impl;
	if (l->n == l->cap) {
		list_compact(l);
		/* Grow unless compaction freed at least a quarter. */
		if (l->n > l->cap - l->cap / 4 || l->cap == 0) {
			size_t cap = l->cap ? l->cap * 2 : 16;
			bthread_t *ids = realloc(l->ids, cap * sizeof(*ids));
			if (!ids)
				return ENOMEM;
			l->ids = ids;
			l->cap = cap;
		}
	}
	l->ids[l->n++] = tid;
	return 0;
}

int bthread_list_stop(bthread_list_t *list)
{
	if (!list || !list->impl)
		return EINVAL;
	struct tid_list *l = list->impl;
	for (size_t i = 0; i < l->n; i++)
		bthread_stop(l->ids[i]); /* EINVAL for a finished one: nothing to stop */
	return 0;
}

int bthread_list_join(bthread_list_t *list)
{
	if (!list || !list->impl)
		return EINVAL;
	struct tid_list *l = list->impl;
	for (size_t i = 0; i < l->n; i++) {
		/* The wait block names the list and the bthread being joined. */
		const struct stb_wait why = {.word = STB_ABI_WAIT_WORD(STB_WAIT_JOIN, 0, 0, 0),
					     .object = (uint64_t)(uintptr_t)list,
					     .owner = l->ids[i]};
		stb_join(l->ids[i], NULL, &why);
	}
	l->n = 0;
	return 0;
}
