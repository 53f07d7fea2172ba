/*
 * huvm: user-space part of the port layer. SPDX-License-Identifier: MIT
 */
#include "huvm_port.h"

#if !defined(__KERNEL__)

#if defined(HUVM_ASSERT_ABORT)
#include <stdio.h>
#include <stdlib.h>
#endif

uint64_t huvm_port_assert_failures;

void huvm_port_assert_failed(const char *expr, const char *file, int line)
{
    __atomic_fetch_add(&huvm_port_assert_failures, 1, __ATOMIC_RELAXED);
#if defined(HUVM_ASSERT_ABORT)
    fprintf(stderr, "huvm: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
#else
    (void)expr;
    (void)file;
    (void)line;
#endif
}

#endif /* !__KERNEL__ */
