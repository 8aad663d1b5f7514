/* rank_check.h: CHECK(cond, fmt, ...) for the multi-rank test programs: when
 * cond is false it prints "rank R: file:line: check failed: cond: message"
 * and exits 1.  The program sets check_rank once it knows its rank; a
 * program of several files defines RANK_CHECK_SHARED before including this
 * and `int check_rank = -1;` in one of them. */
#ifndef DDPH_TESTS_MPI_RANK_CHECK_H
#define DDPH_TESTS_MPI_RANK_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#ifdef RANK_CHECK_SHARED
extern int check_rank;
#else
static int check_rank = -1;
#endif

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "rank %d: %s:%d: check failed: %s: ",            \
                    check_rank, __FILE__, __LINE__, #cond);                  \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
            exit(1);                                                         \
        }                                                                    \
    } while (0)

#endif
