/* SPDX-License-Identifier: BSD-2-Clause */
#include "internal.h"

/* initial-exec (internal.h): it is read on every wrapped libc call, so no
 * __tls_get_addr; one int fits the static TLS surplus glibc keeps even
 * for a library dlopen()ed late. */
__thread unsigned libsdp_internal;
