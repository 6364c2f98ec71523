/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bthread_id (bRPC's bthread/id.h): a 64-bit id with a lock, an error
 * handler and a join, for correlating an RPC with its responses. An id is
 * valid from bthread_id_create* until bthread_id_unlock_and_destroy or
 * bthread_id_cancel; a stale id is always detected (EINVAL). Thread-safe;
 * lock and join block the calling bthread (or pthread). Returns follow bRPC:
 * 0 or an errno value.
 */
#ifndef STB_BTHREAD_ID_H
#define STB_BTHREAD_ID_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <bthread/types.h>
#include <stb/export.h>

#define STB_ID_STR2_(x) #x
#define STB_ID_STR_(x) STB_ID_STR2_(x)
#define STB_ID_LOCATION __FILE__ ":" STB_ID_STR_(__LINE__)

STB_BEGIN_DECLS

/*
 * Creates an id with data and an error handler on_error(id, data, code),
 * called by bthread_id_error with the id locked; it must end with
 * bthread_id_unlock or bthread_id_unlock_and_destroy. NULL on_error means
 * bthread_id_unlock_and_destroy. The ranged form makes value .. value+range-1
 * all name this id (1 <= range <= 1024). Returns 0, EINVAL or ENOMEM.
 */
STB_EXPORT int bthread_id_create(bthread_id_t *id, void *data,
				 int (*on_error)(bthread_id_t id, void *data, int error_code));
STB_EXPORT int bthread_id_create_ranged(bthread_id_t *id, void *data,
					int (*on_error)(bthread_id_t id, void *data,
							int error_code),
					int range);

/*
 * Locks id, waiting while another holder has it; *pdata (if pdata) gets its
 * data. The reset_range form also widens the id's range to range (when
 * larger). Returns 0; EINVAL for an invalid or destroyed id (also when it is
 * destroyed while waiting); EPERM after bthread_id_about_to_destroy. A stop
 * does not end the wait.
 */
STB_EXPORT int bthread_id_lock_verbose(bthread_id_t id, void **pdata, const char *location);
STB_EXPORT int bthread_id_lock_and_reset_range_verbose(bthread_id_t id, void **pdata, int range,
						       const char *location);
#define bthread_id_lock(id, pdata) bthread_id_lock_verbose(id, pdata, STB_ID_LOCATION)
#define bthread_id_lock_and_reset_range(id, pdata, range)                                 \
	bthread_id_lock_and_reset_range_verbose(id, pdata, range, STB_ID_LOCATION)

/* Locks id if nobody holds it: 0, EBUSY, or EINVAL. Never blocks. */
STB_EXPORT int bthread_id_trylock(bthread_id_t id, void **pdata);

/*
 * Unlocks id. When errors were reported while it was locked, the handler of
 * the oldest runs instead (the lock passes to it) and its result is
 * returned. Otherwise 0; EINVAL (invalid id), EPERM (not locked).
 */
STB_EXPORT int bthread_id_unlock(bthread_id_t id);

/* Unlocks and destroys id, dropping queued errors, waking lockers (EINVAL)
 * and joiners. 0, EINVAL or EPERM (not locked). */
STB_EXPORT int bthread_id_unlock_and_destroy(bthread_id_t id);

/* Destroys an unlocked id: 0, EPERM (locked) or EINVAL. */
STB_EXPORT int bthread_id_cancel(bthread_id_t id);

/* Waits until id is destroyed. 0 at once for a destroyed id; EINVAL if never created. */
STB_EXPORT int bthread_id_join(bthread_id_t id);

/*
 * Reports error_code on id: runs the handler now (locking id) when it is
 * unlocked, else queues it for bthread_id_unlock. Returns the handler's
 * result, 0 when queued, EINVAL for an invalid id, ENOMEM.
 */
STB_EXPORT int bthread_id_error_verbose(bthread_id_t id, int error_code, const char *location);
#define bthread_id_error(id, err) bthread_id_error_verbose(id, err, STB_ID_LOCATION)

/*
 * Called by the holder of id: every current and later bthread_id_lock fails
 * with EPERM until bthread_id_unlock (which cancels this). 0, EINVAL, EPERM
 * (not locked).
 */
STB_EXPORT int bthread_id_about_to_destroy(bthread_id_t id);

/* ---- lists of ids ---- */
/* size and conflict_size are accepted for bRPC compatibility. 0 or ENOMEM. */
STB_EXPORT int bthread_id_list_init(bthread_id_list_t *list, unsigned size,
				    unsigned conflict_size);
/* Frees the list (not the ids). Accepts an uninitialized-by-init (zeroed) list. */
STB_EXPORT void bthread_id_list_destroy(bthread_id_list_t *list);
/* Adds id (ids already destroyed are dropped when the list grows). 0, ENOMEM. */
STB_EXPORT int bthread_id_list_add(bthread_id_list_t *list, bthread_id_t id);
/* Swaps the contents of two lists. */
STB_EXPORT void bthread_id_list_swap(bthread_id_list_t *dest, bthread_id_list_t *src);
/* bthread_id_error(id, error_code) on every id, then empties the list. Not
 * thread-safe; the _pthreadsafe/_bthreadsafe forms take the ids out under
 * mutex (which protects the list's adds) and report outside it. 0, EINVAL. */
STB_EXPORT int bthread_id_list_reset(bthread_id_list_t *list, int error_code);
STB_EXPORT int bthread_id_list_reset_pthreadsafe(bthread_id_list_t *list, int error_code,
						 pthread_mutex_t *mutex);
STB_EXPORT int bthread_id_list_reset_bthreadsafe(bthread_id_list_t *list, int error_code,
						 bthread_mutex_t *mutex);

/*
 * ---- stb: the C side of the C++ error-text variants below (and of
 * debugging helpers). text is an opaque object (a std::string for the C++
 * inlines): copy_text makes an owned copy when an error must be queued,
 * free_text releases it. A handler with text, on_error2(id, data, code,
 * text, ctx), gets empty_text for errors reported without one.
 */
typedef int (*stb_id_on_error2_fn)(bthread_id_t id, void *data, int error_code,
				   const void *text, void *ctx);
STB_EXPORT int stb_id_create2(bthread_id_t *id, void *data, stb_id_on_error2_fn on_error2,
			      void *ctx, const void *empty_text, int range);
STB_EXPORT int stb_id_error2(bthread_id_t id, int error_code, const void *text,
			     void *(*copy_text)(const void *), void (*free_text)(void *),
			     const char *location);
STB_EXPORT int stb_id_list_reset2(bthread_id_list_t *list, int error_code, const void *text,
				  void *(*copy_text)(const void *), void (*free_text)(void *));
STB_EXPORT int stb_id_list_reset2_pthreadsafe(bthread_id_list_t *list, int error_code,
					      const void *text,
					      void *(*copy_text)(const void *),
					      void (*free_text)(void *), pthread_mutex_t *mutex);
STB_EXPORT int stb_id_list_reset2_bthreadsafe(bthread_id_list_t *list, int error_code,
					      const void *text,
					      void *(*copy_text)(const void *),
					      void (*free_text)(void *), bthread_mutex_t *mutex);
/* The id's lock word (bRPC's bthread::id_value): 0 if the slot was never used. */
STB_EXPORT uint32_t stb_id_value(bthread_id_t id);
/* A text description of id into buf (snprintf conventions). */
STB_EXPORT int stb_id_status(bthread_id_t id, char *buf, size_t size);

STB_END_DECLS

#if defined(__cplusplus)
#include <ostream>
#include <string>

namespace bthread {
namespace stb_detail {
inline int id_call2(bthread_id_t id, void *data, int code, const void *text, void *ctx)
{
	typedef int (*fn_t)(bthread_id_t, void *, int, const std::string &);
	return reinterpret_cast<fn_t>(ctx)(id, data, code, *static_cast<const std::string *>(text));
}
inline void *copy_text(const void *t)
{
	try {
		return new std::string(*static_cast<const std::string *>(t));
	} catch (...) {
		return NULL;
	}
}
inline void free_text(void *t)
{
	delete static_cast<std::string *>(t);
}
inline const std::string &empty_text()
{
	static const std::string e;
	return e;
}
} // namespace stb_detail

/* Debugging helpers that bRPC defines in its id.cpp. */
inline uint32_t id_value(bthread_id_t id)
{
	return stb_id_value(id);
}
inline void id_status(bthread_id_t id, std::ostream &os)
{
	char buf[512];
	stb_id_status(id, buf, sizeof buf);
	os << buf;
}
} // namespace bthread

/* C++: error handlers with a text (bRPC's bthread_id_create2 ...). */
inline int bthread_id_create2_ranged(bthread_id_t *id, void *data,
				     int (*on_error)(bthread_id_t id, void *data, int error_code,
						     const std::string &error_text),
				     int range)
{
	/* As bRPC: no handler means the default one (unlock and destroy). */
	if (!on_error)
		return bthread_id_create_ranged(id, data, NULL, range);
	return stb_id_create2(id, data, bthread::stb_detail::id_call2,
			      reinterpret_cast<void *>(on_error),
			      &bthread::stb_detail::empty_text(), range);
}
inline int bthread_id_create2(bthread_id_t *id, void *data,
			      int (*on_error)(bthread_id_t id, void *data, int error_code,
					      const std::string &error_text))
{
	return bthread_id_create2_ranged(id, data, on_error, 1);
}
inline int bthread_id_error2_verbose(bthread_id_t id, int error_code,
				     const std::string &error_text, const char *location)
{
	return stb_id_error2(id, error_code, &error_text, bthread::stb_detail::copy_text,
			     bthread::stb_detail::free_text, location);
}
#define bthread_id_error2(id, ec, et) bthread_id_error2_verbose(id, ec, et, STB_ID_LOCATION)
inline int bthread_id_list_reset2(bthread_id_list_t *list, int error_code,
				  const std::string &error_text)
{
	return stb_id_list_reset2(list, error_code, &error_text, bthread::stb_detail::copy_text,
				  bthread::stb_detail::free_text);
}
inline int bthread_id_list_reset2_pthreadsafe(bthread_id_list_t *list, int error_code,
					      const std::string &error_text,
					      pthread_mutex_t *mutex)
{
	return stb_id_list_reset2_pthreadsafe(list, error_code, &error_text,
					      bthread::stb_detail::copy_text,
					      bthread::stb_detail::free_text, mutex);
}
inline int bthread_id_list_reset2_bthreadsafe(bthread_id_list_t *list, int error_code,
					      const std::string &error_text,
					      bthread_mutex_t *mutex)
{
	return stb_id_list_reset2_bthreadsafe(list, error_code, &error_text,
					      bthread::stb_detail::copy_text,
					      bthread::stb_detail::free_text, mutex);
}
#endif /* __cplusplus */

#endif /* STB_BTHREAD_ID_H */
