/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The export macro of libbthread. The library is built with
 * -fvisibility=hidden; only declarations marked STB_EXPORT are part of its ABI.
 */
#ifndef STB_STB_EXPORT_H
#define STB_STB_EXPORT_H

#if defined(__GNUC__)
#define STB_EXPORT __attribute__((visibility("default")))
#else
#define STB_EXPORT
#endif

#ifdef __cplusplus
#define STB_BEGIN_DECLS extern "C" {
#define STB_END_DECLS }
#else
#define STB_BEGIN_DECLS
#define STB_END_DECLS
#endif

#endif /* STB_STB_EXPORT_H */
