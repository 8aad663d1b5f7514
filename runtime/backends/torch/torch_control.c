/* torch_control.c: the torch backend's control plane (comm.h's
 * ddph_control_ops): faults, the ranks' agreement on an outcome, the
 * lanes, the end-of-step agreement with the digest of the hooks'
 * collectives, where each rank is, and the job's last meeting. */
#include "build-config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/torch/torch_internal.h"
#include "support/config.h"

static struct ddph_group *control_world(void *self)
{
    return &((torch_state *)self)->world.head;
}

ddph_status ddph__torch_fault(void *self, ddph_err *err)
{
    ddph_err e = {{0}};
    return out_err(tpg_fault(((torch_state *)self)->job, E(e)), &e, err);
}

static int torch_broken(void *self)
{
    return tpg_broken(((torch_state *)self)->job);
}

static void torch_fail(void *self, ddph_status st, const char *msg)
{
    tpg_fail(((torch_state *)self)->job, st, msg);
}

static ddph_status torch_allreduce_i64(void *self, int64_t *v, size_t n,
                                       ddph_redop op, ddph_err *err)
{
    torch_state *s = self;
    tpg_args a = {.kind = TPG_ALLREDUCE, .buf = v, .count = n,
                  .dtype = DDPH_I64, .op = op};
    return ddph__torch_run(s, &s->control, &a, "the runtime's allreduce", err);
}

static ddph_status torch_bcast_bytes(void *self, void *buf, size_t n, int root,
                                     ddph_err *err)
{
    torch_state *s = self;
    tpg_args a = {.kind = TPG_BROADCAST, .buf = buf, .count = n,
                  .dtype = DDPH_U8, .root = root};
    return ddph__torch_run(s, &s->control, &a, "the runtime's broadcast", err);
}

/* Every rank's outcome: the lowest failing rank's, with its message. */
static ddph_status torch_agree(void *self, ddph_status local,
                               const char *local_msg, ddph_err *err)
{
    torch_state *s = self;
    struct {
        int32_t status;
        char msg[1024];
    } outcome;
    memset(&outcome, 0, sizeof outcome);
    outcome.status = (int32_t)local;
    snprintf(outcome.msg, sizeof outcome.msg, "%s",
             local != DDPH_OK && local_msg ? local_msg : "");
    int size = s->world.head.size, rank = s->world.head.rank;
    int64_t first = local != DDPH_OK ? rank : size;
    ddph_status st = torch_allreduce_i64(s, &first, 1, DDPH_MIN, err);
    if (st != DDPH_OK || first == size)
        return st;
    st = torch_bcast_bytes(s, &outcome, sizeof outcome, (int)first, err);
    if (st != DDPH_OK)
        return st;
    outcome.msg[sizeof outcome.msg - 1] = '\0';
    if (first == rank)
        return ddph__fail(err, local, "%s", outcome.msg);
    return ddph__fail(err, (ddph_status)outcome.status, "rank %lld failed: %s",
                      (long long)first, outcome.msg);
}

/* out[0] the world, out[1..n-1] new groups (each call makes its own, as
 * the MPI backend duplicates the world). */
static ddph_status torch_lane_groups(void *self, int n,
                                     struct ddph_group **out, ddph_err *err)
{
    torch_state *s = self;
    if (n < 1 || n > DDPH__MAX_LANES)
        return ddph__fail(err, DDPH_ERR_INVALID,
                          "rank %d: %d lanes asked (1 to %d)",
                          s->world.head.rank, n, DDPH__MAX_LANES);
    int made = s->world.made++;
    out[0] = &s->world.head;
    ddph_status st = DDPH_OK;
    for (int i = 1; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "lanes/%d/%d", made, i);
        torch_group *g = NULL;
        if (st == DDPH_OK)
            st = ddph__torch_new_group(s, name, s->world.head.rank, s->world.head.size,
                           &g, err);
        out[i] = g ? &g->head : NULL;
    }
    return st;
}

/* The end-of-step agreement (with check_collectives): on each lane, every
 * rank's summary, as a record of the size of a collective's fingerprint
 * (torch_fingerprint.c).  Under join the passes may differ (a joined
 * rank's shadow step): they are left out. */
