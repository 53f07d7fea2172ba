/*
 * huvm: the simulator's C tests' one assertion (driver/sim/tests/): CHECK counts a failure and goes on,
 * so one run reports every broken check; each test program returns non-zero when `failures` is.
 * SPDX-License-Identifier: MIT
 */
#ifndef HUVM_SIM_CHECK_H
#define HUVM_SIM_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#endif
