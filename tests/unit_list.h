/* unit_list.h: the one list of tests/check_unit's suites, one per runtime
 * module: X(name) stands for Suite *name_suite(void), defined in
 * tests/unit_name.c.  unit.h declares them from this list and check_unit.c
 * runs them from it; tests/unit_list.sh checks that Makefile.am builds
 * exactly these files and that each is here.  A new suite: its file in
 * Makefile.am, its name here. */
#ifndef DDPH_TESTS_UNIT_LIST_H
#define DDPH_TESTS_UNIT_LIST_H

#define DDPH_UNIT_SUITES(X)                                                   \
    X(status)                                                                 \
    X(config)                                                                 \
    X(buckets)                                                                \
    X(loader)                                                                 \
    X(cpu_ops)                                                                \
    X(quant_ops)                                                              \
    X(rng)                                                                    \
    X(psgd_cpu)                                                               \
    X(services)                                                               \
    X(device)                                                                 \
    X(timeline)                                                               \
    X(reducer)                                                                \
    X(backends)

/* The tests these suites held when the list last changed: check_unit fails
 * when fewer run.  Raise it with the tests you add. */
#define DDPH_UNIT_MIN_TESTS 85

#endif
