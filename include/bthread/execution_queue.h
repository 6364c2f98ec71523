/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread::ExecutionQueue (bRPC's bthread/execution_queue.h): an ordered
 * multi-producer queue of tasks whose consumer is started by the push that
 * finds the queue empty and quits when it is empty again. Tasks run in push
 * order, high-priority ones before the normal ones still waiting. The
 * consumer is a bthread, a resident pthread (use_pthread), an Executor's
 * thread, or the pushing thread itself (an in-place task); tracers show it
 * "working on execution queue 0x..." with the number of tasks queued.
 * C++ templates over the C layer declared first (stb_execq_*), which exists
 * for them and is documented as their contract.
 */
#ifndef STB_BTHREAD_EXECUTION_QUEUE_H
#define STB_BTHREAD_EXECUTION_QUEUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <bthread/types.h>
#include <stb/export.h>

STB_BEGIN_DECLS

/* A queue (opaque). Its memory is never freed: an id names it or fails. */
struct stb_execq;

/* Bytes of a task kept in its node; larger (or more aligned) ones are on
 * the heap. */
#define STB_EXECQ_INLINE 96u

/*
 * A pushed task. Nodes come from a pool and are never freed, so a
 * TaskHandle of a task long gone still reads its node (and finds another
 * version there).
 */
struct stb_execq_node {
	struct stb_execq_node *next; /* older task while queued (the consumer's list: newer) */
	struct stb_execq *q;         /* the queue; set on the first node a consumer gets */
	uint64_t state;              /* version << 2 | status (0 queued, 1 running, 2 done) */
	uint8_t stop;                /* the last node of a stopped queue (no task) */
	uint8_t iterated;            /* the consumer went past it (consumer only) */
	uint8_t high_priority;
	uint8_t in_place;
	uint32_t reserved;
	union {
		unsigned char bytes[STB_EXECQ_INLINE];
		void *ptr;
	} task __attribute__((aligned(16)));
} __attribute__((aligned(64)));

/*
 * An iteration over the tasks a consumer has now (bthread::TaskIterator).
 * cur is the task handed out; stopped: the queue's last call (no task).
 */
struct stb_execq_iter {
	struct stb_execq_node *cur;
	struct stb_execq_node *head; /* first node of the pass */
	struct stb_execq *q;
	bool stopped;
	bool high_priority;          /* a pass over the high-priority tasks only */
	bool should_break;           /* a high-priority task came: the normal pass ends */
	int niterated;               /* tasks the pass went past */
};

/* Is there a task at it->cur to run? */
static inline bool stb_execq_iter_valid(const struct stb_execq_iter *it)
{
	return !it->stopped && !it->should_break && it->cur != NULL && !it->cur->stop;
}

/* The version a TaskHandle of n records (before n is pushed). */
static inline int64_t stb_execq_node_version(const struct stb_execq_node *n)
{
	return (int64_t)(__atomic_load_n(&n->state, __ATOMIC_ACQUIRE) >> 2);
}

/* Runs the user's function on a pass: meta, the function as given to
 * stb_execq_start, the iteration. Its return value is ignored. */
typedef int (*stb_execq_run_fn)(void *meta, void *user_fn, struct stb_execq_iter *it);
/* Destroys the task of node n (never called for a stop node). */
typedef void (*stb_execq_clear_fn)(struct stb_execq_node *n);
/* Runs fn(arg) on an executor; 0 when it accepted it. */
typedef int (*stb_execq_submit_fn)(void *executor, void *(*fn)(void *), void *arg);

struct stb_execq_options {
	const bthread_attr_t *attr;  /* the consumer bthread's; NULL: BTHREAD_ATTR_NORMAL */
	bool use_pthread;            /* a resident pthread consumes instead */
	void *executor;              /* non-NULL: consumers run as submit(executor, ...) */
	stb_execq_submit_fn submit;
};

/*
 * Starts a queue; run and clear are called on its consumer. Stores its id
 * (never 0) in *id. Returns 0, EINVAL (id, run or clear NULL) or ENOMEM.
 * Thread-safe; does not block.
 */
STB_EXPORT int stb_execq_start(uint64_t *id, const struct stb_execq_options *opts,
			       stb_execq_run_fn run, stb_execq_clear_fn clear, void *meta,
			       void *user_fn);
/* Takes a reference to the live queue id (wait-free); NULL when id is not a
 * live queue (never was, or stopped). Release it with stb_execq_release. */
STB_EXPORT struct stb_execq *stb_execq_address(uint64_t id);
/* Drops a reference; the last one of a stopped queue queues its stop call. */
STB_EXPORT void stb_execq_release(struct stb_execq *q);
/* Has q been stopped? */
STB_EXPORT bool stb_execq_stopped(const struct stb_execq *q);
/* Stops q (the caller holds a reference): later pushes fail, and once every
 * reference is gone its consumer runs the function once more with a stopped
 * iterator. 0, or EINVAL when it was stopped already. */
STB_EXPORT int stb_execq_stop(struct stb_execq *q);
/* Waits until the stop call of queue id has run. 0 (also when that was long
 * ago), or EINVAL for an id no queue ever had. Blocks the calling bthread (or
 * pthread); a stop does not end the wait. */
STB_EXPORT int stb_execq_join(uint64_t id);
/* A node for a task (its state says queued); NULL with errno ENOMEM. */
STB_EXPORT struct stb_execq_node *stb_execq_node_alloc(void);
/* Gives back a node that was never pushed. */
STB_EXPORT void stb_execq_node_free(struct stb_execq_node *n);
/*
 * Pushes n (its task constructed; the caller holds a reference to q). The
 * push that finds q empty starts its consumer -- or, in_place, runs the
 * tasks on the calling thread first. Wait-free unless it runs them.
 */
STB_EXPORT void stb_execq_push(struct stb_execq *q, struct stb_execq_node *n, bool high_priority,
			       bool in_place);
/* Cancels the task of n if it still has version and has not run: 0; 1 when
 * it is running; -1 when it ran (or was cancelled) already. Thread-safe. */
STB_EXPORT int stb_execq_cancel(struct stb_execq_node *n, int64_t version);
/* Moves it to the next task of its pass (TaskIterator::operator++). */
STB_EXPORT void stb_execq_iter_next(struct stb_execq_iter *it);

STB_END_DECLS

#if defined(__cplusplus)
#include <errno.h>
#include <new>
#include <utility>

namespace bthread {

template <typename T> struct ExecutionQueueId {
	uint64_t value;
};

/* A pushed task's node (bRPC's name). */
typedef struct stb_execq_node TaskNode;

/* Names a pushed task for execution_queue_cancel. */
struct TaskHandle {
	TaskHandle() : node(NULL), version(0) {}
	TaskNode *node;
	int64_t version;
};

struct TaskOptions {
	TaskOptions() : high_priority(false), in_place_if_possible(false) {}
	TaskOptions(bool high_priority_, bool in_place_if_possible_)
	    : high_priority(high_priority_), in_place_if_possible(in_place_if_possible_)
	{
	}
	/* Runs before every normal task not yet started, in push order among
	 * the high-priority ones. */
	bool high_priority;
	/* When the push finds the queue empty, run the tasks on the calling
	 * thread instead of starting a consumer (beware of deadlocks). */
	bool in_place_if_possible;
};

const static TaskOptions TASK_OPTIONS_NORMAL = TaskOptions(false, false);
const static TaskOptions TASK_OPTIONS_URGENT = TaskOptions(true, false);
const static TaskOptions TASK_OPTIONS_INPLACE = TaskOptions(false, true);

/* Runs consumers elsewhere (a thread pool): submit returns 0 when it took
 * fn(args) and will run it. */
class Executor {
public:
	virtual ~Executor() {}
	virtual int submit(void *(*fn)(void *), void *args) = 0;
};

struct ExecutionQueueOptions {
	ExecutionQueueOptions() : use_pthread(false), bthread_attr(BTHREAD_ATTR_NORMAL), executor(NULL)
	{
	}
	/* A resident pthread consumes (started with the first task). */
	bool use_pthread;
	/* The consumer bthread's attributes (executor NULL, use_pthread false). */
	bthread_attr_t bthread_attr;
	/* Consumers run on this executor (an in-place one makes every task in place). */
	Executor *executor;
};

template <typename T> class ExecutionQueue;

class TaskIteratorBase {
public:
	TaskIteratorBase(const TaskIteratorBase &) = delete;
	TaskIteratorBase &operator=(const TaskIteratorBase &) = delete;
	/* The queue was stopped and this is its last call: no task, and its
	 * resources (meta) may be released afterwards. */
	bool is_queue_stopped() const { return _it->stopped; }
	/* Is there a task to take? */
	explicit operator bool() const { return stb_execq_iter_valid(_it); }

protected:
	explicit TaskIteratorBase(struct stb_execq_iter *it) : _it(it) {}
	TaskNode *cur_node() const { return _it->cur; }
	void next() { stb_execq_iter_next(_it); }

private:
	struct stb_execq_iter *_it;
};

/* The tasks a call of the execute function gets (for (; iter; ++iter)). */
template <typename T> class TaskIterator : public TaskIteratorBase {
	friend class ExecutionQueue<T>;
	explicit TaskIterator(struct stb_execq_iter *it) : TaskIteratorBase(it) {}

public:
	typedef T *pointer;
	typedef T &reference;
	reference operator*() const { return *ExecutionQueue<T>::task_of(cur_node()); }
	pointer operator->() const { return &operator*(); }
	TaskIterator &operator++()
	{
		next();
		return *this;
	}
	void operator++(int) { next(); }
};

/* Where a queue's typed operations live; reached through scoped_ptr_t. */
template <typename T> class ExecutionQueue {
public:
	typedef ExecutionQueue<T> self_type;
	typedef ExecutionQueueId<T> id_t;
	typedef TaskIterator<T> iterator;
	typedef int (*execute_func_t)(void *meta, iterator &iter);

	/* A reference to a live queue (bRPC's scoped_ptr_t): released when it
	 * goes. Moves, never copies. */
	class scoped_ptr_t {
	public:
		scoped_ptr_t() {}
		explicit scoped_ptr_t(struct stb_execq *q) { _q._q = q; }
		scoped_ptr_t(scoped_ptr_t &&o) noexcept
		{
			_q._q = o._q._q;
			o._q._q = NULL;
		}
		scoped_ptr_t &operator=(scoped_ptr_t &&o) noexcept
		{
			if (this != &o) {
				reset();
				_q._q = o._q._q;
				o._q._q = NULL;
			}
			return *this;
		}
		scoped_ptr_t(const scoped_ptr_t &) = delete;
		scoped_ptr_t &operator=(const scoped_ptr_t &) = delete;
		~scoped_ptr_t() { reset(); }
		void reset()
		{
			if (_q._q)
				stb_execq_release(_q._q);
			_q._q = NULL;
		}
		self_type *get() { return _q._q ? &_q : NULL; }
		self_type *operator->() { return get(); }
		self_type &operator*() { return _q; }
		explicit operator bool() const { return _q._q != NULL; }
		bool operator==(std::nullptr_t) const { return _q._q == NULL; }
		bool operator!=(std::nullptr_t) const { return _q._q != NULL; }

	private:
		self_type _q;
	};

	bool stopped() const { return stb_execq_stopped(_q); }
	/* See execution_queue_stop. */
	int stop() { return stb_execq_stop(_q); }
	/* Pushes a copy (or the moved) task. 0; EINVAL after stop; ENOMEM. */
	int execute(const T &task) { return push(task, NULL, NULL); }
	int execute(const T &task, const TaskOptions *options, TaskHandle *handle)
	{
		return push(task, options, handle);
	}
	int execute(T &&task) { return push(std::move(task), NULL, NULL); }
	int execute(T &&task, const TaskOptions *options, TaskHandle *handle)
	{
		return push(std::move(task), options, handle);
	}

	static int start(id_t *id, const ExecutionQueueOptions *options, execute_func_t fn,
			 void *meta)
	{
		if (!id || !fn)
			return EINVAL;
		ExecutionQueueOptions o;
		if (options)
			o = *options;
		struct stb_execq_options c;
		c.attr = &o.bthread_attr;
		c.use_pthread = o.use_pthread;
		c.executor = o.executor;
		c.submit = o.executor ? &submit_to : NULL;
		return stb_execq_start(&id->value, &c, &run, &clear, meta,
				       reinterpret_cast<void *>(fn));
	}

	/* The task kept in node n. */
	static T *task_of(TaskNode *n)
	{
		return inline_task ? reinterpret_cast<T *>(n->task.bytes) : static_cast<T *>(n->task.ptr);
	}

private:
	friend class scoped_ptr_t;
	ExecutionQueue() : _q(NULL) {}
	static const bool inline_task = sizeof(T) <= STB_EXECQ_INLINE && alignof(T) <= 16;

	template <typename U> int push(U &&task, const TaskOptions *options, TaskHandle *handle)
	{
		if (stb_execq_stopped(_q))
			return EINVAL;
		TaskNode *n = stb_execq_node_alloc();
		if (!n)
			return ENOMEM;
		if (inline_task) {
#if defined(__cpp_exceptions)
			try {
				new (n->task.bytes) T(std::forward<U>(task));
			} catch (...) {
				stb_execq_node_free(n);
				throw;
			}
#else
			new (n->task.bytes) T(std::forward<U>(task));
#endif
		} else {
			T *p = NULL;
#if defined(__cpp_exceptions)
			try {
				p = new (std::nothrow) T(std::forward<U>(task));
			} catch (...) {
				stb_execq_node_free(n);
				throw;
			}
#else
			p = new (std::nothrow) T(std::forward<U>(task));
#endif
			if (!p) {
				stb_execq_node_free(n);
				return ENOMEM;
			}
			n->task.ptr = p;
		}
		const TaskOptions opt = options ? *options : TaskOptions();
		if (handle) {
			handle->node = n;
			handle->version = stb_execq_node_version(n);
		}
		stb_execq_push(_q, n, opt.high_priority, opt.in_place_if_possible);
		return 0;
	}
	static int run(void *meta, void *fn, struct stb_execq_iter *it)
	{
		iterator iter(it);
		return reinterpret_cast<execute_func_t>(fn)(meta, iter);
	}
	static void clear(TaskNode *n)
	{
		if (inline_task)
			task_of(n)->~T();
		else
			delete task_of(n);
	}
	static int submit_to(void *executor, void *(*fn)(void *), void *arg)
	{
		return static_cast<Executor *>(executor)->submit(fn, arg);
	}

	struct stb_execq *_q;
};

/* The type of a task parameter that does not take part in deduction (bRPC's
 * add_const_reference): T comes from the id, the task converts to it. */
template <typename T> struct execq_task_type {
	typedef T type;
};

/*
 * Starts a queue calling execute(meta, iter) for its tasks; stores its id
 * in *id. options NULL: the defaults. T must be copy- or move-constructible.
 * Returns 0 or an errno (EINVAL, ENOMEM). meta must live until the stopped
 * call (iter.is_queue_stopped()) or execution_queue_join returned.
 */
template <typename T>
inline int execution_queue_start(ExecutionQueueId<T> *id, const ExecutionQueueOptions *options,
				 int (*execute)(void *meta, TaskIterator<T> &iter), void *meta)
{
	return ExecutionQueue<T>::start(id, options, execute, meta);
}

/*
 * A reference to queue id (wait-free), to push without looking it up each
 * time; empty when id is not a live queue. While any reference lives the
 * stopped call does not run.
 */
template <typename T>
inline typename ExecutionQueue<T>::scoped_ptr_t execution_queue_address(ExecutionQueueId<T> id)
{
	return typename ExecutionQueue<T>::scoped_ptr_t(stb_execq_address(id.value));
}

/*
 * Stops queue id: later pushes fail (EINVAL); the tasks pushed before run,
 * then execute once more with iter.is_queue_stopped(). 0, or EINVAL (not a
 * live queue). Thread-safe; does not block.
 */
template <typename T> inline int execution_queue_stop(ExecutionQueueId<T> id)
{
	typename ExecutionQueue<T>::scoped_ptr_t p = execution_queue_address(id);
	return p ? p->stop() : EINVAL;
}

/* Waits until the stopped call of queue id ran. 0, or EINVAL for an id no
 * queue ever had. Blocks the calling bthread or pthread. */
template <typename T> inline int execution_queue_join(ExecutionQueueId<T> id)
{
	return stb_execq_join(id.value);
}

/*
 * Pushes task (copied, or moved from an rvalue) into queue id, with options
 * (NULL: a normal task); handle, when not NULL, names it for
 * execution_queue_cancel. 0; EINVAL when id is not a live queue (or it was
 * stopped); ENOMEM. Thread-safe, wait-free unless it runs tasks in place.
 */
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id,
				   const typename execq_task_type<T>::type &task,
				   const TaskOptions *options, TaskHandle *handle)
{
	typename ExecutionQueue<T>::scoped_ptr_t p = execution_queue_address(id);
	return p ? p->execute(task, options, handle) : EINVAL;
}
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id,
				   const typename execq_task_type<T>::type &task,
				   const TaskOptions *options)
{
	return execution_queue_execute(id, task, options, NULL);
}
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id,
				   const typename execq_task_type<T>::type &task)
{
	return execution_queue_execute(id, task, NULL, NULL);
}
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id, typename execq_task_type<T>::type &&task,
				   const TaskOptions *options, TaskHandle *handle)
{
	typename ExecutionQueue<T>::scoped_ptr_t p = execution_queue_address(id);
	return p ? p->execute(std::move(task), options, handle) : EINVAL;
}
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id, typename execq_task_type<T>::type &&task,
				   const TaskOptions *options)
{
	return execution_queue_execute(id, std::move(task), options, NULL);
}
template <typename T>
inline int execution_queue_execute(ExecutionQueueId<T> id, typename execq_task_type<T>::type &&task)
{
	return execution_queue_execute(id, std::move(task), NULL, NULL);
}

/*
 * Cancels the task of h: 0 when it had not run (it never will); 1 when it is
 * running; -1 when it ran already or h names none. Thread-safe, ABA-free.
 */
inline int execution_queue_cancel(const TaskHandle &h)
{
	return h.node ? stb_execq_cancel(h.node, h.version) : -1;
}

} // namespace bthread

#endif /* __cplusplus */

#endif /* STB_BTHREAD_EXECUTION_QUEUE_H */
