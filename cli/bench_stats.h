/* bench_stats.h: what every `ddphook bench` table is made of. */
#ifndef DDPH_CLI_BENCH_STATS_H
#define DDPH_CLI_BENCH_STATS_H

/* The median of v[0..n) (n > 0); sorts v in place. */
double bench_median(double *v, int n);

#endif