static ddph_status torch_step_agree(void *self,
                                    struct ddph_group *const *groups, int n,
                                    const ddph_step_summary *sum,
                                    ddph_err *err)
{
    torch_state *s = self;
    int plain = sum->join_role == DDPH__STEP_PLAIN;
    ddph_status st = DDPH_OK;
    for (int i = 0; i < n && st == DDPH_OK; i++) {
        torch_group *g = G(groups[i]);
        const int64_t summary[TORCH_STEP_FIELDS] = {
            sum->models,
            plain ? sum->digest ^ sum->passes_digest : sum->digest,
            sum->trainer_calls, sum->iteration, sum->first_model,
            plain ? sum->passes : -1, g->collectives, (int64_t)g->digest};
        int64_t record[TORCH_RECORD_FIELDS] = {-1};
        memcpy(record + 1, summary, sizeof summary);
        st = ddph__torch_exchange(s, g, record, "the end-of-step agreement",
                                  err);
    }
    return st;
}

static int torch_in_sync_step(void *self, int on)
{
    torch_state *s = self;
    int was = atomic_exchange(&s->in_sync_step, on);
    publish(s);
    return was;
}

static void torch_step_synced(void *self)
{
    torch_state *s = self;
    atomic_fetch_add(&s->syncs_done, 1);
    atomic_store(&s->in_sync_step, 0);
    publish(s);
}

static int64_t torch_syncs_done(void *self)
{
    return (int64_t)atomic_load(&((torch_state *)self)->syncs_done);
}

static int64_t torch_trainer_calls(void *self)
{
    return (int64_t)atomic_load(&((torch_state *)self)->trainer_calls);
}

static void torch_depart(void *self, int kind, const char *what)
{
    torch_state *s = self;
    if (kind == DDPH__DEPART_TRAINER_CALL)
        atomic_fetch_add(&s->trainer_calls, 1);
    publish(s);
    tpg_notify_leaving(s->job, kind, what, torch_syncs_done(s),
                       torch_trainer_calls(s));
}

static void torch_closing(void *self)
{
    torch_state *s = self;
    tpg_notify_leaving(s->job, TPG_CLOSED, "", torch_syncs_done(s),
                       torch_trainer_calls(s));
}

static int torch_peer_closed(void *self, int rank, int64_t *after)
{
    return tpg_peer_closed(((torch_state *)self)->job, rank, after);
}

static void torch_model_named(void *self, int64_t id, const char *name)
{
    (void)self; /* the fingerprints compared are digests: no names */
    (void)id;
    (void)name;
}

const ddph_control_ops ddph__torch_control_ops = {
    .world = control_world,
    .fault = ddph__torch_fault,
    .broken = torch_broken,
    .fail = torch_fail,
    .agree = torch_agree,
    .lane_groups = torch_lane_groups,
    .allreduce_i64 = torch_allreduce_i64,
    .bcast_bytes = torch_bcast_bytes,
    .step_agree = torch_step_agree,
    .in_sync_step = torch_in_sync_step,
    .step_synced = torch_step_synced,
    .syncs_done = torch_syncs_done,
    .trainer_calls = torch_trainer_calls,
    .depart = torch_depart,
    .closing = torch_closing,
    .peer_closed = torch_peer_closed,
    .model_named = torch_model_named,
};

/* The job's last meeting, on the control group: the lowest rank that
 * reports a failure, and its status. */
ddph_status ddph__torch_leave(void *self, ddph_status local,
                               ddph_status *job, int *job_rank, ddph_err *err)
{
    torch_state *s = self;
    int rank = s->world.head.rank, size = s->world.head.size;
    *job = DDPH_OK;
    *job_rank = -1;
    ddph_status st = ddph__torch_fault(s, err);
    int64_t first = local != DDPH_OK ? rank : size;
    if (st == DDPH_OK)
        st = torch_allreduce_i64(s, &first, 1, DDPH_MIN, err);
    int32_t status = (int32_t)local;
    if (st == DDPH_OK && first < size)
        st = torch_bcast_bytes(s, &status, sizeof status, (int)first, err);
    if (st == DDPH_OK && first < size) {
        *job = (ddph_status)status;
        *job_rank = (int)first;
    }
    if (st == DDPH_OK) {
        s->left = 1;
    } else if (!tpg_broken(s->job)) {
        char msg[DDPH__ERR_LEN + 32];
        snprintf(msg, sizeof msg, "rank %d: %s", rank, err ? err->msg : "");
        tpg_fail(s->job, st, msg);
    }
    return st;
}
