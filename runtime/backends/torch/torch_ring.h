/* torch_ring.h: the torch backend's sums of f16 and bf16 buffers
 * (torch_ring.cc), for torch_pg.cc: a ring of gloo send/recv whose sums
 * ddphook adds itself (gloo's half-precision sum is 7x slower than its
 * f32 one), in the order and with the roundings of the MPI backend's
 * ring (mpi_allreduce.c), so both give the same bits.  C++ only. */
#ifndef DDPH_TORCH_RING_H
#define DDPH_TORCH_RING_H

#include <stddef.h>
#include <stdint.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <ddphook/types.h>

/* Whether the allreduce goes round the ring: a sum of f16 or bf16 over
 * 2 ranks or more. */
bool tpg_ring_takes(int group_size, ddph_dtype dtype, ddph_redop op);

/* Starts the ring on its own thread: sums the count elements at buf over
 * pg's ranks in place.  tag: the same on every rank, and no other ring
 * in flight on pg has it.  Every wait of the thread ends by `deadline`
 * (ddph__now's clock); the work ends with gloo's error when a peer fails.
 * The returned work's future completes when the ring ends. */
c10::intrusive_ptr<c10d::Work>
tpg_ring_start(const c10::intrusive_ptr<c10d::ProcessGroup> &pg, void *buf,
               size_t count, ddph_dtype dtype, int tag, double deadline);

#endif
